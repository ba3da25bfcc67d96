"""NVIDIA ModelOpt exports: ``layers.N.*``, ``d2t`` without ``t2d``, no embeddings, ``eagle_config`` with
ModelOpt's own keys and output-of-layer ids (a forward hook on layer k). Llama and Kimi-K2 MLA templates.
Read only.
"""

from __future__ import annotations

from .base import FLAT_FLAGS_FALSE, OUTPUT, Clue, ConfigRules, Dialect, NameMap, architecture_clue, has_prefix

MODELOPT_EAGLE_KEYS = (
    "use_input_layernorm_in_first_layer",
    "use_last_layernorm",
    "use_mtp_layernorm",
    "next_layer_regular",
    "parallel_draft_step",
    "parallel_draft_heads_num_layers",
)


class ModeloptDialect(Dialect):
    name = "modelopt"
    summary = "NVIDIA ModelOpt export: layers.N.*, d2t only, eagle_config with ModelOpt keys; read only"
    reads = "export_speculative_decoding outputs, Llama and Kimi-K2 MLA templates (fc_input_norm read as input_norm)"
    names = NameMap(aliases={"fc_input_norm.weight": "input_norm.weight"})
    rules = ConfigRules(flags=FLAT_FLAGS_FALSE, aux_ids=(("eagle_config.eagle_aux_hidden_state_layer_ids", OUTPUT),))
    schema = "config/modelopt.schema.json"
    evidence = (
        Clue(
            "eagle_config has ModelOpt's keys (use_last_layernorm, next_layer_regular, ...)",
            60,
            lambda c, n, k: any(key in (c.get("eagle_config") or {}) for key in MODELOPT_EAGLE_KEYS),
        ),
        Clue("d2t without t2d", 15, lambda c, n, k: "d2t" in n and "t2d" not in n),
        Clue("tensors named layers.N.*, no embeddings", 10, lambda c, n, k: has_prefix(n, "layers.") and not has_prefix(n, "embed_tokens")),
        architecture_clue("modelopt", 5),
    )


DIALECT = ModeloptDialect()
