"""The commands that read and write a drafter's files: ``inspect``, ``convert``, ``validate`` (one drafter, or a
``survey`` of many) and ``push``. Each imports what it needs when it runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .results import Conversion, Inspection, Publication, SurveyRow, document, option_fields

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..convert import ConversionPlan, ConvertOptions
    from ..io.dtypes import DType
    from ..io.locate import Located
    from ..target import TargetConfig
    from ..validate import ValidationReport


def inspect(
    path: str | Path,
    *,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
    revision: str | None = None,
    download: bool = False,
) -> Inspection:
    """Read a drafter's headers and config (never its tensor data) and describe it.

    Args:
        path: the drafter: a directory, a file, or a Hub id (``org/name`` or ``org/name@revision``), whose config,
            index and safetensors headers are read by HTTP range requests; ``data["origin"]`` says which was used,
            with the commit and the bytes read.
        source_dialect: the drafter's dialect (``eaglekit.dialects``); "auto": detected from its files.
        norm_output_semantics: how to read a SpecForge-style ``norm_output`` ("eagle31", "specforge"; "auto": as the
            checkpoint says).
        revision: the Hub revision to read (a branch, tag or commit), instead of ``org/name@revision``.
        download: a Hub id's files are downloaded into the Hub cache instead of read by range requests.
    """
    from .. import dialects
    from ..describe import describe
    from ..errors import OtherFamilyError
    from ..io.sources import open_source

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


# -- convert: options, the refusals told before the source is read, the readings measured, the plan run, its document


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
    dtype: str | DType | torch.dtype | None = None,
    max_shard_bytes: int | None = None,
    force: bool = False,
    dry_run: bool = False,
    on_plan: Callable[[ConversionPlan], None] | None = None,
    progress: Callable[[int], None] | None = None,
    revision: str | None = None,
    resolve: bool = False,
    prompts: str | None = None,
    threads: int | None = None,
) -> Conversion:
    """Convert ``source`` into ``out`` in dialect ``to`` (``dry_run``: plan only, write nothing).

    Args:
        source: the drafter: a directory, a file, or a Hub id (``org/name[@revision]``, downloaded into the Hub cache).
        out: where the converted drafter is written, atomically; an existing one is refused unless ``force``.
        to: the dialect to write (``eaglekit.dialects``: "vllm", "speculators", "sglang", "eagle", "gguf").
        source_dialect: the source's dialect; "auto": detected from its files.
        norm_output_semantics: how to read a SpecForge-style ``norm_output`` ("eagle31", "specforge"; "auto").
        target: the target model (a directory, a Hub id in the local cache, or a .gguf file), read for its config.
        target_id: the target's Hub id (``org/name``): the verifier the output names (speculators'
            ``verifier.name_or_path``, which ``vllm serve DRAFTER`` loads) and the serve lines' target; None: the
            target's own Hub id (a cached one) or the source's, never a path on this machine.
        aux_layers: the aux layers to write, input-of-layer ids (vLLM's convention), over what the source records.
        upgrade: "3.1": an EAGLE 3 drafter written as EAGLE 3.1 (its fc_norm weights ones: to be fine-tuned first).
        dtype: cast floating tensors (never d2t/t2d) to this dtype (``eaglekit.io.dtypes.DType``, a torch dtype) or
            dtype name ("bfloat16"; "auto" keeps each tensor's own); None keeps them.
        max_shard_bytes: the largest safetensors shard written; None: ``io.writer.DEFAULT_MAX_SHARD_BYTES``.
        force: replace an existing ``out``.
        dry_run: plan only, write nothing; ``data["destination"]`` says what the same call would do to ``out``.
        on_plan: sees the plan before anything is written.
        progress: receives byte counts as tensors are written.
        revision: the Hub revision of ``source`` (a branch, tag or commit), instead of ``org/name@revision``.
        resolve: an ambiguous checkpoint (two aux-id readings fit its files equally) is measured on ``target`` and
            converted with the reading it was trained with; a UsageError, nothing written, when no reading wins by
            ``eaglekit.verify.readings.DECISIVE_MARGIN``.
        prompts: the prompts ``resolve`` measures on (a JSONL file, as ``verify`` reads it); None: the built-in set.
        threads: torch's CPU threads where torch runs (``resolve``, a cast); None: as ``verify`` chooses them.
    """
    fields = option_fields(
        locals(), "source", "out", "dry_run", "on_plan", "progress", "revision", "resolve", "prompts", "threads"
    )
    from ..convert import execute, plan_conversion
    from ..io.atomic import output_path
    from ..io.sources import open_source
    from ..target.threads import chosen as chosen_threads

    with chosen_threads(threads):
        options = _convert_options(fields)
        out_path = output_path(out)  # where OUT is, taken now: `convert SRC . --force` in OUT replaces the directory
        _refuse_before_reading(source, out, options, resolve=resolve, prompts=prompts, dry_run=dry_run)
        with open_source(source, revision=revision, mode="download") as located:  # a Hub id: into the cache
            resolved = _measure_readings(located, options, prompts) if resolve else None
            plan = plan_conversion(located, None if dry_run else out, options)
            _note_resolved(plan, resolved)
            try:
                if on_plan is not None:
                    on_plan(plan)
                files = None if dry_run else execute(plan, out, progress=progress)
            finally:
                plan.loaded.close()
        data = _conversion_data(plan, out, out_path, files, force=force)
        if resolve:
            data["resolved"] = resolved  # None: the checkpoint was not ambiguous, nothing to measure
        data = document(source, True, _serving(plan, data, out_path))
        data["origin"] = located.origin
    return Conversion(
        str(source), str(out), data["source_dialect"], data["to"], list(data["files"]), files is not None, plan, data
    )


def _convert_options(fields: dict[str, Any]) -> ConvertOptions:
    """The conversion's options from ``convert``'s arguments: aux ids as a tuple, a dtype name parsed ("auto": no
    cast), the default shard size for None; a bad dtype, then a ``target_id`` that is not a Hub id, refused here."""
    from ..convert import ConvertOptions
    from ..io import dtypes
    from ..io.writer import DEFAULT_MAX_SHARD_BYTES

    aux_layers, dtype = fields["aux_layers"], fields["dtype"]
    return ConvertOptions(
        **{
            **fields,
            "aux_layers": tuple(aux_layers) if aux_layers is not None else None,
            "dtype": dtypes.parse_cast(dtype) if isinstance(dtype, str) else dtype,
            "max_shard_bytes": fields["max_shard_bytes"] or DEFAULT_MAX_SHARD_BYTES,
        }
    )


def _refuse_before_reading(
    source: str | Path, out: str | Path, options: ConvertOptions, *, resolve: bool, prompts: str | None, dry_run: bool
) -> None:
    """What is wrong with the request, told before a Hub source downloads (GBs), torch loads or the target runs:
    ``resolve`` without a target or beside ``aux_layers``, an ``out`` that would be refused, an unreadable target
    config or prompts file."""
    from .. import dialects
    from ..errors import UsageError

    if resolve and options.target is None:
        raise UsageError("`resolve` needs `target`: it measures each reading of the aux layers on the target")
    if resolve and options.aux_layers is not None:
        raise UsageError("`resolve` and `aux_layers` both decide the aux layers; pass one of them")
    options.output_name = Path(out).name
    if not dry_run:  # checked again against the located source (plan_conversion)
        from ..convert import check_output

        protect = [Path(source)] if Path(source).exists() else []
        check_output(out, dialects.get_writer(options.to), force=options.force, protect=protect)
    if options.target is not None:
        from ..target import read_target_config

        read_target_config(options.target)
    if resolve and prompts is not None:  # a bad prompts file told before torch, the download and the target
        from ..io.prompts_file import read_prompt_records

        read_prompt_records(prompts)


def _measure_readings(located: Located, options: ConvertOptions, prompts: str | None) -> dict[str, Any] | None:
    """``resolve``: each reading of an ambiguous checkpoint's aux layers measured on the target; the winner's ids go
    into ``options``. None: the checkpoint was not ambiguous."""
    from ..verify import VerifyOptions
    from ..verify.readings import resolve as measure_readings

    resolved = measure_readings(
        str(located),
        VerifyOptions(
            target=options.target,
            prompts=prompts,
            source_dialect=options.source_dialect,
            norm_output_semantics=options.norm_output_semantics,
        ),
    )
    if resolved is not None:
        options.aux_layers = tuple(resolved["aux_layers"])
    return resolved


def _note_resolved(plan: ConversionPlan, resolved: dict[str, Any] | None) -> None:
    """The reading ``resolve`` chose, as the plan's first note."""
    if resolved is None:
        return
    from ..findings import Finding

    plan.notes.insert(
        0,
        Finding(
            "convert.resolved",
            "info",
            f"`resolve` {resolved['summary']}; converted with input-of-layer ids {resolved['aux_layers']}",
        ),
    )


def _conversion_data(
    plan: ConversionPlan, out: str | Path, out_path: Path, files: list[str] | None, *, force: bool
) -> dict[str, Any]:
    """The plan's document, with the output, whether it was written (``files``: None for a dry run, and then what the
    same call without ``dry_run`` would do to ``out``)."""
    data = plan.to_dict()
    data["output"] = str(out)
    data["written"] = files is not None
    if files is None:
        from ..convert import check_output
        from ..io.atomic import destination_status

        data["destination"] = destination_status(
            out,
            force=force,
            protect=[plan.loaded.checkpoint.location],
            check=lambda dest, **kw: check_output(dest, plan.dialect, **kw),
        )
    if files is not None:
        data["files"] = files
    return data


def _serving(plan: ConversionPlan, data: dict[str, Any], out_path: Path) -> dict[str, Any]:
    """``data`` with the engines that serve the output and their commands, and the next steps about its target."""
    from ..serving import gguf_target, serve_lines, serve_target

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
        from ..findings import with_next_steps
        from ..validate.checks import next_step_table

        data["notes"] += [n.to_dict() for n in with_next_steps(said, next_step_table())]
    data["serving"] = lines  # per engine: the releases that serve the output, and the command
    data["serve"] = lines[0]["command"] if lines else None
    return data


# -- validate, one drafter or many; push -------------------------------------------------------------------------


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
    are reported as skipped unless ``download``. ``report.origin`` says where it was read from.

    Args:
        path: the drafter: a directory, a file, or a Hub id (``org/name`` or ``org/name@revision``).
        target: the target model (a directory, a Hub id in the local cache, a .gguf file, or its read
            ``TargetConfig``): the drafter's sizes, vocabulary and aux layers checked against it.
        engine: an engine release ("vllm==0.32", "sglang==X", "llama.cpp==bN"): what it will do with the drafter.
        scan: also read every tensor's values (NaN/Inf, all-zero, d2t contents).
        source_dialect: the drafter's dialect (``eaglekit.dialects``); "auto": detected from its files.
        norm_output_semantics: how to read a SpecForge-style ``norm_output`` ("eagle31", "specforge"; "auto").
        revision: the Hub revision to read (a branch, tag or commit), instead of ``org/name@revision``.
        download: a Hub id's files are downloaded into the Hub cache (tensor values then checked too).
    """
    from ..io.sources import open_source
    from ..validate import validate as run

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


def survey(
    paths: list[str | Path],
    *,
    max_workers: int = 8,
    target: str | TargetConfig | None = None,
    engine: str | None = None,
    scan: bool = False,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
    revision: str | None = None,
    download: bool = False,
) -> list[SurveyRow]:
    """``validate`` each drafter (Hub ids read by headers only), ``max_workers`` at a time; one that cannot be read
    becomes a row with its one-line error and does not stop the rest. Rows come back in the order given.

    Args:
        paths: the drafters (directories, files or Hub ids).
        max_workers: drafters validated at once (threads).
        target, engine, scan, source_dialect, norm_output_semantics, revision, download: as ``validate`` takes
            them, the same for every drafter; a ``target`` that cannot be read is the run's one error, read once.
    """
    options = option_fields(locals(), "paths", "max_workers")
    from concurrent.futures import ThreadPoolExecutor

    from ..errors import EaglekitError

    def one(path: str | Path) -> SurveyRow:
        try:
            return SurveyRow(str(path), validate(path, **options))
        except EaglekitError as exc:
            return SurveyRow(str(path), None, str(exc), type(exc).__name__, exc.exit_code)

    if not paths:
        return []
    if target:  # a --target that cannot be read is the run's one error, not every drafter's; read once
        from ..target import read_target_config

        options["target"] = read_target_config(target)
    with ThreadPoolExecutor(
        max_workers=max(1, min(max_workers, len(paths))), thread_name_prefix="eaglekit-survey"
    ) as pool:
        return list(pool.map(one, paths))


def push(
    path: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    dry_run: bool = False,
    validate: bool = True,
    overwrite_card: bool = False,
    base_model: str | None = None,
    allow_untrained: bool = False,
    allow_ambiguous: bool = False,
    report: str | None = None,
) -> Publication:
    """Validate ``path`` and publish it to ``repo_id`` as one commit (stale shards removed in the same commit; a
    concurrent push refused, not clobbered), with a model card generated from the drafter.

    Args:
        path: the drafter: a directory, or a Hub id (``org/name[@revision]``: read from ``endpoint`` with ``token``).
        repo_id: the Hub repository to publish to (``org/name``).
        private: create the repository as private (if it does not exist).
        revision: the branch to commit to (created from main if new); the source's revision rides in its id.
        create_pr: open a pull request instead of committing to the branch.
        commit_message: the commit's message; None: one naming the drafter.
        token: the Hub token (None: HF_TOKEN, then the stored login); never printed.
        endpoint: the Hub endpoint (None: HF_ENDPOINT, then https://huggingface.co).
        dry_run: say what would be published (each file with size and sha256, the card) and send nothing.
        validate: validate before publishing (False is recorded in the card).
        overwrite_card: replace a README.md already in ``path`` with the generated card.
        base_model: the verifier's Hub id for the card, when the drafter records a local path or none.
        allow_untrained: publish a drafter ``convert(upgrade="3.1")`` produced and nobody trained since.
        allow_ambiguous: publish a checkpoint whose files fit two readings of its aux layers (validate's
            ``*.ambiguous``).
        report: an ``eaglekit drift --report`` directory: its figures into the card, its plots into the commit.
    """
    fields = option_fields(locals(), "path")
    from ..io.sources import open_source
    from ..push import PushOptions, check_options
    from ..push import push as run

    push_options = PushOptions(**fields)
    check_options(push_options)  # before a Hub source downloads
    # --revision names the branch pushed to; the source's revision rides in its id (org/name@rev); a Hub source is
    # read from the endpoint, with the token, the push names (where the source's own repo is, as the user sees it)
    with open_source(path, mode="download", endpoint=endpoint, token=token) as located:
        result = document(path, True, run(located, push_options))
    result["origin"] = located.origin
    return Publication(repo_id, [f["path"] for f in result["files"]], result["dry_run"], result.get("commit"), result)
