"""The Dialect class: a dialect's declared data (name rules, config rules, detection evidence), the shared reading
algorithm (``read``, as named steps) with the hooks a dialect overrides, and the shared writer."""

from __future__ import annotations

from ..errors import ConfigError, UnsupportedError
from ..findings import Finding
from ..io.reader import Checkpoint
from ..model import architectures as arch_table
from ..model.config_view import ConfigView, shown
from ..model.drafter import INPUT, OUTPUT, AuxLayers, Convention, Drafter, Flags, ParallelDrafting
from .aux_readings import (
    MAX_AUX_STATES,
    Ambiguity,
    Reading,
    apply_boundaries,
    is_input_default,
    is_output_default,
    settle_by_target,
)
from .config_rules import ConfigRules, carried_keys, lookup
from .detection import Clue, Detection, architectures, has_prefix, written_by_eaglekit
from .loaded import LoadedDrafter
from .name_maps import LEGACY_FC_NORM_ALIASES, NameMap
from .provenance import eaglekit_block, provenance, provenance_block, with_kept
from .reading import (
    MAX_MISSING_LAYERS,
    check_mask_token,
    decoder_layers_held,
    depth,
    dominant_dtype,
    read_attention,
    read_dimensions,
)


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
                evidence.append(clue.said(config))
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
        top = self._config_view(ckpt)
        names, unknown = self.map_names(ckpt)
        infos = {c: ckpt.tensors[s] for c, s in names.items()}
        notes: list[Finding] = []
        base_view = self._base_view(top)
        fields = read_dimensions(base_view, notes)
        flags = self.read_flags(ckpt.config, top, notes)
        aux, ambiguity, unsettled = self._read_aux(ckpt, top, names, notes, target_num_layers, given)
        target_hidden = self._first_int(top, self.rules.target_hidden) or fields["hidden_size"]
        num_aux = self._num_aux(top, aux, infos, target_hidden)
        attention, fields = read_attention(ckpt.config, base_view, fields, infos, notes)
        num_layers = self._num_layers(base_view, infos, notes)
        drafter = Drafter(
            attention=attention,
            target_hidden_size=target_hidden,
            num_layers=num_layers,
            num_aux=num_aux,
            aux=aux,
            flags=flags,
            dtype=dominant_dtype(infos),
            tensors=frozenset(names),
            provenance=provenance(self.name, self.framework(ckpt), eaglekit_block(top)),
            extra_config=carried_keys(ckpt.config, self.rules.base),
            **fields,
        )
        drafter = drafter.with_(parallel=self.read_parallel(ckpt.config, top, names, notes))
        check_mask_token(drafter, notes)
        drafter = self.adjust(drafter, top, ckpt, notes)
        drafter = self.read_norm_output(drafter, top, norm_output_semantics, notes)
        drafter = with_kept(drafter, eaglekit_block(top))
        return LoadedDrafter(
            drafter, ckpt, self.name, detection, names, unknown, notes, ambiguity, unsettled, self.names
        )

    # the reading's steps -----------------------------------------------------------------------------

    @staticmethod
    def _config_view(ckpt: Checkpoint) -> ConfigView:
        """config.json as a view, refused where it is missing or its ``eagle_config`` is not an object."""
        if ckpt.config is None:
            raise ConfigError(f"{ckpt.label}: no config.json")
        label = f"{ckpt.label}/config.json"
        nested = ckpt.config.get("eagle_config")
        if nested is not None and not isinstance(nested, dict):
            raise ConfigError(
                f"{label}: eagle_config must be an object (its aux layer ids and flags), got {nested!r}",
                key="eagle_config",
            )
        return ConfigView(ckpt.config, label)

    def _base_view(self, top: ConfigView) -> ConfigView:
        """The block holding the HF dimensions (``rules.base``; the top level where None), refused where missing."""
        if not self.rules.base:
            return top
        base_view = top.sub(self.rules.base)
        if base_view is None:
            raise ConfigError(
                f"{top.label}: {self.rules.base} is missing (the {self.name} dialect keeps dimensions there)"
            )
        return base_view

    def _read_aux(
        self,
        ckpt: Checkpoint,
        top: ConfigView,
        names: dict,
        notes: list[Finding],
        target_num_layers: int | None,
        given: bool,
    ) -> tuple[AuxLayers, Ambiguity | None, Ambiguity | None]:
        """The aux ids, the boundary rule applied with a target, and the convention doubt: an ambiguity without a
        target, an unsettled convention with one; none where the user named the dialect (``given``)."""
        aux = self.read_aux_ids(ckpt.config, top, names, notes)
        location = self.aux_location(ckpt.config)
        aux = apply_boundaries(aux, location, target_num_layers, notes)
        if given:
            return aux, None, None
        ambiguity = self.convention_ambiguity(aux, location, ckpt)
        ambiguity, unsettled = settle_by_target(ambiguity, aux, location, target_num_layers, notes)
        return aux, ambiguity, unsettled

    def _num_layers(self, base_view: ConfigView, infos: dict, notes: list[Finding]) -> int:
        """The decoder layers: the tensors' count for a one-layer model class (a differing config noted), else the
        config's, refused where it declares more than ``MAX_MISSING_LAYERS`` beyond what the tensors hold."""
        num_layers = base_view.int("num_hidden_layers", 1, minimum=1)
        found = decoder_layers_held(infos)
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
            return found
        if num_layers > found + MAX_MISSING_LAYERS:  # per-layer expectations would be built for every declared layer
            raise ConfigError(
                f"{base_view.label}: num_hidden_layers {num_layers}, but the tensors hold {found} decoder layer(s)"
            )
        return num_layers

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
            return ParallelDrafting(None, depth=depth(config))
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
        return ParallelDrafting(token, key, depth(config))

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
            "pass `target` to validate or convert (a reading naming a layer outside the target's 0..L is discarded) or"
            " `aux_layers`",
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
