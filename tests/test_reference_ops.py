"""Reference building blocks against transformers' own: RoPE with llama3 and yarn scaling, RMSNorm, and Hub ids
resolved from the local cache."""

from __future__ import annotations

import os

import pytest
import torch

from eaglekit.model.drafter import Rope
from eaglekit.reference.ops import apply_rope, rms_norm, rope_cos_sin

from drafters import Dims, write_vllm

SCALINGS = {
    "default": None,
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "yarn": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "beta_fast": 32,
        "beta_slow": 1,
    },
    "linear": {"rope_type": "linear", "factor": 2.0},
    # gpt-oss states truncate: false (an untruncated correction range) and the mscale pair (a ratio of magnitudes)
    "yarn untruncated, mscale pair": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "truncate": False,
        "mscale": 0.9,
        "mscale_all_dim": 0.5,
    },
}


@pytest.mark.parametrize("kind", list(SCALINGS))
def test_neox_rope_matches_transformers_llama(kind):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    head_dim, theta = 32, 500000.0
    cfg = LlamaConfig(
        hidden_size=head_dim * 2,
        num_attention_heads=2,
        max_position_embeddings=1024,
        rope_theta=theta,
        rope_scaling=SCALINGS[kind],
    )
    rotary = LlamaRotaryEmbedding(cfg)
    positions = torch.arange(300)  # past every original context above, so the scaled frequencies matter
    q = torch.randn(1, 2, 300, head_dim)
    k = torch.randn(1, 2, 300, head_dim)
    cos, sin = rotary(q, positions[None])
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)

    scaling = dict(SCALINGS[kind]) if SCALINGS[kind] else None
    c, s = rope_cos_sin(Rope(theta, scaling), head_dim, positions)
    ours_q = apply_rope(q[0].transpose(0, 1), c, s, neox=True).transpose(0, 1)[None]
    ours_k = apply_rope(k[0].transpose(0, 1), c, s, neox=True).transpose(0, 1)[None]
    torch.testing.assert_close(ours_q, q_hf, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(ours_k, k_hf, atol=2e-5, rtol=2e-5)


def test_rms_norm_matches_transformers_in_fp32_and_bf16():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(64, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.1)
    x = torch.randn(5, 64) * 3
    torch.testing.assert_close(rms_norm(x, norm.weight.detach(), 1e-6), norm(x), atol=1e-6, rtol=1e-6)
    xb, wb = x.bfloat16(), norm.weight.detach().bfloat16()
    ref = (xb.float() * torch.rsqrt(xb.float().pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16() * wb
    assert torch.equal(rms_norm(xb, wb, 1e-6), ref)  # fp32 inside, then the weight in bf16, as vLLM does


def test_hub_ids_resolve_from_the_local_cache(tmp_path, monkeypatch, cli):
    """A drafter already in the Hugging Face cache is read by its repo id; nothing is downloaded."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--org--drafter" / "snapshots" / ("a" * 40)
    blobs = cache / "models--org--drafter" / "blobs"
    src = write_vllm(tmp_path / "src", Dims())
    snapshot.mkdir(parents=True)
    blobs.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):  # the cache layout: snapshot files link into blobs/
        (blobs / name).write_bytes((src / name).read_bytes())
        os.symlink(os.path.relpath(blobs / name, snapshot), snapshot / name)
    (cache / "models--org--drafter" / "refs").mkdir()
    (cache / "models--org--drafter" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    result = cli("inspect", "org/drafter")
    assert "dialect     vllm" in result.stdout
    assert "not a Hub repo in the local cache" in cli("inspect", "org/missing", expect=2).stderr


def test_an_mla_models_scaled_rope_is_deepseeks_yarn_whatever_its_stated_type():
    """vLLM's DeepSeek attention runs every scaled rope as DeepSeek's YaRN (tests/test_vllm_mla_parity.py runs a llama3
    one): on an MLA model the reference takes the stated factor and original context with YaRN's defaults; a scaling
    without an original context cannot be read so and is refused in one line."""
    from eaglekit.errors import UnsupportedError

    positions = torch.arange(40)
    llama3 = Rope(
        10000.0,
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    )
    yarn = Rope(10000.0, {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16})
    for a, b in zip(
        rope_cos_sin(llama3, 64, positions, deepseek=True), rope_cos_sin(yarn, 64, positions, deepseek=True)
    ):
        assert torch.equal(a, b)
    as_llama3 = rope_cos_sin(llama3, 64, positions)  # on a Llama model it is llama3
    assert not torch.allclose(as_llama3[0], rope_cos_sin(yarn, 64, positions)[0])
    with pytest.raises(UnsupportedError, match="original_max_position_embeddings"):
        rope_cos_sin(Rope(10000.0, {"rope_type": "linear", "factor": 2.0}), 64, positions, deepseek=True)
