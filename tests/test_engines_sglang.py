"""``--engine sglang==X``: each difference between SGLang releases, read in their released source
(eaglekit/engines/sglang_releases.json), predicted on a tiny drafter that shows it. Nothing here runs SGLang:
its CUDA kernels do not run on a CPU machine, so every finding must say its evidence is "source"."""

from __future__ import annotations

import json

import pytest

from eaglekit import engines, schemas
from eaglekit.errors import UsageError
from eaglekit.model import architectures
from eaglekit.validate import validate

from drafters import (
    Dims,
    default_output_ids,
    edit_config,
    mla_dims,
    write_modelopt,
    write_specforge,
    write_tiny_target,
    write_vllm,
)


def sglang(src, version, **kw):
    report = validate(src, engine=f"sglang=={version}", **kw)
    engine = [f for f in report.findings if f.engine == f"sglang=={version}"]
    assert all(f.evidence == "source" for f in engine)
    return report, {f.check: f for f in engine}


def errors(src, version, **kw) -> set[str]:
    return {c for c, f in sglang(src, version, **kw)[1].items() if f.severity == "error"}


# -- versions ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, row",
    [
        ("0.4.4.post2", "0.4.4.post2"),
        ("0.4.8", "0.4.4.post2"),
        ("0.4.9", "0.4.9"),
        ("0.5.1.post3", "0.4.9"),
        ("0.5.10.post1", "0.5.2"),
        ("0.5.13.post1", "0.5.13"),
        ("0.5.23", "0.5.17"),
        ("0.5.23rc1", "0.5.17"),
    ],
)
def test_versions_as_pip_prints_them_pick_their_row(version, row):
    rel = engines.parse(f"sglang=={version}")
    assert rel.row == row and rel.label == f"sglang=={version}" and not rel.beyond_table and rel.evidence == "source"


def test_releases_before_eagle3_are_refused_and_newer_ones_are_assumed(tmp_path):
    for early in ("0.4.4", "0.4.4.post1", "0.3.6"):
        with pytest.raises(UsageError, match="0.4.4.post2"):
            engines.parse(f"sglang=={early}")
    _, found = sglang(write_specforge(tmp_path / "s", Dims()), "0.6.0")
    assert found["engine.untested_release"].severity == "info"


def test_every_row_rests_on_source_and_names_its_files():
    table = engines.sglang.load_table(engines.sglang.TABLE)
    for row in table["releases"].values():
        assert row["evidence"] == "source"
        assert set(row["facts"]) == set(table["keys"])
        for fact in row["facts"].values():
            assert fact["evidence"] == "source" and all(p.startswith("sglang/srt/") for p in fact["files"])


# -- architectures ----------------------------------------------------------------------------------------------


def test_a_vllm_architecture_string_is_not_an_sglang_drafter(tmp_path):
    src = write_vllm(tmp_path / "s", Dims())  # Eagle3LlamaForCausalLM
    report, found = sglang(src, "0.5.23")
    assert found["engine.architecture"].severity == "error" and report.engine_view["loads"] is False
    assert "LlamaForCausalLMEagle3" in found["engine.architecture"].message


def test_the_mla_drafter_is_registered_from_0_5_12(tmp_path):
    src = write_modelopt(tmp_path / "s", Dims(Vd=64, mla=mla_dims()))  # Eagle3DeepseekV2ForCausalLM, layers.0.*
    assert "engine.architecture" in errors(src, "0.5.11")
    assert not errors(src, "0.5.12")


def test_the_sglang_column_is_where_the_strings_come_from(tmp_path, monkeypatch):
    src = write_vllm(tmp_path / "s", Dims())
    monkeypatch.setitem(
        architectures.ROWS,
        "Eagle3LlamaForCausalLM",
        {**architectures.ROWS["Eagle3LlamaForCausalLM"], "sglang": {"family": "llama", "since": "0.5.0"}},
    )
    assert "engine.architecture" in errors(src, "0.4.9")
    assert "engine.architecture" not in errors(src, "0.5.1")


# -- names: layers.0.* vs midlayer.* ----------------------------------------------------------------------------


def test_layers_0_names_crash_the_first_release_are_skipped_silently_later_and_load_from_0_5_12(tmp_path):
    src = write_modelopt(tmp_path / "s", Dims())  # LlamaForCausalLMEagle3 with layers.0.*
    report, found = sglang(src, "0.4.4.post2")
    assert report.engine_view["loads"] is False and "KeyError" in found["engine.layer_names"].effect
    report, found = sglang(src, "0.5.4")
    assert report.engine_view["loads"] is True
    assert "without a word" in found["engine.layer_names"].effect and "engine.uninitialised" in found
    assert not errors(src, "0.5.12")


# -- EAGLE 3.1 flags ------------------------------------------------------------------------------------------


def test_legacy_use_aux_norm_and_norm_output_are_read_from_0_5_12(tmp_path):
    src = write_specforge(
        tmp_path / "s", Dims(fc_norm=True), legacy=True, norm_output=True
    )  # use_aux_norm, aux_norm_{low,mid,high}
    on_old = errors(src, "0.5.11", norm_output_semantics="eagle31")
    assert {"engine.flag.fc_norm", "engine.flag.norm_output", "engine.unknown_tensor"} <= on_old
    assert not errors(src, "0.5.12", norm_output_semantics="eagle31")


def test_the_mla_drafter_reads_fc_norm_from_0_5_13(tmp_path):
    src = write_modelopt(tmp_path / "s", Dims(Vd=64, mla=mla_dims(), fc_norm=True))
    edit_config(src, lambda c: c.update(fc_norm=True))
    assert "engine.flag.fc_norm" in errors(src, "0.5.12")
    assert not errors(src, "0.5.13")


def test_norm_before_fc_is_read_from_0_5_17(tmp_path):
    src = write_vllm(tmp_path / "s", Dims(norm_before_fc=True), arch=architectures.written_as("sglang", "llama"))
    edit_config(src, lambda c: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": default_output_ids(Dims())}))
    assert {"engine.flag.norm_before_fc", "engine.unknown_tensor"} <= errors(src, "0.5.16")
    assert not errors(src, "0.5.17")


# -- the head: draft_vocab_size null vs a number ---------------------------------------------------------------


def test_no_lm_head_with_a_number_runs_an_uninitialised_head(tmp_path):
    src = write_specforge(tmp_path / "s", Dims(Vd=64, lm_head=False))
    _, found = sglang(src, "0.5.23")
    assert "uninitialised" in found["engine.lm_head_uninitialised"].effect


def test_no_lm_head_with_null_borrows_the_target_head_from_0_5_2(tmp_path):
    src = edit_config(
        write_specforge(tmp_path / "s", Dims(Vd=64, lm_head=False)), lambda c: c.update(draft_vocab_size=None)
    )
    report, found = sglang(src, "0.5.1")
    assert report.engine_view["loads"] is False and "engine.draft_vocab_size" in found
    assert not errors(src, "0.5.2")


def test_a_shipped_head_with_null_is_replaced_by_the_target_head(tmp_path):
    src = edit_config(write_specforge(tmp_path / "s", Dims(Vd=64)), lambda c: c.update(draft_vocab_size=None))
    assert "engine.lm_head_replaced" in errors(src, "0.5.4")


def test_the_first_release_needs_d2t(tmp_path):
    src = write_specforge(tmp_path / "s", Dims(Vd=64))  # full vocabulary: no d2t written
    assert "engine.d2t_required" in errors(src, "0.4.8")
    assert "engine.d2t_required" not in errors(src, "0.4.9")


# -- capture layers -------------------------------------------------------------------------------------------


def test_eagle_config_ids_are_read_with_the_plus_one_from_0_4_9(tmp_path):
    src = write_specforge(tmp_path / "s", Dims(), ids=[0, 2, 5])  # output-of-layer ids: inputs of layers 1, 3, 6
    target = write_tiny_target(tmp_path / "t")
    _, found = sglang(src, "0.4.8", target=str(target))
    assert "captures the default layers [2, 4, 5]" in found["engine.aux_ids"].effect
    report, found = sglang(src, "0.4.9", target=str(target))
    assert "engine.aux_ids" not in found
    engine = [f for f in report.findings if f.engine == "sglang==0.4.9"]
    assert all(f.evidence == "source" for f in engine) and "findings" not in report.engine_view


def test_top_level_ids_are_ignored(tmp_path):
    src = write_vllm(tmp_path / "s", Dims(), ids=[1, 3, 6], arch=architectures.written_as("sglang", "llama"))
    _, found = sglang(src, "0.5.23", target=str(write_tiny_target(tmp_path / "t")))
    assert "top-level ones are ignored" in found["engine.aux_ids"].effect


def test_the_output_of_the_last_layer_cannot_be_captured(tmp_path):
    src = write_specforge(tmp_path / "s", Dims(), ids=[1, 3, 7])  # 7 = output of the last of 8 layers
    report, found = sglang(src, "0.5.23", target=str(write_tiny_target(tmp_path / "t")))
    assert report.engine_view["loads"] is False and "never captures it" in found["engine.aux_ids"].effect


def test_four_states_need_a_count_from_0_5_12(tmp_path):
    d = Dims(n=4)
    src = write_specforge(tmp_path / "s", d, ids=[1, 2, 3, 4])
    assert "engine.aux_count" in errors(src, "0.5.11")
    assert "engine.aux_count" not in errors(src, "0.5.12")


# -- outputs ----------------------------------------------------------------------------------------------------


def test_validate_json_and_text_say_the_evidence(tmp_path, cli):
    src = write_modelopt(tmp_path / "s", Dims())
    data = json.loads(cli("validate", src, "--engine", "sglang==0.5.4", "--json", expect=1).stdout)
    assert schemas.check(data, "validate.schema.json") == []
    engine = [f for f in data["findings"] if f.get("engine") == "sglang==0.5.4"]
    assert engine and all(f["evidence"] == "source" for f in engine) and data["engine_view"]["evidence"] == "source"
    human = cli("validate", src, "--engine", "sglang==0.5.4", expect=1).stdout
    assert "[engine.layer_names]" in human and "[evidence: source]" in human
    cli("validate", src, "--engine", "sglang==0.5.12", expect=0)
    cli("validate", src, "--engine", "sglang==0.4.4", expect=2)


# -- verify: the drafter as that SGLang would run it, beside the intended one -----------------------------------


@pytest.fixture(scope="module")
def pair31(trained_pair) -> dict:
    return trained_pair(eagle="3.1")


@pytest.mark.slow  # trains the tiny pair (minutes on two cores)
def test_verify_engine_sglang_diverges_before_3_1_support_and_matches_after(pair31, tmp_path):
    from eaglekit.convert import ConvertOptions, convert
    from eaglekit.verify import VerifyOptions, verify

    out = tmp_path / "sglang"
    convert(pair31["drafter"], out, ConvertOptions(to="sglang"))

    def parity(version):
        opts = VerifyOptions(
            target=str(pair31["target"]), prompts=str(pair31["prompts"]), max_new_tokens=40, engine=f"sglang=={version}"
        )
        report = verify(str(out), opts)
        return next(c for c in report["checks"] if c["name"] == "engine_parity"), report

    check, report = parity("0.5.11")
    assert not check["passed"] and "fc_norm" in check["detail"]
    assert all(f["evidence"] == "source" for f in report["engine"]["findings"])
    check, report = parity("0.5.12")
    assert check["passed"], check
    assert schemas.check(report, "verify.schema.json") == []
