"""Tiny drafter checkpoints in every dialect, written the way each framework writes them.

Shapes and names here are typed out from the formats themselves (docs/formats.md) independently of
``eaglekit.model.layout``, so the readers are tested against the formats, not against eaglekit's writers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file


@dataclass
class Dims:
    H: int = 16  # drafter hidden
    T: int = 16  # target hidden
    n: int = 3  # aux states
    V: int = 64  # target vocab
    Vd: int = 32  # draft vocab
    layers: int = 1
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 8
    I: int = 32
    target_layers: int = 8
    mla: dict | None = None  # q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    qwen3: bool = False
    fc_norm: bool = False
    norm_before_fc: bool = False
    embed: bool = True
    lm_head: bool = True
    seed: int = 0
    dtype: torch.dtype = torch.float32
    extra: dict = field(default_factory=dict)


def mla_dims(**kw) -> dict:
    base = dict(q_lora_rank=12, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6)
    base.update(kw)
    return base


def d2t_for(d: Dims, gen: torch.Generator) -> torch.Tensor:
    used = torch.sort(torch.randperm(d.V, generator=gen)[: d.Vd]).values
    return used - torch.arange(d.Vd)


def canonical_tensors(d: Dims) -> dict[str, torch.Tensor]:
    """Random weights under vLLM's canonical names."""
    g = torch.Generator().manual_seed(d.seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.2).to(d.dtype)

    def norm(size):
        return (1.0 + 0.1 * torch.randn(size, generator=g)).to(d.dtype)

    t: dict[str, torch.Tensor] = {}
    if d.embed:
        t["embed_tokens.weight"] = w(d.V, d.H)
    t["fc.weight"] = w(d.H, d.n * d.T)
    if d.fc_norm:
        for i in range(d.n):
            t[f"fc_norm.{i}.weight"] = norm(d.T)
    if d.norm_before_fc:
        t["input_norm.weight"] = norm(d.n * d.T)
    for i in range(d.layers):
        p = f"layers.{i}."
        width = 2 * d.H if i == 0 else d.H
        t[p + "input_layernorm.weight"] = norm(d.H)
        if i == 0:
            t[p + "hidden_norm.weight"] = norm(d.H)
        t[p + "post_attention_layernorm.weight"] = norm(d.H)
        if d.mla:
            m = d.mla
            t[p + "self_attn.q_a_proj.weight"] = w(m["q_lora_rank"], width)
            t[p + "self_attn.q_a_layernorm.weight"] = norm(m["q_lora_rank"])
            t[p + "self_attn.q_b_proj.weight"] = w(
                d.heads * (m["qk_nope_head_dim"] + m["qk_rope_head_dim"]), m["q_lora_rank"]
            )
            t[p + "self_attn.kv_a_proj_with_mqa.weight"] = w(m["kv_lora_rank"] + m["qk_rope_head_dim"], width)
            t[p + "self_attn.kv_a_layernorm.weight"] = norm(m["kv_lora_rank"])
            t[p + "self_attn.kv_b_proj.weight"] = w(
                d.heads * (m["qk_nope_head_dim"] + m["v_head_dim"]), m["kv_lora_rank"]
            )
            t[p + "self_attn.o_proj.weight"] = w(d.H, d.heads * m["v_head_dim"])
        else:
            t[p + "self_attn.q_proj.weight"] = w(d.heads * d.head_dim, width)
            t[p + "self_attn.k_proj.weight"] = w(d.kv_heads * d.head_dim, width)
            t[p + "self_attn.v_proj.weight"] = w(d.kv_heads * d.head_dim, width)
            t[p + "self_attn.o_proj.weight"] = w(d.H, d.heads * d.head_dim)
            if d.qwen3:
                t[p + "self_attn.q_norm.weight"] = norm(d.head_dim)
                t[p + "self_attn.k_norm.weight"] = norm(d.head_dim)
        t[p + "mlp.gate_proj.weight"] = w(d.I, d.H)
        t[p + "mlp.up_proj.weight"] = w(d.I, d.H)
        t[p + "mlp.down_proj.weight"] = w(d.H, d.I)
    t["norm.weight"] = norm(d.H)
    if d.lm_head:
        t["lm_head.weight"] = w(d.Vd, d.H)
    if d.Vd != d.V:
        d2t = d2t_for(d, g)
        t["d2t"] = d2t
        t2d = torch.zeros(d.V, dtype=torch.bool)
        t2d[torch.arange(d.Vd) + d2t] = True
        t["t2d"] = t2d
    return t


def llama_keys(d: Dims, *, rope_theta: float | None = 10000.0) -> dict:
    cfg = {
        "hidden_size": d.H,
        "intermediate_size": d.I,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "num_hidden_layers": d.layers,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "vocab_size": d.V,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    }
    if rope_theta is not None:
        cfg["rope_theta"] = rope_theta
    if d.mla:
        cfg.pop("head_dim")
        cfg.update(d.mla)
        cfg["rope_scaling"] = {
            "type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 512,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        }
    return cfg


def default_output_ids(d: Dims) -> list[int]:
    L = d.target_layers
    return [1, L // 2 - 1, L - 4]


def default_input_ids(d: Dims) -> list[int]:
    return [i + 1 for i in default_output_ids(d)]


def rename(tensors: dict, rules: list[tuple[str, str]]) -> dict:
    out = {}
    for name, t in tensors.items():
        for ours, theirs in rules:
            if name.startswith(ours):
                name = theirs + name[len(ours) :]
                break
        out[name] = t
    return out


def _save(
    directory: Path, tensors: dict, config: dict, *, bin_file: bool = False, metadata: dict | None = None
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if bin_file:
        torch.save(tensors, directory / "pytorch_model.bin")
    else:
        save_file(
            {k: v.contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"), metadata=metadata
        )
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


# -- dialect writers (as each framework writes its checkpoints) ------------------------------------------


def write_eagle(directory: Path, d: Dims, *, bin_file: bool = True) -> Path:
    """SafeAILab EAGLE: midlayer.*, no embeddings, LlamaForCausalLM template, no rope_theta (F1)."""
    t = canonical_tensors(d)
    t.pop("embed_tokens.weight", None)
    t = rename(t, [("layers.0.", "midlayer.")])
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **llama_keys(d, rope_theta=None),
        "draft_vocab_size": d.Vd,
        "torch_dtype": "float16",
        "pad_token_id": 0,
    }
    return _save(directory, t, cfg, bin_file=bin_file)


def write_specforge(
    directory: Path, d: Dims, *, ids: list[int] | None = None, norm_output: bool = False, legacy: bool = False
) -> Path:
    """SpecForge classic: model.safetensors without embeddings, midlayer.*, eagle_config ids (output-of-layer) (F2)."""
    t = canonical_tensors(d)
    t.pop("embed_tokens.weight", None)
    t = rename(t, [("layers.0.", "midlayer.")])
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": ids if ids is not None else default_output_ids(d),
            "use_aux_hidden_state": True,
        },
    }
    if d.T != d.H:
        cfg["target_hidden_size"] = d.T
    if d.fc_norm:
        if legacy:
            cfg["use_aux_norm"] = True
            t = {
                (
                    ({0: "aux_norm_low", 1: "aux_norm_mid", 2: "aux_norm_high"}[int(k.split(".")[1])] + ".weight")
                    if k.startswith("fc_norm.")
                    else k
                ): v
                for k, v in t.items()
            }
        else:
            cfg["fc_norm"] = True
    if norm_output:
        cfg["norm_output"] = True
    return _save(directory, t, cfg)


def write_speculators(
    directory: Path,
    d: Dims,
    *,
    ids: list[int] | None = None,
    norm_output: bool = False,
    norm_before_residual: bool | None = True,
    verifier: str = "org/target",
) -> Path:
    """speculators save_pretrained: layers.0.*, embeddings kept, full speculators_config (F4)."""
    t = canonical_tensors(d)
    if d.Vd == d.V:
        t.pop("d2t", None)
        t.pop("t2d", None)
    layer = {"model_type": "qwen3" if d.qwen3 else "llama", **llama_keys(d)}
    cfg = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1, "accept_tolerance": 0.0}
            ],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]},
        },
        "transformer_layer_config": layer,
        "draft_vocab_size": d.Vd,
        "target_hidden_size": d.T if d.T != d.H else None,
        "eagle_aux_hidden_state_layer_ids": ids if ids is not None else default_input_ids(d),
        "norm_before_fc": d.norm_before_fc,
        "fc_norm": d.fc_norm,
        "norm_output": norm_output,
        "embed_requires_grad": False,
        "torch_dtype": "float32",
    }
    if norm_before_residual is not None:
        cfg["norm_before_residual"] = norm_before_residual
    return _save(directory, t, cfg)


def write_vllm(
    directory: Path,
    d: Dims,
    *,
    ids: list[int] | None = None,
    norm_output: bool = False,
    midlayer: bool = False,
    nested_only: bool = False,
    arch: str | None = None,
) -> Path:
    """vLLM-native flat config (AngelSlim style when midlayer=True)."""
    t = canonical_tensors(d)
    if midlayer:
        t = rename(t, [("layers.0.", "midlayer.")])
    ids = ids if ids is not None else default_input_ids(d)
    cfg = {
        "architectures": [arch or ("Eagle3DeepseekV2ForCausalLM" if d.mla else "Eagle3LlamaForCausalLM")],
        "model_type": "kimi_k2" if d.mla else ("qwen3" if d.qwen3 else "llama"),
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "target_hidden_size": d.T,
        "fc_norm": d.fc_norm,
        "norm_output": norm_output,
        "norm_before_fc": d.norm_before_fc,
        "norm_before_residual": False,
    }
    if nested_only:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
    else:
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    return _save(directory, t, cfg)


def write_torchspec(
    directory: Path,
    d: Dims,
    *,
    vllm_export: bool = False,
    low_rank: int | None = None,
    norm_output: bool = False,
    model_type: str | None = None,
) -> Path:
    """TorchSpec convert_to_hf.py: one model.safetensors with torchspec_version metadata, embeddings included (F3)."""
    t = canonical_tensors(d)
    if low_rank:
        g = torch.Generator().manual_seed(d.seed + 7)
        t.pop("lm_head.weight", None)
        t["lm_head.down.weight"] = torch.randn(d.H // low_rank, d.H, generator=g).to(d.dtype)
        t["lm_head.up.weight"] = torch.randn(d.Vd, d.H // low_rank, generator=g).to(d.dtype)
    if not vllm_export:
        t = rename(t, [("layers.0.", "midlayer.")])
    ids = default_output_ids(d)
    mt = model_type or ("kimi_k2" if d.mla else "llama")
    if vllm_export and mt == "kimi_k2":
        ids = [i + 1 for i in ids]
    cfg = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM" if d.mla else "LlamaForCausalLMEagle3"],
        "model_type": mt,
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "target_hidden_size": d.T,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
        "num_aux_hidden_states": d.n,
        "_torchspec_version": "0.4.0",
        "torch_dtype": "float32",
    }
    if d.fc_norm:
        cfg["fc_norm"] = True
    if norm_output:
        cfg["norm_output"] = True
    if vllm_export and mt == "kimi_k2":
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    return _save(directory, t, cfg, metadata={"torchspec_version": "0.4.0"})


def write_modelopt(directory: Path, d: Dims) -> Path:
    """ModelOpt EagleExporter: layers.0.*, d2t only (no t2d), no embeddings, eagle_config with ModelOpt keys (F5)."""
    t = canonical_tensors(d)
    t.pop("embed_tokens.weight", None)
    t.pop("t2d", None)
    cfg = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM" if d.mla else "LlamaForCausalLMEagle3"],
        "model_type": "kimi_k2" if d.mla else "llama",
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": default_output_ids(d),
            "use_aux_hidden_state": True,
            "use_input_layernorm_in_first_layer": True,
            "use_last_layernorm": True,
            "use_mtp_layernorm": False,
            "next_layer_regular": True,
            "parallel_draft_step": 1,
            "parallel_draft_heads_num_layers": 1,
        },
    }
    return _save(directory, t, cfg)


def write_automodel(directory: Path, d: Dims, *, norm_output: bool = False) -> Path:
    """NeMo Automodel: model.-prefixed names, lm_head unprefixed (F7)."""
    t = canonical_tensors(d)
    t = {(k if k.startswith("lm_head") else "model." + k): v for k, v in t.items()}
    cfg = {
        "architectures": ["LlamaEagle3DraftModel"],
        "model_type": "llama",
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "eagle_aux_hidden_state_layer_ids": default_input_ids(d),
        "fc_norm": d.fc_norm,
        "norm_output": norm_output,
    }
    return _save(directory, t, cfg)


def write_tiny_target(
    directory: Path,
    *,
    layers: int = 8,
    hidden: int = 16,
    vocab: int = 64,
    heads: int = 2,
    seed: int = 0,
    attention_scale: float = 1.0,
    kv_heads: int | None = None,
) -> Path:
    """A random-weight Llama target saved as safetensors (no tokenizer: prompts go in as input_ids).
    ``attention_scale`` < 1 weakens attention, making the target closer to a bigram model (easy to draft for).
    ``kv_heads`` < ``heads``: grouped-query attention (default: as many KV heads as heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        vocab_size=vocab,
        max_position_embeddings=512,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.mul_(3.0)  # sharper logits: greedy continuations that are not just one repeated token
            if name.endswith("o_proj.weight"):
                p.mul_(attention_scale)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def write_tiny_mla_target(
    directory: Path,
    *,
    layers: int = 8,
    hidden: int = 64,
    vocab: int = 96,
    heads: int = 2,
    seed: int = 0,
    nope: int = 32,
) -> Path:
    """A random-weight DeepSeek-V3 (MLA) target, dense MLP only. kv_lora_rank 512 + rope 64 = 576, the one MLA head
    size vLLM's CPU kernels support."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    cfg = DeepseekV3Config(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        moe_intermediate_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=layers,
        q_lora_rank=64,
        kv_lora_rank=512,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=64,
        v_head_dim=nope,
        vocab_size=vocab,
        max_position_embeddings=512,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
        rope_scaling=None,
    )
    model = DeepseekV3ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.mul_(3.0)
            if name.endswith("o_proj.weight"):
                p.mul_(0.3)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


# -- helpers shared by the tests ------------------------------------------------------------------------------


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (NaN-safe, unlike ==)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def edit_tensors(src: Path, fn) -> Path:
    """Rewrite a checkpoint's model.safetensors through ``fn(dict)`` (in place: for test fixtures only)."""
    from safetensors.torch import load_file

    t = load_file(str(src / "model.safetensors"))
    fn(t)
    save_file(t, str(src / "model.safetensors"))
    return src


def edit_config(src: Path, fn) -> Path:
    cfg = json.loads((src / "config.json").read_text())
    fn(cfg)
    (src / "config.json").write_text(json.dumps(cfg))
    return src


def write_fast_pair(root: Path) -> dict[str, Path]:
    """A tiny random target, a vLLM-layout drafter for it and one input_ids prompt: a verify or drift run in well under
    a second, for tests where what it measures does not matter."""
    target = write_tiny_target(root / "target", layers=8, hidden=64, vocab=96, heads=2, attention_scale=0.3)
    drafter = write_vllm(
        root / "drafter",
        Dims(H=64, T=64, V=96, Vd=96, heads=2, kv_heads=1, head_dim=32, I=96, embed=False, lm_head=True),
        ids=[2, 4, 5],
    )
    prompts = root / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "a", "input_ids": [5, 9, 13, 2, 40, 7]}) + "\n")
    return {"target": target, "drafter": drafter, "prompts": prompts}


def llama_gguf_writer(path: Path, d: Dims, *, context: int = 2048):
    """A gguf ``GGUFWriter`` for a llama file of ``d``'s target dimensions, its config keys written; the caller adds
    tensors (and more keys), then writes and closes it."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(d.target_layers)
    writer.add_context_length(context)
    writer.add_embedding_length(d.T)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    writer.add_vocab_size(d.V)
    return writer


def write_gguf_target(path: Path, d: Dims, *, context: int = 2048) -> Path:
    """A GGUF target's metadata for ``d`` (llama, ``d.target_layers`` layers, width ``d.T``, vocabulary ``d.V``) with a
    tokenizer of ``d.V`` tokens: what ``convert --to gguf`` reads of a target (its config, and the tokenizer it copies).
    One small tensor: a GGUF file without tensors is not what llama.cpp writes."""
    import gguf
    import numpy as np

    writer = llama_gguf_writer(path, d, context=context)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([f"t{i}" for i in range(d.V)])
    writer.add_token_types([gguf.TokenType.NORMAL] * d.V)
    writer.add_token_merges([])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_tensor("output_norm.weight", np.ones(d.T, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- P-EAGLE (parallel drafting): each trainer's and engine's layout, typed from its source ---------------------------


def _mask_hidden(d: Dims, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(d.seed + 11)
    return torch.randn(*(shape or (1, 1, d.n * d.T)), generator=g).to(d.dtype)


def write_peagle_speculators(
    directory: Path,
    d: Dims,
    *,
    mask_token_id: int | None = 60,
    norm_output: bool = False,
    norm_before_residual: bool | None = False,
    ids: list[int] | None = None,
) -> Path:
    """speculators 0.9.0's P-EAGLE (PEagleSpeculatorConfig, PEagleDraftModel.save_pretrained): the EAGLE 3 config with
    speculators_model_type peagle, mask_token_id at the top level, mask_hidden [1, 1, n*T]."""
    out = write_speculators(directory, d, ids=ids, norm_output=norm_output, norm_before_residual=norm_before_residual)
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(architectures=["PEagleDraftModel"], speculators_model_type="peagle", embed_requires_grad=True)
    cfg["speculators_config"]["algorithm"] = "peagle"
    cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 8  # num_depths' default
    if mask_token_id is not None:
        cfg["mask_token_id"] = mask_token_id
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return edit_tensors(out, lambda t: t.update(mask_hidden=_mask_hidden(d)))


def write_peagle_vllm(directory: Path, d: Dims, *, key: str = "pard_token", token: int = 60, **kw) -> Path:
    """vLLM's own (flat) config for a P-EAGLE drafter: its EAGLE 3 class, the mask token under one of the names its
    proposer reads (mask_token_id, pard_token, ptd_token_id), mask_hidden as its buffer [1, n*T]."""
    out = write_vllm(directory, d, **kw)
    edit_config(out, lambda cfg: cfg.update({key: token}))
    return edit_tensors(out, lambda t: t.update(mask_hidden=_mask_hidden(d, (1, d.n * d.T))))


def write_peagle_specforge(directory: Path, d: Dims, *, mask_token_id: int | None = 60) -> Path:
    """SpecForge 0.2.0's PEagleDraftModel (modeling/draft/peagle.py): a LlamaConfig named PEagleDraftModel, layers.N.*
    (its own layer list, not midlayer), embed_tokens, fc of 3 states, mask_hidden [1, 1, 3T], t2d/d2t, capture ids in
    eagle_config (output-of-layer)."""
    t = canonical_tensors(d)
    t["mask_hidden"] = _mask_hidden(d)
    cfg = {
        "architectures": ["PEagleDraftModel"],
        "model_type": "llama",
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "norm_before_residual": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": default_output_ids(d)},
    }
    if d.T != d.H:
        cfg["target_hidden_size"] = d.T
    if mask_token_id is not None:
        cfg["mask_token_id"] = mask_token_id
    return _save(directory, t, cfg)


def write_peagle_automodel(directory: Path, d: Dims, *, norm_output: bool = False) -> Path:
    """NeMo Automodel's layout (model.-prefixed names, lm_head not) with P-EAGLE's mask_hidden and mask token."""
    out = write_automodel(directory, d, norm_output=norm_output)
    # NeMo Automodel 0.7.0's recipe (components/speculative/eagle/draft_llama.py): parallel_drafting, num_depths,
    # mask_token_id at the top level; the on-disk key mask_hidden unprefixed, as speculators'
    edit_config(out, lambda cfg: cfg.update(parallel_drafting=True, num_depths=8, mask_token_id=60))
    return edit_tensors(out, lambda t: t.update(mask_hidden=_mask_hidden(d)))
