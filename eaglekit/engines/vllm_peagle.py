"""What a vLLM release does with a P-EAGLE drafter (parallel drafting): the rules of ``vllm_releases.json``'s
``peagle`` section, applied by ``engines.vllm.interpret``.

A speculators ``peagle`` config goes through ``update_peagle``, which passes on fewer keys than ``update_eagle3``: it
drops EAGLE 3.1's ``fc_norm`` and ``norm_output``, defaults ``norm_before_residual`` to false, and requires
``mask_token_id``. The drafter class is the EAGLE 3 one; it drafts all K tokens in one pass only where the speculative
config says ``parallel_drafting: true`` (``vllm serve DRAFTER`` says it for a peagle config); named in
``--speculative-config`` without it, vLLM drafts a chain with the drafter, as EAGLE 3, and skips ``mask_hidden``.
"""

from __future__ import annotations

from dataclasses import replace

from ..model.drafter import Flags
from .common import Recorder, config_flag, load_table

TABLE = "vllm_releases.json"


def rules() -> dict:
    return load_table(TABLE)["peagle"]


def is_speculators_peagle(config: dict) -> bool:
    return isinstance(config.get("speculators_config"), dict) and config.get("speculators_model_type") == "peagle"


def speculators_flags(config: dict, layer: dict, norm_before_fc: bool) -> Flags:
    """The flags vLLM's drafter reads from a speculators peagle config: those update_peagle drops (fc_norm,
    norm_output) from the layer config it starts from (absent there: false), the others from the top level with its
    defaults (``norm_before_fc``: whether the release passes that key on at all)."""
    table = rules()
    dropped = {key: config_flag(layer, key, False) for key in table["speculators_drops"]}
    return Flags(
        **dropped,
        norm_before_fc=config_flag(config, "norm_before_fc", False) if norm_before_fc else False,
        norm_before_residual=config_flag(config, "norm_before_residual", table["norm_before_residual_default"]),
        use_aux_hidden_state=True,
    )


def dropped_flags(drafter) -> list[str]:
    """The EAGLE 3.1 flags a P-EAGLE drafter sets that vLLM drops from a speculators peagle config (every release)."""
    if drafter.parallel is None:
        return []
    return [key for key in rules()["speculators_drops"] if getattr(drafter.flags, key)]


def releases_read() -> str:
    """The vLLM releases whose source these rules were read in, as a message names them."""
    first, last = rules()["read_in"]
    return f"{first} to {last}"


# what each flag finding says for a speculators peagle config (engines.vllm._flags' effects)
EFFECTS = {
    "fc_norm": "update_peagle does not pass fc_norm on: builds the drafter without fc_norm (fc_norm={})",
    "norm_output": "update_peagle does not pass norm_output on",
    "norm_before_fc": "ignores norm_before_fc",
    "norm_before_residual": "computes layer 0's residual with norm_before_residual={}"
    " (absent from a peagle config means false, where an eagle3 config's absent means true)",
}


def findings(out: Recorder, config: dict, intended, names: set[str], speculators: bool) -> None:
    """The P-EAGLE findings beside the flag ones: the mask token and mask_hidden vLLM needs to draft in parallel, what
    the dropped norm_output means for a parallel drafter, and how it must be served."""
    table = rules()
    parallel = intended.parallel
    if speculators and table["mask_token_key"] not in config:
        out.refuse(
            "engine.peagle_mask_token",
            "a speculators peagle config without mask_token_id",
            "refuses to load: update_peagle reads mask_token_id (KeyError)",
            "mask_token_id",
        )
    elif not speculators and not any(config.get(key) is not None for key in table["native_mask_token_keys"]):
        out.refuse(
            "engine.peagle_mask_token",
            f"a P-EAGLE drafter whose config states none of {', '.join(table['native_mask_token_keys'])}",
            "refuses to start parallel drafting: 'For parallel drafting, the draft model config must have ..."
            " specified' (its proposer)",
            table["native_mask_token_keys"][1],
        )
    if "mask_hidden" not in names:
        out.refuse(
            "engine.peagle_mask_hidden",
            "a P-EAGLE drafter without the mask_hidden tensor",
            "refuses to load when serving it in parallel: 'mask_hidden not found in weights'",
            "mask_hidden",
        )
    _soften_norm_output(out)
    out.add(
        "engine.parallel_drafting",
        "info",
        "a P-EAGLE drafter drafts in parallel only when vLLM is told to",
        '`vllm serve DRAFTER` (a speculators peagle config) or --speculative-config with "parallel_drafting": true'
        " drafts all K tokens in one pass; named in --speculative-config without it, vLLM drafts a chain with it, as an"
        " EAGLE 3 drafter, skipping mask_hidden with a log warning: another model than the one trained"
        + ("" if parallel is None or parallel.mask_token_id is None else f" (mask token {parallel.mask_token_id})"),
    )


def _soften_norm_output(out: Recorder) -> None:
    """A dropped norm_output changes nothing while the drafter drafts in parallel (no state is fed from one draft to the
    next): the flag finding becomes a warning that says so, and what it changes when vLLM drafts a chain instead."""
    for i, f in enumerate(out.view.findings):
        if f.check == "engine.flag.norm_output":
            out.view.findings[i] = replace(
                f,
                severity="warning",
                effect=f.effect
                + ": no effect while it drafts in parallel (no state is fed from one draft to the next); served"
                " without parallel_drafting it drafts a chain and feeds the pre-norm state forward, as EAGLE 3",
            )
