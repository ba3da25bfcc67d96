"""vllm-project/speculators format: ``speculators_config``, a nested ``transformer_layer_config``, top-level flags.

Ids are input-of-layer (vLLM's convention) at the top level. ``norm_before_residual`` absent is read as
True, because that is how vLLM's speculators translator serves it (speculators' own pydantic default is
False; saved configs always spell it out, so only hand-made configs hit this, and a note says so).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError, UnsupportedError
from ..findings import Finding
from ..io.reader import Checkpoint
from ..model.architectures import written_as
from ..model.config_view import ConfigView
from ..model.drafter import Drafter
from ..model.hf_config import base_config
from .base import INPUT, MIDLAYER, Clue, ConfigRules, Dialect, Key, NameMap, architecture_clue

SPECULATORS_FORMAT_VERSION = "0.9.0"  # the speculators release whose schema the writer follows
# the speculators_model_type values of the drafters eaglekit reads: EAGLE 3 and P-EAGLE (PEagleSpeculatorConfig, which
# inherits Eagle3SpeculatorConfig's fields and adds mask_token_id); other kinds are named by model/families.py
SPECULATORS_KINDS = ("eagle3", "peagle")


class SpeculatorsDialect(Dialect):
    name = "speculators"
    summary = "vllm-project/speculators: speculators_config + transformer_layer_config, flags top-level"
    reads = (
        "Eagle3Speculator and Eagle3DraftModel checkpoints (llama or qwen3 layers), input_norm and fc_norm; P-EAGLE"
        " (peagle: mask_token_id, mask_hidden)"
    )
    writes = (
        "config.json + model.safetensors as Eagle3DraftModel (P-EAGLE: PEagleDraftModel), full speculators_config,"
        " every flag explicit"
    )
    names = NameMap(rules=MIDLAYER)
    rules = ConfigRules(
        base="transformer_layer_config",
        flags={
            "fc_norm": Key(("fc_norm",), False),
            "norm_before_fc": Key(("norm_before_fc",), False),
            "norm_output": Key(("norm_output",), False),
            "norm_before_residual": Key(("norm_before_residual",), True),
            "use_aux_hidden_state": Key((), True),
        },
        aux_ids=(("eagle_aux_hidden_state_layer_ids", INPUT),),
        num_aux=("transformer_layer_config.num_aux_hidden_states", "num_aux_hidden_states"),
        mask_token=("mask_token_id",),  # PEagleSpeculatorConfig (speculators 0.9.0's models/peagle/config.py)
    )
    schema = "config/speculators.schema.json"
    library_name = "speculators"
    hub_tags = ("vllm", "speculators")
    served_by = ("vllm",)
    # speculators_config.verifier.name_or_path: vLLM's `vllm serve DRAFTER` (its target) and speculators 0.9.0's
    # Eagle3DraftModel.from_pretrained (AutoConfig.from_pretrained of it; source, run here: it fails without one)
    verifier_readers = "`vllm serve DRAFTER` and speculators' from_pretrained"
    evidence = (
        Clue(
            "speculators_model_type is eagle3 or peagle",
            100,
            lambda c, n, k: c.get("speculators_model_type") in SPECULATORS_KINDS,
        ),
        Clue("has speculators_config", 30, lambda c, n, k: isinstance(c.get("speculators_config"), dict)),
        architecture_clue("speculators", 20),
    )

    def adjust(self, d: Drafter, top: ConfigView, ckpt: Checkpoint, notes: list[Finding]) -> Drafter:
        kind = top.raw("speculators_model_type")
        if kind is not None and kind not in SPECULATORS_KINDS:
            raise ConfigError(
                f"{top.label}: speculators_model_type {kind!r} is not an EAGLE 3 drafter", key="speculators_model_type"
            )
        if kind == "peagle" and "norm_before_residual" not in top.data:
            # P-EAGLE: vLLM's update_peagle and speculators' own class both default it to false (vllm 0.22.0-0.33.0's
            # speculators/algos.py; speculators 0.9.0's PEagleDraftModel.from_training_args): no disagreement to warn of
            d = d.with_(flags=replace(d.flags, norm_before_residual=False))
        elif "norm_before_residual" not in top.data:
            notes.append(
                Finding(
                    "flags.defaulted",
                    "warning",
                    "norm_before_residual is absent: vLLM's speculators loader assumes true (speculators' own default "
                    "is false); true is used — set it explicitly",
                    "norm_before_residual",
                )
            )
        verifier = top.sub("speculators_config")
        verifier = verifier.sub("verifier") if verifier else None
        changes: dict = {"draft_vocab_size": top.int("draft_vocab_size", d.vocab_size, minimum=1)}
        if verifier is not None:
            changes["verifier"] = verifier.str("name_or_path", None)
            changes["verifier_architectures"] = verifier.str_list("architectures", ())
        changes["proposals"] = read_proposals(top)
        return d.with_(**changes)

    def framework(self, ckpt: Checkpoint) -> str | None:
        version = (ckpt.config or {}).get("speculators_version")
        return f"speculators {version}" if isinstance(version, str) else "speculators"

    def check_writable(self, d: Drafter) -> None:
        if d.attention == "mla":
            raise UnsupportedError(
                "the speculators format has no MLA drafter (vLLM's speculators loader maps only llama and qwen3)"
            )
        if d.flags.fc_norm and d.flags.norm_before_fc:
            raise UnsupportedError("speculators refuses fc_norm together with norm_before_fc")
        if not d.flags.use_aux_hidden_state:
            raise UnsupportedError("the speculators format cannot express use_aux_hidden_state: false")
        if d.parallel is not None and d.parallel.mask_token_id is None:
            raise UnsupportedError("a P-EAGLE drafter needs its mask token (mask_token_id), and the source names none")

    writes_t2d = True  # speculators derives the target vocab from t2d: synthesised if missing
    drops_full_vocab_maps = True  # speculators registers no vocab maps when Vd == V
    carries_extra_config = False

    def tensor_names(self, d: Drafter) -> dict[str, str]:
        return {c: c for c in sorted(d.tensors)}

    def config_keys(self, d: Drafter) -> dict:
        layer = {"model_type": d.attention, **base_config(d), "num_aux_hidden_states": d.num_aux}
        layer.pop("torch_dtype", None)
        ids = d.aux.as_input()
        kind = "peagle" if d.parallel is not None else "eagle3"
        config = {
            "architectures": [written_as(self.name, d.attention, d.parallel is not None)],
            "speculators_model_type": kind,
            "speculators_version": SPECULATORS_FORMAT_VERSION,
            "speculators_config": {
                "algorithm": kind,
                **(d.proposals or default_proposals(d)),
                "verifier": {"name_or_path": d.verifier, "architectures": list(d.verifier_architectures)},
            },
            "transformer_layer_config": layer,
            "draft_vocab_size": d.draft_vocab_size,
            "target_hidden_size": d.target_hidden_size,
            "eagle_aux_hidden_state_layer_ids": list(ids) if ids is not None else None,
            "norm_before_residual": d.flags.norm_before_residual,
            "norm_before_fc": d.flags.norm_before_fc,
            "fc_norm": d.flags.fc_norm,
            "norm_output": d.flags.norm_output,
            "embed_requires_grad": d.parallel is not None,  # PEagleSpeculatorConfig's default: true
        }
        if d.parallel is not None:
            config["mask_token_id"] = d.parallel.mask_token_id
        if d.dtype:
            config["torch_dtype"] = d.dtype
        return config


# What the writer states when the source stated no proposal methods (speculators' greedy default, 3 tokens).
DEFAULT_PROPOSALS = {
    "proposal_methods": [
        {"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1, "accept_tolerance": 0.0}
    ],
    "default_proposal_method": "greedy",
}


def default_proposals(d: Drafter) -> dict:
    """``DEFAULT_PROPOSALS``; for a P-EAGLE drafter that states the depth it was trained for, that many tokens (what
    speculators' P-EAGLE trainer writes: ``speculative_tokens`` = ``num_depths``)."""
    depth = d.parallel.depth if d.parallel is not None else None
    if depth is None:
        return DEFAULT_PROPOSALS
    return {
        **DEFAULT_PROPOSALS,
        "proposal_methods": [{**DEFAULT_PROPOSALS["proposal_methods"][0], "speculative_tokens": depth}],
    }


def read_proposals(top: ConfigView) -> dict:
    """``speculators_config.proposal_methods`` and ``default_proposal_method`` as stated, so that a conversion keeps
    them (``speculative_tokens``: the lookahead vLLM serves the drafter with); {} where absent. A list that is not of
    objects, each with an integer ``speculative_tokens`` >= 1, is a config error."""
    config = top.data.get("speculators_config")
    methods = config.get("proposal_methods") if isinstance(config, dict) else None
    if methods is None:
        return {}
    where = f"{top.label}: speculators_config.proposal_methods"
    if not isinstance(methods, list) or not methods or not all(isinstance(m, dict) for m in methods):
        raise ConfigError(f"{where} should be a non-empty list of objects", key="speculators_config.proposal_methods")
    for i, method in enumerate(methods):
        tokens = method.get("speculative_tokens")
        if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1):
            raise ConfigError(
                f"{where}[{i}].speculative_tokens should be an integer >= 1, got {tokens!r}",
                key=f"speculators_config.proposal_methods[{i}].speculative_tokens",
            )
    out = {"proposal_methods": [dict(m) for m in methods]}
    default = config.get("default_proposal_method")
    if default is not None:
        out["default_proposal_method"] = default
    return out


DIALECT = SpeculatorsDialect()
