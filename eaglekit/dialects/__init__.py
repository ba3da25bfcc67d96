"""The dialect registry: every on-disk drafter format eaglekit reads and writes, by name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EaglekitError, NotADrafterError, OtherFamilyError, UsageError
from ..findings import Finding
from ..io.checkpoints import open_checkpoint
from ..io.reader import Checkpoint
from . import automodel, eagle, gguf, modelopt, sglang, speculators, torchspec, vllm
from .base import Ambiguity, Detection, Dialect, LoadedDrafter, Reading, lookup

DIALECTS: dict[str, Dialect] = {
    d.name: d
    for d in (
        vllm.DIALECT,
        speculators.DIALECT,
        sglang.DIALECT,
        eagle.DIALECT,
        torchspec.DIALECT,
        modelopt.DIALECT,
        automodel.DIALECT,
        gguf.DIALECT,
    )
}
_ALIASES = {alias: d.name for d in DIALECTS.values() for alias in d.aliases}


# keys of the dialects' own structure that every reader reads and every writer writes its own way (not flags or ids,
# which the dialects' ConfigRules name)
_STRUCTURE_KEYS = (
    "eaglekit",
    "speculators_config",
    "speculators_model_type",
    "speculators_version",
    "embed_requires_grad",
    "_torchspec_version",
    "parallel_drafting",  # P-EAGLE's own keys (NeMo Automodel), read into Drafter.parallel
    "num_depths",
)


def unplaced_keys(source: dict, base: str | None, written: dict) -> list[str]:
    """The source config's keys (top level, and its HF block ``base`` for speculators' transformer_layer_config) that
    the written config holds nowhere under their name and that no dialect's rules read: a custom or newer key a
    conversion would drop in silence. Keys without effect on a served drafter (``WITHOUT_EFFECT_KEYS``) are not named.
    """
    from ..model.hf_config import NO_EFFECT_WHEN_FALSE, REWRITTEN_KEYS, WITHOUT_EFFECT_KEYS

    read = set(_STRUCTURE_KEYS) | set(WITHOUT_EFFECT_KEYS) | set(REWRITTEN_KEYS)
    for dialect in DIALECTS.values():
        rules = dialect.rules
        paths = [
            *(p for key in rules.flags.values() for p in key.locations),
            *(p for p, _ in rules.aux_ids),
            *rules.num_aux,
            *rules.target_hidden,
            *rules.mask_token,
            *([rules.base] if rules.base else []),
        ]
        read |= {p.split(".")[0] for p in paths}
    held: set[str] = set()
    stack: list = [written]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            held |= set(node)
            stack += node.values()
        elif isinstance(node, list):
            stack += node
    keys = []
    for prefix, block in (("", source), (f"{base}.", source.get(base) if base else None)):
        if not isinstance(block, dict):
            continue
        keys += [
            prefix + k for k in block if k != "rope_parameters" and not (k in NO_EFFECT_WHEN_FALSE and not block[k])
        ]
        # transformers 5's rope: read, and written as rope_theta / rope_scaling (hf_config.rope_config); a key inside
        # it that no writer carries is named as any other
        rope = block.get("rope_parameters")
        keys += [f"{prefix}rope_parameters.{k}" for k in (rope if isinstance(rope, dict) else {}) if k not in ROPE_KIND]
    return [k for k in keys if k.rsplit(".", 1)[-1] not in held and k.rsplit(".", 1)[-1] not in read]


ROPE_KIND = ("rope_type", "type", "rope_theta")  # what rope_parameters says of the rope itself: always carried


def _side(config: dict, locations: list[str], default: Any = None) -> dict:
    """Where one setting sits in a config: the keys (dotted) that hold it and its value (the first key's), or the
    default."""
    keys = [k for k in locations if lookup(config, k) is not None]
    return {"keys": keys, "value": lookup(config, keys[0]) if keys else default}


def config_changes(source: Dialect, before: dict, writer: Dialect, after: dict) -> list[dict]:
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


def names(*, writable: bool = False) -> list[str]:
    return [n for n, d in DIALECTS.items() if d.can_write or not writable]


def get(name: str) -> Dialect:
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in DIALECTS:
        known = sorted([*DIALECTS, *_ALIASES])
        import difflib  # only for this message: every command's start-up would pay for it

        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UsageError(f"unknown dialect {name!r} ({hint}known: {', '.join(known)})")
    return DIALECTS[key]


def get_writer(name: str) -> Dialect:
    dialect = get(name)
    if not dialect.can_write:
        raise UsageError(
            f"the {dialect.name} dialect can be read but not written (writable: {', '.join(names(writable=True))})"
        )
    return dialect


def detect(ckpt: Checkpoint) -> list[Detection]:
    """Every dialect's score for this checkpoint, best first (ties keep registry order)."""
    config = ckpt.config or {}
    tensor_names = frozenset(ckpt.tensors)
    found = [d.detect(config, tensor_names, ckpt) for d in DIALECTS.values()]
    return sorted(found, key=lambda det: -det.score)


# Two dialects whose detection scores differ by at most this much are both plausible readings. The smallest
# clue that separates dialects on its own weighs 10 (a tensor-name pattern, a safetensors layout), so a gap of
# 10 or less is one weak clue: not enough to choose between readings that name different target layers.
AMBIGUITY_MARGIN = 10


def _reading(loaded: LoadedDrafter, detection: Detection) -> Reading:
    aux = loaded.drafter.aux
    return Reading(
        loaded.dialect,
        aux.convention if aux.ids is not None else None,
        aux.ids,
        f"score {detection.score}: {'; '.join(detection.evidence)}",
        detection.score,
    )


def _dialect_ambiguity(
    ckpt: Checkpoint,
    detections: list[Detection],
    chosen: LoadedDrafter,
    target_num_layers: int | None,
    norm_output_semantics: str = "auto",
) -> Ambiguity | None:
    """Dialects scoring within AMBIGUITY_MARGIN of the best whose readings name other target layers."""
    best = detections[0]
    readings = [_reading(chosen, best)]
    for det in detections[1:]:
        if det.score <= 0 or best.score - det.score > AMBIGUITY_MARGIN:
            break
        try:
            other = DIALECTS[det.dialect].read(
                ckpt, det, norm_output_semantics=norm_output_semantics, target_num_layers=target_num_layers
            )
        except EaglekitError:
            continue  # this dialect cannot read the checkpoint at all: not a reading
        ids = other.drafter.aux.as_input()
        # a dialect that records no ids (EAGLE's fixed default) does not read these ids differently: it ignores them
        if ids is not None and ids != chosen.drafter.aux.as_input() and all(ids != r.input_ids for r in readings):
            readings.append(_reading(other, det))
    if len(readings) < 2:
        return None
    return Ambiguity("dialect", tuple(readings), "pass `source_dialect` DIALECT or `aux_layers` to decide")


# Tensor names that only a full decoder stack has: a drafter has one layer (sometimes two), never this many.
# a decoder layer past a drafter's one or two, under any prefix (``model.language_model.layers.12.`` of a multimodal
# Qwen3.5 checkpoint as much as ``model.layers.12.``)
_BASE_MODEL_LAYER = re.compile(r"^(?:.*\.)?layers\.([3-9]|[1-9]\d+)\.")
# the fc fusion layer as a whole name part (not GPT-2's ``c_fc``), and not a target's own MTP head's (``mtp.fc.weight``)
_FUSION = re.compile(r"^(?!(?:.*\.)?mtp\.)(?:.*\.)?fc\.weight$")


def _fuses(names) -> bool:
    """A tensor only a drafter has: the fc fusion layer, or SpecForge's ``midlayer``."""
    return any(_FUSION.match(n) or n.startswith("midlayer.") for n in names)


def _deep_layers(names) -> set[str]:
    """The indices of decoder layers past a drafter's one or two (``_BASE_MODEL_LAYER``)."""
    return {m.group(1) for n in names if (m := _BASE_MODEL_LAYER.match(n))}


# config.json keys only an EAGLE drafter states (its own vocabulary, the layers it fuses, speculators' block)
DRAFTER_ONLY_KEYS = ("draft_vocab_size", "eagle_config", "eagle_aux_hidden_state_layer_ids", "speculators_model_type")


def drafter_key(config: dict) -> str | None:
    """The first key of ``config`` only an EAGLE drafter states, or None (a base model's config)."""
    return next((key for key in DRAFTER_ONLY_KEYS if key in config), None)


def looks_like_drafter(names) -> bool:
    """Tensor names a drafter has and a base model has not: a fusion layer and no deep decoder stack (a drafter
    given as ``--target`` is refused by this, a base model given as a drafter by ``_refuse_base_model``)."""
    return _fuses(names) and not _deep_layers(names)


def _refuse_base_model(ckpt: Checkpoint) -> None:
    """A plain model (a target, not a drafter) is said to be one instead of being read as a broken drafter."""
    names = ckpt.tensors
    if _fuses(names):
        return
    layers = _deep_layers(names)
    if layers:
        archs = (ckpt.config or {}).get("architectures")
        arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else "a causal LM"
        count = (ckpt.config or {}).get("num_hidden_layers")
        count = count if isinstance(count, int) else "many"
        raise NotADrafterError(
            f"{ckpt.label}: this is a base model ({arch}, {count} layers, no fc fusion layer), not an EAGLE "
            "drafter; did you mean to pass it as `target`?"
        )


def _refuse_other_family(ckpt: Checkpoint) -> None:
    """A drafter of another family (DFlash, DSpark, MTP, ...) is named as one, never read as a broken EAGLE 3 drafter
    (``model/families.py``)."""
    from ..model import families

    family = families.identify(ckpt.config)
    if family is not None:
        raise OtherFamilyError(families.refusal(ckpt.label, family), family)


def load(
    source: str | Path,
    dialect: str = "auto",
    *,
    norm_output_semantics: str = "auto",
    target_num_layers: int | None = None,
) -> LoadedDrafter:
    """Open a drafter checkpoint and read it into the canonical model (detecting its dialect unless given).

    ``norm_output_semantics``: how to read a ``norm_output`` key whose meaning depends on the producer
    (SpecForge-style configs): "eagle31", "specforge", or "auto" (as the checkpoint says, else EAGLE 3.1's).

    ``target_num_layers`` (the target's L) applies the boundary rule: an aux-id reading outside 0..L is discarded.
    When detection cannot choose (two dialects within ``AMBIGUITY_MARGIN`` that read different aux ids, or ids whose
    convention no evidence settles), the best-scoring reading is returned with ``ambiguity`` set: inspect and validate
    report it, convert refuses until ``--from`` / ``--aux-layers`` / ``--target`` decides."""
    ckpt = open_checkpoint(source)
    try:
        read_notes = gguf.prepare(ckpt) if gguf.is_gguf(ckpt) else []  # its config is its metadata
        if ckpt.config is None:
            raise ConfigError(f"{ckpt.label}: no config.json, so the drafter's dimensions are unknown")
        _refuse_other_family(ckpt)
        _refuse_base_model(ckpt)
        detections = detect(ckpt)
        if dialect == "auto":
            best = detections[0]
            if best.score <= 0:
                raise ConfigError(
                    f"{ckpt.label}: cannot tell which dialect this is; pass `source_dialect` (one of"
                    f" {', '.join(DIALECTS)})"
                )
            loaded = DIALECTS[best.dialect].read(
                ckpt, best, norm_output_semantics=norm_output_semantics, target_num_layers=target_num_layers
            )
            loaded.ambiguity = (
                _dialect_ambiguity(ckpt, detections, loaded, target_num_layers, norm_output_semantics)
                or loaded.ambiguity
            )
            loaded.notes[:0] = read_notes
            return loaded
        chosen = get(dialect)
        given = next(d for d in detections if d.dialect == chosen.name)
        loaded = chosen.read(
            ckpt, given, norm_output_semantics=norm_output_semantics, target_num_layers=target_num_layers, given=True
        )
        detected = detections[0]
        if detected.dialect != chosen.name and detected.score - given.score > AMBIGUITY_MARGIN:
            loaded.notes.append(
                Finding(
                    "dialect.override",
                    "warning",
                    f"read as {chosen.name}, as asked, though the files look like {detected.dialect} (score"
                    f" {detected.score}: {'; '.join(detected.evidence)}) and fit {chosen.name} less (score"
                    f" {given.score})"
                    + (f"; {len(loaded.unknown)} tensors mean nothing in {chosen.name}" if loaded.unknown else ""),
                    "dialect",
                )
            )
        loaded.notes[:0] = read_notes
        return loaded
    except BaseException:
        ckpt.close()
        raise


__all__ = [
    "AMBIGUITY_MARGIN",
    "Ambiguity",
    "DIALECTS",
    "Detection",
    "Dialect",
    "LoadedDrafter",
    "detect",
    "get",
    "get_writer",
    "load",
    "names",
]
