"""Name maps: a dialect's prefix rules between its tensor names and canonical (vLLM) names, and the aliases every
reader accepts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


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

# The name rule of dialects whose model class keeps its one decoder layer as ``midlayer`` (EAGLE, SGLang, ...)
MIDLAYER = (("midlayer.", "layers.0."),)
