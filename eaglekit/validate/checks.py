"""Drafter invariants that engines do not check. Each check has a stable id; ``CHECKS`` lists and describes the
invariants run here (validate adds ids of its own around them: ``remote.*``, ``schema.config``, ``flags.defaulted``,
reading notes such as ``aux.conflicting_locations``, each in docs/validate.md's list).

``run_checks`` works on the canonical drafter plus its tensors (shapes and dtypes from headers; the small
vocab maps are read as Python ints, without torch; ``scan`` streams every tensor once). ``convert`` runs the same checks
on its planned output and refuses to write a drafter that would not validate.

The checks live in sibling modules by what they read (catalogue: the ids and ``CheckInput``; config_checks,
rope_checks, engine_effects, aux_checks, target_checks, vocab_checks); this module runs them in order and keeps the
names others import from it.
"""

from __future__ import annotations

import functools
import json

from ..findings import Finding
from ..model.layout import check_tensors
from ..model.vocab_map import mapped_ids, t2d_from_d2t
from .aux_checks import check_aux
from .catalogue import CHECKS, CheckInput
from .config_checks import check_config, check_flags
from .engine_effects import borrowed_head, check_window
from .target_checks import check_target
from .vocab_checks import check_vocab


@functools.cache
def next_step_table() -> dict:
    """check id -> next step, for the findings that are not an engine rule's (next_steps.json beside this module:
    ``validate.next_steps`` keeps a conversion step only where it keeps its promise)."""
    from importlib import resources

    return json.loads(resources.files("eaglekit.validate").joinpath("next_steps.json").read_text())["steps"]


def run_checks(x: CheckInput) -> list[Finding]:
    """Every invariant check on ``x``, in the order their findings are reported."""
    from .consistency import check_consistency  # the config against itself and its tensors, beyond their shapes

    findings = check_tensors(x.drafter, x.present, x.stored_name)
    for check in (
        check_flags,
        check_config,
        check_consistency,
        borrowed_head,
        check_window,
        check_aux,
        check_target,
        check_vocab,
    ):
        findings += check(x)
    return findings


__all__ = [
    "CHECKS",
    "CheckInput",
    "borrowed_head",
    "check_aux",
    "check_config",
    "check_flags",
    "check_target",
    "check_vocab",
    "check_window",
    "mapped_ids",
    "next_step_table",
    "run_checks",
    "t2d_from_d2t",
]
