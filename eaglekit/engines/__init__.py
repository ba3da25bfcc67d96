"""Engine rules: how a named engine release reads and runs a drafter (``--engine vllm==0.24``, ``--engine
sglang==0.5.4``)."""

from __future__ import annotations

from ..errors import UsageError
from . import llamacpp, sglang, vllm
from .common import EngineView, Release, engine_name

ENGINES = {"vllm": vllm, "sglang": sglang, "llama.cpp": llamacpp}


def parse(spec: str) -> Release:
    """``vllm==0.24``, ``sglang==0.4.9`` or ``llama.cpp==b11434`` -> the rules of that release."""
    engine, (_, sep, version) = engine_name(spec), spec.partition("==")
    if not sep or not version.strip():
        raise UsageError(
            f"`engine` {spec!r}: expected ENGINE==VERSION, e.g. vllm==0.24, sglang==0.5.4 or llama.cpp==b11434"
        )
    if engine not in ENGINES:
        raise UsageError(f"`engine` {spec!r}: eaglekit has rules for {', '.join(ENGINES)}")
    return ENGINES[engine].release(version.strip())


def interpret(loaded, release: Release, *, target_num_layers: int | None = None) -> EngineView:
    return ENGINES[release.engine].interpret(loaded, release, target_num_layers=target_num_layers)


__all__ = ["ENGINES", "EngineView", "Release", "interpret", "parse"]
