"""vLLM's native (non-speculators) drafter dialect: flat HF config, ``layers.N.*`` tensors, input-of-layer ids.

The writer records the aux layer ids at the top level *and* in ``eagle_config``, and writes
``num_aux_hidden_states``: vLLM's v1 runner, Model-Runner-V2 and the Llama/DeepSeek drafter classes each read
a different one of these (vllm#54526), and only all three together make every combination agree.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..model.architectures import written_as
from ..model.drafter import Drafter
from ..model.hf_config import base_config, model_type_for
from .base import FLAT_FLAGS_FALSE, INPUT, MIDLAYER, Clue, ConfigRules, Dialect, NameMap, architecture_clue, has_prefix


def flat_flags(d: Drafter) -> dict:
    return {
        "fc_norm": d.flags.fc_norm,
        "norm_output": d.flags.norm_output,
        "norm_before_fc": d.flags.norm_before_fc,
        "norm_before_residual": d.flags.norm_before_residual,
    }


class VllmDialect(Dialect):
    name = "vllm"
    summary = "vLLM native: flat config, layers.N.*, ids top-level and in eagle_config (input-of-layer)"
    reads = (
        "any architecture vLLM registers as EAGLE 3 (Llama, Qwen3, DeepSeek/Kimi MLA); midlayer.* or layers.N.*;"
        " P-EAGLE (mask_hidden, mask_token_id / pard_token / ptd_token_id)"
    )
    writes = "config.json + model.safetensors: Eagle3{Llama,Qwen3,DeepseekV2}ForCausalLM, every flag explicit"
    names = NameMap(rules=MIDLAYER)
    rules = ConfigRules(
        flags=FLAT_FLAGS_FALSE,
        aux_ids=(
            ("eagle_aux_hidden_state_layer_ids", INPUT),
            ("eagle_config.eagle_aux_hidden_state_layer_ids", INPUT),  # vLLM's v1 runner reads these as-is
        ),
        num_aux=("num_aux_hidden_states", "num_aux_layers"),
        # P-EAGLE's mask token, in the order vLLM's proposer takes it (v1/spec_decode/llm_base_proposer.py
        # _init_parallel_drafting_params: dflash_config.mask_token_id, mask_token_id, dspark_noise_token_id, pard_token,
        # ptd_token_id; the DFlash/DSpark keys belong to those drafters)
        mask_token=("mask_token_id", "pard_token", "ptd_token_id"),
    )
    schema = "config/vllm.schema.json"
    hub_tags = ("vllm",)
    served_by = ("vllm",)
    evidence = (
        architecture_clue("vllm", 40, "architectures names a vLLM-native Eagle3* class"),
        Clue(
            "top-level eagle_aux_hidden_state_layer_ids outside a speculators config",
            30,
            lambda c, n, k: "eagle_aux_hidden_state_layer_ids" in c and "speculators_config" not in c,
        ),
        Clue("tensors named layers.N.*", 10, lambda c, n, k: has_prefix(n, "layers.")),
    )

    def check_writable(self, d: Drafter) -> None:
        if d.attention == "mla" and d.flags.norm_before_fc:
            raise UnsupportedError("vLLM's MLA drafter (deepseek_eagle3) has no norm_before_fc/input_norm path")
        if d.attention == "mla" and not d.flags.use_aux_hidden_state:
            raise UnsupportedError("vLLM's MLA drafter always builds fc; use_aux_hidden_state: false cannot be served")
        if d.parallel is not None and d.attention == "mla":
            raise UnsupportedError("vLLM's MLA drafter (deepseek_eagle3) has no parallel drafting (no mask_hidden)")
        if d.parallel is not None and d.parallel.mask_token_id is None:
            raise UnsupportedError("a P-EAGLE drafter needs its mask token (pard_token), and the source names none")
        if d.attention == "mla" and (d.mla is None or not d.mla.q_lora_rank):
            raise UnsupportedError(
                "vLLM's MLA drafter needs q_lora_rank (without it the fused q/kv projection cannot load)"
            )

    # vLLM >= 0.30 has no draft_id_to_target_id when Vd == V: a full-vocabulary d2t would fail to load
    drops_full_vocab_maps = True

    def tensor_names(self, d: Drafter) -> dict[str, str]:
        return {c: c for c in sorted(d.tensors)}  # canonical names are vLLM's

    def config_keys(self, d: Drafter) -> dict:
        ids = d.aux.as_input()
        eagle_config: dict = {}
        if ids is not None:
            eagle_config["eagle_aux_hidden_state_layer_ids"] = list(ids)
        eagle_config["use_aux_hidden_state"] = d.flags.use_aux_hidden_state
        eagle_config["norm_before_fc"] = d.flags.norm_before_fc
        config = {
            "architectures": [written_as(self.name, d.attention, d.parallel is not None)],
            "model_type": model_type_for(d, vllm=True),
            **base_config(d),
            "draft_vocab_size": d.draft_vocab_size,
            "target_hidden_size": d.target_hidden_size,
            "num_aux_hidden_states": d.num_aux,
        }
        if ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = list(ids)
        config.update(flat_flags(d))
        config["eagle_config"] = eagle_config
        if d.parallel is not None:
            # the name vLLM's own speculators translation gives the mask token (update_peagle: pard_token); served with
            # --speculative-config ... "parallel_drafting": true (serving.py says so)
            config["pard_token"] = d.parallel.mask_token_id
        return config

    def write_config(self, d: Drafter) -> dict:
        config = super().write_config(d)
        if d.model_type and config["model_type"] != d.model_type:
            config["eaglekit"]["model_type"] = d.model_type  # what the drafter was, for the way back
        return config


DIALECT = VllmDialect()
