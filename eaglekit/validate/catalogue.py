"""What every check shares: the catalogue of check ids (``CHECKS``), what a check reads (``CheckInput``), how a plain
finding is made, and where a config holds Hugging Face model keys."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..findings import Finding
from ..model.drafter import Drafter

if TYPE_CHECKING:  # validate without --target never reads a target's config
    from ..target import TargetConfig

# id -> what it guards (docs/validate.md lists these; tests cover each)
CHECKS: dict[str, str] = {
    "tensor.missing": "a tensor the config requires is absent (engines leave it uninitialised, silently)",
    "tensor.shape": "a tensor's shape disagrees with the config (fc [H, n*T], q/k/v in 2H, fc_norm [T], ...)",
    "tensor.dtype": "d2t not int64, t2d not bool, or a weight that is not floating point",
    "tensor.unexpected": "a drafter tensor the config does not account for",
    "tensor.unknown": "a tensor that is not part of any EAGLE 3 drafter",
    "flags.fc_norm_and_norm_before_fc": "fc_norm and norm_before_fc together (speculators refuses; vLLM applies both)",
    "flags.fc_norm_without_flag": "fc_norm.* tensors present but fc_norm is not true",
    "flags.input_norm_without_flag": (
        "input_norm.weight present but norm_before_fc is not true (vLLM drops it silently)"
    ),
    "flags.fc_without_aux": "fc.weight present but use_aux_hidden_state is false (engines drop fc)",
    "flags.modelopt_norm_layout": (
        "a ModelOpt eagle_config norm switch (use_last_layernorm, use_input_layernorm_in_first_layer,"
        " use_mtp_layernorm) other than what engines run"
    ),
    "flags.untrained_upgrade": "upgraded to EAGLE 3.1 by eaglekit (fc_norm weights of ones) and not trained since",
    "config.fc_bias": "fc.bias present: EAGLE 3 fc has no bias",
    "config.hidden_act": "hidden_act is not silu (vLLM's drafter MLP rejects anything else)",
    "config.num_layers": "num_hidden_layers disagrees with the decoder layers shipped",
    "config.partial_rotary": (
        "partial_rotary_factor other than 1: the rope rotates part of each head (info); an error where it is no number"
        " in (0, 1], leaves an odd rotary width, or sits on an MLA drafter"
    ),
    "mla.use_nope": "mla_use_nope: true on an MLA drafter: vLLM's EAGLE 3 MLA drafter never reads it and applies rope",
    "config.tied_head": (
        "tie_word_embeddings: true beside a shipped lm_head: of another shape than the embeddings it cannot be tied"
        " (error); of the same, a tying loader drops one of the two (warning)"
    ),
    "config.heads": (
        "num_attention_heads not a multiple of num_key_value_heads, or an odd rotary width (head_dim, qk_rope_head_dim)"
    ),
    "config.vocab_ids": (
        "draft_vocab_size above vocab_size, or a pad/bos/eos token id outside the vocabulary (pad: transformers"
        " refuses)"
    ),
    "config.dtype": (
        "torch_dtype / dtype names no torch dtype (transformers cannot load the config), names one that is not floating"
        " point, or another than the weights'"
    ),
    "attention.sliding_window": (
        "draft layers use sliding-window attention: which layers, the window, and what each engine does with it"
    ),
    "attention.layer_types": (
        "layer_types names fewer or more layers than the drafter has (vLLM and transformers refuse), or names sliding"
        " layers without a sliding_window"
    ),
    "mla.q_lora_rank": (
        "an MLA drafter without q_lora_rank (vLLM and SGLang cannot load it); absent with q_a_proj present: read from"
        " its rows"
    ),
    "vocab.d2t_order": "arange(Vd) + d2t is not strictly increasing",
    "vocab.d2t_range": "arange(Vd) + d2t leaves [0, V)",
    "vocab.t2d_count": "t2d does not mark exactly Vd target tokens",
    "vocab.t2d_mismatch": "t2d disagrees with d2t",
    "vocab.d2t_full_vocab": "d2t shipped although draft_vocab_size == vocab_size",
    "vocab.lm_head_needed": "no lm_head although the draft vocabulary or width differs from the target's",
    "vocab.lm_head_borrowed": (
        "no lm_head: the drafter borrows the target's head; which engines do (vLLM yes; SGLang only with"
        " draft_vocab_size null)"
    ),
    "aux.impossible_reading": (
        "an aux-id reading names a layer outside the target's 0..L: discarded for the other convention"
    ),
    "aux.ambiguous": "the aux ids' convention is settled by no evidence and no target: both readings reported",
    "aux.unsettled_convention": (
        "with a target: the aux ids' convention is settled by no evidence and both readings fit 0..L: the dialect's is"
        " read, the other named; verify measures both, convert `resolve` decides"
    ),
    "dialect.ambiguous": "two dialects fit within the margin and read different aux ids: both readings reported",
    "config.architecture_mismatch": (
        "the architecture label (e.g. Qwen3ForCausalLM) does not fit the tensors (no q_norm/k_norm): read by the"
        " tensors"
    ),
    "embed.needed": "no embed_tokens although the drafter is narrower or wider than the target",
    "aux.duplicate": "an aux layer id appears twice",
    "aux.unsorted": "aux layer ids are not ascending (engines sort them; fc columns follow ascending order)",
    "aux.count": "the number of aux ids differs from the number of fused states (fc width / T)",
    "aux.range": "an aux layer id outside the target's layers",
    "aux.not_recorded": "no aux layer ids recorded: each engine's default applies",
    "rope.defaulted": "no rope_theta in config (10000 assumed)",
    "rope.conflicting_locations": (
        "rope_theta and rope_parameters.rope_theta state different thetas (transformers 5 reads the latter; a reader of"
        " the top-level key runs the other)"
    ),
    "rope.target": "the drafter's rope settings differ from the target's",
    "rope.parameters": (
        "a scaled rope lacks a key its scaling needs (factor; original_max_position_embeddings where transformers does"
        " not fill it in) or states one that is no positive number"
    ),
    "rope.mla_reading": (
        "an MLA drafter's scaled rope is not YaRN: vLLM's DeepSeek attention runs it as DeepSeek's YaRN all the same"
    ),
    "target.hidden": "target hidden size differs from the drafter's target_hidden_size",
    "target.vocab": "target vocab size differs from the drafter's vocab_size",
    "scan.nonfinite": "a tensor contains NaN or Inf",
    "scan.zero": "a weight tensor is entirely zero",
    "scan.uninitialised": "a tensor holds values typical of uninitialised memory",
    "scan.unit_fc_norm": "fc_norm weights are all ones (an untrained 3.0 -> 3.1 upgrade)",
    "target.lm_head_order": "lm_head rows do not line up with the target's rows for arange + d2t",
}


@dataclass
class CheckInput:
    """What every check reads: the drafter, its tensors' shapes and dtypes, integer values on demand, the target and
    raw config."""

    drafter: Drafter
    present: Mapping[str, tuple[tuple[int, ...], Any]]  # canonical name -> (shape, dtype: a dtypes.DType)
    values: Callable[[str], Sequence[int]] | None = (
        None  # canonical name -> an integer/bool tensor's elements (d2t, t2d)
    )
    target: TargetConfig | None = None
    config: dict | None = None  # the raw config.json, where a check depends on how a key is spelled (null vs a number)
    stored_name: Callable[[str], str] | None = (
        None  # canonical name -> as the checked checkpoint names it (findings say that)
    )


def finding(check: str, severity: str, message: str, subject: str | None = None) -> Finding:
    """A finding of every engine (no engine named, nothing measured)."""
    return Finding(check, severity, message, subject)


def hf_blocks(config: dict | None) -> list[tuple[str, dict]]:
    """(path prefix, block) of each place a drafter's config holds HF model keys: its top level, and the block a
    dialect's rules name for them (``ConfigRules.base``: speculators' ``transformer_layer_config``, the one vLLM reads
    for such a drafter)."""
    from ..dialects import DIALECTS
    from ..dialects.base import lookup

    config = config or {}
    bases = sorted({d.rules.base for d in DIALECTS.values() if d.rules.base})
    return [("", config)] + [
        (f"{base}.", lookup(config, base)) for base in bases if isinstance(lookup(config, base), dict)
    ]
