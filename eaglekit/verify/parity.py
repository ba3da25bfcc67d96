"""Parity: a second drafter on the same target states as the drafter, compared draft step by draft step.

``--reference`` runs another checkpoint of the same drafter (a conversion's source); ``--engine`` runs the drafter
as a vLLM release would read it, beside the drafter as intended.
"""

from __future__ import annotations

import torch

from .. import dialects, engines
from ..errors import UnsupportedError, UsageError
from ..model.drafter import Drafter
from ..reference.model import ReferenceDrafter
from ..validate.checks import CheckInput, run_checks
from .checks import Check, cannot_run
from .run import SequenceResult, Verifier, resolved_ids, totals


def compare_chains(
    a: ReferenceDrafter, b: ReferenceDrafter, ra: list[SequenceResult], rb: list[SequenceResult], k: int
) -> dict:
    """Per draft step: max abs / rel logit difference and draft-token agreement."""
    steps = []
    for step in range(k):
        max_abs = max_rel = 0.0
        agree = total = 0
        for x, y in zip(ra, rb):
            la = a.draft_logits(x.chains.y[:, step]).float()
            lb = b.draft_logits(y.chains.y[:, step].to(a.device)).float().to(la.device)
            if (
                la.shape != lb.shape
            ):  # check_reference refuses such a reference before the run; no Infinity in a JSON report
                raise UnsupportedError(
                    f"draft logits of shapes {list(la.shape)} and {list(lb.shape)} cannot be compared"
                )
            diff = (la - lb).abs()
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / la.abs().clamp_min(1e-6)).max()))
            agree += int((x.chains.drafts[:, step].cpu() == y.chains.drafts[:, step].cpu()).sum())
            total += x.chains.drafts.shape[0]
        steps.append(
            {
                "step": step + 1,
                "max_abs_logit_diff": max_abs,
                "max_rel_logit_diff": max_rel,
                "token_agreement": agree / total if total else 1.0,
            }
        )
    return {
        "steps": steps,
        "bit_identical": all(s["max_abs_logit_diff"] == 0.0 and s["token_agreement"] == 1.0 for s in steps),
    }


def _float_dtypes(loaded: dialects.LoadedDrafter) -> set:  # of dtypes.DType
    return {i.dtype for i in loaded.checkpoint.tensors.values() if i.dtype.is_floating_point}


def check_reference(verifier: Verifier, path: str, drafter: Drafter) -> None:
    """Refuse, before the run, a --reference that cannot run on the target (``cannot_run``) or whose draft logits have
    another shape than the drafter's (other draft vocabulary or width): step by step they could not be compared."""
    options = verifier.options
    L = verifier.target_config.num_layers
    with dialects.load(options.reference, target_num_layers=L) as ref:
        r = ref.drafter.with_(target_num_layers=L)
        bad = cannot_run(
            run_checks(
                CheckInput(
                    r, ref.present(), values=ref.read_values, target=verifier.target_config, stored_name=ref.stored_name
                )
            )
        )
    if bad:
        raise UsageError(
            f"`reference` {options.reference} cannot run on the target {verifier.target_config.name}: {bad[0].message}"
        )
    mine, theirs = (drafter.draft_vocab_size, drafter.hidden_size), (r.draft_vocab_size, r.hidden_size)
    if mine[0] != theirs[0]:
        raise UsageError(
            f"`reference` {options.reference} drafts logits over {theirs[0]} tokens (lm_head {list(theirs)}), {path}"
            f" over {mine[0]} (lm_head {list(mine)}): their logits cannot be compared step by step; give a checkpoint"
            " of the same drafter"
        )


def reference_parity(
    verifier: Verifier, loaded: dialects.LoadedDrafter, model: ReferenceDrafter, results: list[SequenceResult]
) -> tuple[dict, Check]:
    """The same run on another checkpoint of the same drafter. With the same stored dtypes (a lossless conversion)
    nothing may differ at all; otherwise logits within --atol (if given) and 99% token agreement."""
    options = verifier.options
    L = verifier.target_config.num_layers
    with dialects.load(options.reference) as ref:
        ref.drafter = ref.drafter.with_(target_num_layers=L)
        ref_ids = resolved_ids(ref.drafter, L)
        ref_model = verifier.model_for(ref)
        ref_results, _ = verifier.run(ref_model, ref_ids, "reference")
        lossless_expected = _float_dtypes(ref) == _float_dtypes(loaded)
    comparison = compare_chains(model, ref_model, results, ref_results, options.k)
    ref_traj, _ = totals(ref_results)
    ids_match = ref_ids == resolved_ids(model.d, L)
    worst = max(s["max_abs_logit_diff"] for s in comparison["steps"])
    agree = min(s["token_agreement"] for s in comparison["steps"])
    if lossless_expected and options.atol is None:
        ok = ids_match and comparison["bit_identical"]
        rule = "bit-identical (same stored dtypes)"
    else:
        ok = ids_match and agree >= 0.99 and (options.atol is None or worst <= options.atol)
        rule = "token agreement >= 99%" + (f", |logit diff| <= {options.atol:g}" if options.atol is not None else "")
    detail = f"max |logit diff| {worst:.3g}, token agreement {agree:.2%}; required: {rule}"
    if not ids_match:
        detail += f"; aux layer ids differ: {list(ref_ids)} vs {list(resolved_ids(model.d, L))}"
    data = {
        "path": options.reference,
        "aux_layer_ids": list(ref_ids),
        "acceptance_length": round(ref_traj.acceptance_length, 6),
        "required": rule,
        **comparison,
    }
    return data, Check("reference_parity", ok, detail)


def engine_parity(
    verifier: Verifier, loaded: dialects.LoadedDrafter, model: ReferenceDrafter, results: list[SequenceResult]
) -> tuple[dict, Check]:
    """The drafter as --engine's release would run it (its reading of names, config keys and defaults) against the
    drafter as intended: any divergence, or an error the release would make, fails."""
    release = engines.parse(verifier.options.engine)
    view = engines.interpret(loaded, release, target_num_layers=verifier.target_config.num_layers)
    data: dict = {"engine": release.label, "loads": view.loads, "findings": [f.to_dict() for f in view.findings]}
    causes = [f"{f.message} — {f.effect}" for f in view.findings if f.severity == "error"]
    if not view.loads:
        return data, Check("engine_parity", False, f"{release.label} would not load it: " + "; ".join(causes[:3]))
    if view.uninitialised:
        return data, Check(
            "engine_parity",
            False,
            f"{release.label} leaves {', '.join(view.uninitialised[:3])} uninitialised: its output is undefined",
        )
    engine_drafter = view.drafter
    extra = {}
    for name in view.unit_weights:
        extra[name] = torch.ones(
            engine_drafter.target_hidden_size if name.startswith("fc_norm.") else engine_drafter.hidden_size
        )
    engine_model = verifier.model_for(loaded, drafter=engine_drafter, extra_weights=extra)
    ids = resolved_ids(engine_drafter, verifier.target_config.num_layers)
    engine_results, _ = verifier.run(engine_model, ids, release.label)
    intended, _ = totals(results)
    served, _ = totals(engine_results)
    comparison = compare_chains(model, engine_model, results, engine_results, verifier.options.k)
    agreement = [s["token_agreement"] for s in comparison["steps"]]
    data.update(
        {
            "aux_layer_ids": list(ids),
            "intended_acceptance_length": round(intended.acceptance_length, 6),
            "engine_acceptance_length": round(served.acceptance_length, 6),
            "intended": intended.to_dict(),
            "served": served.to_dict(),
            "token_agreement": agreement,
        }
    )
    return data, engine_verdict(release.label, intended.acceptance_length, served.acceptance_length, agreement, causes)


def agreement_text(agreement: list[float]) -> str:
    """Per draft step, the share of positions where two drafters draft the same token: ``78.0%, 64.0%, 58.0%``."""
    return ", ".join(f"{a:.1%}" for a in agreement)


def engine_verdict(label: str, intended: float, served: float, agreement: list[float], causes: list[str]) -> Check:
    """``engine_parity``: the release's drafter against the intended one, saying what differs. The same acceptance
    length does not pass a drafter that drafts other tokens (these prompts happen not to show what other inputs will),
    and a silent misreading fails even where these prompts show no difference at all."""
    why = "; ".join(causes[:3])
    cause = f": {why}" if why else ""
    same_al = abs(intended - served) <= 1e-9
    if min(agreement, default=1.0) < 1.0:
        drafts = f"its drafts agree with the intended drafter's at {agreement_text(agreement)} of positions (step 1..K)"
        if same_al:
            return Check(
                "engine_parity",
                False,
                f"{label} drafts other tokens than intended ({drafts}), though these prompts give both acceptance"
                f" length {served:.3f}{cause}",
            )
        return Check(
            "engine_parity",
            False,
            f"{label} would reach acceptance length {served:.3f} (intended {intended:.3f}); {drafts}{cause}",
        )
    if not same_al or why:  # every draft the same: numerics that tip no argmax here, or a misreading these miss
        return Check(
            "engine_parity",
            False,
            f"{label} would reach acceptance length {served:.3f} (intended {intended:.3f}), drafting the same tokens"
            f" on these prompts{cause or ': numerics differ'}",
        )
    return Check("engine_parity", True, f"{label} runs it as intended (acceptance length {served:.3f})")
