"""Synthetic full-size drafters for the benchmarks, written one tensor at a time (never held whole in memory).

- ``kimi``: a Kimi-K2.6-shaped EAGLE 3.1 MLA drafter in TorchSpec's native layout (midlayer.*), bf16, with
  embeddings and a full-vocabulary lm_head: about 6 GB.
- ``llama8b``: a Llama-3.1-8B-shaped EAGLE 3 drafter in SpecForge's layout plus embeddings, bf16: about 1.8 GB.

    python benchmarks/synthetic.py kimi /tmp/kimi-drafter
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from eaglekit.io import TensorPlan, write_checkpoint_tensors

SHAPES = {
    "kimi": {
        "config": {
            "architectures": ["Eagle3DeepseekV2ForCausalLM"],
            "model_type": "kimi_k2",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "num_hidden_layers": 1,
            "vocab_size": 163840,
            "draft_vocab_size": 163840,
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "rms_norm_eps": 1e-6,
            "hidden_act": "silu",
            "max_position_embeddings": 262144,
            "rope_theta": 50000.0,
            "rope_scaling": {
                "type": "yarn",
                "factor": 64.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
            "num_aux_hidden_states": 3,
            "target_hidden_size": 7168,
            "fc_norm": True,
            "norm_output": True,
            "_torchspec_version": "0.4.0",
            "torch_dtype": "bfloat16",
        },
        "tensors": {
            "embed_tokens.weight": (163840, 7168),
            "fc.weight": (7168, 21504),
            **{f"fc_norm.{i}.weight": (7168,) for i in range(3)},
            "midlayer.input_layernorm.weight": (7168,),
            "midlayer.hidden_norm.weight": (7168,),
            "midlayer.post_attention_layernorm.weight": (7168,),
            "midlayer.self_attn.q_a_proj.weight": (1536, 14336),
            "midlayer.self_attn.q_a_layernorm.weight": (1536,),
            "midlayer.self_attn.q_b_proj.weight": (64 * 192, 1536),
            "midlayer.self_attn.kv_a_proj_with_mqa.weight": (576, 14336),
            "midlayer.self_attn.kv_a_layernorm.weight": (512,),
            "midlayer.self_attn.kv_b_proj.weight": (64 * 256, 512),
            "midlayer.self_attn.o_proj.weight": (7168, 64 * 128),
            "midlayer.mlp.gate_proj.weight": (18432, 7168),
            "midlayer.mlp.up_proj.weight": (18432, 7168),
            "midlayer.mlp.down_proj.weight": (7168, 18432),
            "norm.weight": (7168,),
            "lm_head.weight": (163840, 7168),
        },
    },
    "llama8b": {
        "config": {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_hidden_layers": 1,
            "vocab_size": 128256,
            "draft_vocab_size": 32000,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "max_position_embeddings": 2048,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": True},
            "torch_dtype": "bfloat16",
        },
        "tensors": {
            "embed_tokens.weight": (128256, 4096),
            "fc.weight": (4096, 12288),
            "midlayer.input_layernorm.weight": (4096,),
            "midlayer.hidden_norm.weight": (4096,),
            "midlayer.post_attention_layernorm.weight": (4096,),
            "midlayer.self_attn.q_proj.weight": (4096, 8192),
            "midlayer.self_attn.k_proj.weight": (1024, 8192),
            "midlayer.self_attn.v_proj.weight": (1024, 8192),
            "midlayer.self_attn.o_proj.weight": (4096, 4096),
            "midlayer.mlp.gate_proj.weight": (14336, 4096),
            "midlayer.mlp.up_proj.weight": (14336, 4096),
            "midlayer.mlp.down_proj.weight": (4096, 14336),
            "norm.weight": (4096,),
            "lm_head.weight": (32000, 4096),
            "d2t": (32000,),
            "t2d": (128256,),
        },
    },
}


def _tensor(name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    if name == "d2t":
        return (torch.arange(shape[0]) * 4 + 1) - torch.arange(shape[0])  # used ids 1, 5, 9, ... : increasing, in range
    if name == "t2d":
        t2d = torch.zeros(shape, dtype=torch.bool)
        t2d[torch.arange(32000) * 4 + 1] = True
        return t2d
    if name.endswith("norm.weight") or "norm." in name:
        return torch.ones(shape, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(shape, dtype=torch.bfloat16)
    flat = out.view(-1)
    step = 1 << 24  # fill in 16M-element pieces: the builder itself never holds a float32 copy of a big tensor
    for start in range(0, flat.numel(), step):
        piece = flat[start : start + step]
        piece.copy_(torch.randn(piece.numel(), generator=g) * 0.02)
    return out


def build(kind: str, out: Path) -> Path:
    spec = SHAPES[kind]
    out.mkdir(parents=True, exist_ok=True)
    plans = []
    for i, (name, shape) in enumerate(spec["tensors"].items()):
        dtype = torch.int64 if name == "d2t" else torch.bool if name == "t2d" else torch.bfloat16
        plans.append(TensorPlan(name, dtype, shape, lambda name=name, shape=shape, i=i: _tensor(name, shape, i)))
    write_checkpoint_tensors(
        out, plans, max_shard_bytes=10**12, metadata={"torchspec_version": "0.4.0"} if kind == "kimi" else None
    )
    (out / "config.json").write_text(json.dumps(spec["config"], indent=2))
    return out


def ensure(kind: str, out: Path) -> Path:
    if (out / "config.json").exists():
        return out
    return build(kind, out)


if __name__ == "__main__":
    print(build(sys.argv[1], Path(sys.argv[2])))
