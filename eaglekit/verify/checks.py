"""A check of the verify report: one named pass/fail verdict with a line of detail. Every stage that judges
(thresholds, parity, vLLM itself) returns these; the report passes when all of them pass."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}
