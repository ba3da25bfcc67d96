"""The ``eaglekit`` block: what every writer adds to config.json (who wrote it, from what, any numerics change) and
what the shared reading takes back from it (provenance, and what a format had no place for)."""

from __future__ import annotations

from ..model.config_view import ConfigView
from ..model.drafter import Drafter, Provenance
from ..model.hf_config import MLA_MODEL_TYPES
from .config_rules import CARRIED_HF_KEYS


def provenance_block(drafter: Drafter, dialect: str) -> dict:
    """The ``eaglekit`` key every writer adds to config.json: who wrote it, from what, and any numerics change."""
    from .. import __version__

    block: dict = {"version": __version__, "source_dialect": drafter.provenance.source_dialect, "dialect": dialect}
    if drafter.provenance.framework:
        block["source_framework"] = drafter.provenance.framework
    if drafter.verifier:
        block["verifier"] = drafter.verifier
        if drafter.verifier_architectures:
            block["verifier_architectures"] = list(drafter.verifier_architectures)
    if drafter.aux.ids is not None:
        block["aux_layer_ids_input_convention"] = list(drafter.aux.as_input())
    if not drafter.flags.norm_before_lm_head:
        block["norm_before_lm_head"] = False  # no engine's flag says it; kept so the way back knows
    if drafter.provenance.notes:
        block["notes"] = list(drafter.provenance.notes)
    if drafter.provenance.source_repo:
        block["source_repo"] = drafter.provenance.source_repo
        if drafter.provenance.source_commit:
            block["source_commit"] = drafter.provenance.source_commit
    return block


def eaglekit_block(top: ConfigView) -> dict:
    """The ``eaglekit`` key an earlier eaglekit conversion wrote into config.json (see ``provenance_block``)."""
    block = top.data.get("eaglekit")
    return block if isinstance(block, dict) else {}


def provenance(dialect: str, framework: str | None, block: dict) -> Provenance:
    """Where the checkpoint comes from; an eaglekit output also says what it was converted from and any numerics
    change it recorded (the 3.0 -> 3.1 upgrade), so a further conversion keeps them."""
    text = lambda key: block.get(key) if isinstance(block.get(key), str) else None
    notes = block.get("notes") if isinstance(block.get("notes"), list) else []
    return Provenance(
        source_dialect=dialect,
        framework=framework,
        eaglekit_version=text("version"),
        converted_from=text("source_dialect") if text("version") else None,
        notes=tuple(n for n in notes if isinstance(n, str)),
        source_repo=text("source_repo"),
        source_commit=text("source_commit"),
    )


def with_kept(drafter: Drafter, block: dict) -> Drafter:
    """What an earlier writer kept in the ``eaglekit`` block because its format had no place for it, taken back where
    the reading found none: the verifier, an MLA model type spelled otherwise for an engine, speculators' proposal
    methods, carried HF token ids."""
    if drafter.verifier is None and isinstance(block.get("verifier"), str):
        # formats with no verifier field: eaglekit kept it in its own block
        archs = block.get("verifier_architectures")
        drafter = drafter.with_(
            verifier=block["verifier"], verifier_architectures=tuple(archs) if isinstance(archs, list) else ()
        )
    if (
        isinstance(block.get("model_type"), str)
        and block["model_type"] in MLA_MODEL_TYPES
        and drafter.attention == "mla"
    ):
        drafter = drafter.with_(model_type=block["model_type"])  # a writer had to spell it differently for its engine
    # what a format with no place for it left to eaglekit's block: speculators' proposal methods, HF token ids
    if not drafter.proposals and isinstance(block.get("speculators_proposals"), dict):
        drafter = drafter.with_(proposals=dict(block["speculators_proposals"]))
    kept = block.get("extra_config") if isinstance(block.get("extra_config"), dict) else {}
    missing = {k: v for k, v in kept.items() if k in CARRIED_HF_KEYS and k not in drafter.extra_config}
    if missing:
        drafter = drafter.with_(extra_config={**drafter.extra_config, **missing})
    return drafter
