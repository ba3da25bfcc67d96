"""NVIDIA NeMo Automodel: HF-style ``model.``-prefixed names (``model.fc``, ``model.layers.0.*``,
``model.fc_norm.{i}``) with an unprefixed ``lm_head``. vLLM would prepend another ``model.`` and fail, so
these must be converted before serving. Read only.
"""

from __future__ import annotations

from .base import FLAT_FLAGS_FALSE, INPUT, OUTPUT, Clue, ConfigRules, Dialect, NameMap, architecture_clue, has_prefix


class AutomodelDialect(Dialect):
    name = "automodel"
    aliases = ("nemo",)
    summary = "NeMo Automodel: model.-prefixed tensor names (lm_head unprefixed); read only"
    reads = "LlamaEagle3DraftModel checkpoints with model.fc, model.layers.N.*, model.fc_norm.{i}"
    names = NameMap(rules=(("model.", ""),))
    rules = ConfigRules(
        flags=FLAT_FLAGS_FALSE,
        aux_ids=(
            ("eagle_aux_hidden_state_layer_ids", INPUT),
            ("eagle_config.eagle_aux_hidden_state_layer_ids", OUTPUT),
        ),
        mask_token=("mask_token_id", "pard_token", "ptd_token_id"),  # P-EAGLE (mask_hidden): read as vLLM reads them
    )
    schema = "config/automodel.schema.json"
    evidence = (
        Clue(
            "tensor names carry the model. prefix",
            80,
            lambda c, n, k: "model.fc.weight" in n or has_prefix(n, "model.layers."),
        ),
        architecture_clue("automodel", 20),
    )


DIALECT = AutomodelDialect()
