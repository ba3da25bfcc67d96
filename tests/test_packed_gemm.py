"""The target's linears through MKL's packed GEMM while a batch decodes (eaglekit/target/packed_gemm.py): the same
products to fp32 rounding, used only where they pay, and every layer's own forward back afterwards, errors included.
That tokens and aux states stay those of the plain run is held where the decode is tested (test_verify.py: tokens
equal to ``generate`` one prompt at a time, states equal to a full pass; test_real_pair.py on SmolLM2)."""

from __future__ import annotations

import pytest
import torch

from eaglekit.target import packed_gemm
from eaglekit.target.packed_gemm import MIN_ROWS, MIN_STEPS, packed_linears

pytestmark = pytest.mark.skipif(packed_gemm._mkl_ops() is None, reason="this torch has no MKL packed GEMM")


def _tiny_llama(dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=256, max_position_embeddings=64, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).to(dtype).eval()


def _own_forwards(model) -> list[str]:
    return [name for name, m in model.named_modules() if "forward" in m.__dict__]


@pytest.fixture
def counted(monkeypatch):
    """Calls of the packed op, counted."""
    reorder, linear = packed_gemm._mkl_ops()
    calls = []

    def counting(*args):
        calls.append(args[0].shape)
        return linear(*args)

    monkeypatch.setattr(packed_gemm, "_mkl_ops", lambda: (reorder, counting))
    return calls


@torch.no_grad()
def test_packed_linears_give_the_plain_products_and_give_the_forwards_back(counted):
    model = _tiny_llama()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    ids = torch.randint(0, 256, (MIN_ROWS, 1))
    plain = model(ids).logits
    with packed_linears(model, MIN_ROWS, MIN_STEPS) as packed:
        assert packed
        assert len(_own_forwards(model)) == len(linears) == 2 * 7 + 1  # q k v o gate up down per layer, and lm_head
        fast = model(ids).logits
        assert len(counted) == len(linears)
        prefill = model(torch.randint(0, 256, (MIN_ROWS, 3))).logits  # another row count: the plain GEMM, same op
    assert torch.allclose(fast, plain, rtol=1e-5, atol=1e-5), (fast - plain).abs().max()
    assert prefill.shape == (MIN_ROWS, 3, 256)
    assert _own_forwards(model) == []
    assert torch.equal(model(ids).logits, plain)  # back to the plain GEMM: the very same floats


@torch.no_grad()
def test_forwards_come_back_when_the_decode_fails():
    model = _tiny_llama()
    with pytest.raises(RuntimeError, match="stop"):
        with packed_linears(model, MIN_ROWS, MIN_STEPS):
            assert _own_forwards(model)
            raise RuntimeError("stop")
    assert _own_forwards(model) == []


@pytest.mark.parametrize("case", ["few rows", "few steps", "bfloat16", "no memory", "hooked forward"])
def test_not_packed_where_it_cannot_pay(case, monkeypatch, counted):
    """Nor where a layer's forward is already replaced (accelerate's offloading hooks): leaving would drop theirs."""
    model = _tiny_llama(torch.bfloat16 if case == "bfloat16" else torch.float32)
    hooked = model.lm_head
    if case == "hooked forward":
        hooked.forward = hooked.__class__.forward.__get__(hooked)
    rows, steps = (MIN_ROWS - 1 if case == "few rows" else MIN_ROWS), (MIN_STEPS - 1 if case == "few steps" else MIN_STEPS)
    if case == "no memory":
        weights = sum(m.weight.numel() * 4 for m in model.modules() if type(m) is torch.nn.Linear)
        monkeypatch.setattr(packed_gemm, "_available_bytes", lambda: int(weights / packed_gemm.MEMORY_SHARE) - 1)
    with torch.no_grad(), packed_linears(model, rows, steps) as packed:
        assert not packed and _own_forwards(model) == (["lm_head"] if case == "hooked forward" else [])
        model(torch.randint(0, 256, (rows, 1)))
    assert counted == []
    assert ("forward" in hooked.__dict__) == (case == "hooked forward")


def test_the_memory_rule_reads_this_machine():
    assert packed_gemm._available_bytes() > 0
