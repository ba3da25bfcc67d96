"""The loaded drafter: a drafter read from a checkpoint, with its tensors by canonical name and what reading noticed."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..findings import Finding
from ..io import dtypes
from ..io.reader import Checkpoint
from ..model.drafter import Drafter
from .aux_readings import Ambiguity
from .detection import Detection
from .name_maps import LEGACY_FC_NORM_FAMILIES, NameMap

if TYPE_CHECKING:  # pragma: no cover
    from array import array

    import torch


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
