"""``verify``: run a drafter on its target's real hidden states and measure what a greedy vLLM run would see.

Per prompt: the target generates a greedy continuation (all prompts decoded in one batch, the aux states kept
from those forwards); the reference drafter drafts a K-step chain at every position (batched); drafts are compared
with the target's tokens. Reported with vLLM's definitions: along the positions a vLLM run visits
("trajectory": what its counters would say) and over every position (a steadier estimate).

Parity: ``reference`` runs a second checkpoint of the same drafter on the same states; ``engine`` runs the
drafter as a vLLM release would interpret it beside the intended drafter; ``against`` runs vLLM itself.

One module per stage, in the order the data flows (each imports only those above it):

- ``options``: VerifyOptions; ``checks``: Check, the pass/fail lines every stage returns;
- ``prompts``: prompt records and their token ids;
- ``stored``: precomputed hidden states (``--hidden-states``);
- ``run``: the Verifier: the target's run (or the stored states), a drafter's run, the acceptance simulation;
- ``parity``: ``--reference`` and ``--engine``;
- ``readings``: the readings of a checkpoint its files cannot tell apart, each measured on the same sequences;
- ``against_vllm``: ``--against vllm``, vLLM itself;
- ``report``: the report dict;

and ``verify()`` below, which strings them together.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .. import dialects
from ..engines.vllm_serving import check_request, is_llamacpp, refuse_contradictions
from ..errors import UsageError, ValidationFailed
from ..findings import Finding, errors
from ..io.prompts_file import read_prompt_records
from ..validate.checks import CheckInput, run_checks
from . import readings
from .against_vllm import against_vllm, served_rope
from .checks import Check, cannot_run
from .options import VerifyOptions
from .parity import check_reference, engine_parity, reference_parity
from .prompts import Prompt, encode_prompts
from .report import drafter_report, finish
from .run import SequenceResult, Verifier, layers_of, resolved_ids, simulate, totals


def verify(path: str, options: VerifyOptions, progress: Callable[[str, int], object] | None = None) -> dict:
    """Run the verification and return the report (a dict following schemas/verify.schema.json)."""
    _refuse_conflicts(options)
    verifier = Verifier(options, progress)
    _refuse_target(options, verifier)
    L = verifier.target_config.num_layers
    loaded = dialects.load(
        path, options.source_dialect, norm_output_semantics=options.norm_output_semantics, target_num_layers=L
    )
    with loaded:
        d = loaded.drafter.with_(target_num_layers=L)
        loaded.drafter = d
        findings = _read_findings(path, options, verifier, loaded, d)
        checks = _validate_check(findings)
        ids = resolved_ids(d, L)
        candidates = readings.alternatives(loaded, d, L)
        _prepare_target(options, verifier, d, ids, candidates)
        model = verifier.model_for(loaded)
        results, seconds = verifier.run(model, ids, "drafter")
        findings += fewer_prompts(options, len(verifier.sequences))
        report = drafter_report(path, loaded, verifier, ids, findings, results, seconds)
        report["findings"] += _nothing_measured(report)
        answered = _measure_readings(report, verifier, loaded, d, candidates, results)
        checks += _requested_checks(path, options, report, verifier, loaded, model, results, answered)
    report["timings"] = {stage: round(seconds, 3) for stage, seconds in verifier.timings.items()}
    report["resources"] = verifier.resources
    return finish(report, checks)


def _refuse_conflicts(options: VerifyOptions) -> None:
    """Options that contradict each other, and what no engine can run: refused before any work."""
    refuse_contradictions(
        hidden_states=options.hidden_states,
        against=options.against,
        target_engine=options.target_engine,
        prompts=options.prompts,
    )
    check_request(
        options.target,
        target_engine=options.target_engine,
        against=options.against,
        vllm_python=options.vllm_python,
        parallel=options.parallel,
    )


def _refuse_target(options: VerifyOptions, verifier: Verifier) -> None:
    """A target the engine asked for cannot serve: llama-server's must be a .gguf file, vLLM's a rope it can be told."""
    llamacpp = is_llamacpp(options.against)
    if llamacpp and not verifier.target_config.gguf_file:
        raise UsageError(
            f"`against` {options.against}: llama-server serves the target from GGUF; the target must be its .gguf file,"
            f" not {options.target}"
        )
    if (options.against and not llamacpp) or options.target_engine:
        served_rope(
            verifier.target_config
        )  # refuses, before any work, a target vLLM cannot be told to run as verify does


def _read_findings(path: str, options: VerifyOptions, verifier: Verifier, loaded, d) -> list[Finding]:
    """What reading the checkpoint noticed (a defaulted rope, an unsettled id convention) and what the checks find;
    refused before the target loads: a drafter that cannot run on it, a reference that cannot be compared."""
    findings = [
        *loaded.notes,
        *run_checks(
            CheckInput(
                d,
                loaded.present(),
                values=loaded.read_values,
                target=verifier.target_config,
                stored_name=loaded.stored_name,
            )
        ),
    ]
    misfit = cannot_run(findings)
    if misfit:  # before the target is loaded: it could not run on this target at all
        said = "does not fit the target" if misfit[0].check.startswith("target.") else "cannot run on the target"
        raise ValidationFailed(f"{path} {said} {verifier.target_config.name}: {misfit[0].message}", findings)
    if (
        options.reference
    ):  # also before the target loads: a reference that cannot run, or whose logits are not comparable
        check_reference(verifier, path, d)
    return findings


def _validate_check(findings: list[Finding]) -> list[Check]:
    """The failed ``validate`` check when the checks found errors (none otherwise)."""
    if not errors(findings):
        return []
    return [Check("validate", False, f"{len(errors(findings))} error(s), first: {errors(findings)[0].message}")]


def _prepare_target(options: VerifyOptions, verifier: Verifier, d, ids, candidates) -> None:
    """The target's sequences and aux states: stored, captured by vLLM, or decoded here, keeping the layers of the
    drafter and of every reading to measure."""
    L = verifier.target_config.num_layers
    if options.hidden_states:
        verifier.prepare_stored(d, ids)
    elif options.target_engine:  # the target run by vLLM: the same layers, captured by vLLM itself
        verifier.prepare_engine(capture=layers_of([d, *(c for _, c in candidates)], L))
    else:  # the layers of the drafter and of every reading to measure are kept while the target decodes
        verifier.prepare(capture=layers_of([d, *(c for _, c in candidates)], L))


def _nothing_measured(report: dict) -> list[dict]:
    """A warning when no chain was drafted, or when no drafted token was accepted anywhere."""
    # the counts that measured something (the every-position count has no chain where none fits in K tokens)
    measured = [report[count] for count in ("trajectory", "every_position") if report[count]["num_drafts"]]
    if not measured:
        return [
            Finding(
                "verify.nothing_measured",
                "warning",
                "no chain was drafted: each continuation ends before a draft step (raise `max_new_tokens`)",
            ).to_dict()
        ]
    if not any(count["num_accepted_tokens"] for count in measured):
        return [
            Finding(
                "verify.nothing_accepted",
                "warning",
                "no drafted token was accepted at any position: the "
                "drafter does not predict this target (wrong target, aux layers or vocab map?)",
            ).to_dict()
        ]
    return []


def _measure_readings(report: dict, verifier: Verifier, loaded, d, candidates, results) -> set[str]:
    """The readings the files cannot tell apart, each measured (``report["readings"]``); returns the checks they
    answer, whose findings are dropped: measured here, not a warning to go and measure it."""
    L = verifier.target_config.num_layers
    report["readings"] = (
        readings.measure(verifier, loaded, candidates, done=(d, results)) if len(candidates) > 1 else None
    )
    answered = readings.settled(loaded, d, L) if report["readings"] is not None else set()
    report["findings"] = [f for f in report["findings"] if f["check"] not in answered]
    return answered


def _requested_checks(path, options: VerifyOptions, report, verifier, loaded, model, results, answered) -> list[Check]:
    """The checks asked for, in this order: min_acceptance_length, reference, engine, against; each parity also
    writes its part of the report."""
    checks = []
    if options.min_acceptance_length is not None:
        checks.append(threshold(options.min_acceptance_length, results))
    if options.reference:
        report["reference"], check = reference_parity(verifier, loaded, model, results)
        checks.append(check)
    if options.engine:
        report["engine"], check = engine_parity(verifier, loaded, model, results)
        report["engine"]["findings"] = [f for f in report["engine"]["findings"] if f["check"] not in answered]
        checks.append(check)
    if options.against:
        report["against"], new_checks = _against(path, options, verifier, loaded, model, results)
        checks.extend(new_checks)
    return checks


def _against(path, options: VerifyOptions, verifier, loaded, model, results) -> tuple[dict, list[Check]]:
    """``against``: the engine itself, llama-server or vLLM, timed."""
    start = time.perf_counter()
    llamacpp = is_llamacpp(options.against)
    if llamacpp:
        from .against_llamacpp import against_llamacpp

        part, new_checks = against_llamacpp(path, verifier, loaded, model, results)
    else:
        part, new_checks = against_vllm(path, verifier, model, results, loaded)
    verifier.timings["against_llamacpp" if llamacpp else "against_vllm"] = time.perf_counter() - start
    return part, new_checks


def threshold(minimum: float, results: list[SequenceResult]) -> Check:
    """``min_acceptance_length``: the trajectory's acceptance length against ``minimum``."""
    traj, _ = totals(results)
    if not traj.num_drafts:  # AL 1.000 of no drafts measured nothing: no threshold passes on it
        return Check("min_acceptance_length", False, "no chain was drafted, so no acceptance length was measured")
    ok = traj.acceptance_length >= minimum
    return Check(
        "min_acceptance_length",
        ok,
        f"acceptance length {traj.acceptance_length:.3f} {'>=' if ok else '<'} {minimum}",
    )


def fewer_prompts(options: VerifyOptions, ran: int) -> list[Finding]:
    """A num_prompts larger than the prompts there are: said, where it ran all of them in silence."""
    if options.num_prompts is None or options.num_prompts <= ran:
        return []
    where = options.hidden_states or options.prompts or "the built-in prompt set"
    return [
        Finding(
            "verify.num_prompts",
            "warning",
            f"num_prompts {options.num_prompts} asked for, but {where} holds {ran}: all {ran} were run",
        )
    ]


__all__ = [
    "Check",
    "Prompt",
    "SequenceResult",
    "Verifier",
    "VerifyOptions",
    "encode_prompts",
    "read_prompt_records",
    "simulate",
    "verify",
]
