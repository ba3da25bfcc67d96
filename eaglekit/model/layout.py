"""The tensors a drafter must, may and must not ship, with their shapes: the one place this is written down.

Names are canonical (vLLM's). Dialects map their own names onto these; ``validate`` checks a checkpoint
against ``expected_tensors``; ``convert`` plans its output from it; the reference forward loads from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..findings import Finding
from ..io import dtypes
from .drafter import Drafter

Kind = Literal["float", "int64", "bool"]
ANY = -1  # a dimension that is not fixed by the config (the rank of a factorised lm_head)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor the drafter's config calls for: canonical name, expected shape and kind, and whether it is required."""

    name: str
    shape: tuple[int, ...]
    kind: Kind
    required: bool
    why: str = ""  # what makes it required, for messages


def _attention(d: Drafter, prefix: str, width_in: int) -> list[TensorSpec]:
    H = d.hidden_size
    specs: list[TensorSpec] = []
    if d.attention == "mla":
        m = d.mla
        assert m is not None
        q_out = d.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        if m.q_lora_rank:
            specs += [
                TensorSpec(f"{prefix}q_a_proj.weight", (m.q_lora_rank, width_in), "float", True),
                TensorSpec(f"{prefix}q_a_layernorm.weight", (m.q_lora_rank,), "float", True),
                TensorSpec(f"{prefix}q_b_proj.weight", (q_out, m.q_lora_rank), "float", True),
            ]
        else:
            specs.append(TensorSpec(f"{prefix}q_proj.weight", (q_out, width_in), "float", True))
        specs += [
            TensorSpec(
                f"{prefix}kv_a_proj_with_mqa.weight", (m.kv_lora_rank + m.qk_rope_head_dim, width_in), "float", True
            ),
            TensorSpec(f"{prefix}kv_a_layernorm.weight", (m.kv_lora_rank,), "float", True),
            TensorSpec(
                f"{prefix}kv_b_proj.weight",
                (d.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
                "float",
                True,
            ),
            TensorSpec(f"{prefix}o_proj.weight", (H, d.num_heads * m.v_head_dim), "float", True),
        ]
        return specs
    q, kv = d.num_heads * d.head_dim, d.num_kv_heads * d.head_dim
    for proj, out in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
        specs.append(TensorSpec(f"{prefix}{proj}.weight", (out, width_in), "float", True))
        if d.attention_bias:
            specs.append(TensorSpec(f"{prefix}{proj}.bias", (out,), "float", True, "attention_bias: true"))
    specs.append(TensorSpec(f"{prefix}o_proj.weight", (H, q), "float", True))
    if d.attention_bias:
        specs.append(TensorSpec(f"{prefix}o_proj.bias", (H,), "float", True, "attention_bias: true"))
    if d.attention == "qwen3":
        specs += [
            TensorSpec(f"{prefix}q_norm.weight", (d.head_dim,), "float", True, "qwen3 attention"),
            TensorSpec(f"{prefix}k_norm.weight", (d.head_dim,), "float", True, "qwen3 attention"),
        ]
    return specs


def _layer(d: Drafter, i: int) -> list[TensorSpec]:
    H, I = d.hidden_size, d.intermediate_size
    p = f"layers.{i}."
    width_in = 2 * H if i == 0 else H  # layer 0 reads cat(input_layernorm(embed), hidden_norm(h))
    specs = [
        TensorSpec(f"{p}input_layernorm.weight", (H,), "float", True),
        TensorSpec(f"{p}hidden_norm.weight", (H,), "float", i == 0),  # only layer 0 uses it
        TensorSpec(f"{p}post_attention_layernorm.weight", (H,), "float", True),
        *_attention(d, f"{p}self_attn.", width_in),
        TensorSpec(f"{p}mlp.gate_proj.weight", (I, H), "float", True),
        TensorSpec(f"{p}mlp.up_proj.weight", (I, H), "float", True),
        TensorSpec(f"{p}mlp.down_proj.weight", (H, I), "float", True),
    ]
    if d.mlp_bias:
        specs += [
            TensorSpec(f"{p}mlp.gate_proj.bias", (I,), "float", True, "mlp_bias: true"),
            TensorSpec(f"{p}mlp.up_proj.bias", (I,), "float", True, "mlp_bias: true"),
            TensorSpec(f"{p}mlp.down_proj.bias", (H,), "float", True, "mlp_bias: true"),
        ]
    return specs


def expected_tensors(d: Drafter) -> dict[str, TensorSpec]:
    """Every tensor this drafter's configuration accounts for, keyed by canonical name."""
    H, T, n, V, Vd = d.hidden_size, d.target_hidden_size, d.num_aux, d.vocab_size, d.draft_vocab_size
    specs: list[TensorSpec] = [
        TensorSpec("embed_tokens.weight", (V, H), "float", False),
        TensorSpec("norm.weight", (H,), "float", True),
        TensorSpec("t2d", (V,), "bool", False),
        TensorSpec("d2t", (Vd,), "int64", d.pruned_vocab, "draft_vocab_size != vocab_size"),
    ]
    if d.low_rank_lm_head:
        specs += [
            TensorSpec("lm_head.down.weight", (ANY, H), "float", True, "factorised lm_head"),
            TensorSpec("lm_head.up.weight", (Vd, ANY), "float", True, "factorised lm_head"),
        ]
    else:
        specs.append(TensorSpec("lm_head.weight", (Vd, H), "float", False))
    if d.flags.use_aux_hidden_state:
        specs.append(TensorSpec("fc.weight", (H, n * T), "float", True, "use_aux_hidden_state"))
    if d.flags.norm_before_fc:
        specs.append(TensorSpec("input_norm.weight", (n * T,), "float", True, "norm_before_fc: true"))
    if d.flags.fc_norm:
        specs += [TensorSpec(f"fc_norm.{i}.weight", (T,), "float", True, "fc_norm: true") for i in range(n)]
    if d.parallel is not None:
        # speculators and SpecForge store it [1, 1, n*T], vLLM reads it as [1, n*T]: any shape of n*T elements in
        # its last dimension (_mask_hidden_shape)
        specs.append(TensorSpec("mask_hidden", (1, 1, n * T), "float", True, "P-EAGLE (parallel drafting)"))
    for i in range(d.num_layers):
        specs += _layer(d, i)
    return {s.name: s for s in specs}


# Names that are EAGLE drafter tensors in some configuration, even if not in this one (used to tell
# "you have fc_norm tensors but fc_norm is off" apart from "this is not a drafter tensor at all").
_KNOWN = re.compile(
    r"^(embed_tokens\.weight|norm\.weight|lm_head(\.down|\.up)?\.weight|fc\.(weight|bias)|d2t|t2d"
    r"|input_norm\.weight|fc_norm\.\d+\.weight|mask_hidden"
    r"|layers\.\d+\.(input_layernorm|hidden_norm|post_attention_layernorm)\.weight"
    r"|layers\.\d+\.self_attn\.(q|k|v|o|q_a|q_b|kv_a|kv_b|qkv)_proj(_with_mqa)?\.(weight|bias)"
    r"|layers\.\d+\.self_attn\.kv_a_proj_with_mqa\.weight"
    r"|layers\.\d+\.self_attn\.(q_norm|k_norm|q_a_layernorm|kv_a_layernorm)\.weight"
    r"|layers\.\d+\.mlp\.(gate|up|down|gate_up)_proj\.(weight|bias))$"
)


def _mask_hidden_shape(shape, width: int) -> bool:
    """``mask_hidden`` as a framework stores it: [n*T], [1, n*T] (vLLM's buffer) or [1, 1, n*T] (speculators,
    SpecForge)."""
    return 1 <= len(shape) <= 3 and shape[-1] == width and all(s == 1 for s in shape[:-1])


def is_known_name(name: str) -> bool:
    return bool(_KNOWN.match(name))


_KIND_OK = {
    "float": lambda dt: dt.is_floating_point,
    "int64": lambda dt: dtypes.name(dt) == "int64",
    "bool": lambda dt: dtypes.name(dt) == "bool",
}
_KIND_TEXT = {"float": "a floating dtype", "int64": "int64", "bool": "bool"}


def canonical_aside(stored: str, canonical: str) -> str:
    """What a message adds after a tensor's name as its file stores it: eaglekit's canonical name, where the two
    differ."""
    return "" if stored == canonical else f" (eaglekit's {canonical})"


def check_tensors(
    d: Drafter, present: Mapping[str, tuple[tuple[int, ...], Any]], stored_name: Callable[[str], str] | None = None
) -> list[Finding]:
    """Compare the tensors a checkpoint has (canonical name -> (shape, dtype)) with what its config implies.

    ``stored_name``: how the checked checkpoint names a canonical tensor (SGLang's ``midlayer.*`` for ``layers.0.*``);
    each finding names the tensor so, the canonical name after it where the two differ, and takes the stored name
    as its subject: the name a user finds in the file."""

    def named(name: str) -> tuple[str, str]:  # (how the message names it, the finding's subject)
        stored = stored_name(name) if stored_name is not None else name
        return stored + canonical_aside(stored, name), stored

    findings: list[Finding] = []
    expected = expected_tensors(d)
    for name, spec in expected.items():
        said, subject = named(name)
        if name not in present:
            if spec.required:
                why = f" (required by {spec.why})" if spec.why else ""
                findings.append(Finding("tensor.missing", "error", f"missing tensor {said}{why}", subject))
            continue
        shape, dtype = present[name]
        want = tuple(shape[i] if s == ANY and i < len(shape) else s for i, s in enumerate(spec.shape))
        if name == "mask_hidden" and _mask_hidden_shape(shape, spec.shape[-1]):
            want = tuple(shape)
        if tuple(shape) != want:
            findings.append(
                Finding("tensor.shape", "error", f"{said} has shape {list(shape)}, expected {list(want)}", subject)
            )
        if not _KIND_OK[spec.kind](dtype):
            findings.append(
                Finding(
                    "tensor.dtype",
                    "error",
                    f"{said} is {dtypes.name(dtype)}, expected {_KIND_TEXT[spec.kind]}",
                    subject,
                )
            )
    for name in present:
        if name in expected:
            continue
        if name.startswith("fc_norm.") and not d.flags.fc_norm:
            continue  # reported by the flag checks, with a better message
        if name == "input_norm.weight" and not d.flags.norm_before_fc:
            continue
        if name == "fc.weight" and not d.flags.use_aux_hidden_state:
            continue
        if name == "mask_hidden" and d.parallel is None:
            continue  # reported by the P-EAGLE checks (config.peagle_unstated)
        said, subject = named(name)
        if name == "fc.bias":
            findings.append(
                Finding(
                    "config.fc_bias",
                    "error",
                    f"{said} is present: EAGLE 3 fc has no bias (engines refuse or ignore it)",
                    subject,
                )
            )
        elif is_known_name(name):
            findings.append(
                Finding(
                    "tensor.unexpected", "error", f"tensor {said} is not part of this drafter's configuration", subject
                )
            )
        else:
            findings.append(Finding("tensor.unknown", "error", f"unknown tensor {said}", subject))
    return findings
