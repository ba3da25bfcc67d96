"""NVIDIA ModelOpt exports: ``layers.N.*``, ``d2t`` without ``t2d``, no embeddings, ``eagle_config`` with
ModelOpt's own keys and output-of-layer ids (a forward hook on layer k). Llama and Kimi-K2 MLA templates.
Read only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..findings import Finding
from .base import FLAT_FLAGS_FALSE, OUTPUT, Clue, ConfigRules, Dialect, NameMap, architecture_clue, has_prefix

if TYPE_CHECKING:
    from ..io.reader import Checkpoint
    from ..model.config_view import ConfigView
    from ..model.drafter import Drafter

MODELOPT_EAGLE_KEYS = (
    "use_input_layernorm_in_first_layer",
    "use_last_layernorm",
    "use_mtp_layernorm",
    "next_layer_regular",
    "parallel_draft_step",
    "parallel_draft_heads_num_layers",
)

# ModelOpt's norm layout switches (its EagleModule: ``norm`` only with use_last_layernorm, layer 0's input_layernorm
# only with use_input_layernorm_in_first_layer, extra enorm/hnorm with use_mtp_layernorm), the value every engine's
# EAGLE 3 drafter runs (vLLM 0.32.0's source reads none of these keys; SGLang's was not checked), and what differs
# when a drafter was trained otherwise.
NORM_LAYOUT = {
    "use_last_layernorm": (True, "trained without the final norm before lm_head; engines apply norm.weight"),
    "use_input_layernorm_in_first_layer": (True, "trained without layer 0's input_layernorm; engines apply it"),
    "use_mtp_layernorm": (
        False,
        "trained with MTP-style norms on the embedding and hidden state (enorm/hnorm); engines have none",
    ),
}


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
        Clue(
            "tensors named layers.N.*, no embeddings",
            10,
            lambda c, n, k: has_prefix(n, "layers.") and not has_prefix(n, "embed_tokens"),
        ),
        architecture_clue("modelopt", 5),
    )

    def adjust(self, d: Drafter, top: ConfigView, ckpt: Checkpoint, notes: list[Finding]) -> Drafter:
        """A norm layout other than the one engines run is said: nothing in the engines reads these keys, so such a
        drafter loads and drafts with norms its training did not have."""
        nested = top.data.get("eagle_config") or {}
        for key, (runs, what) in NORM_LAYOUT.items():
            value = nested.get(key)
            if isinstance(value, bool) and value != runs:
                notes.append(
                    Finding(
                        "flags.modelopt_norm_layout",
                        "warning",
                        f"eagle_config.{key} is {str(value).lower()}: {what}",
                        f"eagle_config.{key}",
                    )
                )
        return d


DIALECT = ModeloptDialect()
