"""A config that contradicts itself or its tensors is flagged by plain `validate` (issue 53, item 3); `--engine` adds
what a release does with it, and `convert` repairs what writing can repair (a tie no head can honour) and refuses the
rest. The shape family (vocab_size against embed rows, draft_vocab_size against lm_head rows and d2t, hidden_size
against norm widths, head counts against q/k/v, target_hidden_size against fc, num_hidden_layers against the layers)
is `tensor.shape` / `tensor.missing` / `tensor.unexpected`, held here too."""

from __future__ import annotations

import json

import pytest
import torch

from eaglekit import api

from drafters import Dims, edit_config, edit_tensors, write_specforge, write_speculators, write_vllm


def checks(report, severity: str | None = None) -> dict[str, str]:
    return {f.check: f.message for f in report.findings if severity is None or f.severity == severity}


def test_a_tied_head_beside_a_head_of_another_shape_is_an_error_without_engine(tmp_path, cli):
    src = edit_config(write_vllm(tmp_path / "src", Dims()), lambda c: c.update(tie_word_embeddings=True))
    report = api.validate(src)
    assert not report.ok
    message = checks(report, "error")["config.tied_head"]
    assert "lm_head.weight [32, 16]" in message and "[64, 16]" in message
    # --engine adds what each release does with it
    vllm = {f.check: f for f in api.validate(src, engine="vllm==0.32").findings if f.engine}
    assert (
        vllm["engine.lm_head_tied"].severity == "info"
        and "runs the shipped lm_head" in vllm["engine.lm_head_tied"].effect
    )
    sg = edit_config(write_specforge(tmp_path / "sg", Dims()), lambda c: c.update(tie_word_embeddings=True))
    assert "config.tied_head" in checks(api.validate(sg), "error")
    sglang = {f.check: f for f in api.validate(sg, engine="sglang==0.5.23").findings if f.engine}
    assert (
        sglang["engine.lm_head_tied"].severity == "error"
        and "runs its embeddings" in sglang["engine.lm_head_tied"].effect
    )
    # convert writes tie_word_embeddings false: every loader then runs the shipped head, as vLLM did
    data = json.loads(cli("convert", src, tmp_path / "out", "--to", "vllm", "--json").stdout)
    assert any(n["check"] == "config.tied_head_repaired" for n in data["notes"])
    assert json.loads((tmp_path / "out" / "config.json").read_text())["tie_word_embeddings"] is False
    assert api.validate(tmp_path / "out").ok


def test_a_tied_head_of_the_same_shape_warns(tmp_path):
    src = edit_config(write_vllm(tmp_path / "src", Dims(Vd=64)), lambda c: c.update(tie_word_embeddings=True))
    report = api.validate(src)
    assert report.ok and "drops the shipped one" in checks(report, "warning")["config.tied_head"]
    # speculators keeps the key in transformer_layer_config, which vLLM builds the drafter from
    spec = edit_config(
        write_speculators(tmp_path / "spec", Dims(Vd=64)),
        lambda c: c["transformer_layer_config"].update(tie_word_embeddings=True),
    )
    found = [f for f in api.validate(spec).findings if f.check == "config.tied_head"]
    assert [f.subject for f in found] == ["transformer_layer_config.tie_word_embeddings"]


def test_no_tie_without_a_head_of_its_own(tmp_path):
    """tie true with no lm_head shipped: the engines borrow the target's head (vocab.lm_head_borrowed): no finding."""
    src = edit_config(
        write_vllm(tmp_path / "src", Dims(Vd=64, lm_head=False)), lambda c: c.update(tie_word_embeddings=True)
    )
    assert "config.tied_head" not in checks(api.validate(src))


@pytest.mark.parametrize(
    ("dims", "said"),
    [
        (Dims(heads=3, kv_heads=2), "num_attention_heads 3 is not a multiple of num_key_value_heads 2"),
        (Dims(head_dim=7), "head_dim 7 is odd"),
    ],
)
def test_heads_that_cannot_group_or_rotate(tmp_path, dims, said):
    assert said in checks(api.validate(write_vllm(tmp_path / "src", dims)), "error")["config.heads"]


def test_token_ids_and_a_draft_vocabulary_past_the_vocabulary(tmp_path):
    src = edit_config(write_vllm(tmp_path / "src", Dims()), lambda c: c.update(pad_token_id=64, eos_token_id=[2, 70]))
    found = [(f.severity, f.subject) for f in api.validate(src).findings if f.check == "config.vocab_ids"]
    assert found == [("error", "pad_token_id"), ("warning", "eos_token_id")]
    bigger = edit_config(
        write_vllm(tmp_path / "big", Dims(Vd=64, lm_head=True)), lambda c: c.update(draft_vocab_size=80)
    )
    assert (
        "draft_vocab_size 80 is larger than vocab_size 64" in checks(api.validate(bigger), "error")["config.vocab_ids"]
    )


def test_layer_types_naming_more_layers_than_there_are(tmp_path):
    src = edit_config(write_vllm(tmp_path / "src", Dims()), lambda c: c.update(layer_types=["full_attention"] * 2))
    assert "names 2 layers" in checks(api.validate(src), "error")["attention.layer_types"]


@pytest.mark.parametrize(
    ("edit", "check", "said"),
    [
        (
            lambda c: c.update(vocab_size=80),
            "tensor.shape",
            "embed_tokens.weight has shape [64, 16], expected [80, 16]",
        ),
        (
            lambda c: c.update(draft_vocab_size=24),
            "tensor.shape",
            "lm_head.weight has shape [32, 16], expected [24, 16]",
        ),
        (lambda c: c.update(hidden_size=24), "tensor.shape", "norm.weight has shape [16], expected [24]"),
        (
            lambda c: c.update(num_key_value_heads=2),
            "tensor.shape",
            "k_proj.weight has shape [8, 32], expected [16, 32]",
        ),
        (lambda c: c.update(target_hidden_size=24), "tensor.shape", "fc.weight has shape [16, 48], expected [16, 72]"),
        (lambda c: c.update(num_hidden_layers=2), "tensor.missing", "missing tensor layers.1.input_layernorm.weight"),
    ],
)
def test_the_shape_family_is_caught_without_engine(tmp_path, edit, check, said):
    src = edit_config(write_vllm(tmp_path / "src", Dims()), edit)
    assert any(
        said in message for c, message in [(f.check, f.message) for f in api.validate(src).findings] if c == check
    )


def test_fewer_declared_layers_than_shipped(tmp_path):
    src = edit_tensors(
        write_vllm(tmp_path / "src", Dims()), lambda t: t.update({"layers.1.mlp.up_proj.weight": torch.zeros(32, 16)})
    )
    assert "tensor.unexpected" in checks(api.validate(src), "error")
