"""Numerical building blocks of the reference forward, computed the way vLLM computes them.

RMSNorm: fp32 inside, then ``y.to(w.dtype) * w`` and back to the input dtype (weight ``w``, not ``1 + w``).
The fused add-norm returns the fp32-accumulated residual rounded to the model dtype, as vLLM does.
RoPE: neox style (halves) for Llama/Qwen, interleaved pairs for DeepSeek/Kimi MLA.
"""

from __future__ import annotations

import math

import torch

from ..errors import UnsupportedError
from ..model.drafter import Rope


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (y.to(weight.dtype) * weight).to(x.dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(x + residual), x + residual) with the sum accumulated in fp32."""
    s = x.float() + residual.float()
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    return (y.to(weight.dtype) * weight).to(x.dtype), s.to(x.dtype)


# -- rotary embeddings -----------------------------------------------------------------------------------


def _yarn_correction_range(
    beta_fast: float, beta_slow: float, dim: int, base: float, max_pos: int, truncate: bool = True
) -> tuple[float, float]:
    def correction_dim(rotations: float) -> float:
        return (dim * math.log(max_pos / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def inv_freq(rope: Rope, dim: int, *, deepseek: bool = False) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [dim/2], multiplier on cos/sin), in fp32 exactly as vLLM builds its rope cache."""
    base = rope.theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    inv_freq = 1.0 / pos_freqs
    scaling = rope.scaling or {}
    kind = rope.reading(mla=deepseek)  # an MLA model's scaled rope is DeepSeek's YaRN, whatever its stated type
    missing = rope.reading_lacks(mla=deepseek)
    if missing:
        raise UnsupportedError(
            f"vLLM reads an MLA model's {rope.rope_type} rope as DeepSeek's YaRN, which needs "
            f"{' and '.join(repr(key) for key in missing)} in rope_scaling"
        )
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / float(scaling["factor"]), 1.0
    if kind == "llama3":
        factor = float(scaling["factor"])
        low, high = float(rope.parameter("low_freq_factor")), float(rope.parameter("high_freq_factor"))
        old_ctx = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_ctx / wavelen - low) / (high - low) if low != high else 0
        scaled = torch.where(
            wavelen < old_ctx / high,
            inv_freq,
            torch.where(
                wavelen > old_ctx / low, inv_freq / factor, (1 - smooth) * inv_freq / factor + smooth * inv_freq
            ),
        )
        return scaled, 1.0
    if kind in ("yarn", "deepseek_yarn"):
        factor = float(scaling["factor"])
        old_ctx = int(scaling["original_max_position_embeddings"])
        # DeepSeek's YaRN always truncates the range; YaRN as its ``truncate`` says (default true)
        truncate = kind == "deepseek_yarn" or bool(rope.parameter("truncate"))
        low, high = _yarn_correction_range(
            float(rope.parameter("beta_fast", kind)),
            float(rope.parameter("beta_slow", kind)),
            dim,
            base,
            old_ctx,
            truncate,
        )
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float) - low) / (high - low)).clamp(0, 1)
        keep = 1 - ramp  # 1 = extrapolate (original frequency), 0 = interpolate (divided by factor)
        inv_freq = (1.0 / (factor * pos_freqs)) * (1 - keep) + inv_freq * keep
        mscale = rope.yarn_attention(deepseek=kind == "deepseek_yarn")
        return inv_freq, mscale
    raise UnsupportedError(f"the reference forward does not implement rope_type {kind!r}")


def rope_cos_sin(
    rope: Rope, dim: int, positions: torch.Tensor, *, deepseek: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [*positions.shape, dim/2] in fp32."""
    frequencies, mscale = inv_freq(rope, dim, deepseek=deepseek)
    freqs = positions.to(torch.float32)[..., None] * frequencies.to(positions.device)
    return freqs.cos() * mscale, freqs.sin() * mscale


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, neox: bool) -> torch.Tensor:
    """Rotate the last dimension of x [..., heads, dim] by cos/sin [..., dim/2] (broadcast over heads)."""
    # vLLM keeps its cos/sin cache in the model dtype and rotates in that dtype
    cos, sin = cos.unsqueeze(-2).to(x.dtype), sin.unsqueeze(-2).to(x.dtype)
    if neox:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
