"""SGLang's reading of a drafter checkpoint, release by release, from SGLang's released source.

``interpret`` reads config.json and the tensor names the way a given SGLang release does (which drafter class its
architecture string selects, how tensor names map onto that class and what becomes of the names that match
nothing, which flags it reads, how many states its fc fuses, which target layers it captures, where the head and
the embeddings come from) and compares the result with eaglekit's reading of the drafter. The behaviour per
release is data, ``sglang_releases.json``; every row rests on the released wheel's source (evidence "source"):
SGLang's CUDA kernels do not run on a CPU machine, so none of it was run.

The returned ``EngineView.drafter`` is the drafter as that SGLang would run it, which ``verify --engine``
simulates beside the intended one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..model.architectures import sglang_class, sglang_registered
from ..model.drafter import INPUT, AuxLayers, Drafter, Flags, default_aux_ids
from ..model.layout import expected_tensors
from .common import (
    EngineView,
    Recorder,
    Release,
    capture_count_refusal,
    fc_count_refusal,
    final_norm_findings,
    flag_findings,
    fused_states,
    int_ids,
    listed,
    load_table,
    missing_tensors,
    partial_rotary_findings,
    pick_row,
    release_key,
    with_source_read,
)

TABLE = "sglang_releases.json"
STACKED = (
    "q_proj",
    "k_proj",
    "v_proj",
    "gate_proj",
    "up_proj",
)  # fused on load: an unknown one is a KeyError in the target's loader
LEGACY_AUX_NORM = {"aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1", "aux_norm_high": "fc_norm.2"}


def release(version: str) -> Release:
    table = load_table(TABLE)
    return with_source_read(
        pick_row(
            table,
            "sglang",
            version,
            table["first_release"],
            f"SGLang {table['first_release']}, its first release with EAGLE 3",
        ),
        table["wheels_read"],
    )


def facts(rel: Release) -> dict:
    """The row's facts as plain values (the table keeps each with its evidence and the files it was read from)."""
    return {key: fact["value"] for key, fact in rel.rules["facts"].items()}


def _truthy(value) -> bool:
    return bool(value) if value is not None else False


def _engine_name(raw: str, f: dict, mla: bool) -> str | None:
    """The canonical name a checkpoint tensor lands on in this release's drafter, or None if it lands on nothing."""
    name = raw
    if mla:
        if name.startswith("midlayer."):
            name = "layers.0." + name[len("midlayer.") :]
        return None if name.startswith("model.") else name
    if name.startswith("model."):
        if not f["model_prefix_loads"]:
            return None
        name = name[len("model.") :]
    if f["legacy_aux_norm_names"]:
        for legacy, new in LEGACY_AUX_NORM.items():
            name = name.replace(legacy, new)
    if f["layer_names"] == "layers":
        return name.replace("midlayer", "layers.0")
    if name.startswith("layers."):
        return None  # the one layer is called midlayer: layers.N.* matches no parameter
    return "layers.0." + name[len("midlayer.") :] if name.startswith("midlayer.") else name


def interpret(loaded, rel: Release, *, target_num_layers: int | None = None) -> EngineView:
    """How release ``rel`` of SGLang reads and runs ``loaded`` (a LoadedDrafter), compared with eaglekit's reading: the
    class it builds, the flags it reads, the layers it captures and the count it fuses, the tensors, the hot tokens."""
    out = Recorder(rel)
    out.untested(rel)
    r = _Reading(loaded, rel, target_num_layers, facts(rel))
    _parallel_drafting(out, r)
    if not _drafter_class(out, r):
        return out.view
    served = _flags(out, r)
    counted, captured, fc_states = _aux_layers(out, r)
    engine_drafter = replace(
        partial_rotary_findings(out, r.intended, r.f["partial_rotary"]),
        flags=served,
        num_aux=counted,
        aux=AuxLayers(captured, INPUT) if captured is not None else r.intended.aux,
        tensors=r.intended.tensors - {"lm_head.down.weight", "lm_head.up.weight"},
    )
    _tensors(out, r, engine_drafter, fc_states)
    _hot_tokens(out, r)
    out.view.drafter = engine_drafter if out.view.loads else None
    return out.view


@dataclass
class _Reading:
    """What every stage of ``interpret`` reads: the drafter as eaglekit reads it, its files, and the release's facts."""

    loaded: object  # LoadedDrafter
    rel: Release
    target_num_layers: int | None
    f: dict  # the release's facts (``facts``)
    family: str = ""  # the drafter class SGLang builds: llama or mla

    @property
    def intended(self) -> Drafter:
        return self.loaded.drafter

    @property
    def config(self) -> dict:
        return self.loaded.checkpoint.config or {}

    @property
    def ec(self) -> dict:
        ec = self.config.get("eagle_config")
        return ec if isinstance(ec, dict) else {}

    @property
    def raw_names(self) -> set[str]:
        return set(self.loaded.checkpoint.tensors)

    @property
    def top_ids(self) -> tuple[int, ...] | None:
        return int_ids(self.config.get("eagle_aux_hidden_state_layer_ids"))

    @property
    def nested_ids(self) -> tuple[int, ...] | None:
        return int_ids(self.ec.get("eagle_aux_hidden_state_layer_ids"))

    @property
    def mla(self) -> bool:
        return self.family == "mla"

    @property
    def mla_rules(self) -> dict:
        return self.f["mla_drafter"] or {}


def _parallel_drafting(out: Recorder, r: _Reading) -> None:
    """A P-EAGLE drafter: SGLang drafts none in parallel."""
    if r.intended.parallel is not None:
        out.add(
            "engine.parallel_drafting",
            "error",
            "a P-EAGLE drafter (parallel drafting)",
            "drafts no P-EAGLE drafter in parallel (" + load_table(TABLE)["peagle"] + ")",
            "mask_hidden",
        )


def _drafter_class(out: Recorder, r: _Reading) -> bool:
    """Sets ``r.family`` to the class SGLang builds (its architecture string, against the tensors); False where it
    builds none."""
    config, intended, f = r.config, r.intended, r.f
    version = release_key(r.rel.requested)
    archs = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    arch = archs[0] if archs and isinstance(archs[0], str) else None
    registered = sorted(name for name, row in sglang_registered().items() if release_key(row["since"]) <= version)
    cls = sglang_class(arch) if arch else None
    if arch is None:
        out.refuse("engine.architecture", "config.json has no architectures", "cannot pick a drafter class")
        return False
    if cls is None or release_key(cls["since"]) > version:
        since = f" (registered from {cls['since']})" if cls else ""
        out.refuse(
            "engine.architecture",
            f"architecture {arch!r} is not an EAGLE 3 drafter class of this SGLang{since}; it registers"
            f" {', '.join(registered)}",
            "refuses it as a drafter: no EAGLE 3 draft model is registered under that name",
            "architectures",
        )
        return False
    r.family = cls["family"]
    mla = r.mla
    if mla and intended.attention != "mla":
        out.refuse(
            "engine.architecture",
            f"architecture {arch!r} selects the MLA drafter but the tensors are {intended.attention} attention",
            "cannot load them: its MLA parameters match none of them",
        )
        return False
    if not mla and intended.attention == "mla":
        out.refuse(
            "engine.architecture",
            f"MLA tensors under {arch!r}, which selects the Llama drafter",
            "cannot load them: the Llama drafter has no MLA parameters",
        )
        return False
    if (mla or f["single_layer_only"]) and intended.num_layers != 1:
        out.refuse(
            "engine.layers",
            f"the drafter has {intended.num_layers} decoder layers",
            "refuses to load: its drafter has exactly one (EAGLE3 currently only supports 1 layer)",
            "num_hidden_layers",
        )
    return True


def _flags(out: Recorder, r: _Reading) -> Flags:
    """The flags as SGLang reads them, with a finding for each that differs from the drafter's."""
    config, ec, f, mla_rules = r.config, r.ec, r.f, r.mla_rules
    if r.mla:
        fc_norm_read, norm_output_read, nbf_read = mla_rules["fc_norm"], mla_rules["norm_output"], False
    else:
        fc_norm_read, norm_output_read, nbf_read = f["fc_norm"], f["norm_output"], f["norm_before_fc"]
    served = Flags(
        fc_norm=fc_norm_read and (_truthy(config.get("fc_norm")) or _truthy(config.get("use_aux_norm"))),
        norm_output=norm_output_read and _truthy(config.get("norm_output")),
        norm_before_fc=nbf_read and _truthy(ec.get("norm_before_fc", config.get("norm_before_fc"))),
        norm_before_residual=False,
        use_aux_hidden_state=r.intended.flags.use_aux_hidden_state,
        norm_before_lm_head=True,
    )
    effects = {
        "fc_norm": (
            "has no fc_norm in this release: ignores it"
            if not fc_norm_read
            else "does not read fc_norm from this config: runs without it"
        ),
        "norm_output": "ignores norm_output: feeds the pre-norm state to the next step, as EAGLE 3",
        "norm_before_fc": (
            "ignores norm_before_fc: runs without the norm over the fused states"
            + ("" if nbf_read else " (it has no input_norm in this release)")
        ),
        "norm_before_residual": (
            "never reads norm_before_residual: layer 0's residual is the un-normed fused state"
            " (norm_before_residual={})"
        ),
    }
    flag_findings(out, r.intended, served, effects)
    final_norm_findings(out, r.intended, config, reads_norm_output=norm_output_read)
    return served


def _aux_count(r: _Reading) -> tuple[int, list[str]]:
    """(the fused-state count SGLang builds fc for, the config keys it counts from, in its order)."""
    config, top_ids, nested_ids = r.config, r.top_ids, r.nested_ids
    num_aux = config.get("num_aux_hidden_states") if isinstance(config.get("num_aux_hidden_states"), int) else None
    count_sources = {
        "num_aux_hidden_states": num_aux,
        "eagle_config": len(nested_ids) if nested_ids else None,
        "top_level": len(top_ids) if top_ids else None,
    }
    count_order = r.mla_rules["aux_count_from"] if r.mla else r.f["aux_count_from"]
    return next((count_sources[src] for src in count_order if count_sources.get(src)), 3), count_order


def _aux_layers(out: Recorder, r: _Reading) -> tuple[int, tuple[int, ...] | None, int]:
    """(the fused-state count SGLang builds fc for, the target layers it captures, the states fc.weight fuses), with
    its refusals where they do not fit each other or the target."""
    f = r.f
    counted, count_order = _aux_count(r)
    nested_ids = r.nested_ids
    L = r.target_num_layers or r.intended.target_num_layers
    captured: tuple[int, ...] | None = None
    source = "default"
    if "eagle_config" in f["capture_ids_from"] and nested_ids:
        captured, source = (
            tuple(sorted({i + 1 for i in nested_ids})),
            "eagle_config",
        )  # output-of-layer ids: SGLang adds 1
    elif L:
        captured = default_aux_ids(L)

    fc_states = fused_states(r.loaded)
    where = " and ".join(count_order) if count_order else "nothing: always 3"
    fc_count_refusal(out, r.loaded, fc_states, counted, "SGLang", f"it counts from {where}")
    if captured is not None and L and any(i >= L for i in captured):
        out.refuse(
            "engine.aux_ids",
            f"it would capture the input of layer {max(captured)}, but the target has {L} layers",
            "never captures it (it captures before a layer runs, and there is no layer there): hidden-state width"
            " mismatch at the first step",
            "eagle_aux_hidden_state_layer_ids",
        )
    else:
        capture_count_refusal(out, captured, counted)
    _capture_findings(out, r, source, captured, r.intended.aux.resolved(L))
    return counted, captured, fc_states


def _capture_findings(out: Recorder, r: _Reading, source: str, captured, intended_ids) -> None:
    """The layers SGLang captures (from ``source``: eagle_config or its default) against those the drafter fuses."""
    f, intended, top_ids, nested_ids = r.f, r.intended, r.top_ids, r.nested_ids
    ignored = ""
    if source == "default" and top_ids and "eagle_config" in f["capture_ids_from"]:
        ignored = " (it reads only eagle_config ids; the top-level ones are ignored)"
    elif source == "default" and (top_ids or nested_ids) and not f["capture_ids_from"]:
        ignored = " (this release reads no ids from the drafter)"
    if intended_ids is not None and captured is not None and captured != intended_ids:
        why = ""
        if source == "eagle_config" and intended.aux.convention == INPUT:
            why = " (it reads eagle_config ids as output-of-layer and adds 1; these are input-of-layer ids)"
        where = "the default layers" if source == "default" else f"layers {list(captured)} from eagle_config ids"
        out.add(
            "engine.aux_ids",
            "error",
            f"the drafter fuses target layers {list(intended_ids)} (input-of-layer)",
            (f"captures the default layers {list(captured)}" if source == "default" else f"captures {where}")
            + f" instead{ignored or why}: the drafter sees other layers than it was trained on",
            "eagle_aux_hidden_state_layer_ids",
        )
    elif intended_ids is not None and captured is None:
        from ..dialects.eagle import is_default_pattern

        severity = "warning" if is_default_pattern(intended_ids) else "error"
        out.add(
            "engine.aux_ids",
            severity,
            f"the drafter fuses target layers {list(intended_ids)} (input-of-layer)",
            f"captures its default (inputs of layers 2, L//2, L-3) instead{ignored}; "
            + (
                "that matches only for the right target depth (pass `target`)"
                if severity == "warning"
                else "no target depth gives these ids: the drafter sees other layers than it was trained on"
            ),
            "eagle_aux_hidden_state_layer_ids",
        )
    elif intended.aux.ids is None:
        out.add(
            "engine.aux_default",
            "info",
            "no aux layer ids recorded",
            f"captures its default (inputs of layers 2, L//2, L-3){' = ' + str(list(captured)) if captured else ''}",
        )


def _tensors(out: Recorder, r: _Reading, engine_drafter: Drafter, fc_states: int) -> None:
    """The tensors SGLang's drafter has parameters for against those shipped: where each lands, what matches nothing,
    what it takes from the target, what it leaves uninitialised."""
    fused = fc_states if "fc.weight" in r.loaded.names else engine_drafter.num_aux
    expected = {
        n: s for n, s in expected_tensors(replace(engine_drafter, num_aux=fused)).items() if n not in ("d2t", "t2d")
    }
    provided, unknown = _landing(r, expected)
    supplied, unknown = _head_and_embeddings(out, r, provided, unknown)
    if unknown:
        _unknown_findings(out, r, unknown)
    missing_tensors(out, expected, provided, supplied=tuple(supplied))
    if out.view.loads and "lm_head.weight" not in supplied and "lm_head.weight" not in provided:
        out.view.uninitialised.append("lm_head.weight")
        out.add(
            "engine.lm_head_uninitialised",
            "error",
            f"no lm_head.weight, and draft_vocab_size is {r.config.get('draft_vocab_size')}",
            "builds its own head and leaves it uninitialised: nothing is accepted (sglang#27829); write"
            " draft_vocab_size: null to borrow the target's",
            "draft_vocab_size",
        )
    if r.f["fc_bias"] == "random_init" and "fc.weight" in provided:
        out.add(
            "engine.fc_bias",
            "warning",
            "the drafter's fc has no bias",
            "builds fc with a bias no checkpoint ships and keeps its random initial values (fixed in 0.4.9)",
            "fc.weight",
        )


def _landing(r: _Reading, expected: dict) -> tuple[set[str], list[str]]:
    """(the drafter's parameters the shipped tensors land on, the shipped names that land on none); the hot-token
    maps are read apart."""
    provided: set[str] = set()
    unknown: list[str] = []
    for raw in sorted(r.raw_names):
        if raw in ("d2t", "t2d") or raw.endswith((".d2t", ".t2d")):
            continue
        name = _engine_name(raw, r.f, r.mla)
        if name is not None and name in expected:
            provided.add(name)
        else:
            unknown.append(raw)
    return provided, unknown


def _head_and_embeddings(out: Recorder, r: _Reading, provided: set[str], unknown: list[str]):
    """(the names SGLang fills from the target: its embeddings, its head; ``unknown`` less a head it skips), with what
    becomes of a shipped head or embeddings, and the refusals where the config does not say which head to build."""
    config, intended, mla, f = r.config, r.intended, r.mla, r.f
    tied = config.get("tie_word_embeddings") is True
    dvs_present = "draft_vocab_size" in config
    dvs = config.get("draft_vocab_size")
    supplied: list[str] = []
    shares_embed = not isinstance(config.get("target_hidden_size"), int) or config.get(
        "target_hidden_size"
    ) == config.get("hidden_size")
    if shares_embed:
        supplied.append("embed_tokens.weight")
        if "embed_tokens.weight" in provided:
            out.add(
                "engine.embed_shared",
                "info",
                "the drafter ships embed_tokens.weight",
                "replaces it with the target's embeddings (it shares them whenever hidden sizes match): the same only"
                " if they were copied from the target",
                "embed_tokens.weight",
            )
    if tied:
        supplied.append("lm_head.weight")
        unknown = [n for n in unknown if n != "lm_head.weight"]
        if "lm_head.weight" in provided:
            provided.discard("lm_head.weight")
            out.add(
                "engine.lm_head_tied",
                "error",
                "tie_word_embeddings is true but the drafter ships lm_head.weight",
                "skips lm_head.weight and runs its embeddings (the target's, when shared) as the head",
                "tie_word_embeddings",
            )
    elif mla or f["lm_head_from_target_when_null"]:
        if dvs is None:  # absent reads as null for the MLA class (getattr default); the Llama class needs the key
            if not mla and not dvs_present:
                out.refuse(
                    "engine.draft_vocab_size",
                    "config.json has no draft_vocab_size",
                    "fails to build the drafter (it reads config.draft_vocab_size); write null to borrow the target's"
                    " lm_head, or the number of lm_head rows",
                    "draft_vocab_size",
                )
            else:
                supplied.append("lm_head.weight")
                _borrowed_head(out, intended, provided)
    else:
        if dvs is None:
            out.refuse(
                "engine.draft_vocab_size",
                "draft_vocab_size is null or absent",
                "fails to build the drafter's head (this release has no target-head borrowing: from 0.5.2); write the"
                " number of lm_head rows",
                "draft_vocab_size",
            )
    return supplied, unknown


def _borrowed_head(out: Recorder, intended: Drafter, provided: set[str]) -> None:
    """draft_vocab_size null: SGLang borrows the target's head, over a shipped one or beside a pruned vocabulary."""
    if "lm_head.weight" in provided:
        out.add(
            "engine.lm_head_replaced",
            "error",
            "the drafter ships lm_head.weight but draft_vocab_size is null",
            "loads the target's lm_head over it (null means: borrow the target's head): runs another head"
            " than the trained one",
            "draft_vocab_size",
        )
    elif intended.pruned_vocab:
        out.add(
            "engine.lm_head_borrowed",
            "error",
            f"draft_vocab_size is null but the drafter has a pruned vocabulary ({intended.draft_vocab_size}"
            f" of {intended.vocab_size}, d2t)",
            "borrows the target's full head and maps its ids through d2t as if it had the draft's rows",
            "draft_vocab_size",
        )


def _unknown_findings(out: Recorder, r: _Reading, unknown: list[str]) -> None:
    """The shipped tensors that land on no parameter (``unknown``, non-empty): refused where SGLang hands them to a
    loader that raises, else skipped (logged, or without a word)."""
    mla, f = r.mla, r.f
    layer_names = [n for n in unknown if n.startswith("layers.")] if not mla and f["layer_names"] == "midlayer" else []
    others = [n for n in unknown if n not in layer_names]
    if f["unknown_names"] == "target_loader" and not mla:
        crash = [n for n in unknown if any(f".{s}." in n for s in STACKED)]
        if crash:
            check = "engine.layer_names" if layer_names else "engine.unknown_tensor"
            out.refuse(
                check,
                f"{'tensors' if len(unknown) > 1 else 'tensor'} {listed(unknown)} match no parameter of its drafter"
                " (its one layer is midlayer.*)",
                f"refuses to load: the Llama loader it hands them to raises KeyError on {crash[0]}",
                crash[0],
            )
        else:
            out.add(
                "engine.unknown_tensor",
                "error",
                f"{'tensors' if len(unknown) > 1 else 'tensor'} {listed(unknown)} match no parameter of its drafter",
                "logs 'Parameter ... not found' and skips them",
                unknown[0],
            )
        return
    how = "logs 'skipping unexpected weight' and skips" if mla else "skips"
    quiet = "" if mla else " without a word"
    if layer_names:
        out.add(
            "engine.layer_names",
            "error",
            f"tensors {listed(layer_names)} are named layers.N.*; this SGLang names its one decoder layer midlayer",
            f"{how} every layers.N.* tensor{quiet} and runs midlayer with the weights it was never given (write"
            " midlayer.*, e.g. `eaglekit convert --to sglang`)",
            layer_names[0],
        )
    if others:
        out.add(
            "engine.unknown_tensor",
            "error",
            f"{'tensors' if len(others) > 1 else 'tensor'} {listed(others)} match no parameter of its drafter",
            f"{how} them{quiet}: the drafter runs without them",
            others[0],
        )


def _hot_tokens(out: Recorder, r: _Reading) -> None:
    """The hot-token map (d2t): required by the first releases, and needed by a pruned vocabulary."""
    intended = r.intended
    has_d2t = any(n == "d2t" or n.endswith(".d2t") for n in r.raw_names)
    if not has_d2t and r.f["requires_d2t"]:
        out.refuse(
            "engine.d2t_required",
            "no d2t is shipped",
            "fails to start: it reads the drafter's hot-token map unconditionally (optional from 0.4.9); ship d2t"
            " (zeros for a full vocabulary)",
            "d2t",
        )
    elif not has_d2t and intended.pruned_vocab:
        out.add(
            "engine.d2t_missing",
            "error",
            f"draft_vocab_size {intended.draft_vocab_size} < vocab_size {intended.vocab_size} but no d2t",
            "reads draft token ids as target ids",
            "d2t",
        )
