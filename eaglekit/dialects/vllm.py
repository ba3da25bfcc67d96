"""vLLM's native (non-speculators) drafter dialect: flat HF config, ``layers.N.*`` tensors, input-of-layer ids.

The writer records the aux layer ids at the top level *and* in ``eagle_config``, and writes
``num_aux_hidden_states``: vLLM's v1 runner, Model-Runner-V2 and the Llama/DeepSeek drafter classes each read
a different one of these (vllm#54526), and only all three together make every combination agree.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..model.drafter import Drafter
from ..model.hf_config import MLA_MODEL_TYPES, base_config
from .base import FLAT_FLAGS_FALSE, INPUT, Clue, ConfigRules, Dialect, NameMap, architectures, has_prefix, provenance_block

# Architecture strings vLLM's registry resolves to an EAGLE 3 drafter class (vllm-eagle3.md §1.2).
VLLM_LLAMA_ARCHS = (
    "Eagle3LlamaForCausalLM",
    "LlamaForCausalLMEagle3",
    "Eagle3MiniMaxM2ForCausalLM",
    "Eagle3Qwen2_5vlForCausalLM",
    "Eagle3Qwen3vlForCausalLM",
)
VLLM_QWEN3_ARCHS = ("Eagle3Qwen3ForCausalLM",)
VLLM_MLA_ARCHS = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")
VLLM_NATIVE_ARCHS = tuple(a for a in VLLM_LLAMA_ARCHS + VLLM_QWEN3_ARCHS + VLLM_MLA_ARCHS if a.startswith("Eagle3"))

ARCH_FOR = {"llama": "Eagle3LlamaForCausalLM", "qwen3": "Eagle3Qwen3ForCausalLM", "mla": "Eagle3DeepseekV2ForCausalLM"}


def flat_flags(d: Drafter) -> dict:
    return {
        "fc_norm": d.flags.fc_norm,
        "norm_output": d.flags.norm_output,
        "norm_before_fc": d.flags.norm_before_fc,
        "norm_before_residual": d.flags.norm_before_residual,
    }


def model_type_for(d: Drafter, *, vllm: bool = False) -> str:
    if d.attention == "mla":
        if vllm:
            # vLLM rewrites a deepseek_v3 draft config into a DeepSeek MTP drafter and refuses it; kimi_k2 selects
            # the same DeepseekV3Config without that rewrite
            return "deepseek_v2" if d.model_type == "deepseek_v2" else "kimi_k2"
        return d.model_type if d.model_type in MLA_MODEL_TYPES else "deepseek_v3"
    return d.attention  # "llama" | "qwen3"


class VllmDialect(Dialect):
    name = "vllm"
    summary = "vLLM native: flat config, layers.N.*, ids top-level and in eagle_config (input-of-layer)"
    reads = "any architecture vLLM registers as EAGLE 3 (Llama, Qwen3, DeepSeek/Kimi MLA); midlayer.* or layers.N.*"
    writes = "config.json + model.safetensors: Eagle3{Llama,Qwen3,DeepseekV2}ForCausalLM, every flag explicit"
    names = NameMap(rules=(("midlayer.", "layers.0."),))
    rules = ConfigRules(
        flags=FLAT_FLAGS_FALSE,
        aux_ids=(
            ("eagle_aux_hidden_state_layer_ids", INPUT),
            ("eagle_config.eagle_aux_hidden_state_layer_ids", INPUT),  # vLLM's v1 runner reads these as-is
        ),
        num_aux=("num_aux_hidden_states", "num_aux_layers"),
    )
    evidence = (
        Clue("architectures names a vLLM-native Eagle3* class", 40, lambda c, n, k: any(a in VLLM_NATIVE_ARCHS for a in architectures(c))),
        Clue(
            "top-level eagle_aux_hidden_state_layer_ids outside a speculators config",
            30,
            lambda c, n, k: "eagle_aux_hidden_state_layer_ids" in c and "speculators_config" not in c,
        ),
        Clue("tensors named layers.N.*", 10, lambda c, n, k: has_prefix(n, "layers.")),
        Clue("written by eaglekit as vllm", 60, lambda c, n, k: (c.get("eaglekit") or {}).get("dialect") == "vllm"),
    )

    def check_writable(self, d: Drafter) -> None:
        if d.attention == "mla" and d.flags.norm_before_fc:
            raise UnsupportedError("vLLM's MLA drafter (deepseek_eagle3) has no norm_before_fc/input_norm path")
        if d.attention == "mla" and not d.flags.use_aux_hidden_state:
            raise UnsupportedError("vLLM's MLA drafter always builds fc; use_aux_hidden_state: false cannot be served")
        if d.attention == "mla" and (d.mla is None or not d.mla.q_lora_rank):
            raise UnsupportedError("vLLM's MLA drafter needs q_lora_rank (without it the fused q/kv projection cannot load)")

    def output_names(self, d: Drafter) -> dict[str, str]:
        names = {c: c for c in sorted(d.tensors)}
        if not d.pruned_vocab:
            # vLLM >= 0.31 has no draft_id_to_target_id when Vd == V: a d2t would fail to load
            names.pop("d2t", None)
            names.pop("t2d", None)
        return names

    def write_config(self, d: Drafter) -> dict:
        ids = d.aux.as_input()
        eagle_config: dict = {}
        if ids is not None:
            eagle_config["eagle_aux_hidden_state_layer_ids"] = list(ids)
        eagle_config["use_aux_hidden_state"] = d.flags.use_aux_hidden_state
        eagle_config["norm_before_fc"] = d.flags.norm_before_fc
        config = {
            "architectures": [ARCH_FOR[d.attention]],
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
        config.update(d.extra_config)
        config["eaglekit"] = provenance_block(d, self.name)
        if d.model_type and config["model_type"] != d.model_type:
            config["eaglekit"]["model_type"] = d.model_type  # what the drafter was, for the way back
        return config


DIALECT = VllmDialect()
