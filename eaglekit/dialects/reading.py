"""The shared reading's steps that need nothing of a dialect: the HF dimensions, the attention kind (MLA, Llama or
Qwen3, the tensors deciding against a wrong label), the dominant dtype, P-EAGLE's depth and mask-token range."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from ..errors import ConfigError
from ..findings import Finding
from ..io import dtypes
from ..model import architectures as arch_table
from ..model.config_view import ConfigView
from ..model.drafter import Drafter
from ..model.hf_config import MLA_MODEL_TYPES, base_fields, read_rope
from .detection import architectures

# How many declared decoder layers may be missing from the tensors and still be reported one tensor at a time
# (tensor.missing); past it the config is refused in one line (a config declaring 10^7 layers ran out of memory).
MAX_MISSING_LAYERS = 8


def read_dimensions(base_view: ConfigView, notes: list[Finding]) -> dict:
    """The HF dimensions from the block that holds them (``base_fields``), with a note where rope_theta is assumed."""
    fields = base_fields(base_view)
    _, theta_given = read_rope(base_view)
    if not theta_given:
        notes.append(
            Finding(
                "rope.defaulted",
                "warning",
                "config has no rope_theta: 10000 assumed (EAGLE's default)",
                "rope_theta",
            )
        )
    return fields


def read_attention(
    config: dict, base_view: ConfigView, fields: dict, infos: Mapping, notes: list[Finding]
) -> tuple[str, dict]:
    """The attention kind and the dimensions it corrects: MLA by its keys or model_type (its q_lora_rank read from the
    tensors where the key is absent), else Llama or Qwen3 as the tensors decide (a wrong label noted, read as Llama)."""
    fields = dict(fields)
    attention = "mla" if fields["mla"] is not None or fields["model_type"] in MLA_MODEL_TYPES else "llama"
    if attention == "mla" and fields["mla"] is None:
        raise ConfigError(
            f"{base_view.label}: model_type {fields['model_type']!r} is MLA but kv_lora_rank/qk_rope_head_dim are"
            " missing"
        )
    if attention == "mla":
        fields["mla"] = q_lora_rank_from_tensors(fields["mla"], base_view, infos, notes)
    if attention == "llama":
        attention, mismatch = attention_from_tensors(config, fields["model_type"], infos)
        if mismatch:
            notes.append(Finding("config.architecture_mismatch", "warning", mismatch, "architectures"))
            fields["model_type"] = "llama"  # the tensors decide; the label was wrong
    return attention, fields


def attention_from_tensors(config: dict, model_type: str | None, infos: Mapping) -> tuple[str, str | None]:
    """Llama or Qwen3 attention, decided by the tensors (q_norm/k_norm present or not) when the config's label says
    otherwise. AngelSlim's Qwen3 drafters are Llama-shaped but labelled ``Qwen3ForCausalLM`` / ``qwen3`` (sglang#9135).
    Returns the attention and, on a mismatch, what to tell the user."""
    has_qk_norm = "layers.0.self_attn.q_norm.weight" in infos or "layers.0.self_attn.k_norm.weight" in infos
    has_q = "layers.0.self_attn.q_proj.weight" in infos
    labels = [a for a in architectures(config) if (arch_table.ROWS.get(a) or {}).get("attention") == "qwen3"]
    says_qwen3 = model_type == "qwen3" or bool(labels)
    if has_qk_norm:
        return "qwen3", None
    if not says_qwen3:
        return "llama", None
    if not has_q:
        return "qwen3", None  # no attention tensors to judge by: tensor.missing will speak
    said = " / ".join(
        ([f"architectures {labels[0]}"] if labels else []) + (["model_type qwen3"] if model_type == "qwen3" else [])
    )
    return (
        "llama",
        (
            f"{said} says Qwen3 attention (q_norm/k_norm), but the tensors are Llama-shaped (q/k/v projections, no"
            " q_norm/k_norm): read as a Llama drafter. Engines trust the label: SGLang builds its Qwen3 model and fails"
            " (KeyError 'midlayer.self_attn.qkv_proj.weight', sglang#9135); vLLM builds its Qwen3 drafter and runs q/k"
            " norms the drafter never had, with unit weights. A conversion writes the class the tensors fit"
        ),
    )


def q_lora_rank_from_tensors(mla, view: ConfigView, infos: Mapping, notes: list[Finding]):
    """An MLA config without the ``q_lora_rank`` key (not an explicit null: that is a q_proj drafter) whose checkpoint
    has ``q_a_proj``: the rank is that tensor's row count. Said as an error (no engine loads the checkpoint as it is;
    vLLM's config class defaults the rank to 1536), and read from the tensor so that nothing else is misreported (a
    "missing q_proj") and ``convert`` writes the key."""
    q_a = infos.get("layers.0.self_attn.q_a_proj.weight")
    if mla.q_lora_rank is not None or "q_lora_rank" in view.data or q_a is None or len(q_a.shape) != 2:
        return mla
    rows = q_a.shape[0]
    notes.append(
        Finding(
            "mla.q_lora_rank",
            "error",
            "config.json has no q_lora_rank, which vLLM and SGLang need to load an MLA drafter; "
            f"q_a_proj.weight has {rows} rows, so {rows} is read (a conversion writes it)",
            "q_lora_rank",
        )
    )
    return replace(mla, q_lora_rank=rows)


def decoder_layers_held(infos: Mapping) -> int:
    """The decoder layers the tensors hold: one past the highest ``layers.N`` (at least one)."""
    return 1 + max((int(c.split(".")[1]) for c in infos if c.startswith("layers.")), default=0)


def dominant_dtype(infos: Mapping) -> str | None:
    counts = Counter(dtypes.name(i.dtype) for i in infos.values() if i.dtype.is_floating_point and len(i.shape) >= 2)
    if not counts:
        counts = Counter(dtypes.name(i.dtype) for i in infos.values() if i.dtype.is_floating_point)
    return counts.most_common(1)[0][0] if counts else None


def depth(config: dict) -> int | None:
    """NeMo Automodel's ``num_depths`` (the drafts per pass a P-EAGLE drafter was trained for), where stated."""
    value = config.get("num_depths")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def check_mask_token(drafter: Drafter, notes: list[Finding]) -> None:
    """A P-EAGLE mask token past the vocabulary is an error: its embedding row does not exist."""
    token = drafter.parallel.mask_token_id if drafter.parallel is not None else None
    if token is not None and token >= drafter.vocab_size:  # its embedding row does not exist
        notes.append(
            Finding(
                "config.mask_token",
                "error",
                f"mask token {token} ({drafter.parallel.mask_token_key}) is not a token of the vocabulary"
                f" (0..{drafter.vocab_size - 1}): the mask rows' embedding lookup fails",
                drafter.parallel.mask_token_key,
            )
        )
