"""Failures reported in the wild (issue 19) and the ambiguity rule (issue 14, item 5), each rebuilt as a tiny
checkpoint from the reported config: the keys, ids and layer counts as the threads quote them, tiny widths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from eaglekit import api, dialects
from eaglekit.errors import UsageError

from drafters import Dims, _save, canonical_tensors, edit_config, llama_keys, rename, write_specforge, write_vllm


def target_config(directory: Path, layers: int) -> Path:
    """A target's config.json alone (what convert/validate read): hidden 16, vocab 64, ``layers`` decoder layers."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 16,
                "num_hidden_layers": layers,
                "num_attention_heads": 2,
                "vocab_size": 64,
                "intermediate_size": 32,
                "rope_theta": 10000.0,
            }
        )
    )
    return directory


def write_nvidia_gpt_oss(directory: Path, ids: list[int]) -> Path:
    """NVIDIA's gpt-oss-120b EAGLE-3 drafters as sglang#32334 quotes them: ``LlamaForCausalLMEagle3``, ``layers.0.*``,
    ids only in ``eagle_config.eagle_aux_hidden_state_layer_ids``, ``norm_before_fc: true`` with ``input_norm.weight``,
    d2t without t2d, no embeddings. "v3": ids [24, 30, 36] (input-of-layer already); "-long-context": [1, 17, 32]."""
    d = Dims(norm_before_fc=True, target_layers=36)
    t = canonical_tensors(d)
    t.pop("embed_tokens.weight")
    t.pop("t2d")
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "norm_before_fc": True,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
    }
    return _save(directory, t, cfg)


# -- 1. boundary ids: the impossible reading is discarded (sglang#32334, tokenspeed#526, llama.cpp#25794) -----------


def test_gpt_oss_v3_boundary_ids_read_by_the_target(tmp_path, cli):
    src, target = write_nvidia_gpt_oss(tmp_path / "v3", [24, 30, 36]), target_config(tmp_path / "gpt-oss-120b", 36)
    report = json.loads(cli("validate", src, "--target", target, "--json").stdout)
    assert report["ok"], report["findings"]
    note = next(f for f in report["findings"] if f["check"] == "aux.impossible_reading")
    assert (
        "[25, 31, 37]" in note["message"]
        and "0..36" in note["message"]
        and "[24, 30, 36] (input-of-layer)" in note["message"]
    )
    assert not report["ambiguous"]
    cli("convert", src, tmp_path / "out", "--to", "vllm", "--target", target)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (
        cfg["eagle_aux_hidden_state_layer_ids"]
        == [24, 30, 36]
        == cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    )


def test_gpt_oss_v3_without_a_target_reports_both_readings_and_convert_refuses(tmp_path, cli):
    src = write_nvidia_gpt_oss(tmp_path / "v3", [24, 30, 36])
    info = json.loads(cli("inspect", src, "--json").stdout)
    assert info["ambiguous"] and info["ambiguity"]["kind"] == "convention"
    assert sorted(r["input_ids"] for r in info["ambiguity"]["readings"]) == [[24, 30, 36], [25, 31, 37]]
    assert "AMBIGUOUS" in cli("inspect", src).stdout
    report = json.loads(cli("validate", src, "--json").stdout)
    assert report["ambiguous"] and any(f["check"] == "aux.ambiguous" for f in report["findings"])
    result = cli("convert", src, tmp_path / "out", "--to", "vllm", expect=2)
    assert "ambiguous" in result.stderr and "--target" in result.stderr
    assert not (tmp_path / "out").exists()


def test_gpt_oss_long_context_ids_stay_output_of_layer(tmp_path, cli):
    """The same producer's other drafter is output-of-layer: evidence (the default pattern, the target) decides."""
    src, target = write_nvidia_gpt_oss(tmp_path / "lc", [1, 17, 32]), target_config(tmp_path / "t", 36)
    info = json.loads(cli("inspect", src, "--json").stdout)
    assert not info["ambiguous"] and info["aux_layers"]["input_ids"] == [2, 18, 33]
    report = json.loads(cli("validate", src, "--target", target, "--json").stdout)
    assert report["ok"] and not any(f["check"] == "aux.impossible_reading" for f in report["findings"])


@pytest.mark.parametrize("dialect", ["sglang", "modelopt", "torchspec", "vllm"])
def test_the_impossible_reading_rule_is_the_same_in_every_dialect(tmp_path, dialect):
    """Read in each dialect, whatever convention it gives the location: a reading outside 0..L is discarded."""
    src = write_nvidia_gpt_oss(tmp_path / "c", [24, 30, 36])
    if dialect == "vllm":  # vLLM reads these as input-of-layer: [-1, ...] would be impossible there
        edit_config(src, lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[-1, 17, 32]))
    with dialects.load(src, dialect, target_num_layers=36) as loaded:
        got = loaded.drafter.aux.as_input()
        assert any(n.check == "aux.impossible_reading" for n in loaded.notes)
    assert got == ((0, 18, 33) if dialect == "vllm" else (24, 30, 36))


def test_a_reading_impossible_both_ways_is_still_out_of_range(tmp_path, cli):
    src, target = write_nvidia_gpt_oss(tmp_path / "c", [24, 30, 40]), target_config(tmp_path / "t", 36)
    report = json.loads(cli("validate", src, "--target", target, "--json", expect=1).stdout)
    assert [f["check"] for f in report["findings"] if f["severity"] == "error"] == ["aux.range"]


def test_ambiguous_outputs_follow_their_schemas(tmp_path, cli):
    from eaglekit import schemas

    src = write_nvidia_gpt_oss(tmp_path / "v3", [24, 30, 36])
    assert schemas.check(json.loads(cli("inspect", src, "--json").stdout), "inspect.schema.json") == []
    assert schemas.check(json.loads(cli("validate", src, "--json").stdout), "validate.schema.json") == []


# -- 2 and 3. borrowed heads (sglang#9739; sglang#27829 / #27908) ----------------------------------------------------


def write_headless(directory: Path, *, draft_vocab_size) -> Path:
    """A full-vocabulary drafter without lm_head (nvidia/gpt-oss-120b-Eagle3: ``draft_vocab_size: null``;
    nvidia/Kimi-K2.6-Eagle3: declares ``draft_vocab_size`` yet ships no lm_head)."""
    src = write_specforge(directory, Dims(Vd=64, lm_head=False))
    return edit_config(src, lambda c: c.update(draft_vocab_size=draft_vocab_size))


def _borrowed(report: dict) -> dict:
    return {f["engine"]: f for f in report["findings"] if f["check"] == "vocab.lm_head_borrowed"}


def test_validate_says_a_declared_draft_vocab_without_lm_head_is_borrowed_and_which_engines_borrow_it(tmp_path, cli):
    report = json.loads(cli("validate", write_headless(tmp_path / "kimi", draft_vocab_size=64), "--json").stdout)
    by_engine = _borrowed(report)
    assert by_engine["vllm"]["severity"] == "info" and "borrows it" in by_engine["vllm"]["effect"]
    sglang = by_engine["sglang"]
    assert sglang["severity"] == "warning" and "draft_vocab_size 64" in sglang["message"]
    assert "only when draft_vocab_size is null" in sglang["effect"] and "not run by eaglekit" in sglang["effect"]
    assert report["counts"]["warning"] >= 1


def test_validate_with_null_draft_vocab_says_both_engines_borrow(tmp_path, cli):
    src = write_headless(tmp_path / "gpt-oss", draft_vocab_size=None)
    by_engine = _borrowed(json.loads(cli("validate", src, "--json").stdout))
    assert by_engine["sglang"]["severity"] == "info" and "as draft_vocab_size is null" in by_engine["sglang"]["effect"]


def test_a_drafter_with_its_own_head_borrows_nothing(tmp_path, cli):
    assert _borrowed(json.loads(cli("validate", write_specforge(tmp_path / "c", Dims(Vd=64)), "--json").stdout)) == {}


@pytest.mark.parametrize("declared", [64, None])
def test_sglang_writer_keeps_draft_vocab_null_for_a_drafter_without_lm_head(tmp_path, cli, declared):
    src = write_headless(tmp_path / "src", draft_vocab_size=declared)
    cli("convert", src, tmp_path / "out", "--to", "sglang")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["draft_vocab_size"] is None and "lm_head.weight" not in load_file(
        str(tmp_path / "out" / "model.safetensors")
    )
    report = json.loads(cli("validate", tmp_path / "out", "--json").stdout)
    assert _borrowed(report)["sglang"]["severity"] == "info"
    # and read back, the drafter is the same full-vocabulary drafter
    assert api.inspect(tmp_path / "out").data["vocab"]["draft_vocab_size"] == 64


# -- 4. a Llama-shaped drafter labelled Qwen3ForCausalLM (AngelSlim, sglang#9135) -----------------------------------


def write_angelslim_qwen3(directory: Path) -> Path:
    """AngelSlim's Qwen3 EAGLE-3 drafters: ``midlayer.*`` Llama tensors (no q_norm/k_norm), labelled with the target's
    class ``Qwen3ForCausalLM`` and ``model_type: qwen3``."""
    src = write_vllm(directory, Dims(), midlayer=True, arch="Qwen3ForCausalLM")
    return edit_config(src, lambda c: c.update(model_type="qwen3"))


def test_a_llama_shaped_drafter_labelled_qwen3_is_read_by_its_tensors(tmp_path, cli):
    src = write_angelslim_qwen3(tmp_path / "angelslim")
    info = json.loads(cli("inspect", src, "--json").stdout)
    assert info["attention"] == "llama"
    note = next(n for n in info["notes"] if n["check"] == "config.architecture_mismatch")
    assert "Qwen3ForCausalLM" in note["message"] and "sglang#9135" in note["message"] and "vLLM" in note["message"]
    report = json.loads(cli("validate", src, "--json").stdout)
    assert report["ok"] and not any(f["check"] == "tensor.missing" for f in report["findings"])
    engine = json.loads(cli("validate", src, "--engine", "vllm==0.32", "--json", expect=1).stdout)
    assert any(f["check"] == "engine.architecture" and "Qwen3 drafter" in f["message"] for f in engine["findings"])


def test_convert_writes_the_class_the_tensors_fit(tmp_path, cli):
    src = write_angelslim_qwen3(tmp_path / "angelslim")
    done = json.loads(cli("convert", src, tmp_path / "out", "--to", "vllm", "--json").stdout)
    assert any(n["check"] == "architecture.repaired" for n in done["notes"])
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert json.loads(cli("validate", tmp_path / "out", "--engine", "vllm==0.32", "--json").stdout)["ok"]


# -- issue 14, item 5: two dialects that fit equally ---------------------------------------------------------------


def write_issue14_mla(directory: Path) -> Path:
    """``architectures: ["Eagle3DeepseekV2ForCausalLM"]``, ``midlayer.*`` tensors, aux ids only in ``eagle_config``
    (TorchSpec's output-of-layer [1, 3, 4]), no producer metadata: vllm and sglang score 40 each."""
    from drafters import mla_dims

    d = Dims(mla=mla_dims())
    t = rename(canonical_tensors(d), [("layers.0.", "midlayer.")])
    cfg = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"],
        "model_type": "kimi_k2",
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "target_hidden_size": d.T,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True},
    }
    return _save(directory, t, cfg)


def test_equal_scores_are_reported_ambiguous_with_both_readings(tmp_path, cli):
    src = write_issue14_mla(tmp_path / "mla")
    info = json.loads(cli("inspect", src, "--json").stdout)
    scores = {c["dialect"]: c["score"] for c in info["candidates"]}
    assert scores["vllm"] == scores["sglang"] == 40
    assert info["ambiguous"] and info["ambiguity"]["kind"] == "dialect"
    readings = {r["dialect"]: r["input_ids"] for r in info["ambiguity"]["readings"]}
    assert readings == {"vllm": [1, 3, 4], "sglang": [2, 4, 5]}
    text = cli("inspect", src).stdout
    assert "ambiguous" in text and "[2, 4, 5] input-of-layer" in text and "[1, 3, 4] input-of-layer" in text
    report = json.loads(cli("validate", src, "--json").stdout)
    assert report["ambiguous"] and any(f["check"] == "dialect.ambiguous" for f in report["findings"])


def test_convert_refuses_an_ambiguous_checkpoint_until_told(tmp_path, cli):
    src = write_issue14_mla(tmp_path / "mla")
    result = cli("convert", src, tmp_path / "out", "--to", "vllm", expect=2)
    assert "--from" in result.stderr and "[2, 4, 5]" in result.stderr and "[1, 3, 4]" in result.stderr
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError):
        api.convert(src, tmp_path / "out", to="vllm", dry_run=True)


def test_from_torchspec_decides_the_plus_one_reading(tmp_path, cli):
    src = write_issue14_mla(tmp_path / "mla")
    cli("convert", src, tmp_path / "out", "--to", "vllm", "--from", "torchspec")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (
        cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5] == cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    )


def test_aux_layers_decides_too(tmp_path, cli):
    src = write_issue14_mla(tmp_path / "mla")
    cli("convert", src, tmp_path / "out", "--to", "vllm", "--aux-layers", "1,3,4")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]


def test_vllm_ids_only_in_eagle_config_without_evidence_are_reported_with_both_conventions(tmp_path, cli):
    """An MLA drafter as SGLang's writer lays it out (vLLM's Eagle3DeepseekV2ForCausalLM, layers.N.* tensors) with
    output-of-layer ids [1, 4, 5] in eagle_config only and no eaglekit block: it scores as vllm, which reads those ids
    input-of-layer. That reading used to be taken in silence, one layer off; both are reported now, and --target or
    --aux-layers decides."""
    from drafters import mla_dims

    src = write_vllm(tmp_path / "src", Dims(mla=mla_dims()), ids=[2, 5, 6])

    def sglang_style(cfg):
        cfg.pop("eaglekit", None)
        cfg.pop("eagle_aux_hidden_state_layer_ids", None)
        cfg.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = [1, 4, 5]

    src = edit_config(src, sglang_style)
    info = json.loads(cli("inspect", src, "--json").stdout)
    assert info["ambiguous"] and info["ambiguity"]["kind"] == "convention"
    assert sorted(r["input_ids"] for r in info["ambiguity"]["readings"]) == [[1, 4, 5], [2, 5, 6]]
    result = cli("convert", src, tmp_path / "out", "--to", "sglang", expect=2)
    assert "--aux-layers" in result.stderr and not (tmp_path / "out").exists()
    # vLLM's default capture layers (2, L//2, L-3) settle it: the ids are input-of-layer
    default = edit_config(write_vllm(tmp_path / "default", Dims(mla=mla_dims()), ids=[2, 5, 6]), sglang_style)
    edit_config(default, lambda cfg: cfg["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 5, 7]))
    assert not json.loads(cli("inspect", default, "--json").stdout)["ambiguous"]


def test_with_a_target_both_conventions_fitting_is_a_warning_not_a_silent_choice(tmp_path, cli):
    """--target discards a reading past 0..L; where both fit, the dialect's reading is kept and the other named."""
    from drafters import mla_dims

    def sglang_style(cfg):
        cfg.pop("eaglekit", None)
        cfg.pop("eagle_aux_hidden_state_layer_ids", None)
        cfg.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = [1, 4, 5]

    src = edit_config(write_vllm(tmp_path / "src", Dims(mla=mla_dims()), ids=[2, 5, 6]), sglang_style)
    with dialects.load(src, target_num_layers=8) as loaded:
        assert loaded.ambiguity is None and loaded.drafter.aux.as_input() == (1, 4, 5)
        (note,) = [n for n in loaded.notes if n.check == "aux.unsettled_convention"]
    assert "[2, 5, 6]" in note.message and note.severity == "warning"
    with dialects.load(src, target_num_layers=5) as loaded:  # [2, 5, 6] is past 0..5: the boundary rule decides
        assert not any(n.check == "aux.unsettled_convention" for n in loaded.notes)
