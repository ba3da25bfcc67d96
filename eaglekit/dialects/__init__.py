"""The dialect registry: every on-disk drafter format eaglekit reads and writes, by name."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, UsageError
from ..io.reader import Checkpoint
from . import automodel, eagle, modelopt, sglang, speculators, torchspec, vllm
from .base import Detection, Dialect, LoadedDrafter

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
    )
}
_ALIASES = {alias: d.name for d in DIALECTS.values() for alias in d.aliases}


def names(*, writable: bool = False) -> list[str]:
    return [n for n, d in DIALECTS.items() if d.can_write or not writable]


def get(name: str) -> Dialect:
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in DIALECTS:
        raise UsageError(f"unknown dialect {name!r} (known: {', '.join(sorted([*DIALECTS, *_ALIASES]))})")
    return DIALECTS[key]


def get_writer(name: str) -> Dialect:
    dialect = get(name)
    if not dialect.can_write:
        raise UsageError(f"the {dialect.name} dialect can be read but not written (writable: {', '.join(names(writable=True))})")
    return dialect


def detect(ckpt: Checkpoint) -> list[Detection]:
    """Every dialect's score for this checkpoint, best first (ties keep registry order)."""
    config = ckpt.config or {}
    tensor_names = frozenset(ckpt.tensors)
    found = [d.detect(config, tensor_names, ckpt) for d in DIALECTS.values()]
    return sorted(found, key=lambda det: -det.score)


def load(source: str | Path, dialect: str = "auto", *, norm_output_semantics: str = "auto") -> LoadedDrafter:
    """Open a drafter checkpoint and read it into the canonical model (detecting its dialect unless given).

    ``norm_output_semantics``: how to read a ``norm_output`` key whose meaning depends on the producer
    (SpecForge-style configs): "eagle31", "specforge", or "auto" (as the checkpoint says, else EAGLE 3.1's)."""
    ckpt = Checkpoint.open(source)
    try:
        if ckpt.config is None:
            raise ConfigError(f"{ckpt.label}: no config.json, so the drafter's dimensions are unknown")
        detections = detect(ckpt)
        if dialect == "auto":
            best = detections[0]
            if best.score <= 0:
                raise ConfigError(f"{ckpt.label}: cannot tell which dialect this is; pass --from (one of {', '.join(DIALECTS)})")
            chosen = DIALECTS[best.dialect]
        else:
            chosen = get(dialect)
            best = next(d for d in detections if d.dialect == chosen.name)
        return chosen.read(ckpt, best, norm_output_semantics=norm_output_semantics)
    except BaseException:
        ckpt.close()
        raise


__all__ = ["DIALECTS", "Detection", "Dialect", "LoadedDrafter", "detect", "get", "get_writer", "load", "names"]
