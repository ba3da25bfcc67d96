"""SDPA with a GQA model's KV heads shared rather than copied, for targets run on a CPU with an attention mask.

transformers' ``"sdpa"`` attention repeats the K and V heads of a GQA model (SmolLM2: 3 to 9) before calling torch's
SDPA whenever an attention mask is present (its ``use_gqa_in_sdpa``, whose comment gives the reason: on CUDA a mask
with ``enable_gqa`` sends SDPA to its math kernel; read in transformers 5.19's source, not measured here). verify's
batched decode always has a mask: left-padded prompts. On a CPU, torch's SDPA takes the mask and ``enable_gqa=True``
together and gives the same floats without the copies: the demo's decode (8 prompts x 68
tokens) went from 4.42-4.49 s to 4.05-4.14 s, its tokens and aux states bit-identical.

From transformers 5.24 on, a call with a single query position (a decode step) no longer repeats them either: its
``pack_gqa`` folds each group's query heads into query positions on their KV head. ``attention`` handles exactly the
calls transformers would still repeat the heads for (CPU, a mask, grouped KV heads, not a single query position where
transformers packs, nothing else asked of it: the prefill, on 5.24) and hands every other call to transformers' own
``sdpa_attention_forward``, so the floats are always the ones transformers' SDPA gives. It is registered under
``NAME`` with transformers' ``AttentionInterface`` and, for its masks, ``AttentionMaskInterface`` (the documented way
to add an attention implementation); ``use_shared_kv_heads`` switches a loaded CPU model from ``"sdpa"`` to it.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations import sdpa_attention as transformers_sdpa
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "eaglekit_sdpa_shared_kv"


def attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """What ``sdpa_attention_forward`` computes, in the case it would repeat the KV heads, without repeating them."""
    ours = (
        attention_mask is not None
        and getattr(module, "num_key_value_groups", 1) > 1
        and query.device.type == "cpu"
        and kwargs.get("position_bias") is None
        and kwargs.get("cache") is None
        and not kwargs.get("output_attentions", False)
        and transformers_repeats_kv_heads(query, key, value, attention_mask)
    )
    if not ours:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    # With a mask, transformers' SDPA call is never causal and crops nothing: the same call, the heads grouped.
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=False, enable_gqa=True
    )
    return output.transpose(1, 2).contiguous(), None


def transformers_repeats_kv_heads(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None
) -> bool:
    """Whether transformers' ``sdpa_attention_forward`` copies the KV heads for this call of a grouped layer: not where
    it passes ``enable_gqa`` itself (``use_gqa_in_sdpa``), nor for a single query position where it packs the groups
    (``pack_gqa``, transformers 5.24 and later)."""
    if transformers_sdpa.use_gqa_in_sdpa(attention_mask, key, value):
        return False
    return not (query.shape[2] == 1 and hasattr(transformers_sdpa, "pack_gqa"))


def use_shared_kv_heads(model) -> bool:
    """Switch ``model`` (loaded on a CPU with ``"sdpa"`` attention) to ``attention``; False where it does not apply:
    another attention, another device (``model.device`` of a ``device_map`` model is its first GPU or ``meta``), a
    torch before 2.5 (no ``enable_gqa``), or a model transformers refuses to switch (a composite model whose sub-model
    fell back to eager), which keeps ``"sdpa"``."""
    config = model.config
    if config._attn_implementation != "sdpa" or model.device.type != "cpu" or not _has_enable_gqa():
        return False
    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    try:
        model.set_attn_implementation(NAME)
    except ValueError:
        model.set_attn_implementation("sdpa")
        return False
    return config._attn_implementation == NAME


def _has_enable_gqa() -> bool:
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 5)
