"""The target's linears through oneDNN's prepacked weights while batches decode (eaglekit/target/packed_gemm.py): the
same products to fp32 rounding, for the row counts where they pay, and every layer's own forward back afterwards,
errors included.
That tokens and aux states stay those of the plain run is held where the decode is tested (test_verify.py: tokens
equal to ``generate`` one prompt at a time, states equal to a full pass; test_real_pair.py on SmolLM2)."""

from __future__ import annotations

import pytest
import torch

from eaglekit.target import packed_gemm
from eaglekit.target.packed_gemm import MAX_ROWS, MIN_ROWS, MIN_STEPS, SHARED_INPUT, packed_linears

pytestmark = pytest.mark.skipif(packed_gemm._onednn_ops() is None, reason="this torch has no oneDNN")


def _tiny_llama(dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg).to(dtype).eval()


def _own_forwards(model) -> list[str]:
    return [name for name, m in model.named_modules() if "forward" in m.__dict__]


@pytest.fixture
def counted(monkeypatch):
    """Calls of the prepacked op: the rows each multiplied."""
    reorder, linear = packed_gemm._onednn_ops()
    calls = []

    def counting(*args):
        calls.append(args[0].numel() // args[0].shape[-1])
        return linear(*args)

    monkeypatch.setattr(packed_gemm, "_onednn_ops", lambda: (reorder, counting))
    return calls


@torch.no_grad()
def test_packed_linears_give_the_plain_products_and_give_the_forwards_back(counted):
    model = _tiny_llama()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    steps = {rows: torch.randint(0, 256, (rows, 1)) for rows in (MIN_ROWS, MAX_ROWS, MIN_ROWS - 1, MAX_ROWS + 1)}
    plain = {rows: model(ids).logits for rows, ids in steps.items()}
    with packed_linears(model, 16, MIN_STEPS) as packed:
        assert packed
        assert len(_own_forwards(model)) == len(linears) == 2 * 7 + 1  # q k v o gate up down per layer, and lm_head
        fast = {rows: model(ids).logits for rows, ids in steps.items()}
        prefill = model(torch.randint(0, 256, (MIN_ROWS, MAX_ROWS))).logits  # 4 x 32 positions: the plain GEMM
    # one prepacked call per step for each layer's q/k/v, o, gate/up, down and for lm_head, for each row count from
    # MIN_ROWS to MAX_ROWS, whatever count the weights were laid out for
    assert counted == [MIN_ROWS] * (2 * 4 + 1) + [MAX_ROWS] * (2 * 4 + 1)
    for rows in steps:
        assert torch.allclose(fast[rows], plain[rows], rtol=1e-5, atol=1e-5), (
            rows,
            (fast[rows] - plain[rows]).abs().max(),
        )
        if rows < MIN_ROWS or rows > MAX_ROWS:
            assert torch.equal(fast[rows], plain[rows])  # the plain GEMM itself
    assert prefill.shape == (MIN_ROWS, MAX_ROWS, 256)
    assert _own_forwards(model) == []
    assert torch.equal(model(steps[MIN_ROWS]).logits, plain[MIN_ROWS])  # back to the plain GEMM: the very same floats


@torch.no_grad()
def test_one_gemm_for_linears_on_one_input_gives_their_own_products_bit_for_bit(monkeypatch):
    """q/k/v and gate/up prepacked as one weight: the same floats as each prepacked alone (so did SmolLM2's demo
    decode: the same tokens, aux states, logits and caches both ways)."""
    model = _tiny_llama()
    steps = [torch.randint(0, 256, (rows, 1)) for rows in (MIN_ROWS, 8, MAX_ROWS)]
    with packed_linears(model, 16, MIN_STEPS):
        shared = [model(ids).logits for ids in steps]
    monkeypatch.setattr(packed_gemm, "SHARED_INPUT", ())
    with packed_linears(model, 16, MIN_STEPS):
        alone = [model(ids).logits for ids in steps]
    assert all(torch.equal(a, b) for a, b in zip(shared, alone))


@torch.no_grad()
def test_a_member_called_on_another_input_computes_its_own_product(counted):
    model = _tiny_llama()
    attention = model.model.layers[0].self_attn
    x, other = torch.randn(MIN_ROWS, 64), torch.randn(MIN_ROWS, 64)
    weight = {name: getattr(attention, name).weight for name in SHARED_INPUT[0]}
    with packed_linears(model, 16, MIN_STEPS):
        q = attention.q_proj(x)  # one GEMM: q, k and v of x
        k = attention.k_proj(other)  # not x: k of other, on its own
        v = attention.v_proj(x)  # what was computed for x is dropped once another input came: a new shared GEMM
        k_again = attention.k_proj(x)  # taken from that GEMM
    assert len(counted) == 2
    for name, product, inputs in (("q_proj", q, x), ("k_proj", k, other), ("v_proj", v, x), ("k_proj", k_again, x)):
        assert torch.allclose(product, torch.nn.functional.linear(inputs, weight[name]), rtol=1e-5, atol=1e-6), name
    assert torch.equal(k, torch.nn.functional.linear(other, weight["k_proj"]))  # the plain GEMM itself


def test_only_linears_of_one_module_with_one_input_width_and_like_biases_share_a_gemm():
    def attention(k_in=8, v_bias=False):
        module = torch.nn.Module()
        module.q_proj, module.k_proj, module.v_proj = (
            torch.nn.Linear(8, 8, bias=False),
            torch.nn.Linear(k_in, 4, bias=False),
            torch.nn.Linear(8, 4, bias=v_bias),
        )
        return module

    model = torch.nn.ModuleList([attention(), attention(k_in=6), attention(v_bias=True)])
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert packed_gemm._shared_input_groups(model, linears) == [[model[0].q_proj, model[0].k_proj, model[0].v_proj]]
    assert packed_gemm._shared_input_groups(model, linears[1:]) == []  # one member not a plain float32 linear


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
    rows, steps = (
        (MIN_ROWS - 1 if case == "few rows" else MIN_ROWS),
        (MIN_STEPS - 1 if case == "few steps" else MIN_STEPS),
    )
    if case == "no memory":
        weights = sum(m.weight.numel() * 4 for m in model.modules() if type(m) is torch.nn.Linear)
        monkeypatch.setattr(packed_gemm, "available_bytes", lambda: int(weights / packed_gemm.MEMORY_SHARE) - 1)
    with torch.no_grad(), packed_linears(model, rows, steps) as packed:
        assert not packed and _own_forwards(model) == (["lm_head"] if case == "hooked forward" else [])
        model(torch.randint(0, 256, (rows, 1)))
    assert counted == []
    assert ("forward" in hooked.__dict__) == (case == "hooked forward")


def test_the_memory_rule_reads_this_machine():
    assert packed_gemm.available_bytes() > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_s_prepacked_product_does_not_depend_on_the_rows_beside_it(threads):
    """What lets a batched decode drop its done rows (target/decode.py, ``_Rows.drop_done``) without moving the others'
    linears: from ``MIN_ROWS`` to ``MAX_ROWS`` rows, a row's product is the same floats in any batch of them."""
    reorder, linear = packed_gemm._onednn_ops()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(threads)
        for n_out, n_in in ((1536, 576), (192, 64), (49152 // 16, 576)):
            weight = torch.randn(n_out, n_in, generator=generator)
            packed = reorder(weight, MAX_ROWS)
            x = torch.randn(MAX_ROWS, n_in, generator=generator)
            every = linear(x, packed, None, "none", [], "")
            for rows in (list(range(MIN_ROWS)), list(range(1, MAX_ROWS, 2)), [0, 5, 6, 7, 30], list(range(20))):
                assert torch.equal(linear(x[rows], packed, None, "none", [], ""), every[rows]), (n_out, rows)
    finally:
        torch.set_num_threads(before)
