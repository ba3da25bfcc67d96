"""Conversion between dialects: plan (pure, from headers and the tiny vocab maps), then stream.

``plan_conversion`` reads the source into the canonical drafter, applies what the user asked (target
resolution, aux ids, the 3.0 -> 3.1 upgrade, dtype), lets the destination dialect name and select the
tensors, and validates the result. ``execute`` writes it: tensors one at a time (raw byte copies where the
bytes do not change), config.json last, all inside an atomic output directory.

Planning and copying import no torch (dtypes are ``dtypes.DType`` values, the vocab maps are read as ints); torch
is imported only to make a tensor: a cast, fc_norm ones, a materialised lm_head, a t2d synthesised from d2t.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import dialects
from .dialects.base import lookup
from .errors import CheckpointError, UsageError, ValidationFailed
from .findings import Finding, errors
from .io import dtypes, jsonfile
from .io.atomic import atomic_directory, check_destination
from .io.reader import Checkpoint
from .io.writer import DEFAULT_MAX_SHARD_BYTES, Payload, TensorPlan, plan_shards, shard_names, write_checkpoint_tensors
from .model.config_view import shown
from .model.drafter import INPUT, UPGRADE_NOTE, AuxLayers, Drafter, default_aux_ids
from .validate.checks import CheckInput, run_checks, t2d_from_d2t

if TYPE_CHECKING:  # a conversion without --target never loads the target's modules
    from .target import TargetConfig


@dataclass
class ConvertOptions:
    to: str
    source_dialect: str = "auto"
    norm_output_semantics: str = "auto"  # how to read a SpecForge-style norm_output (eagle31 | specforge | auto)
    target: str | None = None
    aux_layers: tuple[int, ...] | None = None  # input-of-layer ids (vLLM's convention)
    upgrade: str | None = None  # "3.1"
    dtype: dtypes.DType | None = None  # None: keep each tensor's dtype (a torch dtype or a name is taken too)
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    force: bool = False

    def __post_init__(self) -> None:
        if self.dtype is not None:
            self.dtype = dtypes.of(self.dtype)


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
        return config_changes(
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


def _side(config: dict, locations: list[str], default: Any = None) -> dict:
    """Where one setting sits in a config: the keys (dotted) that hold it and its value (the first key's), or the
    default."""
    keys = [k for k in locations if lookup(config, k) is not None]
    return {"keys": keys, "value": lookup(config, keys[0]) if keys else default}


def config_changes(source: dialects.Dialect, before: dict, writer: dialects.Dialect, after: dict) -> list[dict]:
    """The settings a conversion moves or rewrites, each as ``{"what", "old", "new"}`` with ``{"keys", "value",
    "convention"}`` on each side: the architecture and model_type labels, the aux layer ids (translated between
    conventions: SGLang's output-of-layer [1, 15, 28] is vLLM's input-of-layer [2, 16, 29]) and every flag, read
    where each dialect's rules (``ConfigRules``) keep them. A flag no key records reads as its dialect's default."""
    out: list[dict] = []
    for what in ("architectures", "model_type"):
        places = [
            f"{rules.base}.{what}" for rules in (source.rules, writer.rules) if rules.base and what == "model_type"
        ]
        out.append({"what": what, "old": _side(before, [what, *places]), "new": _side(after, [what, *places])})

    def aux(rules, config):
        present = [(key, conv) for key, conv in rules.aux_ids if isinstance(_side(config, [key])["value"], list)]
        return {**_side(config, [k for k, _ in present]), "convention": present[0][1] if present else None}

    out.append({"what": "aux layer ids", "old": aux(source.rules, before), "new": aux(writer.rules, after)})
    for flag in dict.fromkeys([*source.rules.flags, *writer.rules.flags]):
        old_key, new_key = source.rules.flags.get(flag), writer.rules.flags.get(flag)
        old = _side(before, list(old_key.locations) if old_key else [], old_key.default if old_key else None)
        new = _side(after, list(new_key.locations) if new_key else [], new_key.default if new_key else None)
        out.append({"what": flag, "old": old, "new": new})
    return [c for c in out if c["old"] != c["new"]]


def destination_status(out: str | Path, *, force: bool, protect: list[Path]) -> dict:
    """What writing ``out`` would do, for a dry run: whether it exists, whether the conversion needs ``--force``, the
    entries ``--force`` replaces, and the refusal the same command without ``--dry-run`` would stop with (or None)."""
    from .errors import EaglekitError

    dest = Path(out)
    exists = dest.exists() or dest.is_symlink()

    def refusal(with_force: bool) -> str | None:
        try:
            check_destination(dest, force=with_force, protect=protect, replaceable=foreign_entries)
        except EaglekitError as exc:
            return str(exc)
        return None

    forced = refusal(True)  # a refusal even --force cannot lift (a user's files, the source) is the one to show
    stop = forced if forced or force else refusal(False)
    replaces = (
        sorted(p.name + ("/" if p.is_dir() else "") for p in dest.iterdir())
        if exists and dest.is_dir() and not forced
        else []
    )
    return {
        "path": str(out),
        "exists": exists,
        "needs_force": exists and not forced,
        "replaces": replaces,
        "refusal": stop,
    }


def _refusal(why: str, problems: list[Finding]) -> str:
    more = f", and {len(problems) - 1} more (see `eaglekit validate`)" if len(problems) > 1 else ""
    return f"refusing to write: {why}: {problems[0].message}{more}"


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


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


# What a conversion writes (and what verify --report may add beside it): the only names --force replaces.
_OUTPUT_FILE = re.compile(
    r"config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|eaglekit-verify\.json"
)


# The key in each written safetensors header's __metadata__ that says eaglekit wrote those weights (its version). A
# model trained from a conversion keeps the config's eaglekit block but not this (save_pretrained writes its own
# header): --force does not take the trained weights for an earlier output of ours.
WEIGHTS_MARK = "eaglekit"


def foreign_entries(directory: Path) -> list[str]:
    """What stops ``directory`` being an earlier eaglekit conversion that ``--force`` may replace.

    It is one when its config.json carries the ``eaglekit`` block every writer adds, every weights file's header
    carries ``WEIGHTS_MARK``, and it holds nothing but the files a conversion writes. Every other entry is named, so
    the refusal says what would be lost.
    """
    foreign = sorted(p.name + "/" for p in directory.iterdir() if p.is_dir() or p.is_symlink())
    foreign += sorted(
        p.name for p in directory.iterdir() if p.is_file() and not p.is_symlink() and not _OUTPUT_FILE.fullmatch(p.name)
    )
    if foreign:
        return foreign
    try:
        config = jsonfile.load_object(directory / "config.json")
    except CheckpointError:
        config = {}
    block = config.get("eaglekit")
    if not (isinstance(block, dict) and "dialect" in block):
        return sorted(p.name for p in directory.iterdir())  # safetensors and a config, but not eaglekit's
    from .io.safetensors_header import read_header

    unmarked = []
    for weights in sorted(directory.glob("*.safetensors")):
        try:
            marked = WEIGHTS_MARK in read_header(weights).metadata
        except CheckpointError:
            marked = False
        if not marked:  # another program's, re-saved since (a fine-tune), or an eaglekit's from before the mark
            unmarked.append(f"{weights.name}: weights without eaglekit's mark")
    return unmarked


def plan_conversion(source: str | Path, out: str | Path | None, options: ConvertOptions) -> ConversionPlan:
    writer = dialects.get_writer(options.to)
    if options.upgrade not in (None, "3", "3.0", "3.1"):
        raise UsageError(f"--upgrade {options.upgrade!r}: only 3.1 is supported")
    if out is not None:
        check_destination(Path(out), force=options.force, protect=[Path(source)], replaceable=foreign_entries)
    target = None
    if options.target:
        from .target import read_target_config

        target = read_target_config(options.target)
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
        return _plan(loaded, writer, options, target)
    except BaseException:
        loaded.close()
        raise


def _plan(
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
    # a config dtype no reader can load is the source's error that writing repairs: the writers state the weights' dtype
    problems = [f for f in errors(found) if f.check != "config.dtype" or source.dtype is None]
    if problems:
        raise ValidationFailed(_refusal("the source drafter does not validate", problems), problems)
    d = source
    if target is not None:
        d = d.with_(
            target_num_layers=target.num_layers,
            verifier=d.verifier or target.name,
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
    out_names = writer.output_names(d)
    present = loaded.present()
    tensors: list[OutputTensor] = []
    for canonical, name in out_names.items():
        op, src, dtype_in, shape = _source_of(canonical, d, loaded, present, added_ones)
        dtype = options.dtype if options.dtype is not None and dtype_in.is_floating_point else dtype_in
        if op == "copy" and dtype != dtype_in:
            op = "cast"
        tensors.append(OutputTensor(name, canonical, src, op, dtype_in, dtype, shape))
    written_sources = {t.source for t in tensors}
    dropped = {s: _why_dropped(c, writer) for c, s in loaded.names.items() if s not in written_sources}

    # validate what would be written, with the source's vocab maps standing in for the output's
    out_present = {t.canonical: (t.shape, t.dtype) for t in tensors}
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
    from . import schemas  # jsonschema: the output's config.json is held to its dialect's schema, as validate holds it

    findings = schemas.check_config(config, writer.schema, mla=d.attention == "mla", label="the output's config.json")
    findings += run_checks(
        CheckInput(
            d,
            out_present,
            values=lambda c: _values_for_checks(loaded, c),
            target=target,
            config=config,
            stored_name=lambda c: out_names.get(c, c),
        )
    )  # the output's names
    # what this run's own notes already say of the output, said once, by the note (which says why)
    said_by_notes = {"flags.untrained_upgrade"} if options.upgrade else set()
    said_by_notes |= {n.check for n in notes if n.check == "aux.not_recorded"}
    findings = [f for f in findings if f.check not in said_by_notes]
    shards = plan_shards([TensorPlan(t.name, t.dtype, t.shape, lambda: None) for t in tensors], options.max_shard_bytes)
    files = shard_names(len(shards)) + (["model.safetensors.index.json"] if len(shards) > 1 else []) + ["config.json"]
    return ConversionPlan(loaded, source, d, writer, tensors, dropped, config, files, notes, findings, options, target)


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


def _producer(t: OutputTensor, loaded: dialects.LoadedDrafter) -> Callable[[], Payload]:
    ckpt: Checkpoint = loaded.checkpoint
    if t.op == "copy":

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
    ckpt = plan.loaded.checkpoint
    tensor_plans = [
        TensorPlan(
            t.name, t.dtype, t.shape, _producer(t, plan.loaded), ckpt.byte_range(t.source) if t.op == "copy" else None
        )
        for t in plan.tensors
    ]
    with atomic_directory(
        Path(out), force=options.force, protect=[plan.loaded.checkpoint.directory], replaceable=foreign_entries
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


def convert(source: str | Path, out: str | Path, options: ConvertOptions) -> ConversionPlan:
    """Plan and write in one call (the library entry point)."""
    plan = plan_conversion(source, out, options)
    try:
        execute(plan, out)
    finally:
        plan.loaded.close()
    return plan
