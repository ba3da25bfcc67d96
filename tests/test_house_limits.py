"""Rooms a newcomer can read at once: no function in eaglekit/ over 80 lines (``def`` to its last line, docstring
included), no module over 600 lines. A longer one is cut into named steps, as ``engines/vllm.py::interpret`` is."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eaglekit"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


def oversized(source: str, label: str) -> list[str]:
    """What in ``source`` is over the limits, each as ``label: name N lines``."""
    found = []
    lines = source.count("\n")
    if lines > MAX_MODULE_LINES:
        found.append(f"{label}: the module, {lines} lines")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{label}: {node.name}, {length} lines")
    return found


def test_no_function_over_80_lines_and_no_module_over_600():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += oversized(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert found == []


def test_the_measure_sees_a_long_function_and_a_long_module():
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    assert oversized(f"def long():\n{body}", "m.py") == ["m.py: long, 81 lines"]
    assert oversized("x = 1\n" * 601, "m.py") == ["m.py: the module, 601 lines"]
    assert oversized("def short():\n    return 1\n", "m.py") == []
