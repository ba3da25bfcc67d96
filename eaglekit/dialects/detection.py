"""Detection: the scored clues a dialect declares, how well a checkpoint fits it, and the tests clues are built from."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..io.reader import Checkpoint
from ..model import architectures as arch_table


@dataclass(frozen=True)
class Clue:
    """One piece of detection evidence: a description, its weight, and a test of (config, tensor names, checkpoint)."""

    text: str
    score: int
    test: Callable[[dict, frozenset[str], Checkpoint], bool]
    found: Callable[[dict], str] | None = None  # the evidence as this config shows it (else ``text``)

    def said(self, config: dict) -> str:
        """The evidence as a reader is told it: what this config has, where the clue can say it."""
        return self.found(config) if self.found is not None else self.text


@dataclass
class Detection:
    """How well a checkpoint's files fit one dialect: a score and the evidence for it."""

    dialect: str
    score: int
    evidence: list[str]

    def to_dict(self) -> dict:
        return {"dialect": self.dialect, "score": self.score, "evidence": self.evidence}


def architectures(config: dict) -> tuple[str, ...]:
    value = config.get("architectures")
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def architecture_clue(dialect: str, score: int, text: str | None = None, *, alone: bool = False) -> Clue:
    """Evidence from the architecture table: config.json names a string that ``dialect`` claims (``alone``: and
    nothing else). The table is read at detection time, so a row added to it is recognised everywhere."""

    def test(config: dict, names: frozenset[str], ckpt: Checkpoint) -> bool:
        found, claimed = architectures(config), set(arch_table.claimed_by(dialect))
        return (len(found) == 1 and found[0] in claimed) if alone else bool(claimed & set(found))

    def found(config: dict) -> str:  # the strings this config names, not every one the dialect claims
        claimed = set(arch_table.claimed_by(dialect))
        return "architectures is " + " or ".join(a for a in architectures(config) if a in claimed)

    return Clue(
        text or "architectures is " + " or ".join(arch_table.claimed_by(dialect)), score, test, None if text else found
    )


def written_by_eaglekit(config: dict, dialect: str) -> bool:
    """The ``eaglekit`` block a writer adds (``provenance_block``) names this dialect."""
    block = config.get("eaglekit")
    return isinstance(block, dict) and block.get("dialect") == dialect


def has_prefix(names: Iterable[str], prefix: str) -> bool:
    return any(n.startswith(prefix) for n in names)
