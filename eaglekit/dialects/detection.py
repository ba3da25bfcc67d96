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
