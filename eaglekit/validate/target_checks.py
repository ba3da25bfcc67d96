"""The drafter against the target named (``--target``): hidden size, vocabulary size, rope."""

from __future__ import annotations

from ..findings import Finding
from ..model.hf_config import deepseek_attention
from .catalogue import CheckInput, finding
from .rope_checks import OWN_CONTEXT, context_source, described, rope_differences


def check_target(x: CheckInput) -> list[Finding]:
    """The drafter against the target named: hidden size, vocabulary, rope."""
    t, d = x.target, x.drafter
    if t is None:
        return []
    out = []
    if t.hidden_size != d.target_hidden_size:
        out.append(
            finding(
                "target.hidden",
                "error",
                f"target {t.name} has hidden size {t.hidden_size}, the drafter expects {d.target_hidden_size}",
                "target_hidden_size",
            )
        )
    if t.vocab_size != d.vocab_size:
        out.append(
            finding(
                "target.vocab",
                "error",
                f"target {t.name} has vocab {t.vocab_size}, the drafter's vocab_size is {d.vocab_size}",
                "vocab_size",
            )
        )
    differences = rope_differences(d, t)
    if differences:
        shown = [key for key in differences if key not in ("theta", "rope_type")]
        target_rope = described(
            t.rope,
            t.rope_as_loaded,
            shown,
            deepseek_attention(t.architectures, t.model_type),
            OWN_CONTEXT if t.own_original_context is not None else context_source(t),
        )
        if (
            t.rope_freqs is not None
        ):  # a GGUF file's llama.cpp rope divisors: the rope its model runs (target.gguf_rope)
            target_rope += f", divided by the file's rope_freqs ({min(t.rope_freqs):g} to {max(t.rope_freqs):g})"
        drafter_rope = described(d.rope, d.rope_as_loaded, shown, d.attention == "mla", context_source(d))
        out.append(
            finding(
                "rope.target",
                "warning",
                f"drafter rope ({drafter_rope}) differs from the target's ({target_rope}); engines use the drafter's —"
                " right only if it was trained so",
                "rope_theta" if differences == ["theta"] else "rope_scaling",
            )
        )
    return out
