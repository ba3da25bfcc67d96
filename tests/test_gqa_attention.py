"""The CPU attention that shares a GQA target's KV heads instead of copying them (eaglekit.target.gqa_attention):
the floats transformers' own SDPA attention gives, bit for bit, and the same greedy tokens and aux states."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from eaglekit.target.gqa_attention import NAME, attention

from drafters import write_tiny_target


class Layer(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def inputs(q_len: int, kv_len: int, groups: int, mask: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    batch, kv_heads, dim = 3, 2, 8
    query = torch.randn(batch, kv_heads * groups, q_len, dim, generator=g)
    key, value = torch.randn(2, batch, kv_heads, kv_len, dim, generator=g)
    allowed = torch.ones(batch, 1, q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
    allowed[0, :, :, :2] = False  # row 0 left-padded by two
    if mask == "bool":
        return query, key, value, allowed
    return query, key, value, torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("mask", ["bool", "additive"])
@pytest.mark.parametrize("q_len,kv_len", [(1, 9), (5, 5), (3, 11)])  # a decode step, a prefill, a chunk on a cache
def test_the_same_floats_as_transformers_sdpa(mask, q_len, kv_len):
    query, key, value, attention_mask = inputs(q_len, kv_len, groups=3, mask=mask)
    layer = Layer(groups=3)
    theirs, _ = sdpa_attention_forward(layer, query, key, value, attention_mask, scaling=0.35)
    ours, _ = attention(layer, query, key, value, attention_mask, scaling=0.35)
    assert ours.shape == theirs.shape == (3, q_len, 6, 8) and ours.is_contiguous()
    assert torch.equal(ours, theirs)


def test_every_other_case_is_transformers_own(monkeypatch):
    import eaglekit.target.gqa_attention as module

    calls = []
    monkeypatch.setattr(module, "sdpa_attention_forward", lambda *a, **k: calls.append(k) or ("theirs", None))
    query, key, value, mask = inputs(1, 9, groups=3, mask="bool")
    assert attention(Layer(3), query, key, value, None)[0] == "theirs"  # no mask: transformers already shares the heads
    assert attention(Layer(1), query[:, :2], key, value, mask)[0] == "theirs"  # no grouping
    assert attention(Layer(3), query, key, value, mask, output_attentions=True)[0] == "theirs"
    assert len(calls) == 3
    prefill = inputs(5, 5, groups=3, mask="bool")
    assert (
        attention(Layer(3), *prefill)[0] != "theirs" and len(calls) == 3
    )  # a mask, several positions: transformers copies
    # a decode step: transformers 5.24 and later pack the groups (pack_gqa), copying nothing; before, they copied
    monkeypatch.setattr(module.transformers_sdpa, "pack_gqa", lambda *a: None, raising=False)
    assert attention(Layer(3), query, key, value, mask)[0] == "theirs" and len(calls) == 4
    monkeypatch.delattr(module.transformers_sdpa, "pack_gqa")
    assert attention(Layer(3), query, key, value, mask)[0] != "theirs" and len(calls) == 4


def test_a_cpu_target_uses_it_and_decodes_the_same_tokens_and_states(tmp_path):
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(write_tiny_target(tmp_path / "gqa", heads=4, kv_heads=2, hidden=32)))
    assert target.model.config._attn_implementation == NAME
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (9, 4, 7, 12)]  # unequal: a padding mask
    ours = target.decode_batch(prompts, 16, padding=float("inf"), capture=(2, 8))
    target.model.set_attn_implementation("sdpa")
    theirs = target.decode_batch(prompts, 16, padding=float("inf"), capture=(2, 8))
    assert (
        [d.tokens.tolist() for d in ours]
        == [d.tokens.tolist() for d in theirs]
        == [target.generate(p, 16).tolist() for p in prompts]
    )
    assert all(torch.equal(a.states[k], b.states[k]) for a, b in zip(ours, theirs) for k in (2, 8))


def test_not_used_where_transformers_runs_another_attention(tmp_path):
    from transformers import AutoModelForCausalLM

    from eaglekit.target.gqa_attention import use_shared_kv_heads

    model = AutoModelForCausalLM.from_pretrained(
        write_tiny_target(tmp_path / "eager", heads=4, kv_heads=2, hidden=32), attn_implementation="eager"
    )
    assert use_shared_kv_heads(model) is False and model.config._attn_implementation == "eager"


def test_a_model_transformers_refuses_to_switch_keeps_sdpa(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from eaglekit.target import gqa_attention

    model = AutoModelForCausalLM.from_pretrained(
        write_tiny_target(tmp_path / "t", heads=4, kv_heads=2, hidden=32), attn_implementation="sdpa"
    )
    real = type(model).set_attn_implementation

    def refuse(self, name, **kwargs):
        if name == NAME:
            raise ValueError("a sub-model does not support SDPA")
        return real(self, name, **kwargs)

    monkeypatch.setattr(type(model), "set_attn_implementation", refuse)
    assert gqa_attention.use_shared_kv_heads(model) is False and model.config._attn_implementation == "sdpa"
    monkeypatch.setattr(gqa_attention.torch, "__version__", "2.4.1+cpu")
    monkeypatch.setattr(type(model), "set_attn_implementation", real)
    assert gqa_attention.use_shared_kv_heads(model) is False and model.config._attn_implementation == "sdpa"
