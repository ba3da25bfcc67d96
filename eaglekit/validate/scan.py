"""Checks that read tensor data: ``--scan`` (every tensor, streamed) and lm_head against the target's rows."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from ..findings import Finding
from ..io.reader import Checkpoint

GARBAGE_ABS = 1e5  # trained drafter weights sit far below this; torch.empty garbage does not


def scan_pieces(name: str, pieces: Iterable[torch.Tensor]) -> list[Finding]:
    """Check one tensor, given as flat pieces (so that memory holds one piece, not the tensor)."""
    nonfinite = nonzero = 0
    biggest = 0.0
    ones = name.startswith("fc_norm.")
    floating = None
    for piece in pieces:
        if floating is None:
            floating = piece.dtype.is_floating_point
            if not floating:
                return []
        if piece.numel() == 0:
            continue
        part = (
            piece if piece.dtype == torch.float64 else piece.float()
        )  # float64's values do not fit float32 (1e300, 1e-60)
        finite = torch.isfinite(part)
        if not bool(finite.all()):
            nonfinite += int((~finite).sum())
            part = torch.where(finite, part, torch.zeros((), dtype=part.dtype))
        nonzero += int(torch.count_nonzero(part))
        biggest = max(biggest, float(part.abs().max()))
        if ones:
            ones = bool(torch.all(part == 1))
    if not floating:
        return []
    out = []
    if nonfinite:
        out.append(Finding("scan.nonfinite", "error", f"{name} has {nonfinite} NaN/Inf values", name))
    if nonzero == 0 and nonfinite == 0 and not name.endswith(".bias"):
        out.append(Finding("scan.zero", "warning", f"{name} is entirely zero", name))
    if biggest > GARBAGE_ABS:
        out.append(
            Finding(
                "scan.uninitialised",
                "warning",
                f"{name} holds values up to {biggest:.3g}, typical of uninitialised memory",
                name,
            )
        )
    if ones:
        out.append(
            Finding("scan.unit_fc_norm", "warning", f"{name} is all ones: an untrained EAGLE 3 -> 3.1 upgrade?", name)
        )
    return out


def scan_all(ckpt: Checkpoint, names: Iterable[str]) -> list[Finding]:
    """Read and check each tensor in turn, in pieces."""
    findings: list[Finding] = []
    for name in names:
        findings += scan_pieces(name, ckpt.read_chunks(name, 16 * 2**20))
    return findings


def check_lm_head_order(
    drafter_lm_head: torch.Tensor, d2t: torch.Tensor, target_lm_head: torch.Tensor
) -> list[Finding]:
    """Drafters start from the target's lm_head rows for their draft vocabulary; row i should resemble target row
    i + d2t[i]. A head indexed by the offsets d2t[i] instead (a known exporter bug) resembles those rows."""
    if drafter_lm_head.shape[1] != target_lm_head.shape[1]:
        return []
    idx = torch.arange(d2t.numel()) + d2t.to(torch.int64)
    if int(idx.max()) >= target_lm_head.shape[0] or int(d2t.max()) >= target_lm_head.shape[0] or int(d2t.min()) < 0:
        return []
    a = drafter_lm_head.float()
    right = F.cosine_similarity(a, target_lm_head[idx].float(), dim=-1).mean().item()
    wrong = F.cosine_similarity(a, target_lm_head[d2t.to(torch.int64)].float(), dim=-1).mean().item()
    if wrong > 0.5 and wrong > right + 0.2:
        return [
            Finding(
                "target.lm_head_order",
                "error",
                f"lm_head rows match the target's rows at d2t offsets (mean cosine {wrong:.2f}), not at arange + d2t "
                f"({right:.2f}): the head was exported with mis-ordered rows",
                "lm_head.weight",
            )
        ]
    return [
        Finding(
            "target.lm_head_order",
            "info",
            f"lm_head rows vs the target's rows for arange + d2t: mean cosine {right:.2f}",
            "lm_head.weight",
        )
    ]
