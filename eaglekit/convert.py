"""Conversion between dialects: plan (pure, from headers and the tiny vocab maps), then stream.

``plan_conversion`` reads the source into the canonical drafter, applies what the user asked (target
resolution, aux ids, the 3.0 -> 3.1 upgrade, dtype), lets the destination dialect name and select the
tensors, and validates the result. ``execute`` writes it: tensors one at a time (raw byte copies where the
bytes do not change), config.json last, all inside an atomic output directory.

Planning and copying import no torch (dtypes are ``dtypes.DType`` values, the vocab maps are read as ints); torch
is imported only to make a tensor: a cast, fc_norm ones, a materialised lm_head, a t2d synthesised from d2t.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import dialects
from .dialects.base import lookup
from .errors import UsageError, ValidationFailed
from .findings import Finding, errors
from .io import dtypes, jsonfile
from .io.atomic import atomic_directory, check_destination
from .io.reader import Checkpoint
from .io.writer import (
    DEFAULT_MAX_SHARD_BYTES,
    WEIGHTS_MARK,
    Payload,
    TensorPlan,
    foreign_entries,
    plan_shards,
    shard_names,
    write_checkpoint_tensors,
)
from .model.config_view import shown
from .model.drafter import INPUT, UPGRADE_NOTE, AuxLayers, Drafter, default_aux_ids
from .model.vocab_map import t2d_from_d2t
from .validate.checks import CheckInput, run_checks

if TYPE_CHECKING:  # a conversion without --target never loads the target's modules
    from .target import TargetConfig


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
            from .serving import hub_id_problem

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


def _refusal(why: str, problems: list[Finding]) -> str:
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
    from .engines import vllm_peagle

    dropped = vllm_peagle.dropped_flags(d) if writer.name == "speculators" else []
    if dropped:
        notes.append(
            Finding(
                "convert.peagle_flags_dropped",
                "warning",
                f"a P-EAGLE drafter with {' and '.join(dropped)}: vLLM {vllm_peagle.releases_read()} drops"
                f" {'them' if len(dropped) > 1 else 'it'} from a speculators peagle config (update_peagle), so no vLLM"
                " release serves this output as trained; for vLLM convert --to vllm, whose flat config it reads them"
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
                    f"--aux-layers {list(ids)} replaces the recorded ids {list(before)} (input-of-layer)",
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
                "no aux layer ids recorded and no --target/--aux-layers: the output records none, so each engine's"
                " default applies (vLLM: 2, L//2, L-3)",
            )
        )
    return d


def _upgrade(d: Drafter, notes: list[Finding]) -> tuple[Drafter, list[str]]:
    from . import __version__

    if d.flags.fc_norm or d.flags.norm_output:
        raise UsageError("--upgrade 3.1: the drafter is already EAGLE 3.1 (fc_norm / norm_output set)")
    if d.flags.norm_before_fc:
        raise UsageError(
            "--upgrade 3.1: the drafter uses norm_before_fc, which EAGLE 3.1's fc_norm replaces; refusing to combine"
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
        raise UsageError(f"--upgrade {options.upgrade!r}: only 3.1 is supported")
    if out is not None:
        check_output(out, writer, force=options.force, protect=[Path(source)])
    target = None
    if options.target:
        from .target import read_target_config

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
                    f"--upgrade {options.upgrade}: {loaded.checkpoint.label} is already EAGLE 3, nothing to do"
                )
            raise UsageError(
                "--upgrade 3: downgrading EAGLE 3.1 to 3 drops trained fc_norm weights and changes the math; refused"
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
    from . import __version__

    source = loaded.drafter
    notes = list(loaded.notes)
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
        raise ValidationFailed(_refusal("the source drafter does not validate", problems), problems)
    from .serving import verifier_for

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
    notes = _repaired(notes, found, loaded, writer, d)
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
    out_names = writer.output_names(d)
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
    written_sources = {t.source for t in tensors}
    dropped = {s: _why_dropped(c, writer) for c, s in loaded.names.items() if s not in written_sources}

    # validate what would be written, with the source's vocab maps standing in for the output's
    out_present = {t.canonical: (t.shape, t.dtype) for t in tensors if t.op != "synth:rope_freqs"}
    for s in loaded.unknown:
        out_present[s] = present[s]
    config = writer.write_config(d)
    unplaced = dialects.unplaced_keys(loaded.checkpoint.config or {}, dialects.get(loaded.dialect).rules.base, config)
    if unplaced:
        notes.append(
            Finding(
                "config.keys_dropped",
                "warning",
                f"config.json keys eaglekit does not know, which the {writer.name} dialect "
                f"has no place for, are left out: {', '.join(map(shown, unplaced))}; a reader that used them no longer "
                "can (a key that changes the drafter's math would change what an engine runs)",
                unplaced[0],
            )
        )
    findings = _check_output(loaded, d, config, out_present, out_names, writer, target)
    # what this run's own notes already say of the output, said once, by the note (which says why)
    said_by_notes = {"flags.untrained_upgrade"} if options.upgrade else set()
    said_by_notes |= {n.check for n in notes if n.check == "aux.not_recorded"}
    findings = [f for f in findings if f.check not in said_by_notes]
    serving = []
    if not errors(findings):  # an output that does not validate is refused for that, when it would be written
        from .serving import engine_support, unservable

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
    from .findings import with_next_steps
    from .validate.checks import next_step_table

    notes, findings = with_next_steps(notes, next_step_table()), with_next_steps(findings, next_step_table())
    if writer.single_file:
        files = [Path(options.output_name or "drafter.gguf").name]
    else:
        shards = plan_shards(
            [TensorPlan(t.name, t.dtype, t.shape, lambda: None) for t in tensors], options.max_shard_bytes
        )
        files = (
            shard_names(len(shards)) + (["model.safetensors.index.json"] if len(shards) > 1 else []) + ["config.json"]
        )
    return ConversionPlan(
        loaded, source, d, writer, tensors, dropped, config, files, notes, findings, options, target, serving
    )


def _check_output(loaded, d: Drafter, config: dict, out_present: dict, out_names: dict, writer, target) -> list:
    """validate's checks of the output as planned: its config against its dialect's schema, its tensors (the source's
    vocab maps standing in for the output's) against its config."""
    from . import schemas  # jsonschema: the output's config.json is held to its dialect's schema, as validate holds it

    findings = schemas.check_config(config, writer.schema, mla=d.attention == "mla", label="the output's config.json")
    return findings + run_checks(
        CheckInput(
            d,
            out_present,
            values=lambda c: _values_for_checks(loaded, c),
            target=target,
            config=config,
            stored_name=lambda c: out_names.get(c, c),
        )
    )  # the output's names


def _repaired(notes: list[Finding], found: list[Finding], loaded, writer, d: Drafter) -> list[Finding]:
    """``notes`` and what writing repairs of the source's own faults (the class its tensors fit, the weights' dtype,
    tie_word_embeddings false, the q_lora_rank its tensors give)."""
    notes = list(notes)
    if any(n.check == "config.architecture_mismatch" for n in notes):
        from .model.architectures import written_as

        notes.append(
            Finding(
                "architecture.repaired",
                "info",
                "the source's architecture label did not fit its tensors: wrote "
                f"{written_as(writer.name, d.attention)} (model_type {d.attention}), the class the tensors fit",
                "architectures",
            )
        )

    for stated in (
        f for f in found if f.check == "config.dtype" and f.severity != "info"
    ):  # (d.dtype: the weights', or --dtype's)
        why = "which no reader can load" if stated.severity == "error" else "not a floating-point dtype"
        notes.append(
            Finding(
                "config.dtype_repaired",
                "info",
                f"the source's config.json had {stated.subject}"
                f" {shown(lookup(loaded.checkpoint.config, stated.subject))}, {why}: wrote torch_dtype {d.dtype}, the"
                " weights' dtype",
                stated.subject,
            )
        )
    notes += [
        Finding(
            "config.tied_head_repaired",
            "info",
            f"the source's {f.subject} was true beside a shipped lm_head.weight: wrote tie_word_embeddings false, so"
            " that every loader runs the shipped head (as vLLM did)",
            f.subject,
        )
        for f in found
        if f.check == "config.tied_head"
    ]
    if any(n.check == "mla.q_lora_rank" for n in notes):  # the source's error, repaired by writing the key
        notes = [n for n in notes if n.check != "mla.q_lora_rank"]
        notes.append(
            Finding(
                "mla.q_lora_rank_repaired",
                "info",
                f"the source's config.json had no q_lora_rank: wrote {d.mla.q_lora_rank}, "
                "the row count of its q_a_proj.weight",
                "q_lora_rank",
            )
        )
    return notes


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


def _values_for_checks(loaded: dialects.LoadedDrafter, canonical: str):
    if canonical == "t2d" and "t2d" not in loaded.names:
        return t2d_from_d2t(loaded.read_values("d2t"), loaded.drafter.vocab_size)
    return loaded.read_values(canonical)


def _producer(t: OutputTensor, plan: ConversionPlan) -> Callable[[], Payload]:
    loaded = plan.loaded
    ckpt: Checkpoint = loaded.checkpoint
    if t.op.startswith(("rows:", "absolute", "synth:rope_freqs")):  # GGUF's stored forms (GGUFDialect.stored_value)

        def produce() -> Payload:
            values = plan.dialect.stored_value(t.op, ckpt.read(t.source) if t.source else None, plan.drafter)
            return _cast(values, t) if t.dtype != t.dtype_in else values

    elif t.op == "copy":

        def produce() -> Payload:
            return ckpt.byte_range(t.source) or ckpt.read(t.source)

    elif t.op == "cast":

        def produce() -> Payload:
            return _cast(ckpt.read(t.source), t)

    elif t.op == "synth:ones":

        def produce() -> Payload:
            import torch

            return torch.ones(t.shape, dtype=t.dtype.torch)

    elif t.op == "synth:t2d":

        def produce() -> Payload:
            import torch

            t2d = t2d_from_d2t(loaded.read_values("d2t"), t.shape[0])
            return torch.frombuffer(t2d, dtype=torch.bool) if t2d else torch.zeros(0, dtype=torch.bool)

    elif t.op == "synth:lm_head":

        def produce() -> Payload:
            up, down = loaded.read("lm_head.up.weight"), loaded.read("lm_head.down.weight")
            return _cast(up.float() @ down.float(), t)

    else:  # pragma: no cover - plan and producer are written together
        raise AssertionError(t.op)
    return produce


def _cast(values, t: OutputTensor):
    """``values`` in ``t``'s dtype; refused (UsageError) where finite values would become inf there (float16 holds at
    most
    65504). Raised while the output is still a temporary directory, so nothing is left at OUT."""
    import torch

    cast = values.to(t.dtype.torch)
    if cast.is_floating_point() and not bool(torch.isfinite(cast).all()):
        overflowed = torch.isinf(cast) & torch.isfinite(values)
        count = int(overflowed.sum())
        if count:
            largest = float(values[overflowed].abs().max())
            name = dtypes.name(t.dtype)
            raise UsageError(
                f"--dtype {name}: tensor {t.source or t.name} holds {count} value{'s' * (count != 1)} up to {largest:g}"
                f" in magnitude, beyond {name}'s range (at most {torch.finfo(cast.dtype).max:g}), which would become"
                " inf; nothing written (keep the source's dtype, or use bfloat16)"
            )
    return cast


def execute(plan: ConversionPlan, out: str | Path, *, progress: Callable[[int], None] | None = None) -> list[str]:
    """Write the planned conversion atomically into ``out``; return the files written."""
    if errors(plan.findings):
        raise ValidationFailed(
            _refusal("the converted drafter would not validate", errors(plan.findings)), plan.findings
        )
    from . import __version__

    options = plan.options or ConvertOptions(to=plan.dialect.name)
    if any(t.op != "copy" or t.dtype != t.dtype_in for t in plan.tensors):  # torch makes these: its threads settled
        from .target import threads

        threads.settle()
    if plan.dialect.single_file:
        return _execute_file(plan, Path(out), options, progress)
    ckpt = plan.loaded.checkpoint
    tensor_plans = [
        TensorPlan(t.name, t.dtype, t.shape, _producer(t, plan), ckpt.byte_range(t.source) if t.op == "copy" else None)
        for t in plan.tensors
    ]
    with atomic_directory(
        Path(out), force=options.force, protect=[plan.loaded.checkpoint.location], replaceable=foreign_entries
    ) as tmp:
        files = write_checkpoint_tensors(
            tmp,
            tensor_plans,
            max_shard_bytes=options.max_shard_bytes,
            progress=progress,
            metadata={WEIGHTS_MARK: __version__},
        )
        (tmp / "config.json").write_text(jsonfile.dumps(plan.config))
        files.append("config.json")
    return files


def _execute_file(plan: ConversionPlan, out: Path, options: ConvertOptions, progress) -> list[str]:
    """A single-file dialect (GGUF) writes the one file itself, from the plan's tensors in order."""
    assert plan.target is not None  # plan_conversion refuses a single-file output without one
    tensors = [(t.name, t.dtype, t.shape, _producer(t, plan)) for t in plan.tensors]
    plan.dialect.write_file(
        out,
        plan.drafter,
        plan.config,
        plan.target,
        tensors,
        force=options.force,
        protect=[plan.loaded.checkpoint.location],
        progress=progress,
    )
    return [out.name]


def convert(source: str | Path, out: str | Path, options: ConvertOptions) -> ConversionPlan:
    """Plan and write in one call (the library entry point)."""
    plan = plan_conversion(source, out, options)
    try:
        execute(plan, out)
    finally:
        plan.loaded.close()
    return plan
