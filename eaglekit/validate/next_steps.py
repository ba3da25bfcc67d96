"""What to do about a finding, as data beside its rule (``next_steps.json`` for validate's own checks, the engine
tables' ``next_steps`` for an engine's), and only where it keeps its promise: an engine finding is told to convert to a
layout only where that release, reading the converted drafter (planned, headers only), no longer says it; an error is
told the first later release that serves the drafter as it is (engines/support.py)."""

from __future__ import annotations

from ..errors import EaglekitError
from ..findings import Finding, with_next_steps
from .checks import next_step_table


def advise(loaded, release, findings: list[Finding], target=None) -> list[Finding]:
    """``findings`` (release ``release``'s reading of ``loaded``) with the next steps that hold for them."""
    from ..engines.common import load_table
    from ..engines.support import TABLES, support

    depth = target.num_layers if target is not None else None
    extra = {}
    if any(f.severity == "error" for f in findings):
        served = support(loaded, release.engine, target_num_layers=depth)
        from ..engines.common import release_key

        if served.first and release_key(served.first) > release_key(release.requested):
            extra = {"release": f"{release.engine}>={served.first}"}
    table = load_table(TABLES[release.engine]).get("next_steps", {})
    after: dict[str, set[str] | None] = {}
    kept = {}
    said = {f.check for f in findings}
    for check, step in table.items():
        if check not in said:
            continue
        to = (step.get("options") or {}).get("to") if step.get("command") == "convert" else None
        if to is None:
            kept[check] = step
            continue
        if to not in after:
            after[to] = _checks_after_converting(loaded, release, to, target)
        if after[to] is not None and check not in after[to]:
            kept[check] = step
    # an engine's note (info) says what goes right: nothing to do about it
    return [f if f.severity == "info" else with_next_steps([f], kept, extra)[0] for f in findings]


def advise_checks(loaded, findings: list[Finding], target=None) -> list[Finding]:
    """validate's own findings with the steps ``next_step_table`` gives them; a conversion (to the drafter's own
    dialect where it can be written: DIALECT) only where the planned output no longer has the finding."""
    from .. import dialects

    own = loaded.dialect if dialects.get(loaded.dialect).can_write else "vllm"
    kept, planned = {}, {}
    said = {f.check for f in findings}
    for check, step in next_step_table().items():
        if check not in said:
            continue
        if step.get("command") != "convert" or (step.get("options") or {}).get("resolve"):
            kept[check] = step  # options alone, or --resolve (refused only where no reading wins: it says so)
            continue
        to = step["options"]["to"]
        to = own if to == "DIALECT" else to
        if to not in planned:
            plan = _plan(loaded, to, target)
            planned[to] = None if plan is None else {f.check for f in plan.findings + plan.notes}
        if planned[to] is not None and check not in planned[to]:
            kept[check] = {**step, "options": {**step["options"], "to": to}}
    return with_next_steps(findings, kept)


def _plan(loaded, to: str, target):
    """``loaded`` converted to ``to``, planned (nothing written); None where the conversion refuses it."""
    from .. import dialects
    from ..convert import ConvertOptions, plan_loaded
    from ..findings import errors

    if loaded.ambiguity is not None:  # refused until --from, --aux-layers or --resolve decides
        return None
    try:
        plan = plan_loaded(loaded, dialects.get_writer(to), ConvertOptions(to=to), target)
    except (EaglekitError, ValueError, KeyError, TypeError):  # advice: a plan that fails gives none, never a crash
        return None
    return None if errors(plan.findings) else plan  # one with errors, the conversion refuses to write


def _checks_after_converting(loaded, release, to: str, target) -> set[str] | None:
    """The engine checks release ``release`` raises on ``loaded`` converted to ``to`` (planned, nothing written), or
    None where the conversion is refused."""
    from .. import dialects, engines
    from ..io.reader import Checkpoint

    plan = _plan(loaded, to, target)
    if plan is None:
        return None
    writer = dialects.get_writer(to)
    depth = target.num_layers if target is not None else None
    planned = Checkpoint.planned(f"the {to} output", plan.config, {t.name: (t.dtype, t.shape) for t in plan.tensors})
    converted = writer.read(planned, target_num_layers=depth, given=True)
    if depth is not None:
        converted.drafter = converted.drafter.with_(target_num_layers=depth)
    view = engines.interpret(converted, release, target_num_layers=depth)
    return {f.check for f in view.findings if f.severity in ("error", "warning")}
