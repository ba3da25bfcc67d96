"""eaglekit's Python API: the five commands as functions with typed results. The CLI calls these and nothing else.

    from eaglekit import api

    info = api.inspect("./drafter")                  # Inspection: dialect, EAGLE version, aux ids, flags
    api.convert("./drafter", "./for-vllm", to="vllm")  # Conversion: the files written
    report = api.validate("./for-vllm", engine="vllm==0.32")
    assert report.ok, [f.message for f in report.findings]

Every result keeps the full JSON document the CLI prints under ``--json`` in ``.data`` (its schema is in
``schemas/``); the typed fields are the parts a script usually wants. Failures raise ``eaglekit.errors.EaglekitError``
subclasses with a one-line message. Importing this module is cheap: each function imports what it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from .convert import ConversionPlan
    from .validate import ValidationReport

# Every JSON document eaglekit prints starts with the same three keys: the contract's version, whether the command
# succeeded (its one success key) and the path it was given (its one path key). Bump the version on any change
# that could break a reader (a key removed or renamed, a meaning changed).
SCHEMA_VERSION = 1


def document(path: str | Path, ok: bool, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` under the shared contract keys (see ``SCHEMA_VERSION``)."""
    return {"schema_version": SCHEMA_VERSION, "ok": ok, "path": str(path), **data}


@dataclass(frozen=True)
class Inspection:
    """What a drafter checkpoint is (``eaglekit inspect``)."""

    path: str
    dialect: str
    eagle_version: str
    attention: str
    aux_layer_ids: list[int] | None  # input-of-layer (vLLM's convention); None when the checkpoint records none
    flags: dict[str, bool]
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Conversion:
    """A conversion's plan and, unless it was a dry run, the files written (``eaglekit convert``)."""

    source: str
    output: str
    source_dialect: str
    to: str
    files: list[str]  # written, or (dry run) that would be written
    written: bool
    plan: "ConversionPlan" = field(repr=False)
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Verification:
    """The drafter run on its target's real hidden states (``eaglekit verify``)."""

    path: str
    acceptance_length: float
    passed: bool
    checks: list[dict[str, Any]]
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Publication:
    """What ``eaglekit push`` published (or, with ``dry_run``, would publish)."""

    repo_id: str
    files: list[str]
    dry_run: bool
    commit: dict[str, Any] | None
    data: dict[str, Any] = field(repr=False)


def inspect(path: str | Path, *, source_dialect: str = "auto", norm_output_semantics: str = "auto") -> Inspection:
    """Read a drafter's headers and config (never its tensor data) and describe it. ``norm_output_semantics``:
    how to read a SpecForge-style ``norm_output`` ("eagle31", "specforge"; "auto": as the checkpoint says)."""
    from . import dialects
    from .describe import describe

    with dialects.load(path, source_dialect, norm_output_semantics=norm_output_semantics) as loaded:
        data = document(path, True, describe(loaded))
    return Inspection(str(path), data["dialect"]["dialect"], data["eagle_version"], data["attention"], data["aux_layers"]["input_ids"],
                      dict(data["flags"]), data)


def convert(
    source: str | Path,
    out: str | Path,
    *,
    to: str,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
    target: str | None = None,
    aux_layers: tuple[int, ...] | None = None,
    upgrade: str | None = None,
    dtype: Any = None,
    max_shard_bytes: int | None = None,
    force: bool = False,
    dry_run: bool = False,
    on_plan: Callable[["ConversionPlan"], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Conversion:
    """Convert ``source`` into ``out`` in dialect ``to`` (``dry_run``: plan only, write nothing).

    ``dtype`` is a dtype (``eaglekit.io.dtypes.DType``, a torch dtype) or its name (``"bfloat16"``); ``on_plan`` sees the plan before anything is
    written; ``progress`` receives byte counts as tensors are written.
    """
    from .convert import ConvertOptions, execute, plan_conversion
    from .io import dtypes
    from .io.writer import DEFAULT_MAX_SHARD_BYTES

    options = ConvertOptions(
        to=to,
        source_dialect=source_dialect,
        norm_output_semantics=norm_output_semantics,
        target=target,
        aux_layers=tuple(aux_layers) if aux_layers is not None else None,
        upgrade=upgrade,
        dtype=dtypes.parse_cast(dtype) if isinstance(dtype, str) else dtype,
        max_shard_bytes=max_shard_bytes or DEFAULT_MAX_SHARD_BYTES,
        force=force,
    )
    plan = plan_conversion(source, None if dry_run else out, options)
    try:
        if on_plan is not None:
            on_plan(plan)
        files = None if dry_run else execute(plan, out, progress=progress)
    finally:
        plan.loaded.close()
    from .serving import serve_command

    data = plan.to_dict()
    data["output"] = str(out)
    data["written"] = files is not None
    if files is not None:
        data["files"] = files
    target_name = target or plan.drafter.verifier or "<target model>"
    data["serve"] = serve_command(plan.dialect.hub_tags, target_name, str(Path(out).resolve()))
    data = document(source, True, data)
    return Conversion(str(source), str(out), data["source_dialect"], data["to"], list(data["files"]), files is not None, plan, data)


def validate(
    path: str | Path,
    *,
    target: str | None = None,
    engine: str | None = None,
    scan: bool = False,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
) -> "ValidationReport":
    """Check a drafter: schemas, invariants, its target (``target``), and what an engine release will do (``engine``)."""
    from .validate import validate as run

    return run(path, target=target, engine=engine, scan=scan, source_dialect=source_dialect, norm_output_semantics=norm_output_semantics)


def verify(path: str | Path, *, target: str, progress: Callable[[str, int], object] | None = None, **options: Any) -> Verification:
    """Run the drafter on its target's hidden states and measure acceptance; ``options`` are ``VerifyOptions`` fields
    (``num_prompts``, ``max_new_tokens``, ``k``, ``engine``, ``reference``, ``against``, ...)."""
    from .verify import VerifyOptions, verify as run

    report = document(path, False, run(str(path), VerifyOptions(target=target, **options), progress))
    report["ok"] = report["passed"]  # `passed` stays for readers of schema version 0
    return Verification(str(path), report["acceptance_length"], report["passed"], report["checks"], report)


def push(path: str | Path, repo_id: str, **options: Any) -> Publication:
    """Validate ``path`` and publish it to ``repo_id`` as one commit; ``options`` are ``PushOptions`` fields
    (``dry_run``, ``private``, ``revision``, ``create_pr``, ``token``, ``endpoint``, ``base_model``, ...)."""
    from .push import PushOptions, push as run

    result = document(path, True, run(str(path), PushOptions(repo_id=repo_id, **options)))
    return Publication(repo_id, [f["path"] for f in result["files"]], result["dry_run"], result.get("commit"), result)


__all__ = ["SCHEMA_VERSION", "Conversion", "document", "Inspection", "Publication", "Verification", "convert", "inspect", "push", "validate", "verify"]
