"""eaglekit's Python API: the commands as functions with typed results. The CLI calls these and nothing else.

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

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import SCHEMA_VERSION  # the contract's version, kept in the package root: modules below api.py state it too

if TYPE_CHECKING:  # pragma: no cover
    from .convert import ConversionPlan
    from .target import TargetConfig
    from .validate import ValidationReport

# Every JSON document about a drafter starts with the same three keys: the contract's version, whether the command
# succeeded (its one success key) and the path it was given (its one path key).


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
    aux_layer_ids: list[int] | None  # input-of-layer (vLLM's convention); None: none recorded, or ambiguous (see data)
    flags: dict[str, bool]
    data: dict[str, Any] = field(repr=False)
    # a drafter of another family (DFlash, DSpark, MTP, ...: model/families.py), which eaglekit names and does not
    # handle yet: its name ("dflash"); the fields above are then empty
    family: str | None = None


@dataclass(frozen=True)
class Conversion:
    """A conversion's plan and, unless it was a dry run, the files written (``eaglekit convert``)."""

    source: str
    output: str
    source_dialect: str
    to: str
    files: list[str]  # written, or (dry run) that would be written
    written: bool
    plan: ConversionPlan = field(repr=False)
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
class DriftReport:
    """EAGLE 3.1's diagnosis measured on a drafter and its target (``eaglekit drift``): acceptance by absolute position,
    and per draft step the acceptance, the attention on sinks and on the chain's own drafts, the fed-back norm."""

    path: str
    ok: bool
    acceptance_length: float
    per_depth: list[dict[str, Any]]
    by_context_length: list[dict[str, Any]]
    compare: dict[str, Any] | None
    files: list[str]  # written with ``report``: report.json, the PNG plots, report.html
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Capture:
    """The target's greedy continuations and aux states, captured by vLLM into a folder (``eaglekit capture``)."""

    output: str
    sequences: int  # in the folder
    captured: int  # by this run (the others were there: a resumed capture)
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Publication:
    """What ``eaglekit push`` published (or, with ``dry_run``, would publish)."""

    repo_id: str
    files: list[str]
    dry_run: bool
    commit: dict[str, Any] | None
    data: dict[str, Any] = field(repr=False)


def inspect(
    path: str | Path,
    *,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
    revision: str | None = None,
    download: bool = False,
) -> Inspection:
    """Read a drafter's headers and config (never its tensor data) and describe it. ``norm_output_semantics``:
    how to read a SpecForge-style ``norm_output`` ("eagle31", "specforge"; "auto": as the checkpoint says).

    ``path`` may be a Hub id (``org/name`` or ``org/name@revision``, or ``revision=``): its config, index and
    safetensors headers are read by HTTP range requests (``download``: the files are downloaded into the Hub cache
    instead). ``data["origin"]`` says which was used, with the commit and the bytes read."""
    from . import dialects
    from .describe import describe
    from .errors import OtherFamilyError
    from .io.sources import open_source

    with open_source(path, revision=revision, mode="download" if download else "headers") as located:
        try:
            with dialects.load(located, source_dialect, norm_output_semantics=norm_output_semantics) as loaded:
                data = document(located, True, describe(loaded))
        except OtherFamilyError as other:  # named, not handled: inspect says what it is
            data = document(located, True, {"source": str(path), "family": other.family, "handled": False})
            data["origin"] = located.origin
            return Inspection(str(path), "", "", "", None, {}, data, other.family["family"])
        data["origin"] = located.origin
    return Inspection(
        str(path),
        data["dialect"]["dialect"],
        data["eagle_version"],
        data["attention"],
        data["aux_layers"]["input_ids"],
        dict(data["flags"]),
        data,
    )


def _threads_chosen(run: Callable) -> Callable:
    """``run`` with a ``threads`` keyword: torch's CPU threads while it runs (``eaglekit.target.threads``: by default
    the cores other processes leave at least half free, measured from the call until torch is imported; torch's count
    before comes back after it)."""

    @functools.wraps(run)
    def chosen(*args, threads: int | None = None, **kwargs):
        from .target import threads as cpu_threads

        with cpu_threads.chosen(threads):
            return run(*args, **kwargs)

    return chosen


@_threads_chosen
def convert(
    source: str | Path,
    out: str | Path,
    *,
    to: str,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
    target: str | None = None,
    target_id: str | None = None,
    aux_layers: tuple[int, ...] | None = None,
    upgrade: str | None = None,
    dtype: Any = None,
    max_shard_bytes: int | None = None,
    force: bool = False,
    dry_run: bool = False,
    on_plan: Callable[[ConversionPlan], None] | None = None,
    progress: Callable[[int], None] | None = None,
    revision: str | None = None,
    resolve: bool = False,
    prompts: str | None = None,
) -> Conversion:
    """Convert ``source`` into ``out`` in dialect ``to`` (``dry_run``: plan only, write nothing).

    ``resolve``: an ambiguous checkpoint (two aux-id readings fit its files equally) is measured on ``target`` as
    ``verify`` measures it (``prompts``: a JSONL file, else the built-in set) and converted with the reading it was
    trained with; a UsageError, nothing written, when no reading wins by ``verify.readings.DECISIVE_MARGIN``.

    ``target_id``: the target's Hub id (``org/name``), the verifier the output names (speculators'
    ``verifier.name_or_path``, which ``vllm serve DRAFTER`` loads) and the target of the serve lines; without it the
    target's own Hub id (a cached Hub id) or the source's, and never a path on this machine.

    ``dtype`` is a dtype (``eaglekit.io.dtypes.DType``, a torch dtype) or its name (``"bfloat16"``); ``on_plan`` sees
    the plan before anything is written; ``progress`` receives byte counts as tensors are written. ``threads``: torch's
    CPU threads where torch runs (``resolve``, a cast; ``_threads_chosen``).
    """
    from .convert import ConvertOptions, execute, plan_conversion
    from .errors import UsageError
    from .findings import Finding
    from .io import dtypes
    from .io.writer import DEFAULT_MAX_SHARD_BYTES

    options = ConvertOptions(
        to=to,
        source_dialect=source_dialect,
        norm_output_semantics=norm_output_semantics,
        target=target,
        target_id=target_id,
        aux_layers=tuple(aux_layers) if aux_layers is not None else None,
        upgrade=upgrade,
        dtype=dtypes.parse_cast(dtype) if isinstance(dtype, str) else dtype,
        max_shard_bytes=max_shard_bytes or DEFAULT_MAX_SHARD_BYTES,
        force=force,
    )
    from .io.atomic import output_path
    from .io.sources import open_source

    # where OUT is, taken now: `convert SRC . --force` run inside OUT replaces the working directory itself
    out_path = output_path(out)
    if resolve and target is None:
        raise UsageError("--resolve needs --target: it measures each reading of the aux layers on the target")
    if resolve and aux_layers is not None:
        raise UsageError("--resolve and --aux-layers both decide the aux layers; pass one of them")
    from . import dialects

    options.output_name = Path(out).name
    if not dry_run:  # before a Hub source downloads (GBs); checked again against the located source (plan_conversion)
        from .convert import check_output

        check_output(out, dialects.get_writer(to), force=force, protect=[Path(source)] if Path(source).exists() else [])
    if target is not None:
        from .target import read_target_config

        read_target_config(target)
    if resolve and prompts is not None:  # a bad prompts file told before torch, the download and the target
        from .io.prompts_file import read_prompt_records

        read_prompt_records(prompts)
    resolved = None
    with open_source(source, revision=revision, mode="download") as located:  # a Hub id: downloaded into the cache
        if resolve:
            from .verify import VerifyOptions
            from .verify.readings import resolve as measure_readings

            resolved = measure_readings(
                str(located),
                VerifyOptions(
                    target=target,
                    prompts=prompts,
                    source_dialect=source_dialect,
                    norm_output_semantics=norm_output_semantics,
                ),
            )
            if resolved is not None:
                options.aux_layers = tuple(resolved["aux_layers"])
        plan = plan_conversion(located, None if dry_run else out, options)
        if resolved is not None:
            plan.notes.insert(
                0,
                Finding(
                    "convert.resolved",
                    "info",
                    f"--resolve {resolved['summary']}; converted with input-of-layer ids {resolved['aux_layers']}",
                ),
            )
        try:
            if on_plan is not None:
                on_plan(plan)
            files = None if dry_run else execute(plan, out, progress=progress)
        finally:
            plan.loaded.close()
    from .serving import gguf_target, serve_lines, serve_target

    data = plan.to_dict()
    data["output"] = str(out)
    data["written"] = files is not None
    if dry_run:  # what the same command without --dry-run would do to OUT
        from .convert import check_output
        from .io.atomic import destination_status

        data["destination"] = destination_status(
            out,
            force=force,
            protect=[plan.loaded.checkpoint.location],
            check=lambda dest, **kw: check_output(dest, plan.dialect, **kw),
        )
    if resolve:
        data["resolved"] = resolved  # None: the checkpoint was not ambiguous, nothing to measure
    if files is not None:
        data["files"] = files
    target_name, said = serve_target(plan.target, plan.drafter.verifier)
    # no command to serve a drafter whose fc_norm weights are ones put there by --upgrade: it is to be fine-tuned first
    untrained = plan.drafter.provenance.untrained_upgrade
    parallel = plan.drafter.parallel is not None
    lines = (
        []
        if untrained
        else serve_lines(
            plan.serving, target_name, str(out_path), parallel=parallel, gguf_target=gguf_target(plan.target)
        )
    )
    if any(line["engine"] != "llama.cpp" for line in lines):  # llama-server takes the GGUF target as given
        from .findings import with_next_steps
        from .validate.checks import next_step_table

        data["notes"] += [n.to_dict() for n in with_next_steps(said, next_step_table())]
    data["serving"] = lines  # per engine: the releases that serve the output, and the command
    data["serve"] = lines[0]["command"] if lines else None
    data = document(source, True, data)
    data["origin"] = located.origin
    return Conversion(
        str(source), str(out), data["source_dialect"], data["to"], list(data["files"]), files is not None, plan, data
    )


def validate(
    path: str | Path,
    *,
    target: str | TargetConfig | None = None,
    engine: str | None = None,
    scan: bool = False,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
    revision: str | None = None,
    download: bool = False,
) -> ValidationReport:
    """Check a drafter: schemas, invariants, its target (``target``), and what an engine release will do (``engine``).

    A Hub id is read by headers only, as ``inspect`` does: checks that need tensor values (d2t contents, ``scan``)
    are reported as skipped unless ``download``. ``report.origin`` says where it was read from."""
    from .io.sources import open_source
    from .validate import validate as run

    with open_source(path, revision=revision, mode="download" if download else "headers") as located:
        report = run(
            located,
            target=target,
            engine=engine,
            scan=scan,
            source_dialect=source_dialect,
            norm_output_semantics=norm_output_semantics,
        )
    report.origin = located.origin
    return report


@dataclass(frozen=True)
class SurveyRow:
    """One drafter of a survey: its report, or why it could not be validated (``error``, ``exit_code``)."""

    path: str
    report: ValidationReport | None
    error: str | None = None
    error_type: str | None = None
    exit_code: int = 0

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.ok

    def to_dict(self) -> dict[str, Any]:
        if self.report is not None:
            return self.report.to_dict()
        from .errors import error_document

        return error_document(self.error, self.error_type, self.exit_code, self.path)


def survey(paths: list[str | Path], *, max_workers: int = 8, **options: Any) -> list[SurveyRow]:
    """``validate`` each drafter (Hub ids read by headers only), ``max_workers`` at a time; one that cannot be read
    becomes a row with its one-line error and does not stop the rest. Rows come back in the order given."""
    from concurrent.futures import ThreadPoolExecutor

    from .errors import EaglekitError

    def one(path: str | Path) -> SurveyRow:
        try:
            return SurveyRow(str(path), validate(path, **options))
        except EaglekitError as exc:
            return SurveyRow(str(path), None, str(exc), type(exc).__name__, exc.exit_code)

    if not paths:
        return []
    if options.get("target"):  # a --target that cannot be read is the run's one error, not every drafter's; read once
        from .target import read_target_config

        options = {**options, "target": read_target_config(options["target"])}
    with ThreadPoolExecutor(
        max_workers=max(1, min(max_workers, len(paths))), thread_name_prefix="eaglekit-survey"
    ) as pool:
        return list(pool.map(one, paths))


def _check_inputs(target: str, command: str, prompts: str | None, hidden_states: str | None = None) -> None:
    """A ``--target`` that is not there (no such file, a Hub id missing from the cache), or holds no weights where the
    command runs it, and a ``--prompts`` file that does not read (a bad line, a FIFO), are told before torch is
    imported: reading a target's config and a prompts file needs neither torch nor transformers
    (``read_target_config``, ``read_prompt_records``); the ``Verifier`` reads both again for library callers."""
    from .io.prompts_file import read_prompt_records
    from .target import read_target_config

    config = read_target_config(target, weights=True)
    if not hidden_states:
        config.require_runnable(f"{command} runs the target model")
    if prompts is not None:
        read_prompt_records(prompts)


@_threads_chosen
def verify(
    path: str | Path, *, target: str, progress: Callable[[str, int], object] | None = None, **options: Any
) -> Verification:
    """Run the drafter on its target's hidden states and measure acceptance; ``options`` are ``VerifyOptions`` fields
    (``num_prompts``, ``max_new_tokens``, ``k``, ``engine``, ``reference``, ``against``, ``batch_size``, ...);
    ``threads``: torch's CPU threads (``_threads_chosen``)."""
    from .engines import envs
    from .engines.vllm_serving import check_request
    from .io.sources import open_source, refuse_missing
    from .target.long_lived import frozen_scope, long_lived

    refuse_missing(path, revision=options.get("revision"))  # the drafter first, as it is given first
    envs.require_environment(options.get("against"), options.get("vllm_python"))  # then the engine, before the target
    _check_inputs(
        target, "verify", options.get("prompts"), options.get("hidden_states")
    )  # before a Hub drafter downloads
    check_request(  # what vLLM cannot run, refused before torch and before any engine starts
        target,
        target_engine=options.get("target_engine"),
        against=options.get("against"),
        vllm_python=options.get("vllm_python"),
        parallel=options.get("parallel"),
    )
    with open_source(path, revision=options.pop("revision", None), mode="download") as located:
        with (
            frozen_scope()
        ):  # torch's and the target's objects out of the collector's walks while this runs (target/long_lived.py)
            with long_lived():
                from .verify import VerifyOptions  # torch: ~2 s, after the paths are known to be there
                from .verify import verify as run
            report = document(path, False, run(located, VerifyOptions(target=target, **options), progress))
    report["origin"] = located.origin
    report["ok"] = report["passed"]  # `passed` stays for readers of schema version 0
    return Verification(str(path), report["acceptance_length"], report["passed"], report["checks"], report)


def capture(
    target: str,
    out: str | Path,
    *,
    prompts: str | None = None,
    num_prompts: int | None = None,
    max_new_tokens: int = 64,
    k: int = 3,
    aux_layers: tuple[int, ...] | None = None,
    dtype: str = "float32",
    target_engine: str = "vllm",
    vllm_python: str | None = None,
    parallel: Any = None,
    force: bool = False,
    on_plan: Callable[[Any], None] | None = None,
    progress: Callable[[str, int], object] | None = None,
) -> Capture:
    """Run ``target`` in vLLM (``target_engine``: "vllm" or "vllm==X"; ``vllm_python``: any environment's Python),
    with ``parallel`` workers (``eaglekit.engines.vllm_scale.Parallel``), and write into ``out`` each prompt's greedy
    continuation and the states of target layers ``aux_layers`` (input-of-layer ids; default vLLM's (2, L//2, L-3))
    at every position, captured by vLLM's own ``extract_hidden_states``, in the dtype the target runs in: the folder
    ``verify --hidden-states`` and many drafters' runs read. eaglekit's process never loads the target's weights. A
    rerun into the same folder with the same settings captures only the prompts still missing; ``force`` replaces a
    capture of other settings. ``on_plan`` sees the plan (the sequences and the bytes they take) before the engine
    starts."""
    from .engines.vllm_scale import Parallel
    from .engines.vllm_serving import check_request
    from .io.prompts_file import read_prompt_records
    from .target import read_target_config
    from .target.long_lived import long_lived

    parallel = parallel or Parallel()
    config = read_target_config(target, weights=True)
    config.require_runnable("capture runs the target model")
    records = read_prompt_records(prompts)
    check_request(target, target_engine=target_engine, vllm_python=vllm_python, parallel=parallel)
    with long_lived():
        from .verify.capture import Engine, capture_to_folder
    result = capture_to_folder(
        config,
        records,
        Path(out),
        Engine(target_engine, vllm_python, parallel),
        aux_layers=aux_layers,
        dtype=dtype,
        max_new_tokens=max_new_tokens,
        k=k,
        num_prompts=num_prompts,
        force=force,
        on_plan=on_plan,
        progress=progress,
    )
    data = document(out, True, result)
    return Capture(str(out), result["sequences"], result["captured"], data)


@_threads_chosen
def drift(
    path: str | Path,
    *,
    target: str,
    report: str | Path | None = None,
    progress: Callable[[str, int], object] | None = None,
    **options: Any,
) -> DriftReport:
    """Measure attention drift, fed-back norms, fused-input balance and acceptance by context length; ``options`` are
    ``DriftOptions`` fields (``compare``, ``sink_tokens``, ``max_context``, ``prompts``, ``k``, ...). ``report``: a
    directory for report.json, PNG plots and report.html (needs matplotlib: ``eaglekit[report]``); ``threads``: torch's
    CPU threads (``_threads_chosen``)."""
    from .io.sources import refuse_missing
    from .target.long_lived import frozen_scope, long_lived

    for drafter in (path, options.get("compare")):
        if drafter is not None:
            refuse_missing(drafter)  # before the target loads (~5 s), not after it
    _check_inputs(target, "drift", options.get("prompts"), options.get("hidden_states"))
    from .engines.vllm_serving import check_request

    check_request(  # what vLLM cannot run, refused before torch and before any engine starts
        target,
        target_engine=options.get("target_engine"),
        vllm_python=options.get("vllm_python"),
        parallel=options.get("parallel"),
    )
    from .drift_report import check_report_destination, require_matplotlib, write_report

    inputs = (path, options.get("compare"), target, options.get("prompts"))
    if report is not None:  # before the long run, not after it
        check_report_destination(report, inputs)
        require_matplotlib()
    with (
        frozen_scope()
    ):  # torch's and the target's objects out of the collector's walks while this runs (target/long_lived.py)
        with long_lived():
            from .verify.drift import DriftOptions
            from .verify.drift import drift as run
        result = run(str(path), DriftOptions(target=target, **options), progress)

    data = document(path, not result["findings"], result)
    files: list[str] = []
    if report is not None:
        files = write_report(data, report, inputs)
    return DriftReport(
        str(path),
        data["ok"],
        data["acceptance"]["trajectory"]["acceptance_length"],
        data["per_depth"],
        data["by_context_length"],
        data["compare"],
        files,
        data,
    )


def push(path: str | Path, repo_id: str, **options: Any) -> Publication:
    """Validate ``path`` and publish it to ``repo_id`` as one commit; ``options`` are ``PushOptions`` fields
    (``dry_run``, ``private``, ``revision``, ``create_pr``, ``token``, ``endpoint``, ``base_model``, ...)."""
    from .io.sources import open_source
    from .push import PushOptions, check_options
    from .push import push as run

    push_options = PushOptions(repo_id=repo_id, **options)
    check_options(push_options)  # before a Hub source downloads
    # --revision names the branch pushed to; the source's revision rides in its id (org/name@rev); a Hub source is
    # read from the endpoint, with the token, the push names (where the source's own repo is, as the user sees it)
    with open_source(path, mode="download", endpoint=options.get("endpoint"), token=options.get("token")) as located:
        result = document(path, True, run(located, push_options))
    result["origin"] = located.origin
    return Publication(repo_id, [f["path"] for f in result["files"]], result["dry_run"], result.get("commit"), result)


__all__ = [
    "SCHEMA_VERSION",
    "Capture",
    "Conversion",
    "DriftReport",
    "document",
    "Inspection",
    "Publication",
    "SurveyRow",
    "Verification",
    "capture",
    "convert",
    "drift",
    "inspect",
    "push",
    "survey",
    "validate",
    "verify",
]
