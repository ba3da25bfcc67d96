"""What a dialect is: name rules, config rules and detection evidence as data, plus a reader and a writer.

A dialect module declares
- ``names``: prefix rules between its tensor names and canonical (vLLM) names, and read-only aliases;
- ``rules``: where its config keeps the HF dimensions, each flag (with its default) and the aux layer ids
  (with their convention);
- ``evidence``: scored clues for detection;
and, if it can hold a drafter, a writer (``write_config`` and ``output_names``).

The reading algorithm is shared (``read``); dialects hook in only where their semantics differ.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, UnsupportedError
from ..findings import Finding
from ..io import dtypes
from ..io.reader import Checkpoint
from ..model import architectures as arch_table
from ..model.config_view import ConfigView, shown
from ..model.drafter import INPUT, OUTPUT, AuxLayers, Convention, Drafter, Flags, ParallelDrafting, Provenance
from ..model.hf_config import MLA_MODEL_TYPES, base_fields, read_rope

if TYPE_CHECKING:  # pragma: no cover
    from array import array

    import torch

# -- names ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NameMap:
    """Prefix rules ``(dialect_prefix, canonical_prefix)``; the first matching rule wins in each direction."""

    rules: tuple[tuple[str, str], ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)  # exact dialect name -> canonical (read only)

    def to_canonical(self, name: str) -> str:
        if name in self.aliases:
            return self.aliases[name]
        for theirs, ours in self.rules:
            if name.startswith(theirs):
                return ours + name[len(theirs) :]
        return name

    def from_canonical(self, name: str) -> str:
        for theirs, ours in self.rules:
            if name.startswith(ours):
                return theirs + name[len(ours) :]
        return name


# HF keys harmless to any engine that ride along from source to output (``Drafter.extra_config``)
CARRIED_HF_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _carried_keys(config: dict, base: str | None) -> dict:
    """The ``CARRIED_HF_KEYS`` a config states: at its top level, or in the block holding its HF keys (speculators'
    ``transformer_layer_config``), the top level's first."""
    block = lookup(config, base) if base else None
    nested = {k: block[k] for k in CARRIED_HF_KEYS if k in block} if isinstance(block, dict) else {}
    return {**nested, **{k: config[k] for k in CARRIED_HF_KEYS if k in config}}


# Aliases every reader accepts, by family: SGLang's legacy per-aux norm names and a third-party converter's name (a
# file names its norms by one family: ``LoadedDrafter.stored_name`` names a missing one by the family the file uses).
LEGACY_FC_NORM_FAMILIES = (
    {
        "aux_norm_low.weight": "fc_norm.0.weight",
        "aux_norm_mid.weight": "fc_norm.1.weight",
        "aux_norm_high.weight": "fc_norm.2.weight",
    },
    {f"fcs.{i}.weight": f"fc_norm.{i}.weight" for i in range(8)},
)
LEGACY_FC_NORM_ALIASES = {alias: ours for family in LEGACY_FC_NORM_FAMILIES for alias, ours in family.items()}

# -- config rules --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """A flag's locations in config.json (dotted paths, first present wins) and its default when absent."""

    locations: tuple[str, ...]
    default: bool


@dataclass(frozen=True)
class ConfigRules:
    """Where a dialect's config keeps the HF dimensions, the flags, the aux layer ids and the target width."""

    base: str | None = None  # dotted path of the dict holding the HF dimensions; None = top level
    flags: Mapping[str, Key] = field(default_factory=dict)
    aux_ids: tuple[tuple[str, Convention], ...] = ()  # id locations in precedence order
    num_aux: tuple[str, ...] = ("num_aux_hidden_states",)
    target_hidden: tuple[str, ...] = ("target_hidden_size",)
    # P-EAGLE's mask token: the config keys that may hold it, in the order the dialect's readers take them
    mask_token: tuple[str, ...] = ()


def lookup(config: dict, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


# -- detection -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clue:
    """One piece of detection evidence: a description, its weight, and a test of (config, tensor names, checkpoint)."""

    text: str
    score: int
    test: Callable[[dict, frozenset[str], Checkpoint], bool]


@dataclass
class Detection:
    """How well a checkpoint's files fit one dialect: a score and the evidence for it."""

    dialect: str
    score: int
    evidence: list[str]

    def to_dict(self) -> dict:
        return {"dialect": self.dialect, "score": self.score, "evidence": self.evidence}


# How many declared decoder layers may be missing from the tensors and still be reported one tensor at a time
# (tensor.missing); past it the config is refused in one line (a config declaring 10^7 layers ran out of memory).
MAX_MISSING_LAYERS = 8
# More fused target states than any target has layers (the deepest have a few hundred).
MAX_AUX_STATES = 1024


@dataclass(frozen=True)
class Reading:
    """One way to read a checkpoint's aux layer ids: which dialect, which convention, and the input-of-layer ids."""

    dialect: str
    convention: Convention | None
    ids: tuple[int, ...] | None  # as recorded
    why: str  # the evidence behind this reading
    score: int | None = None  # the dialect's detection score, for a dialect ambiguity

    @property
    def input_ids(self) -> tuple[int, ...] | None:
        return AuxLayers(self.ids, self.convention or INPUT).as_input()

    def text(self) -> str:
        if self.ids is None:
            return f"{self.dialect}: no aux ids"
        ids = list(self.ids)
        if self.convention == OUTPUT:
            return f"{self.dialect}: {ids} output-of-layer = {list(self.input_ids)} input-of-layer ({self.why})"
        return f"{self.dialect}: {ids} input-of-layer ({self.why})"

    def to_dict(self) -> dict:
        return {
            "dialect": self.dialect,
            "score": self.score,
            "ids": list(self.ids) if self.ids is not None else None,
            "convention": self.convention,
            "input_ids": list(self.input_ids) if self.ids is not None else None,
            "why": self.why,
        }


@dataclass(frozen=True)
class Ambiguity:
    """Two readings of one checkpoint that the evidence cannot choose between.

    ``kind`` "dialect": two dialects score within ``AMBIGUITY_MARGIN`` and read different aux ids (``--from`` or
    ``--aux-layers`` decides); "convention": the ids' convention (input- or output-of-layer) is not settled by any
    evidence and no target says which reading is possible (``--target`` or ``--aux-layers`` decides).
    """

    kind: str
    readings: tuple[Reading, ...]
    decide: str

    def message(self) -> str:
        what = (
            "two dialects fit within the detection margin"
            if self.kind == "dialect"
            else "the aux ids' convention is not settled"
        )
        return (
            f"ambiguous: {what}, and they name different target layers: "
            + "; ".join(r.text() for r in self.readings)
            + f"; {self.decide}"
        )

    def to_dict(self) -> dict:
        return {"kind": self.kind, "readings": [r.to_dict() for r in self.readings], "decide": self.decide}


def architectures(config: dict) -> tuple[str, ...]:
    value = config.get("architectures")
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def architecture_clue(dialect: str, score: int, text: str | None = None, *, alone: bool = False) -> Clue:
    """Evidence from the architecture table: config.json names a string that ``dialect`` claims (``alone``: and
    nothing else). The table is read at detection time, so a row added to it is recognised everywhere."""
    text = text or "architectures is " + " or ".join(arch_table.claimed_by(dialect))

    def test(config: dict, names: frozenset[str], ckpt: Checkpoint) -> bool:
        found, claimed = architectures(config), set(arch_table.claimed_by(dialect))
        return (len(found) == 1 and found[0] in claimed) if alone else bool(claimed & set(found))

    return Clue(text, score, test)


def written_by_eaglekit(config: dict, dialect: str) -> bool:
    """The ``eaglekit`` block a writer adds (``provenance_block``) names this dialect."""
    block = config.get("eaglekit")
    return isinstance(block, dict) and block.get("dialect") == dialect


def has_prefix(names: Iterable[str], prefix: str) -> bool:
    return any(n.startswith(prefix) for n in names)


# -- the loaded drafter --------------------------------------------------------------------------------


@dataclass
class LoadedDrafter:
    """A drafter read from a checkpoint: the canonical description, and its tensors by canonical name."""

    drafter: Drafter
    checkpoint: Checkpoint
    dialect: str
    detection: Detection | None
    names: dict[str, str]  # canonical name -> name in the checkpoint
    unknown: list[str]  # checkpoint names that map to no canonical name
    notes: list[Finding] = field(default_factory=list)  # what reading noticed (defaults assumed, ambiguities)
    ambiguity: Ambiguity | None = None  # two readings the evidence cannot choose between (see ``Ambiguity``)
    # with a target: two id conventions that its depth rules neither out of; the dialect's is read
    # (aux.unsettled_convention),
    # verify measures both and convert --resolve converts with the one the weights were trained with
    unsettled: Ambiguity | None = None
    name_map: NameMap | None = None  # the dialect's name rules, for tensors the checkpoint lacks (``stored_name``)

    @functools.cached_property
    def _unknown(self) -> frozenset[str]:
        """``unknown`` as a set: a header may list 300,000 of them, and every tensor's finding asks (list:
        quadratic)."""
        return frozenset(self.unknown)

    @property
    def doubt(self) -> Ambiguity | None:
        """The aux-id readings worth measuring on a target: an ambiguity, else an unsettled convention."""
        return self.ambiguity or self.unsettled

    def present(self) -> dict[str, tuple[tuple[int, ...], dtypes.DType]]:
        out = {c: (self.checkpoint.tensors[s].shape, self.checkpoint.tensors[s].dtype) for c, s in self.names.items()}
        for s in self.unknown:
            out[s] = (self.checkpoint.tensors[s].shape, self.checkpoint.tensors[s].dtype)
        return out

    def stored_name(self, canonical: str) -> str:
        """A tensor as the checkpoint names it (``midlayer.*`` for SGLang's ``layers.0.*``): its own name where it holds
        the tensor; for one it lacks, its alias in a family of aliases the checkpoint uses (SGLang's legacy
        ``aux_norm_mid.weight``), else the name a rule of its dialect gives it where the checkpoint names other tensors
        by that rule (every dialect reads ``midlayer.*``, few files hold it), else the canonical name; a tensor that
        maps to no canonical name keeps its own."""
        if canonical in self.names:
            return self.names[canonical]
        if self.name_map is None or canonical in self._unknown:
            return canonical
        stored = set(self.names.values())
        for family in (*LEGACY_FC_NORM_FAMILIES, self.name_map.aliases):
            if stored & set(family):  # the file names tensors by this family of aliases
                alias = next((a for a, ours in family.items() if ours == canonical), None)
                if alias is not None:
                    return alias
        for theirs, ours in self.name_map.rules:
            if canonical.startswith(ours) and any(s.startswith(theirs) for s in stored):
                return theirs + canonical[len(ours) :]
        return canonical

    def read(self, canonical: str) -> torch.Tensor:
        return self.checkpoint.read(self.names[canonical])

    def read_values(self, canonical: str) -> array:
        """An integer or bool tensor's elements as Python ints, without torch (``Checkpoint.read_values``)."""
        return self.checkpoint.read_values(self.names[canonical])

    def close(self) -> None:
        self.checkpoint.close()

    def __enter__(self) -> LoadedDrafter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- dialects ------------------------------------------------------------------------------------------


class Dialect:
    name: str = ""
    aliases: tuple[str, ...] = ()
    summary: str = ""
    reads: str = ""  # what the reader accepts, for `convert --list`
    writes: str = ""  # what the writer produces; empty when the dialect cannot be written
    names: NameMap = NameMap()
    rules: ConfigRules = ConfigRules()
    evidence: tuple[Clue, ...] = ()
    single_layer_model: bool = False  # the dialect's model class has exactly one decoder layer (`midlayer`)
    # facts other parts of eaglekit read (card, schemas, convert --list): each dialect states its own
    schema: str | None = None  # its config.json schema, relative to schemas/
    library_name: str = "vllm"  # the Hub's library_name for a drafter published in this dialect
    hub_tags: tuple[str, ...] = ()  # the engines/libraries a model card tags it with
    served_by: tuple[str, ...] = ()  # the engines that load this layout as it is: convert names a serve line for each
    verifier_readers: str = ""  # who reads the verifier this layout records (speculators'): said when none is known
    # the writer's vocabulary maps: with a pruned vocabulary, synthesise t2d if missing; with a full one, drop both
    writes_t2d: bool = False
    drops_full_vocab_maps: bool = True
    carries_extra_config: bool = True  # harmless HF keys (token ids) ride along in the written config
    holds_unnormed_lm_head: bool = False  # its config can say "lm_head reads the un-normalised state" (SpecForge)
    # every writer writes sliding_window / use_sliding_window / layer_types (flat HF keys); where the format's own
    # readers
    # are not known to apply them, what to tell the user when a windowed drafter is written (convert's note)
    window_caveat: str | None = None
    single_file: bool = False  # the output is one file (GGUF), not a directory of config.json and safetensors
    omitted: dict[str, str] = {}  # canonical tensors the format has no place for, with why (said when dropped)

    @property
    def can_write(self) -> bool:
        return bool(self.writes)

    # detection ---------------------------------------------------------------------------------------

    def clues(self) -> tuple[Clue, ...]:
        """The dialect's evidence, plus the mark its own writer leaves (an eaglekit output says what it is)."""
        if not self.can_write:
            return self.evidence
        name = self.name
        return self.evidence + (
            Clue(f"written by eaglekit as {name}", 60, lambda c, n, k: written_by_eaglekit(c, name)),
        )

    def detect(self, config: dict, names: frozenset[str], ckpt: Checkpoint) -> Detection:
        score, evidence = 0, []
        for clue in self.clues():
            try:
                hit = clue.test(config, names, ckpt)
            except (TypeError, AttributeError, KeyError, ValueError):
                hit = False
            if hit:
                score += clue.score
                evidence.append(clue.text)
        return Detection(self.name, score, evidence)

    # reading -----------------------------------------------------------------------------------------

    def map_names(self, ckpt: Checkpoint) -> tuple[dict[str, str], list[str]]:
        from ..model.layout import is_known_name

        canonical: dict[str, str] = {}
        unknown: list[str] = []
        aliases = {**LEGACY_FC_NORM_ALIASES, **self.names.aliases}
        for source in ckpt.tensors:
            ours = aliases.get(source) or self.names.to_canonical(source)
            if ours in canonical:
                raise ConfigError(
                    f"{ckpt.label}: tensors {canonical[ours]!r} and {source!r} both map to {ours!r} in the {self.name}"
                    " dialect"
                )
            if is_known_name(ours):
                canonical[ours] = source
            else:
                unknown.append(source)
        return canonical, unknown

    def read(
        self,
        ckpt: Checkpoint,
        detection: Detection | None = None,
        *,
        norm_output_semantics: str = "auto",
        target_num_layers: int | None = None,
        given: bool = False,
    ) -> LoadedDrafter:
        """Read ``ckpt`` in this dialect. ``norm_output_semantics``: how to read a producer-dependent ``norm_output``
        key ("eagle31", "specforge", "auto"). ``target_num_layers`` (L, from ``--target``) lets the boundary rule
        discard an aux-id reading outside 0..L; ``given``: the user named this dialect (``--from``), which settles the
        ids' convention the way the dialect reads them."""
        if ckpt.config is None:
            raise ConfigError(f"{ckpt.label}: no config.json")
        label = f"{ckpt.label}/config.json"
        nested = ckpt.config.get("eagle_config")
        if nested is not None and not isinstance(nested, dict):
            raise ConfigError(
                f"{label}: eagle_config must be an object (its aux layer ids and flags), got {nested!r}",
                key="eagle_config",
            )
        top = ConfigView(ckpt.config, label)
        names, unknown = self.map_names(ckpt)
        notes: list[Finding] = []
        base_view = top
        if self.rules.base:
            base_view = top.sub(self.rules.base)
            if base_view is None:
                raise ConfigError(
                    f"{label}: {self.rules.base} is missing (the {self.name} dialect keeps dimensions there)"
                )
        fields = base_fields(base_view)
        _, theta_given = read_rope(base_view)
        if not theta_given:
            notes.append(
                Finding(
                    "rope.defaulted",
                    "warning",
                    "config has no rope_theta: 10000 assumed (EAGLE's default)",
                    "rope_theta",
                )
            )

        flags = self.read_flags(ckpt.config, top, notes)
        aux = self.read_aux_ids(ckpt.config, top, names, notes)
        location = self.aux_location(ckpt.config)
        aux = apply_boundaries(aux, location, target_num_layers, notes)
        ambiguity = unsettled = None
        if not given:
            ambiguity = self.convention_ambiguity(aux, location, ckpt)
            if ambiguity is not None and target_num_layers is not None:
                # the target's depth ruled neither reading out (apply_boundaries keeps the one that fits): say so
                other = next(r for r in ambiguity.readings if r.convention != aux.convention)
                other_layers = AuxLayers(other.ids, other.convention).as_input()
                if within_boundaries(other_layers, target_num_layers):
                    notes.append(
                        Finding(
                            "aux.unsettled_convention",
                            "warning",
                            f"{location} {list(aux.ids)} read {aux.convention}-of-layer (target layers"
                            f" {list(aux.as_input())}); {other.convention}-of-layer ({list(other_layers)}) fits the"
                            " target too: verify measures both, convert --resolve picks",
                            location,
                            detail=(
                                f"{location} {list(aux.ids)}: read {aux.convention}-of-layer = target layers"
                                f" {list(aux.as_input())}, but read {other.convention}-of-layer they would be"
                                f" {list(other_layers)}, also within the target's 0..{target_num_layers}, and nothing"
                                " in the checkpoint says which its producer meant: verify measures both; convert"
                                " --resolve (or --aux-layers) if it is the other"
                            ),
                        )
                    )
                    unsettled = ambiguity
                ambiguity = None
        infos = {c: ckpt.tensors[s] for c, s in names.items()}
        T = self._first_int(top, self.rules.target_hidden) or fields["hidden_size"]
        n = self._num_aux(top, aux, infos, T)

        attention = "mla" if fields["mla"] is not None or fields["model_type"] in MLA_MODEL_TYPES else "llama"
        if attention == "mla" and fields["mla"] is None:
            raise ConfigError(
                f"{label}: model_type {fields['model_type']!r} is MLA but kv_lora_rank/qk_rope_head_dim are missing"
            )
        if attention == "mla":
            fields["mla"] = _q_lora_rank_from_tensors(fields["mla"], base_view, infos, notes)
        if attention == "llama":
            attention, mismatch = attention_from_tensors(ckpt.config, fields["model_type"], infos)
            if mismatch:
                notes.append(Finding("config.architecture_mismatch", "warning", mismatch, "architectures"))
                fields["model_type"] = "llama"  # the tensors decide; the label was wrong

        num_layers = base_view.int("num_hidden_layers", 1, minimum=1)
        found = 1 + max(
            (int(c.split(".")[1]) for c in infos if c.startswith("layers.")), default=0
        )  # decoder layers the tensors hold
        if self.single_layer_model:
            if found != num_layers:
                notes.append(
                    Finding(
                        "config.num_layers",
                        "warning",
                        f"config says num_hidden_layers {num_layers}, but the {self.name} drafter class has "
                        f"{found} decoder layer(s); {found} is used",
                        "num_hidden_layers",
                    )
                )
            num_layers = found
        elif num_layers > found + MAX_MISSING_LAYERS:  # per-layer expectations would be built for every declared layer
            raise ConfigError(f"{label}: num_hidden_layers {num_layers}, but the tensors hold {found} decoder layer(s)")

        drafter = Drafter(
            attention=attention,
            target_hidden_size=T,
            num_layers=num_layers,
            num_aux=n,
            aux=aux,
            flags=flags,
            dtype=_dominant_dtype(infos),
            tensors=frozenset(names),
            provenance=_provenance(self.name, self.framework(ckpt), _eaglekit_block(top)),
            extra_config=_carried_keys(ckpt.config, self.rules.base),
            **fields,
        )
        drafter = drafter.with_(parallel=self.read_parallel(ckpt.config, top, names, notes))
        token = drafter.parallel.mask_token_id if drafter.parallel is not None else None
        if token is not None and token >= drafter.vocab_size:  # its embedding row does not exist
            notes.append(
                Finding(
                    "config.mask_token",
                    "error",
                    f"mask token {token} ({drafter.parallel.mask_token_key}) is not a token of the vocabulary"
                    f" (0..{drafter.vocab_size - 1}): the mask rows' embedding lookup fails",
                    drafter.parallel.mask_token_key,
                )
            )
        drafter = self.adjust(drafter, top, ckpt, notes)
        drafter = self.read_norm_output(drafter, top, norm_output_semantics, notes)
        block = _eaglekit_block(top)
        if drafter.verifier is None and isinstance(block.get("verifier"), str):
            # formats with no verifier field: eaglekit kept it in its own block
            archs = block.get("verifier_architectures")
            drafter = drafter.with_(
                verifier=block["verifier"], verifier_architectures=tuple(archs) if isinstance(archs, list) else ()
            )
        if (
            isinstance(block.get("model_type"), str)
            and block["model_type"] in MLA_MODEL_TYPES
            and drafter.attention == "mla"
        ):
            drafter = drafter.with_(
                model_type=block["model_type"]
            )  # a writer had to spell it differently for its engine
        # what a format with no place for it left to eaglekit's block: speculators' proposal methods, HF token ids
        if not drafter.proposals and isinstance(block.get("speculators_proposals"), dict):
            drafter = drafter.with_(proposals=dict(block["speculators_proposals"]))
        kept = block.get("extra_config") if isinstance(block.get("extra_config"), dict) else {}
        missing = {k: v for k, v in kept.items() if k in CARRIED_HF_KEYS and k not in drafter.extra_config}
        if missing:
            drafter = drafter.with_(extra_config={**drafter.extra_config, **missing})
        return LoadedDrafter(
            drafter, ckpt, self.name, detection, names, unknown, notes, ambiguity, unsettled, self.names
        )

    # hooks a dialect may override --------------------------------------------------------------------

    def read_flags(self, config: dict, top: ConfigView, notes: list[Finding] | None = None) -> Flags:
        """The flags, each from the first of its locations that states it; places that state it otherwise are named
        (``flags.conflicting_locations``), as an engine may read another place first."""
        values = {}
        for flag, key in self.rules.flags.items():
            stated = [(location, lookup(config, location)) for location in key.locations]
            stated = [(location, value) for location, value in stated if value is not None]
            for (
                location,
                value,
            ) in stated:  # every place the flag may be, also those a value elsewhere takes precedence over
                if not isinstance(value, bool):
                    raise ConfigError(f"{top.label}: {location} must be true or false, got {value!r}", key=location)
            values[flag] = stated[0][1] if stated else key.default
            differing = [(location, value) for location, value in stated[1:] if value != stated[0][1]]
            if differing and notes is not None:
                (used, value), others = (
                    stated[0],
                    ", ".join(f"{location} {str(v).lower()}" for location, v in differing),
                )
                notes.append(
                    Finding(
                        "flags.conflicting_locations",
                        "warning",
                        f"{used} {str(value).lower()} and {others} disagree; {used} is used (an engine reading the"
                        " other place first runs the other value: convert writes one)",
                        used,
                    )
                )
        return Flags(**values)

    def read_parallel(
        self, config: dict, top: ConfigView, names: dict, notes: list[Finding]
    ) -> ParallelDrafting | None:
        """P-EAGLE (``ParallelDrafting``) where the config says so (speculators' ``peagle``, a P-EAGLE architecture) or
        the tensors hold ``mask_hidden``; its mask token from the first of ``rules.mask_token`` that states one (others
        that state another are named: an engine reading another key first runs the other token). None: EAGLE 3."""
        says = (
            config.get("speculators_model_type") == "peagle"
            or config.get("parallel_drafting") is True  # NeMo Automodel's recipe (0.7.0's eagle/draft_llama.py)
            or any(arch_table.is_parallel(a) for a in architectures(config))
        )
        if not says and "mask_hidden" not in names:
            return None
        stated = []
        for location in self.rules.mask_token:
            value = lookup(config, location)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(
                    f"{top.label}: {location} must be a token id (an integer >= 0), got {value!r}", location
                )
            stated.append((location, value))
        if not stated:
            keys = " or ".join(self.rules.mask_token) or "a mask token key"
            notes.append(
                Finding(
                    "config.mask_token",
                    "error",
                    f"a P-EAGLE drafter (parallel drafting) whose config names no mask token ({keys}): its K-1 mask"
                    " rows are fed that token; vLLM refuses to load it (update_peagle reads mask_token_id; the proposer"
                    " raises without one)",
                    self.rules.mask_token[0] if self.rules.mask_token else None,
                )
            )
            return ParallelDrafting(None, depth=_depth(config))
        (key, token), others = stated[0], [(k, v) for k, v in stated[1:] if v != stated[0][1]]
        if others:
            notes.append(
                Finding(
                    "config.mask_token_conflict",
                    "warning",
                    f"{key} {token} and " + ", ".join(f"{k} {v}" for k, v in others) + f" disagree; {key} is used (an"
                    " engine reading another key first runs another mask token: convert writes one)",
                    key,
                )
            )
        return ParallelDrafting(token, key, _depth(config))

    def read_aux_ids(self, config: dict, top: ConfigView, names: dict, notes: list[Finding]) -> AuxLayers:
        found: list[tuple[str, tuple[int, ...], Convention]] = []
        for location, convention in self.aux_id_rules(config, names, notes):
            value = lookup(config, location)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                raise ConfigError(
                    f"{top.label}: {location} must be a list of integers, got {shown(value)}", key=location
                )
            if len(value) > MAX_AUX_STATES:  # said before the list is read (or printed) whole
                raise ConfigError(
                    f"{top.label}: {location} lists {len(value)} layer ids; a drafter fuses at most {MAX_AUX_STATES}",
                    key=location,
                )
            if value:
                found.append((location, tuple(value), convention))
        if not found:
            return AuxLayers(None, INPUT)
        location, ids, convention = found[0]
        for other_location, other_ids, other_convention in found[1:]:
            if AuxLayers(other_ids, other_convention).as_input() != AuxLayers(ids, convention).as_input():
                notes.append(
                    Finding(
                        "aux.conflicting_locations",
                        "warning",
                        f"{location} {list(ids)} ({convention}-of-layer) and {other_location} {list(other_ids)} "
                        f"({other_convention}-of-layer) name different target layers; {location} is used",
                        location,
                    )
                )
        return AuxLayers(ids, convention)

    def aux_id_rules(self, config: dict, names: dict, notes: list[Finding]) -> tuple[tuple[str, Convention], ...]:
        """Where this checkpoint's aux ids are read from, each location with its convention (default: the dialect's
        ``rules.aux_ids``). Hook: a producer that writes another convention under some condition says so here, before
        the locations are compared."""
        return self.rules.aux_ids

    def aux_location(self, config: dict) -> str | None:
        """The config key the aux ids were read from (the first recorded location, as ``read_aux_ids`` picks it)."""
        for location, _ in self.rules.aux_ids:
            value = lookup(config, location)
            if isinstance(value, list) and value:
                return location
        return None

    def pins_convention(self, ckpt: Checkpoint) -> str | None:
        """Producer evidence that fixes the ids' convention as this dialect reads it (None: none). Hook."""
        return None

    def convention_ambiguity(self, aux: AuxLayers, location: str | None, ckpt: Checkpoint) -> Ambiguity | None:
        """Without a target: ids in ``eagle_config`` alone, whose convention no evidence confirms, are reported with
        both readings instead of one being chosen. NVIDIA's gpt-oss-120b v3 drafter writes input-of-layer ids there
        ([24, 30, 36] on 36 layers, sglang#32334) and its long-context variant output-of-layer ones ([1, 17, 32]);
        SGLang's and SpecForge's MLA drafters carry vLLM's architecture string with output-of-layer ids there, so the
        location and the producer alone do not decide. Evidence that does: the ids are the default of the convention
        read (1, L//2-1, L-4 output-of-layer; 2, L//2, L-3 input-of-layer) for some L; for output-of-layer ids,
        SpecForge's/EAGLE's own ``midlayer.*`` tensor names; the same layers recorded at the top level too; an eaglekit
        block naming them; the dialect's producer metadata (``pins_convention``)."""
        if aux.ids is None or location is None or not location.startswith("eagle_config."):
            return None
        config = ckpt.config or {}
        if self.pins_convention(ckpt):
            return None
        if aux.convention == OUTPUT and (is_output_default(aux.ids) or has_prefix(ckpt.tensors, "midlayer.")):
            return None
        if aux.convention == INPUT and is_input_default(aux.ids):
            return None
        if isinstance(config.get("eagle_aux_hidden_state_layer_ids"), list):
            return None  # both locations recorded: aux.conflicting_locations speaks if they disagree
        recorded = (
            (config.get("eaglekit") or {}).get("aux_layer_ids_input_convention")
            if isinstance(config.get("eaglekit"), dict)
            else None
        )
        if isinstance(recorded, list) and tuple(recorded) == aux.as_input():
            return None
        as_read = Reading(
            self.name, aux.convention, aux.ids, f"{location} read as {self.name} does: {aux.convention}-of-layer"
        )
        if aux.convention == OUTPUT:
            other = Reading(self.name, INPUT, aux.ids, "the same ids already input-of-layer (boundary ids)")
        else:
            other = Reading(
                self.name, OUTPUT, aux.ids, "the same ids output-of-layer, as SGLang and SpecForge write them there"
            )
        return Ambiguity(
            "convention",
            (as_read, other),
            "pass --target to validate or convert (a reading naming a layer outside the target's 0..L is discarded) or"
            " --aux-layers",
        )

    def adjust(self, drafter: Drafter, top: ConfigView, ckpt: Checkpoint, notes: list[Finding]) -> Drafter:
        """Dialect-specific corrections after the shared reading (default: none)."""
        return drafter

    def read_norm_output(self, drafter: Drafter, top: ConfigView, semantics: str, notes: list[Finding]) -> Drafter:
        """Where ``norm_output`` has more than one producer meaning, read it as ``semantics`` ("auto": as the
        checkpoint says, else EAGLE 3.1's reading, with a warning). Default: the dialect's meaning is fixed."""
        return drafter

    def framework(self, ckpt: Checkpoint) -> str | None:
        return None

    # writing -----------------------------------------------------------------------------------------

    def check_writable(self, drafter: Drafter) -> None:
        if not self.can_write:
            raise UnsupportedError(f"the {self.name} dialect can be read but not written")

    def check_flags_holdable(self, drafter: Drafter) -> None:
        """Refuse a drafter whose math this format has no way to say (checked for every writer)."""
        if not drafter.flags.norm_before_lm_head and not self.holds_unnormed_lm_head:
            raise UnsupportedError(
                f"the {self.name} format cannot hold a drafter whose lm_head reads the un-normalised state (SpecForge's"
                " norm_output: false): its readers always apply the final norm before lm_head; write sglang"
                " (SpecForge) instead"
            )

    def output_names(self, drafter: Drafter) -> dict[str, str]:
        """canonical name -> output name, for every canonical tensor this dialect ships."""
        names = self.tensor_names(drafter)
        if drafter.pruned_vocab:
            if self.writes_t2d:
                names["t2d"] = "t2d"  # synthesised from d2t when the source has none
        elif self.drops_full_vocab_maps:
            names.pop("d2t", None)
            names.pop("t2d", None)
        return names

    def tensor_names(self, drafter: Drafter) -> dict[str, str]:
        """canonical name -> output name before the vocabulary-map rule (default: the name rules)."""
        return {c: self.names.from_canonical(c) for c in sorted(drafter.tensors)}

    def write_config(self, drafter: Drafter) -> dict:
        """config.json: the dialect's own keys, carried HF keys, then the ``eaglekit`` provenance block."""
        config = self.config_keys(drafter)
        if self.carries_extra_config:
            config.update(drafter.extra_config)
        config["eaglekit"] = provenance_block(drafter, self.name)
        if not self.carries_extra_config and drafter.extra_config:
            config["eaglekit"]["extra_config"] = dict(drafter.extra_config)  # for the way back
        if drafter.proposals and "speculators_config" not in config:
            config["eaglekit"]["speculators_proposals"] = drafter.proposals  # for the way back
        return config

    def config_keys(self, drafter: Drafter) -> dict:
        raise UnsupportedError(f"the {self.name} dialect cannot be written")

    # helpers -----------------------------------------------------------------------------------------

    @staticmethod
    def _first_int(view: ConfigView, keys: tuple[str, ...]) -> int | None:
        for key in keys:
            value = lookup(view.data, key)
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"{view.label}: {key} must be a positive integer, got {value!r}", key=key)
                return value
        return None

    def _num_aux(self, top: ConfigView, aux: AuxLayers, infos: dict, T: int) -> int:
        declared = self._first_int(top, self.rules.num_aux)
        if (
            declared and declared > MAX_AUX_STATES
        ):  # one fc_norm and one aux slot expected per state: refuse, not allocate
            raise ConfigError(
                f"{top.label}: {declared} fused target states declared; a drafter fuses at most {MAX_AUX_STATES}"
            )
        if declared:
            return declared
        if aux.ids is not None:
            return len(aux.ids)
        fc = infos.get("fc.weight")
        if fc is not None and len(fc.shape) == 2 and T and fc.shape[1] % T == 0 and fc.shape[1] // T > 0:
            return fc.shape[1] // T
        fc_norms = [c for c in infos if c.startswith("fc_norm.")]
        return len(fc_norms) or 3


def _depth(config: dict) -> int | None:
    """NeMo Automodel's ``num_depths`` (the drafts per pass a P-EAGLE drafter was trained for), where stated."""
    value = config.get("num_depths")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def is_input_default(ids: tuple[int, ...]) -> bool:
    """The ids are vLLM's default capture layers (2, L//2, L-3) for some target depth L."""
    if len(ids) != 3:
        return False
    from ..model.drafter import default_aux_ids

    return tuple(sorted(ids)) == default_aux_ids(max(ids) + 3)


def is_output_default(ids: tuple[int, ...]) -> bool:
    """The ids are SGLang/SpecForge's default capture layers (1, L//2-1, L-4) for some target depth L."""
    if len(ids) != 3:
        return False
    from ..model.drafter import default_aux_ids

    return tuple(sorted(i + 1 for i in ids)) == default_aux_ids(max(ids) + 4)


def within_boundaries(ids: tuple[int, ...] | None, L: int) -> bool:
    """Input-of-layer ids name boundaries of an L-layer target: 0 (the embeddings) .. L (the last layer's output)."""
    return ids is not None and all(0 <= i <= L for i in ids)


def apply_boundaries(aux: AuxLayers, location: str | None, L: int | None, notes: list[Finding]) -> AuxLayers:
    """The impossible-reading rule, the same for every dialect and id location: with the target's depth L known, a
    reading that names a layer outside 0..L cannot be what the producer meant. It is discarded, with a note, in
    favour of the other convention when that one fits; when neither fits, the reading stays and ``aux.range`` says so.
    """
    if aux.ids is None or L is None or within_boundaries(aux.as_input(), L):
        return aux
    other = AuxLayers(aux.ids, INPUT if aux.convention == OUTPUT else OUTPUT)
    if not within_boundaries(other.as_input(), L):
        return aux
    notes.append(
        Finding(
            "aux.impossible_reading",
            "warning",
            f"{location or 'aux ids'} {list(aux.ids)} read {aux.convention}-of-layer would be target layers"
            f" {list(aux.as_input())} (input-of-layer), past the target's boundaries 0..{L}: impossible, so they are"
            f" read {other.convention}-of-layer = {list(other.as_input())} (input-of-layer)",
            location,
        )
    )
    return other


def attention_from_tensors(config: dict, model_type: str | None, infos: Mapping) -> tuple[str, str | None]:
    """Llama or Qwen3 attention, decided by the tensors (q_norm/k_norm present or not) when the config's label says
    otherwise. AngelSlim's Qwen3 drafters are Llama-shaped but labelled ``Qwen3ForCausalLM`` / ``qwen3`` (sglang#9135).
    Returns the attention and, on a mismatch, what to tell the user."""
    has_qk_norm = "layers.0.self_attn.q_norm.weight" in infos or "layers.0.self_attn.k_norm.weight" in infos
    has_q = "layers.0.self_attn.q_proj.weight" in infos
    labels = [a for a in architectures(config) if (arch_table.ROWS.get(a) or {}).get("attention") == "qwen3"]
    says_qwen3 = model_type == "qwen3" or bool(labels)
    if has_qk_norm:
        return "qwen3", None
    if not says_qwen3:
        return "llama", None
    if not has_q:
        return "qwen3", None  # no attention tensors to judge by: tensor.missing will speak
    said = " / ".join(
        ([f"architectures {labels[0]}"] if labels else []) + (["model_type qwen3"] if model_type == "qwen3" else [])
    )
    return (
        "llama",
        (
            f"{said} says Qwen3 attention (q_norm/k_norm), but the tensors are Llama-shaped (q/k/v projections, no"
            " q_norm/k_norm): read as a Llama drafter. Engines trust the label: SGLang builds its Qwen3 model and fails"
            " (KeyError 'midlayer.self_attn.qkv_proj.weight', sglang#9135); vLLM builds its Qwen3 drafter and runs q/k"
            " norms the drafter never had, with unit weights. A conversion writes the class the tensors fit"
        ),
    )


def _q_lora_rank_from_tensors(mla, view: ConfigView, infos: Mapping, notes: list[Finding]):
    """An MLA config without the ``q_lora_rank`` key (not an explicit null: that is a q_proj drafter) whose checkpoint
    has ``q_a_proj``: the rank is that tensor's row count. Said as an error (no engine loads the checkpoint as it is;
    vLLM's config class defaults the rank to 1536), and read from the tensor so that nothing else is misreported (a
    "missing q_proj") and ``convert`` writes the key."""
    q_a = infos.get("layers.0.self_attn.q_a_proj.weight")
    if mla.q_lora_rank is not None or "q_lora_rank" in view.data or q_a is None or len(q_a.shape) != 2:
        return mla
    rows = q_a.shape[0]
    notes.append(
        Finding(
            "mla.q_lora_rank",
            "error",
            "config.json has no q_lora_rank, which vLLM and SGLang need to load an MLA drafter; "
            f"q_a_proj.weight has {rows} rows, so {rows} is read (a conversion writes it)",
            "q_lora_rank",
        )
    )
    return replace(mla, q_lora_rank=rows)


def _dominant_dtype(infos: Mapping) -> str | None:
    counts = Counter(dtypes.name(i.dtype) for i in infos.values() if i.dtype.is_floating_point and len(i.shape) >= 2)
    if not counts:
        counts = Counter(dtypes.name(i.dtype) for i in infos.values() if i.dtype.is_floating_point)
    return counts.most_common(1)[0][0] if counts else None


def _eaglekit_block(top: ConfigView) -> dict:
    """The ``eaglekit`` key an earlier eaglekit conversion wrote into config.json (see ``provenance_block``)."""
    block = top.data.get("eaglekit")
    return block if isinstance(block, dict) else {}


def _provenance(dialect: str, framework: str | None, block: dict) -> Provenance:
    """Where the checkpoint comes from; an eaglekit output also says what it was converted from and any numerics
    change it recorded (the 3.0 -> 3.1 upgrade), so a further conversion keeps them."""
    text = lambda key: block.get(key) if isinstance(block.get(key), str) else None
    notes = block.get("notes") if isinstance(block.get("notes"), list) else []
    return Provenance(
        source_dialect=dialect,
        framework=framework,
        eaglekit_version=text("version"),
        converted_from=text("source_dialect") if text("version") else None,
        notes=tuple(n for n in notes if isinstance(n, str)),
        source_repo=text("source_repo"),
        source_commit=text("source_commit"),
    )


# Shared building blocks for dialect modules ----------------------------------------------------------

FLAT_FLAGS_FALSE = {
    "fc_norm": Key(("fc_norm",), False),
    "norm_before_fc": Key(("eagle_config.norm_before_fc", "norm_before_fc"), False),
    "norm_output": Key(("norm_output",), False),
    "norm_before_residual": Key(("norm_before_residual",), False),
    "use_aux_hidden_state": Key(("eagle_config.use_aux_hidden_state", "use_aux_hidden_state"), True),
}

MIDLAYER = (("midlayer.", "layers.0."),)


def provenance_block(drafter: Drafter, dialect: str) -> dict:
    """The ``eaglekit`` key every writer adds to config.json: who wrote it, from what, and any numerics change."""
    from .. import __version__

    block: dict = {"version": __version__, "source_dialect": drafter.provenance.source_dialect, "dialect": dialect}
    if drafter.provenance.framework:
        block["source_framework"] = drafter.provenance.framework
    if drafter.verifier:
        block["verifier"] = drafter.verifier
        if drafter.verifier_architectures:
            block["verifier_architectures"] = list(drafter.verifier_architectures)
    if drafter.aux.ids is not None:
        block["aux_layer_ids_input_convention"] = list(drafter.aux.as_input())
    if not drafter.flags.norm_before_lm_head:
        block["norm_before_lm_head"] = False  # no engine's flag says it; kept so the way back knows
    if drafter.provenance.notes:
        block["notes"] = list(drafter.provenance.notes)
    if drafter.provenance.source_repo:
        block["source_repo"] = drafter.provenance.source_repo
        if drafter.provenance.source_commit:
            block["source_commit"] = drafter.provenance.source_commit
    return block


__all__ = [
    "Ambiguity",
    "Clue",
    "ConfigRules",
    "Detection",
    "Dialect",
    "FLAT_FLAGS_FALSE",
    "INPUT",
    "Key",
    "LoadedDrafter",
    "MIDLAYER",
    "NameMap",
    "OUTPUT",
    "Reading",
    "apply_boundaries",
    "architecture_clue",
    "architectures",
    "has_prefix",
    "lookup",
    "provenance_block",
]
