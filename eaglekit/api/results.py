"""The Python API's results: one frozen dataclass per command, each keeping the command's full JSON document (what
the CLI prints under ``--json``) in ``.data`` beside the typed fields a script usually wants. ``ValidationReport``,
``validate``'s result, lives with the checks that fill it (``eaglekit.validate``); ``eaglekit.api`` re-exports it.
Below them, ``document`` (the keys every document starts with) and ``option_fields`` (a command's options dataclass
from its function's explicit arguments)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import SCHEMA_VERSION  # the contract's version, kept in the package root: modules below api state it too

if TYPE_CHECKING:  # pragma: no cover
    from ..convert import ConversionPlan
    from ..validate import ValidationReport

# Every JSON document about a drafter starts with the same three keys: the contract's version, whether the command
# succeeded (its one success key) and the path it was given (its one path key).


def document(path: str | Path, ok: bool, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` under the shared contract keys (see ``SCHEMA_VERSION``).

    Args:
        path: the drafter (or output) the document is about, as given.
        ok: whether the command succeeded.
        data: the command's own keys.
    """
    return {"schema_version": SCHEMA_VERSION, "ok": ok, "path": str(path), **data}


@dataclass(frozen=True)
class Inspection:
    """What a drafter checkpoint is (``eaglekit inspect``)."""

    path: str
    dialect: str
    eagle_version: str
    attention: str
    aux_layer_ids: list[int] | None  # input-of-layer (vLLM's convention); None: none recorded, or ambiguous (see data)
    flags: dict[str, bool]
    data: dict[str, Any] = field(repr=False)
    # a drafter of another family (DFlash, DSpark, MTP, ...: model/families.py), which eaglekit names and does not
    # handle yet: its name ("dflash"); the fields above are then empty
    family: str | None = None


@dataclass(frozen=True)
class Conversion:
    """A conversion's plan and, unless it was a dry run, the files written (``eaglekit convert``)."""

    source: str
    output: str
    source_dialect: str
    to: str
    files: list[str]  # written, or (dry run) that would be written
    written: bool
    plan: ConversionPlan = field(repr=False)
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Verification:
    """The drafter run on its target's real hidden states (``eaglekit verify``)."""

    path: str
    acceptance_length: float
    passed: bool
    checks: list[dict[str, Any]]
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class DriftReport:
    """EAGLE 3.1's diagnosis measured on a drafter and its target (``eaglekit drift``): acceptance by absolute position,
    and per draft step the acceptance, the attention on sinks and on the chain's own drafts, the fed-back norm."""

    path: str
    ok: bool
    acceptance_length: float
    per_depth: list[dict[str, Any]]
    by_context_length: list[dict[str, Any]]
    compare: dict[str, Any] | None
    files: list[str]  # written with ``report``: report.json, the PNG plots, report.html
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def of(cls, path: str, data: dict[str, Any], files: list[str]) -> DriftReport:
        """The typed fields read from drift's document ``data``."""
        acceptance_length = data["acceptance"]["trajectory"]["acceptance_length"]
        return cls(
            path,
            data["ok"],
            acceptance_length,
            data["per_depth"],
            data["by_context_length"],
            data["compare"],
            files,
            data,
        )


@dataclass(frozen=True)
class Capture:
    """The target's greedy continuations and aux states, captured by vLLM into a folder (``eaglekit capture``)."""

    output: str
    sequences: int  # in the folder
    captured: int  # by this run (the others were there: a resumed capture)
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Publication:
    """What ``eaglekit push`` published (or, with ``dry_run``, would publish)."""

    repo_id: str
    files: list[str]
    dry_run: bool
    commit: dict[str, Any] | None
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class SurveyRow:
    """One drafter of a survey: its report, or why it could not be validated (``error``, ``exit_code``)."""

    path: str
    report: ValidationReport | None
    error: str | None = None
    error_type: str | None = None
    exit_code: int = 0

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.ok

    def to_dict(self) -> dict[str, Any]:
        if self.report is not None:
            return self.report.to_dict()
        from ..errors import error_document

        return error_document(self.error, self.error_type, self.exit_code, self.path)


# -- the commands' options, from their explicit arguments ----------------------------------------------------------


def option_fields(arguments: dict[str, Any], *not_fields: str) -> dict[str, Any]:
    """A command's options dataclass's fields, from the function's explicit arguments (its ``locals()`` on entry)
    less ``not_fields``; a ``parallel`` left at None is the dataclass's own default (one vLLM worker)."""
    return {
        name: value
        for name, value in arguments.items()
        if name not in not_fields and not (name == "parallel" and value is None)
    }
