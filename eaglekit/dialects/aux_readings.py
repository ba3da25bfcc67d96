"""Aux-id readings: one way to read a checkpoint's aux layer ids (``Reading``), two the evidence cannot choose between
(``Ambiguity``), the default capture layers of each convention, and the target-boundary rule that discards an
impossible reading."""

from __future__ import annotations

from dataclasses import dataclass

from ..findings import Finding
from ..model.drafter import INPUT, OUTPUT, AuxLayers, Convention

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


def settle_by_target(
    ambiguity: Ambiguity | None, aux: AuxLayers, location: str | None, L: int | None, notes: list[Finding]
) -> tuple[Ambiguity | None, Ambiguity | None]:
    """A convention ambiguity with the target's depth L known: no longer an ambiguity (``apply_boundaries`` kept the
    reading that fits), but where the other reading fits the target too, it stays unsettled, with a note (verify
    measures both). Returns (ambiguity, unsettled)."""
    if ambiguity is None or L is None:
        return ambiguity, None
    # the target's depth ruled neither reading out (apply_boundaries keeps the one that fits): say so
    other = next(r for r in ambiguity.readings if r.convention != aux.convention)
    other_layers = AuxLayers(other.ids, other.convention).as_input()
    if not within_boundaries(other_layers, L):
        return None, None
    notes.append(
        Finding(
            "aux.unsettled_convention",
            "warning",
            f"{location} {list(aux.ids)} read {aux.convention}-of-layer (target layers"
            f" {list(aux.as_input())}); {other.convention}-of-layer ({list(other_layers)}) fits the"
            " target too: verify measures both, convert `resolve` picks",
            location,
            detail=(
                f"{location} {list(aux.ids)}: read {aux.convention}-of-layer = target layers"
                f" {list(aux.as_input())}, but read {other.convention}-of-layer they would be"
                f" {list(other_layers)}, also within the target's 0..{L}, and nothing"
                " in the checkpoint says which its producer meant: verify measures both; convert"
                " `resolve` (or `aux_layers`) if it is the other"
            ),
        )
    )
    return None, ambiguity
