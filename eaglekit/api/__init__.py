"""eaglekit's Python API: the commands as functions with typed results. The CLI calls these and nothing else.

    from eaglekit import api

    info = api.inspect("./drafter")                  # Inspection: dialect, EAGLE version, aux ids, flags
    api.convert("./drafter", "./for-vllm", to="vllm")  # Conversion: the files written
    report = api.validate("./for-vllm", engine="vllm==0.32")
    assert report.ok, [f.message for f in report.findings]

Every function takes explicit keyword arguments, each documented in its docstring (an unknown one is a TypeError).
Every result keeps the full JSON document the CLI prints under ``--json`` in ``.data`` (its schema is in
``schemas/``); the typed fields are the parts a script usually wants. The result types are exported here and from
``eaglekit`` itself. Failures raise ``eaglekit.errors.EaglekitError`` subclasses with a one-line message. Importing
this package is cheap: each function imports what it needs when it runs.

The functions live by what they touch: ``drafters.py`` (a drafter's files: inspect, convert, validate, survey, push),
``runs.py`` (the target run: verify, drift, capture); the result types in ``results.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import SCHEMA_VERSION
from .drafters import convert, inspect, push, survey, validate
from .results import Capture, Conversion, DriftReport, Inspection, Publication, SurveyRow, Verification, document
from .runs import capture, drift, verify

if TYPE_CHECKING:  # pragma: no cover
    from ..validate import ValidationReport


def __getattr__(name: str) -> Any:
    """``ValidationReport``, ``validate``'s result, from ``eaglekit.validate`` when first asked for: importing it
    reads the dialects and checks, which ``import eaglekit.api`` need not."""
    if name != "ValidationReport":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ..validate import ValidationReport

    globals()[name] = ValidationReport
    return ValidationReport


__all__ = [
    "SCHEMA_VERSION",
    "Capture",
    "Conversion",
    "DriftReport",
    "Inspection",
    "Publication",
    "SurveyRow",
    "ValidationReport",
    "Verification",
    "capture",
    "convert",
    "document",
    "drift",
    "inspect",
    "push",
    "survey",
    "validate",
    "verify",
]
