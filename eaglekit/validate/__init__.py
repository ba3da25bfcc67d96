"""``validate``: everything wrong with a drafter checkpoint — config schema, invariants, and (with ``--engine``)
what a named engine release will actually do with it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import dialects
from ..errors import ConfigError
from ..findings import Finding, by_severity, errors
from ..model.layout import canonical_aside
from .checks import CHECKS, CheckInput, run_checks

if TYPE_CHECKING:
    from ..target import TargetConfig


@dataclass
class ValidationReport:
    """What ``validate`` found (``to_dict`` is the ``--json`` document)."""

    source: str
    dialect: str | None
    eagle_version: str | None
    engine: str | None
    target: str | None
    scanned: bool
    findings: list[Finding] = field(default_factory=list)
    engine_view: dict | None = None
    ambiguity: dict | None = None  # two readings the evidence cannot choose between (dialects.Ambiguity)
    origin: dict | None = None  # where the drafter was read from (io.sources.open_source); None: not said

    @property
    def ok(self) -> bool:
        return not errors(self.findings)

    def to_dict(self) -> dict:
        counts = {severity: len(found) for severity, found in by_severity(self.findings).items()}
        from .. import SCHEMA_VERSION

        return {
            "schema_version": SCHEMA_VERSION,
            "ok": self.ok,
            "path": self.source,
            "source": self.source,
            "dialect": self.dialect,
            "eagle_version": self.eagle_version,
            "engine": self.engine,
            "target": self.target,
            "scanned": self.scanned,
            "counts": counts,
            "findings": [f.to_dict() for f in self.findings],
            "engine_view": self.engine_view,
            "ambiguous": self.ambiguity is not None,
            "ambiguity": self.ambiguity,
            **({"origin": self.origin} if self.origin is not None else {}),
        }


# An engine finding that says for the named release what a general finding says of every engine: with that engine
# named, it is said instead of the general one (the ids vLLM captures where none are recorded, not "each engine's
# default").
RESTATED_FOR_THE_ENGINE = {"engine.aux_default": "aux.not_recorded"}


def validate(
    source: str | Path,
    *,
    target: str | Path | TargetConfig | None = None,
    engine: str | None = None,
    scan: bool = False,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
) -> ValidationReport:
    """``target``: as the user gave it, or its config already read (a survey reads it once for every drafter)."""
    release = _release(engine)
    target_cfg = _target_config(target)
    try:
        loaded = dialects.load(
            source,
            source_dialect,
            norm_output_semantics=norm_output_semantics,
            target_num_layers=target_cfg.num_layers if target_cfg else None,
        )
    except ConfigError as exc:
        return _unreadable(source, source_dialect, exc, release, target_cfg, scan)
    with loaded:
        if target_cfg is not None:
            loaded.drafter = loaded.drafter.with_(target_num_layers=target_cfg.num_layers)
        report = ValidationReport(
            str(source),
            loaded.dialect,
            loaded.drafter.eagle_version,
            release.label if release else None,
            target_cfg.source if target_cfg else None,
            scan,
        )
        report.findings += loaded.notes
        _say_ambiguity(report, loaded)
        report.findings += _invariants(loaded, target_cfg, scan)
        if release is not None:
            _add_engine_view(report, loaded, release, target_cfg)
        if scan and not loaded.checkpoint.located.remote:
            report.findings += _scanned(loaded)
        report.findings = _advised_with_schema(loaded, report.findings, target_cfg)
    return report


def _release(engine: str | None):
    """The engine release named (``engines.parse``), or None; the engine rules load only when an engine is named."""
    if not engine:
        return None
    from .. import engines

    return engines.parse(engine)


def _target_config(target: str | Path | TargetConfig | None) -> TargetConfig | None:
    """The target's config: read from what the user gave, or as given where it is read already."""
    if target is not None and not isinstance(target, (str, Path)):
        return target  # read already
    if target:
        from ..target import read_target_config  # the target's modules load only when a target is named

        return read_target_config(target)
    return None


def _say_ambiguity(report: ValidationReport, loaded: dialects.LoadedDrafter) -> None:
    """Two readings the evidence cannot choose between: recorded in the report and said as a warning."""
    if loaded.ambiguity is None:
        return
    config = loaded.checkpoint.config or {}
    report.ambiguity = loaded.ambiguity.to_dict()
    check = "dialect.ambiguous" if loaded.ambiguity.kind == "dialect" else "aux.ambiguous"
    where = dialects.get(loaded.dialect).aux_location(config)  # the key the ids were read from, where there is one
    report.findings.append(
        Finding(check, "warning", loaded.ambiguity.message() + f"; checked as the {loaded.dialect} reading", where)
    )


def _invariants(loaded: dialects.LoadedDrafter, target_cfg: TargetConfig | None, scan: bool) -> list[Finding]:
    """The invariant checks (``run_checks``), what a headers-only read skipped, and the lm_head's row order against
    the target's."""
    d = loaded.drafter
    present = loaded.present()
    remote = loaded.checkpoint.located.remote  # headers only: no tensor values to check
    found = run_checks(
        CheckInput(
            d,
            present,
            values=None if remote else loaded.read_values,
            target=target_cfg,
            config=loaded.checkpoint.config or {},
            stored_name=loaded.stored_name,
        )
    )
    if remote:
        found += _skipped_remotely(present, scan)
    if not remote and target_cfg is not None and d.has_d2t and "lm_head.weight" in loaded.names:
        target_head = _target_lm_head(target_cfg)
        if target_head is not None:
            from .scan import check_lm_head_order  # tensor math: torch

            found += check_lm_head_order(loaded.read("lm_head.weight"), loaded.read("d2t"), target_head)
    return found


def _add_engine_view(report: ValidationReport, loaded: dialects.LoadedDrafter, release, target_cfg) -> None:
    """What the named engine release does with the drafter: its findings (with their next steps) said once, in
    ``report.findings``, instead of the general ones they restate; the view keeps the verdict."""
    from .. import engines
    from .next_steps import advise

    depth = target_cfg.num_layers if target_cfg else None
    view = engines.interpret(loaded, release, target_num_layers=depth)
    view.findings = advise(loaded, release, view.findings, target_cfg)
    restated = {RESTATED_FOR_THE_ENGINE[f.check] for f in view.findings if f.check in RESTATED_FOR_THE_ENGINE}
    report.findings = [f for f in report.findings if f.check not in restated] + view.findings
    report.engine_view = {k: v for k, v in view.to_dict().items() if k != "findings"}


def _scanned(loaded: dialects.LoadedDrafter) -> list[Finding]:
    """``--scan``: every tensor's values read once; a finding names the canonical tensor beside the checkpoint's."""
    from .scan import scan_all  # reads every tensor: torch

    canonical_of = {s: c for c, s in loaded.names.items()}
    # scan findings name checkpoint tensors; say which canonical tensor they are when it differs
    return [
        (
            f
            if f.subject not in canonical_of
            else replace(f, message=f.message + canonical_aside(f.subject, canonical_of[f.subject]))
        )
        for f in scan_all(loaded.checkpoint, list(loaded.checkpoint.tensors))
    ]


def _advised_with_schema(
    loaded: dialects.LoadedDrafter, findings: list[Finding], target_cfg: TargetConfig | None
) -> list[Finding]:
    """``findings`` with their next steps, after the config's schema violations."""
    from .. import schemas  # jsonschema: loaded when a config is checked, not on import
    from .next_steps import advise_checks

    findings = advise_checks(loaded, findings, target_cfg)
    # the config against its schema, said first, less what the other errors already say of a value (one fault, one
    # finding)
    return (
        schemas.check_config(
            loaded.checkpoint.config or {},
            dialects.get(loaded.dialect).schema,
            mla=loaded.drafter.attention == "mla",
            label=f"{loaded.checkpoint.label}/config.json",
            told=_told(findings),
        )
        + findings
    )


def _told(findings: list[Finding]) -> set[str]:
    """The config values other errors name (their subjects): ``schemas.check_config`` does not restate them."""
    return {f.subject for f in findings if f.severity == "error" and f.subject}


def _skipped_remotely(present, scan: bool) -> list[Finding]:
    """What a headers-only (remote) read did not check, said rather than silently passed."""
    out = []
    needing = [name for name in ("d2t", "t2d") if name in present]
    if needing:
        out.append(
            Finding(
                "remote.values_skipped",
                "info",
                f"{' and '.join(needing)} contents not checked: read from the Hub by headers "
                "only (pass `download` to check them)",
                needing[0],
            )
        )
    if scan:
        out.append(
            Finding(
                "remote.scan_skipped",
                "warning",
                "`scan` skipped: the drafter was read from the Hub by headers only; "
                "pass `download` to scan its tensors",
            )
        )
    return out


def _target_lm_head(target_cfg: TargetConfig):
    """The target's lm_head rows for the order check, or None: without them the check is skipped."""
    from ..target.weights import read_target_weight

    try:
        return read_target_weight(target_cfg, "lm_head")
    except Exception:  # the target's checkpoint is not ours to judge here (a config-only target has none)
        return None


def _unreadable(source, source_dialect, exc, release, target_cfg, scan) -> ValidationReport:
    """A config eaglekit cannot read: report the schema violations and the reading error, not just the latter."""
    from .. import schemas
    from ..io.checkpoints import open_checkpoint

    with open_checkpoint(source) as ckpt:
        if ckpt.config is None:  # no config to hold to a schema: the missing file is the one thing to say (exit 2)
            raise exc
        dialect = source_dialect if source_dialect != "auto" else dialects.detect(ckpt)[0].dialect
        dialect = dialects.get(dialect).name
        report = ValidationReport(
            str(source),
            dialect,
            None,
            release.label if release else None,
            target_cfg.source if target_cfg else None,
            scan,
        )
        config = ckpt.config or {}
        mla = any(k in config for k in ("kv_lora_rank", "qk_rope_head_dim"))
        unreadable = Finding("config.unreadable", "error", str(exc), getattr(exc, "key", None))
        report.findings = schemas.check_config(
            config, dialects.get(dialect).schema, mla=mla, label=f"{ckpt.label}/config.json", told=_told([unreadable])
        ) + [unreadable]
    return report


__all__ = ["CHECKS", "ConfigError", "ValidationReport", "validate"]
