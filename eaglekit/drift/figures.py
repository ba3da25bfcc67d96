"""The report's figures from drafter runs: acceptance and the recorder's totals per draft step, overall and per
context bucket; the balance of fc's input; the expectation under sampling; ratios between two drafters."""

from __future__ import annotations

from ..reference.record import DriftRecorder
from ..reference.simulate import Counters
from .drafting import Side
from .inputs import bucket_label
from .sampling import DRAFT_DISTRIBUTION


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def per_depth(counters: Counters, recorder: DriftRecorder, k: int, bucket: int | None = None) -> list[dict]:
    """Rows for steps 1..K: acceptance (P(step accepted), and given the step before was), attention on sinks and on
    the chain's own drafts, the fed-back state's mean norm and its ratio to step 1's."""
    sums: dict[int, dict[str, float]] = {}
    for (b, step), t in recorder.totals.items():
        if bucket is not None and b != bucket:
            continue
        acc = sums.setdefault(step, {"chains": 0, "sink": 0.0, "own": 0.0, "feedback": 0.0})
        for key in acc:
            acc[key] += t[key]
    rates = counters.per_position
    rows = []
    base = None
    for step in range(1, k + 1):
        s = sums.get(step)
        n = s["chains"] if s else 0
        fb = s["feedback"] / n if n else None
        if step == 1:
            base = fb
        rate = rates[step - 1] if len(rates) >= step else None
        prev = 1.0 if step == 1 else (rates[step - 2] if len(rates) >= step - 1 else None)
        rows.append(
            {
                "step": step,
                "acceptance_rate": _r(rate),
                "conditional_acceptance_rate": _r(rate / prev) if rate is not None and prev else None,
                "sink_attention": _r(s["sink"] / n) if n else None,
                "own_draft_attention": _r(s["own"] / n) if n else None,
                "feedback_norm": _r(fb),
                "feedback_norm_relative": _r(fb / base) if fb is not None and base else None,
                "chains": n,
            }
        )
    return rows


def fc_input(recorder: DriftRecorder) -> dict | None:
    """Mean norm of each aux chunk entering fc, and each one's share of their sum (balanced: 1/n each)."""
    if not recorder.fc_totals:
        return None
    n = sum(f["chains"] for f in recorder.fc_totals.values())
    total = sum(f["sum"] for f in recorder.fc_totals.values()) / max(n, 1)
    norms = [float(x) for x in total]
    share = [x / sum(norms) if sum(norms) else 0.0 for x in norms]
    return {
        "chunk_norms": [_r(x) for x in norms],
        "chunk_shares": [_r(x) for x in share],
        "max_over_min": _r(max(norms) / min(norms)) if min(norms) else None,
    }


def side_report(side: Side, edges: list[int], k: int, temperature: float | None = None, top_p: float = 1.0) -> dict:
    by_context = []
    for b, counters in sorted(side.buckets.items()):
        lo, hi = edges[b], edges[b + 1]
        by_context.append(
            {
                "bucket": bucket_label(lo, hi),
                "from": lo,
                "to": hi,
                "every_position": counters.to_dict(),
                "acceptance_length": _r(counters.acceptance_length),
                "per_depth": per_depth(counters, side.recorder, k, b),
            }
        )
    return {
        "path": side.path,
        "eagle_version": side.eagle_version,
        "acceptance": {"trajectory": side.trajectory.to_dict(), "every_position": side.every.to_dict()},
        "per_depth": per_depth(side.every, side.recorder, k),
        "by_context_length": by_context,
        "fc_input": fc_input(side.recorder),
        "seconds": round(side.seconds, 3),
        "sampling": sampling_report(side, temperature, top_p) if side.sampling is not None else None,
    }


def sampling_report(side: Side, temperature: float, top_p: float) -> dict:
    e = side.sampling
    return {
        "temperature": temperature,
        "top_p": top_p,
        "draft_distribution": DRAFT_DISTRIBUTION,
        "contexts": (
            "every position of the same greedy continuations the greedy figures use (each context's expectation is"
            " exact)"
        ),
        "num_drafts": e.num_drafts,
        "expected_accepted_per_position": [_r(x) for x in e.accepted_per_position],
        "per_position_rate": [_r(x) for x in e.per_position_rate],
        "acceptance_length": _r(e.acceptance_length),
        "greedy_acceptance_length": _r(side.every.acceptance_length),
    }


def _ratio(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and a:
        return _r(b / a)
    return None


FIGURES = (
    "acceptance_rate",
    "conditional_acceptance_rate",
    "sink_attention",
    "own_draft_attention",
    "feedback_norm_relative",
)


def ratios(mine: dict, other: dict) -> dict:
    """other / mine for every figure both have."""

    def depth(rows_a, rows_b):
        return [{"step": a["step"], **{f: _ratio(a[f], b[f]) for f in FIGURES}} for a, b in zip(rows_a, rows_b)]

    by_b = {r["bucket"]: r for r in other["by_context_length"]}
    return {
        "acceptance_length": _ratio(
            mine["acceptance"]["trajectory"]["acceptance_length"],
            other["acceptance"]["trajectory"]["acceptance_length"],
        ),
        "every_position_acceptance_length": _ratio(
            mine["acceptance"]["every_position"]["acceptance_length"],
            other["acceptance"]["every_position"]["acceptance_length"],
        ),
        "per_depth": depth(mine["per_depth"], other["per_depth"]),
        "by_context_length": [
            {
                "bucket": r["bucket"],
                "acceptance_length": _ratio(r["acceptance_length"], by_b[r["bucket"]]["acceptance_length"]),
                "per_depth": depth(r["per_depth"], by_b[r["bucket"]]["per_depth"]),
            }
            for r in mine["by_context_length"]
            if r["bucket"] in by_b
        ],
    }


def variant_side(side: Side) -> dict:
    out = {
        "acceptance": {"trajectory": side.trajectory.to_dict(), "every_position": side.every.to_dict()},
        "acceptance_length": _r(side.trajectory.acceptance_length),
        "every_position_acceptance_length": _r(side.every.acceptance_length),
    }
    if side.sampling is not None:
        out["sampling_acceptance_length"] = _r(side.sampling.acceptance_length)
    return out
