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


# validate's errors with which a drafter cannot run at all: one that does not fit the target (target.*), a repeated aux
# layer (vLLM captures it once, so fc gets fewer states than it fuses), a partial_rotary_factor vLLM refuses or the
# reference does not model (no number in (0, 1], an odd rotary width, on an MLA drafter), a scaled rope lacking a key
# its scaling reads without a default (the reference forward, like vLLM, cannot compute it) and a tensor of another
# shape than its config gives (the forward's first product with it fails: an internal error before) and a d2t mapping
# draft tokens past the target's vocabulary (the first lookup fails); a drafter of another width than the target that
# ships no embedding or no lm_head (the target's do not fit it: the forward's first norm of the target's embedding
# failed)
CANNOT_RUN = (
    "aux.duplicate",
    "config.partial_rotary",
    "embed.needed",
    "rope.parameters",
    "tensor.shape",
    "vocab.d2t_range",
    "vocab.lm_head_needed",
)


def cannot_run(findings) -> list:
    """The error findings (validate's) that keep a drafter from running on the target: refused before the run."""
    return [f for f in findings if f.severity == "error" and (f.check.startswith("target.") or f.check in CANNOT_RUN)]
