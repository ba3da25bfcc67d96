"""The verify report (a dict following schemas/verify.schema.json): the drafter's run, then the parity sections and
the checks as the later stages fill them in."""

from __future__ import annotations

from .. import dialects
from ..findings import Finding
from .checks import Check
from .run import SequenceResult, Verifier, totals


def target_engine_report(verifier: Verifier) -> dict | None:
    """With --target-engine: which vLLM ran the target, with which workers, and what eaglekit changed in its run."""
    options = verifier.options
    if not options.target_engine:
        return None
    return {
        "engine": options.target_engine,
        "vllm_version": verifier.engine_said.get("vllm_version"),
        "parallel": options.parallel.to_dict(),
        "workarounds": verifier.engine_said.get("workarounds", []),
    }


def drafter_report(
    path: str,
    loaded: dialects.LoadedDrafter,
    verifier: Verifier,
    ids: tuple[int, ...],
    findings: list[Finding],
    results: list[SequenceResult],
    seconds: float,
) -> dict:
    """Everything about the drafter's own run; "reference", "engine" and "against" are None until those run."""
    options = verifier.options
    d = loaded.drafter
    traj, every = totals(results)
    drafted = sum(r.chains.drafts.numel() for r in results)
    return {
        "drafter": str(path),
        "dialect": loaded.dialect,
        "eagle_version": d.eagle_version,
        "target": verifier.target_config.name,
        "device": verifier.device,
        "dtype": options.dtype,
        "num_speculative_tokens": options.k,
        "max_new_tokens": options.max_new_tokens,
        "hidden_states": options.hidden_states,
        "target_engine": target_engine_report(verifier),
        "aux_layer_ids": list(ids),
        "aux_layer_ids_recorded": d.aux.ids is not None,
        "acceptance_length": round(traj.acceptance_length, 6),
        "trajectory": traj.to_dict(),
        "every_position": every.to_dict(),
        "prompts": [
            {
                "id": r.prompt.id,
                "category": r.prompt.category,
                "encoding": r.prompt.encoding,
                "prompt_tokens": len(r.prompt.ids),
                "new_tokens": min(int(r.tokens.shape[0]) - len(r.prompt.ids), verifier.max_new[i]),
                "target_mismatches": r.target_mismatches,
                "trajectory": r.trajectory.to_dict(),
                "every_position": r.every_position.to_dict(),
            }
            for i, r in enumerate(results)
        ],
        "throughput": {
            "drafted_tokens": drafted,
            "seconds": round(seconds, 4),
            "drafted_tokens_per_second": round(drafted / seconds, 1) if seconds else None,
        },
        "findings": [f.to_dict() for f in findings if f.severity != "info"],
        "reference": None,
        "engine": None,
        "against": None,
    }


def finish(report: dict, checks: list[Check]) -> dict:
    """The checks, and the verdict: passed when every check passed."""
    report["checks"] = [c.to_dict() for c in checks]
    report["passed"] = all(c.passed for c in checks)
    return report
