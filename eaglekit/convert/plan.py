"""Planning a conversion (pure, from headers and the tiny vocab maps): ``ConvertOptions`` in, a ``ConversionPlan`` out,
each of its tensors an ``OutputTensor`` that ``execute`` (the package's) writes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import dialects
from ..errors import UsageError, ValidationFailed
from ..findings import Finding, errors
from ..io import dtypes
from ..io.atomic import check_destination
from ..io.writer import (
    DEFAULT_MAX_SHARD_BYTES,
    TensorPlan,
    foreign_entries,
    plan_shards,
    shard_names,
)
from ..model.config_view import shown
from ..model.drafter import INPUT, UPGRADE_NOTE, AuxLayers, Drafter, default_aux_ids
from ..validate.checks import CheckInput, run_checks
from .output_checks import check_planned, repaired

if TYPE_CHECKING:  # a conversion without --target never loads the target's modules
    from ..target import TargetConfig


@dataclass
class ConvertOptions:
    to: str
    source_dialect: str = "auto"
    norm_output_semantics: str = "auto"  # how to read a SpecForge-style norm_output (eagle31 | specforge | auto)
    target: str | None = None
    # the target's Hub id: the verifier the output names and its serve lines' target (a local path is never written)
    target_id: str | None = None
    aux_layers: tuple[int, ...] | None = None  # input-of-layer ids (vLLM's convention)
    upgrade: str | None = None  # "3.1"
    dtype: dtypes.DType | None = None  # None: keep each tensor's dtype (a torch dtype or a name is taken too)
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    force: bool = False
    output_name: str | None = None  # OUT's name, for a single-file output's plan (its one file)

    def __post_init__(self) -> None:
        if self.dtype is not None:
            self.dtype = dtypes.of(self.dtype)
        if self.target_id is not None:
            from ..serving import hub_id_problem

            problem = hub_id_problem(self.target_id)
            if problem:
                raise UsageError(f"target_id {self.target_id!r} is not a Hub repo id: {problem}")


@dataclass
class OutputTensor:
    name: str  # name in the output checkpoint
    canonical: str
    source: str | None  # name in the source checkpoint; None when synthesised
    op: str  # copy | cast | synth:t2d | synth:ones | synth:lm_head
    dtype_in: dtypes.DType
    dtype: dtypes.DType
    shape: tuple[int, ...]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "canonical": self.canonical,
            "source": self.source,
            "op": self.op,
            "dtype_in": dtypes.name(self.dtype_in),
            "dtype": dtypes.name(self.dtype),
            "shape": list(self.shape),
        }


@dataclass
class ConversionPlan:
    loaded: dialects.LoadedDrafter
    source_drafter: Drafter
    drafter: Drafter  # the output, canonically
    dialect: dialects.Dialect
    tensors: list[OutputTensor]
    dropped: dict[str, str]  # source tensor name -> why it is not written
    config: dict
    files: list[str]
    notes: list[Finding] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    options: ConvertOptions | None = None
    target: TargetConfig | None = None  # --target's config, when given
    serving: list = field(default_factory=list)  # engines.support.Support per engine the output's layout is for

    @property
    def total_bytes(self) -> int:
        return sum(_numel(t.shape) * dtypes.itemsize(t.dtype) for t in self.tensors)

    def config_diff(self) -> dict:
        before = self.loaded.checkpoint.config or {}
        after = self.config
        return {
            "added": sorted(k for k in after if k not in before),
            "removed": sorted(k for k in before if k not in after),
            "changed": sorted(k for k in after if k in before and before[k] != after[k]),
        }

    def changes(self) -> list[dict]:
        """What the conversion changes in config.json, as old -> new values with the keys that hold them
        (``config_changes``)."""
        return dialects.config_changes(
            dialects.get(self.loaded.dialect), self.loaded.checkpoint.config or {}, self.dialect, self.config
        )

    def to_dict(self) -> dict:
        return {
            "source": self.loaded.checkpoint.label,
            "source_dialect": self.loaded.dialect,
            "to": self.dialect.name,
            "eagle_version": self.drafter.eagle_version,
            "files": self.files,
            "tensors": [t.to_dict() for t in self.tensors],
            "dropped": self.dropped,
            "config": self.config,
            "config_diff": self.config_diff(),
            "changes": self.changes(),
            "total_bytes": self.total_bytes,
            "notes": [n.to_dict() for n in self.notes],
            "findings": [f.to_dict() for f in self.findings],
        }


def refusal(why: str, problems: list[Finding]) -> str:
    more = f", and {len(problems) - 1} more (see `eaglekit validate`)" if len(problems) > 1 else ""
    return f"refusing to write: {why}: {problems[0].message}{more}"


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _peagle_speculators(d: Drafter, writer, notes: list[Finding]) -> None:
    """A P-EAGLE 3.1 drafter written as speculators holds its flags for speculators, but no vLLM release reads them from
    a speculators peagle config (engines/vllm_peagle.py): said, and convert prints no vLLM serve line for it."""
    from ..engines import vllm_peagle

    dropped = vllm_peagle.dropped_flags(d) if writer.name == "speculators" else []
    if dropped:
        notes.append(
            Finding(
                "convert.peagle_flags_dropped",
                "warning",
                f"a P-EAGLE drafter with {' and '.join(dropped)}: vLLM {vllm_peagle.releases_read()} drops"
                f" {'them' if len(dropped) > 1 else 'it'} from a speculators peagle config (update_peagle), so no vLLM"
                " release serves this output as trained; for vLLM convert `to` vllm, whose flat config it reads them"
                " from",
                dropped[0],
            )
        )


def _resolve_aux(d: Drafter, options: ConvertOptions, target: TargetConfig | None, notes: list[Finding]) -> Drafter:
    if options.aux_layers is not None:
        ids = tuple(options.aux_layers)
        before = d.aux.as_input()
        if before is not None and before != ids:
            notes.append(
                Finding(
                    "aux.override",
                    "warning",
                    f"`aux_layers` {list(ids)} replaces the recorded ids {list(before)} (input-of-layer)",
                )
            )
        return d.with_(aux=AuxLayers(ids, INPUT))
    if d.aux.ids is None:
        if target is not None:
            ids = default_aux_ids(target.num_layers)
            notes.append(
                Finding(
                    "aux.resolved",
                    "info",
                    f"no aux layer ids recorded: wrote {target.name}'s default {list(ids)} (input-of-layer: 2, L//2,"
                    " L-3)",
                )
            )
            return d.with_(aux=AuxLayers(ids, INPUT))
        notes.append(
            Finding(
                "aux.not_recorded",
                "info",
                "no aux layer ids recorded and no `target`/`aux_layers`: the output records none, so each engine's"
                " default applies (vLLM: 2, L//2, L-3)",
            )
        )
    return d


def _upgrade(d: Drafter, notes: list[Finding]) -> tuple[Drafter, list[str]]:
    from .. import __version__

    if d.flags.fc_norm or d.flags.norm_output:
        raise UsageError("`upgrade` 3.1: the drafter is already EAGLE 3.1 (fc_norm / norm_output set)")
    if d.flags.norm_before_fc:
        raise UsageError(
            "`upgrade` 3.1: the drafter uses norm_before_fc, which EAGLE 3.1's fc_norm replaces; refusing to combine"
            " them"
        )
    added = [f"fc_norm.{i}.weight" for i in range(d.num_aux)]
    message = (
        f"{UPGRADE_NOTE} by eaglekit {__version__}: fc_norm.0..{d.num_aux - 1} initialised to ones and norm_output"
        " enabled. This changes the drafter's numerics (RMSNorm rescales even with unit weights): fine-tune before"
        " serving"
    )
    notes.append(Finding("upgrade.numerics", "warning", message))
    prov = d.provenance
    d = d.with_(
        flags=replace(d.flags, fc_norm=True, norm_output=True),
        tensors=d.tensors | frozenset(added),
        provenance=replace(prov, notes=prov.notes + (message,)),
    )
    return d, added


def check_output(out: str | Path, writer: dialects.Dialect, *, force: bool, protect: list[Path]) -> None:
    """Refuse, before any work, an OUT the conversion could not write: a directory of files (``check_destination``),
    or one file for a single-file dialect (``GGUFDialect.check_output``)."""
    if writer.single_file:
        writer.check_output(Path(out), force=force, protect=protect)
    else:
        check_destination(Path(out), force=force, protect=protect, replaceable=foreign_entries)


def plan_conversion(source: str | Path, out: str | Path | None, options: ConvertOptions) -> ConversionPlan:
    writer = dialects.get_writer(options.to)
    if options.upgrade not in (None, "3", "3.0", "3.1"):
        raise UsageError(f"`upgrade` {options.upgrade!r}: only 3.1 is supported")
    if out is not None:
        check_output(out, writer, force=options.force, protect=[Path(source)])
    target = None
    if options.target:
        from ..target import read_target_config

        target = read_target_config(options.target)
    if writer.single_file:
        writer.check_target(options.target, target)
    loaded = dialects.load(
        source,
        options.source_dialect,
        norm_output_semantics=options.norm_output_semantics,
        target_num_layers=target.num_layers if target else None,
    )
    try:
        if options.upgrade in ("3", "3.0"):
            if loaded.drafter.eagle_version == "3":
                raise UsageError(
                    f"`upgrade` {options.upgrade}: {loaded.checkpoint.label} is already EAGLE 3, nothing to do"
                )
            raise UsageError(
                "`upgrade` 3: downgrading EAGLE 3.1 to 3 drops trained fc_norm weights and changes the math; refused"
            )
        if loaded.ambiguity is not None and options.aux_layers is None:
            # the user must decide: converting would write one reading's ids as if they were certain
            raise UsageError(f"{loaded.checkpoint.label}: refusing to convert, {loaded.ambiguity.message()}")
        return plan_loaded(loaded, writer, options, target)
    except BaseException:
        loaded.close()
        raise


def plan_loaded(
    loaded: dialects.LoadedDrafter, writer: dialects.Dialect, options: ConvertOptions, target: TargetConfig | None
) -> ConversionPlan:
    """The conversion of a loaded source into ``writer``'s dialect: refused where the source does not validate (less
    what writing repairs) or ``writer`` cannot hold the output; the output's own findings said (``execute`` refuses an
    output with errors)."""
    source = loaded.drafter
    notes = list(loaded.notes)
    found = _checked_source(loaded, target)
    d, added_ones = _output_drafter(loaded, writer, options, target, notes)
    notes = repaired(notes, found, loaded, writer, d)
    _writer_caveats(d, writer, notes)
    out_names = writer.output_names(d)
    tensors = _output_tensors(d, loaded, writer, options, out_names, added_ones)
    written_sources = {t.source for t in tensors}
    dropped = {s: _why_dropped(c, writer) for c, s in loaded.names.items() if s not in written_sources}
    config = writer.write_config(d)
    notes += _keys_dropped(loaded, writer, config)
    findings = _output_findings(loaded, d, config, tensors, out_names, writer, target, options, notes)
    # an output that does not validate is refused for that, when it would be written
    serving = [] if errors(findings) else _serving(d, writer, config, tensors, target, notes)
    from ..findings import with_next_steps
    from ..validate.checks import next_step_table

    notes, findings = with_next_steps(notes, next_step_table()), with_next_steps(findings, next_step_table())
    files = _files(writer, tensors, options)
    return ConversionPlan(
        loaded, source, d, writer, tensors, dropped, config, files, notes, findings, options, target, serving
    )


def _checked_source(loaded: dialects.LoadedDrafter, target: TargetConfig | None) -> list[Finding]:
    """validate's checks of the source; refused (ValidationFailed) where it has errors that writing does not repair."""
    source = loaded.drafter
    found = run_checks(
        CheckInput(
            source,
            loaded.present(),
            values=loaded.read_values,
            target=target,
            config=loaded.checkpoint.config,
            stored_name=loaded.stored_name,
        )
    )
    # the source's errors that writing repairs: a config dtype no reader can load (the writers state the weights'), a
    # tie_word_embeddings no head can honour (the writers state false: the shipped head is the drafter's)
    problems = [
        f
        for f in errors(found)
        if not (f.check == "config.dtype" and source.dtype is not None) and f.check != "config.tied_head"
    ]
    if problems:
        raise ValidationFailed(refusal("the source drafter does not validate", problems), problems)
    return found


def _output_drafter(
    loaded: dialects.LoadedDrafter,
    writer: dialects.Dialect,
    options: ConvertOptions,
    target: TargetConfig | None,
    notes: list[Finding],
) -> tuple[Drafter, list[str]]:
    """The output drafter, canonically (the verifier it names, the target's depth, its aux ids, the 3.1 upgrade, a
    dense lm_head, provenance, dtype), and the fc_norm tensors the upgrade adds; refused where ``writer`` cannot hold
    it. What it decides is added to ``notes``."""
    from .. import __version__
    from ..serving import verifier_for

    source = loaded.drafter
    verifier, said = verifier_for(source.verifier, options.target_id, target, read_by=writer.verifier_readers)
    notes += said
    d = source.with_(verifier=verifier)
    if target is not None:
        d = d.with_(
            target_num_layers=target.num_layers,
            verifier_architectures=d.verifier_architectures or target.architectures,
        )
    d = _resolve_aux(d, options, target, notes)
    added_ones: list[str] = []
    if options.upgrade == "3.1":
        d, added_ones = _upgrade(d, notes)
    if d.low_rank_lm_head:
        d = d.with_(tensors=(d.tensors - {"lm_head.down.weight", "lm_head.up.weight"}) | {"lm_head.weight"})
        notes.append(
            Finding(
                "lm_head.materialised",
                "info",
                "factorised lm_head.down/up materialised into a dense lm_head.weight (up @ down)",
            )
        )
    d = d.with_(
        provenance=replace(d.provenance, eaglekit_version=__version__).from_hub(loaded.checkpoint.located.origin)
    )
    if options.dtype is not None:
        d = d.with_(dtype=dtypes.name(options.dtype))
    writer.check_flags_holdable(d)
    writer.check_writable(d)
    return d, added_ones


def _writer_caveats(d: Drafter, writer: dialects.Dialect, notes: list[Finding]) -> None:
    """What ``writer``'s layout does not carry as the drafter runs: its sliding window, a P-EAGLE drafter's flags."""
    if d.windowed_layers and writer.window_caveat:
        notes.append(
            Finding(
                "window.writer",
                "warning",
                f"draft layers {list(d.windowed_layers)} use a sliding window of {d.window.size}: "
                f"sliding_window and layer_types are written, but {writer.window_caveat}",
                "sliding_window",
            )
        )
    _peagle_speculators(d, writer, notes)


def _output_tensors(
    d: Drafter,
    loaded: dialects.LoadedDrafter,
    writer: dialects.Dialect,
    options: ConvertOptions,
    out_names: dict[str, str],
    added_ones: list[str],
) -> list[OutputTensor]:
    """Each tensor the output holds, in order: where it comes from (or how it is made), its op and dtype; for a
    single-file dialect, the forms it stores and the rope divisors it adds."""
    present = loaded.present()
    tensors: list[OutputTensor] = []
    for canonical, name in out_names.items():
        op, src, dtype_in, shape = _source_of(canonical, d, loaded, present, added_ones)
        dtype = options.dtype if options.dtype is not None and dtype_in.is_floating_point else dtype_in
        if writer.single_file:  # GGUF: llama.cpp's row order, absolute ids, norms in float32
            transform, as_float32 = writer.stored(canonical, d)
            dtype = dtypes.FLOAT32 if as_float32 and dtype.is_floating_point else dtype
            op = transform if transform and op == "copy" else op
        if op == "copy" and dtype != dtype_in:
            op = "cast"
        tensors.append(OutputTensor(name, canonical, src, op, dtype_in, dtype, shape))
    divisors = writer.rope_divisors(d) if writer.single_file else None
    if divisors is not None:
        f32 = dtypes.FLOAT32
        tensors.append(
            OutputTensor("rope_freqs.weight", "rope_freqs", None, "synth:rope_freqs", f32, f32, (len(divisors),))
        )
    return tensors


def _keys_dropped(loaded: dialects.LoadedDrafter, writer: dialects.Dialect, config: dict) -> list[Finding]:
    """The source's config.json keys eaglekit does not know and ``writer``'s dialect has no place for: said, as they
    are left out."""
    unplaced = dialects.unplaced_keys(loaded.checkpoint.config or {}, dialects.get(loaded.dialect).rules.base, config)
    if not unplaced:
        return []
    return [
        Finding(
            "config.keys_dropped",
            "warning",
            f"config.json keys eaglekit does not know, which the {writer.name} dialect "
            f"has no place for, are left out: {', '.join(map(shown, unplaced))}; a reader that used them no longer "
            "can (a key that changes the drafter's math would change what an engine runs)",
            unplaced[0],
        )
    ]


def _output_findings(
    loaded: dialects.LoadedDrafter,
    d: Drafter,
    config: dict,
    tensors: list[OutputTensor],
    out_names: dict[str, str],
    writer: dialects.Dialect,
    target: TargetConfig | None,
    options: ConvertOptions,
    notes: list[Finding],
) -> list[Finding]:
    """validate's findings on what would be written (the source's vocab maps standing in for the output's), less what
    this run's own notes already say of the output (said once, by the note, which says why)."""
    present = loaded.present()
    out_present = {t.canonical: (t.shape, t.dtype) for t in tensors if t.op != "synth:rope_freqs"}
    for s in loaded.unknown:
        out_present[s] = present[s]
    findings = check_planned(loaded, d, config, out_present, out_names, writer, target)
    said_by_notes = {"flags.untrained_upgrade"} if options.upgrade else set()
    said_by_notes |= {n.check for n in notes if n.check == "aux.not_recorded"}
    return [f for f in findings if f.check not in said_by_notes]


def _serving(
    d: Drafter,
    writer: dialects.Dialect,
    config: dict,
    tensors: list[OutputTensor],
    target: TargetConfig | None,
    notes: list[Finding],
) -> list:
    """Which engines serve the output's layout (``engine_support``); where none does, ``notes`` gains why no serve line
    is printed."""
    from ..serving import engine_support, unservable

    serving = engine_support(
        writer,
        config,
        {t.name: (t.dtype, t.shape) for t in tensors},
        target_num_layers=target.num_layers if target else None,
    )
    # a layout no engine serves the drafter in is written where it is a trainer's own: SpecForge's lm_head on the
    # un-normalised state, and a P-EAGLE drafter as speculators or SpecForge keep it (no SGLang release drafts in
    # parallel, no vLLM release reads a speculators P-EAGLE's 3.1 flags); the notes say why no line is printed
    trainers_only = not d.flags.norm_before_lm_head or d.parallel is not None
    notes += unservable(writer, serving, trainers_only=trainers_only)
    return serving


def _files(writer: dialects.Dialect, tensors: list[OutputTensor], options: ConvertOptions) -> list[str]:
    """The files the output is: a single-file dialect's one file, or the shards, their index and config.json."""
    if writer.single_file:
        return [Path(options.output_name or "drafter.gguf").name]
    shards = plan_shards([TensorPlan(t.name, t.dtype, t.shape, lambda: None) for t in tensors], options.max_shard_bytes)
    return shard_names(len(shards)) + (["model.safetensors.index.json"] if len(shards) > 1 else []) + ["config.json"]


def _source_of(canonical: str, d: Drafter, loaded, present, added_ones):
    if canonical in added_ones:
        fc = present["fc.weight"] if "fc.weight" in present else next(iter(present.values()))
        return "synth:ones", None, fc[1], (d.target_hidden_size,)
    if canonical == "lm_head.weight" and "lm_head.weight" not in loaded.names and "lm_head.up.weight" in loaded.names:
        up = present["lm_head.up.weight"]
        return "synth:lm_head", None, up[1], (d.draft_vocab_size, d.hidden_size)
    if canonical == "t2d" and "t2d" not in loaded.names:
        if "d2t" not in loaded.names:
            raise UsageError(
                f"the {d.provenance.source_dialect} source has neither t2d nor d2t, but the output dialect needs t2d"
            )
        return "synth:t2d", None, dtypes.BOOL, (d.vocab_size,)
    shape, dtype = present[canonical]
    return "copy", loaded.names[canonical], dtype, tuple(shape)


def _why_dropped(canonical: str, writer) -> str:
    if canonical in writer.omitted:
        return writer.omitted[canonical]
    if canonical == "embed_tokens.weight":
        return f"{writer.name} takes embeddings from the target"
    if canonical in ("d2t", "t2d"):
        return f"{writer.name} ships no vocab maps when draft_vocab_size == vocab_size"
    if canonical in ("lm_head.down.weight", "lm_head.up.weight"):
        return "materialised into lm_head.weight"
    return f"not part of the {writer.name} layout"
