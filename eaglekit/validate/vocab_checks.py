"""The vocab maps' values (read as Python ints, without torch): d2t's target ids and the t2d mask they imply."""

from __future__ import annotations

from typing import Any

from ..findings import Finding
from ..io import dtypes
from ..model.vocab_map import mapped_ids
from .catalogue import CheckInput, finding


def _is_int_map(dtype: Any, shape: tuple[int, ...]) -> bool:
    """A 1-D tensor of an integer dtype (what arange + d2t can be computed from)."""
    return len(shape) == 1 and dtypes.name(dtype) in dtypes.INTEGER_NAMES


def check_vocab(x: CheckInput) -> list[Finding]:
    """The vocab maps' values: arange + d2t strictly increasing inside [0, V), t2d marking exactly those ids."""
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
                finding(
                    "vocab.d2t_full_vocab",
                    "error",
                    "d2t maps a full-size draft vocabulary onto a permutation of the target's",
                    "d2t",
                )
            )
        else:
            out.append(
                finding(
                    "vocab.d2t_full_vocab",
                    "warning",
                    "d2t is shipped although draft_vocab_size == vocab_size (vLLM >= 0.30 refuses it)",
                    "d2t",
                )
            )
    if len(mapped) > 1 and not all(a < b for a, b in zip(mapped, mapped[1:])):
        out.append(
            finding(
                "vocab.d2t_order",
                "error",
                "arange + d2t is not strictly increasing: draft ids map to repeated or reordered target ids",
                "d2t",
            )
        )
    if mapped and (min(mapped) < 0 or max(mapped) >= d.vocab_size):
        out.append(
            finding(
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
                finding(
                    "vocab.t2d_count",
                    "error",
                    f"t2d marks {marked} target tokens, draft_vocab_size is {d.draft_vocab_size}",
                    "t2d",
                )
            )
        if not all(0 <= i < len(t2d) and t2d[i] for i in mapped):
            out.append(
                finding(
                    "vocab.t2d_mismatch", "error", "t2d does not mark the target ids that arange + d2t names", "t2d"
                )
            )
    return out
