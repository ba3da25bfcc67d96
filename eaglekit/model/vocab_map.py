"""The draft <-> target vocabulary maps, as pure functions on Python ints (no torch: validate and convert's planning
read the small maps as ints).

A pruned drafter's ``d2t`` holds, per draft id ``i``, the offset to its target id: ``i + d2t[i]`` (EAGLE 3's layout,
which vLLM and SGLang read). ``t2d`` is the same map seen from the target: a bool per target id, true where some draft
id maps there.
"""

from __future__ import annotations

from collections.abc import Sequence


def mapped_ids(d2t: Sequence[int]) -> list[int]:
    """arange(Vd) + d2t: the target id of each draft id."""
    return [i + offset for i, offset in enumerate(d2t)]


def t2d_from_d2t(d2t: Sequence[int], vocab_size: int) -> bytearray:
    """The t2d mask d2t implies, as the bytes of a bool tensor of ``vocab_size`` (ids outside [0, V) are left out)."""
    t2d = bytearray(vocab_size)
    for target_id in mapped_ids(d2t):
        if 0 <= target_id < vocab_size:
            t2d[target_id] = 1
    return t2d
