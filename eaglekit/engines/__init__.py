"""Engine rules: how a named engine release reads and runs a drafter (``--engine vllm==0.24``)."""

from __future__ import annotations

from ..errors import UsageError
from . import vllm

ENGINES = ("vllm",)


def parse(spec: str) -> vllm.Release:
    """``vllm==0.24`` -> the rules of that release."""
    engine, sep, version = spec.partition("==")
    engine = engine.strip().lower()
    if not sep or not version.strip():
        raise UsageError(f"--engine {spec!r}: expected ENGINE==VERSION, e.g. vllm==0.24")
    if engine not in ENGINES:
        raise UsageError(f"--engine {spec!r}: eaglekit has rules for {', '.join(ENGINES)} (SGLang's are not tabulated yet)")
    return vllm.release(version.strip())


def interpret(loaded, release: vllm.Release, *, target_num_layers: int | None = None) -> vllm.EngineView:
    return vllm.interpret(loaded, release, target_num_layers=target_num_layers)


__all__ = ["ENGINES", "interpret", "parse"]
