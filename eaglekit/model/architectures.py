"""The architecture table (``architectures.json``): one row per architecture string, read by dialects and engines.

Detection asks which dialects claim a string (``claimed_by``), the vLLM engine rules ask which drafter class
vLLM builds for it (``vllm_family``), the SGLang rules which one SGLang registers (``sglang_class``), and writers ask
which string to write (``written_as``). Nothing else in eaglekit spells an architecture string, so a new one is a data
edit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Beside this module in every install (package data); read directly, as importlib.resources costs ~6 ms of imports.
_TABLE: dict[str, Any] = json.loads(Path(__file__).with_name("architectures.json").read_text())
ROWS: dict[str, dict[str, Any]] = _TABLE["architectures"]
WRITTEN_AS: dict[str, dict[str, str]] = _TABLE["written_as"]
WRITTEN_AS_PARALLEL: dict[str, dict[str, str]] = _TABLE["written_as_parallel"]


def claimed_by(dialect: str) -> tuple[str, ...]:
    """The architecture strings whose presence is evidence for ``dialect``, in table order."""
    return tuple(name for name, row in ROWS.items() if dialect in row.get("claimed_by", ()))


def vllm_family(architecture: str) -> str | None:
    """The drafter class family vLLM builds for this string (llama, qwen3, mla), or None if it registers none."""
    row = ROWS.get(architecture)
    return row.get("vllm") if row else None


def sglang_class(architecture: str) -> dict | None:
    """The EAGLE 3 drafter class SGLang registers for this string: {"family": llama|mla, "since": first release}."""
    row = ROWS.get(architecture)
    return row.get("sglang") if row else None


def sglang_registered() -> dict[str, dict]:
    """Every string SGLang registers an EAGLE 3 drafter class for, with its family and first release."""
    return {name: row["sglang"] for name, row in ROWS.items() if "sglang" in row}


def is_parallel(architecture: str) -> bool:
    """The string names a P-EAGLE (parallel drafting) class (the table's ``parallel``)."""
    return bool((ROWS.get(architecture) or {}).get("parallel"))


def written_as(dialect: str, attention: str, parallel: bool = False) -> str:
    """The architecture string ``dialect``'s writer puts on a drafter with this attention (``parallel``: a P-EAGLE
    one)."""
    return (WRITTEN_AS_PARALLEL if parallel else WRITTEN_AS)[dialect][attention]


__all__ = [
    "ROWS",
    "WRITTEN_AS",
    "claimed_by",
    "sglang_class",
    "is_parallel",
    "sglang_registered",
    "vllm_family",
    "written_as",
]
