"""Which releases of an engine serve a drafter as it is: every row of the engine's release table read the way
``validate --engine`` reads it, and the releases whose reading has no error kept as ranges.

A row is where a behaviour changes (``vllm_releases.json``, ``sglang_releases.json``), so the releases between two
rows read the drafter as the first of them does: a range of rows is a range of releases. ``convert`` names the ranges
beside the command that serves its output, and ``validate``'s next steps name the first release that serves a drafter
a named release does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..findings import Finding
from .common import DISPLAY, load_table, release_key

TABLES = {"vllm": "vllm_releases.json", "sglang": "sglang_releases.json", "llama.cpp": "llamacpp_releases.json"}


@dataclass(frozen=True)
class Support:
    """The releases of ``engine`` that serve a drafter without an error: ranges of table rows, each the first row that
    serves it and the first later row that does not (None: every release since, and newer ones assumed alike)."""

    engine: str
    ranges: tuple[tuple[str, str | None], ...]
    blocking: tuple[Finding, ...] = ()  # the newest release's errors, where it does not serve the drafter

    @property
    def serves(self) -> bool:
        return bool(self.ranges)

    @property
    def current(self) -> bool:
        """The newest release read serves it (and, assumed, the releases after it)."""
        return bool(self.ranges) and self.ranges[-1][1] is None

    @property
    def first(self) -> str | None:
        """The first release from which every later one serves it (None: the newest does not)."""
        return self.ranges[-1][0] if self.current else None

    def specifier(self) -> str:
        """The releases as pip writes them: ``>=0.25.0``, or ``>=0.22.0,<0.30.0`` for a range that ends."""
        return " or ".join(f">={start}" + (f",<{end}" if end else "") for start, end in self.ranges)

    def words(self) -> str:
        """``vLLM >= 0.25.0`` (the text beside a serve line)."""
        name = DISPLAY.get(self.engine, self.engine)
        parts = [f">= {start}" + (f", < {end}" if end else "") for start, end in self.ranges]
        return f"{name} {' or '.join(parts)}"

    def to_dict(self) -> dict:
        return {"engine": self.engine, "releases": self.specifier() or None, "first": self.first}


def rows(engine: str) -> list[str]:
    """The engine's release rows, oldest first."""
    from . import ENGINES

    return sorted(load_table(TABLES[engine])["releases"], key=getattr(ENGINES[engine], "release_key", release_key))


def support(loaded, engine: str, *, target_num_layers: int | None = None) -> Support:
    """Which releases of ``engine`` (``vllm``, ``sglang``, ``llama.cpp``) serve ``loaded`` (a LoadedDrafter) without an
    error."""
    from . import ENGINES

    module = ENGINES[engine]
    clean: list[tuple[str, bool]] = []
    blocking: tuple[Finding, ...] = ()
    listed = rows(engine)
    newest = load_table(TABLES[engine]).get("newest_read", listed[-1])  # the last row's rules hold up to it
    for row in listed:
        version = newest if row == listed[-1] else row
        view = module.interpret(loaded, module.release(version), target_num_layers=target_num_layers)
        problems = tuple(f for f in view.findings if f.severity == "error")
        clean.append((row, not problems))
        blocking = problems  # the newest row's, after the loop
    ranges: list[tuple[str, str | None]] = []
    for i, (row, ok) in enumerate(clean):
        if ok and (i == 0 or not clean[i - 1][1]):
            end = next((later for later, fine in clean[i + 1 :] if not fine), None)
            ranges.append((row, end))
    return Support(engine, tuple(ranges), blocking)


__all__ = ["Support", "rows", "support"]
