"""`validate --engine llama.cpp==bN`: what a llama.cpp build does with a drafter, from its release table (no llama.cpp
needed here; tests/engines/test_llamacpp_matrix.py holds each prediction against llama-server itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drafters import Dims, write_gguf_target, write_specforge, write_vllm

SPEC = "llama.cpp==b11434"
pytest.importorskip("gguf")


@pytest.fixture
def tiny(tmp_path):
    d = Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96, embed=False)
    return d, write_gguf_target(tmp_path / "target.gguf", d)


def findings(cli, path, target, engine=SPEC) -> tuple[dict, dict]:
    report = json.loads(cli("validate", path, "--engine", engine, "--target", target, "--json", expect=None).stdout)
    return {f["check"]: f for f in report["findings"] if f.get("engine")}, report["engine_view"]


def edit_gguf(src: Path, out: Path, **kw) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "engines"))
    from llamacpp_matrix import edit_gguf as edit

    return edit(src, out, **kw)


def test_eaglekits_gguf_is_served_as_trained(cli, tmp_path, tiny):
    d, target = tiny
    cli(
        "convert",
        write_vllm(tmp_path / "src", d, ids=[1, 4, 6]),
        tmp_path / "d.gguf",
        "--to",
        "gguf",
        "--target",
        target,
    )
    found, view = findings(cli, tmp_path / "d.gguf", target)
    assert not found and view["loads"] is True and view["crashes"] is False


def test_ids_only_in_eagle_config_go_through_the_converter_as_the_default(cli, tmp_path, tiny):
    d, target = tiny
    src = write_specforge(tmp_path / "sf", d, ids=[0, 3, 5])  # input-of-layer [1, 4, 6]
    found, view = findings(cli, src, target)
    assert view["loads"] is True
    assert found["engine.aux_ids"]["severity"] == "error"
    assert (
        "captures layers [2, 4, 5] instead (its converter reads only the top-level ids"
        in found["engine.aux_ids"]["effect"]
    )
    cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target)
    assert not findings(cli, tmp_path / "d.gguf", target)[0]  # eaglekit's GGUF carries them


def test_what_the_loader_refuses_and_what_aborts(cli, tmp_path, tiny):
    import torch

    d, target = tiny
    plain = tmp_path / "d.gguf"
    cli("convert", write_vllm(tmp_path / "src", d, ids=[1, 4, 6]), plain, "--to", "gguf", "--target", target)
    cases = {
        "engine.aux_ids": edit_gguf(plain, tmp_path / "a.gguf", drop=("eagle3.target_layers",)),
        "engine.aux_count": edit_gguf(plain, tmp_path / "b.gguf", ids=[1, 3, 5, 7]),
        "engine.unknown_tensor": edit_gguf(plain, tmp_path / "c.gguf", add={"fc_norm.0.weight": torch.ones(64)}),
        "engine.missing_tensor": edit_gguf(plain, tmp_path / "e.gguf", drop=("blk.0.attn_norm_2.weight",)),
    }
    for check, path in cases.items():
        found, view = findings(cli, path, target)
        assert view["loads"] is False and found[check]["severity"] == "error", (check, found)
    found, view = findings(cli, edit_gguf(plain, tmp_path / "f.gguf", ids=[2, 4, 9]), target)
    assert (
        view["loads"] is True
        and view["crashes"] is True
        and "target layer id exceeds" in found["engine.crash"]["effect"]
    )


def test_an_eagle31_drafter_cannot_reach_llama_cpp(cli, tmp_path, tiny):
    d, target = tiny
    src = write_vllm(tmp_path / "src", Dims(**{**d.__dict__, "fc_norm": True}), ids=[1, 4, 6], norm_output=True)
    found, view = findings(cli, src, target)
    assert view["loads"] is False and "no GGUF name for them" in found["engine.converter"]["effect"]


def test_builds_are_named_as_llama_cpp_tags_them(cli, tmp_path, tiny):
    d, target = tiny
    src = write_vllm(tmp_path / "src", d, ids=[1, 4, 6])
    assert "rules start at b11434" in cli("validate", src, "--engine", "llama.cpp==b9000", expect=2).stderr
    assert "expected a build as llama.cpp tags it" in cli("validate", src, "--engine", "llama.cpp==x1", expect=2).stderr
    found, _ = findings(cli, src, target, engine="llamacpp==b12000")
    assert found["engine.untested_release"]["severity"] == "info"
    assert "installs llama.cpp b11434" in cli("engines", "install", "llama.cpp==b11000", expect=2).stderr


def test_an_mla_drafter_has_no_conversion_and_a_speculators_one_loses_its_default(cli, tmp_path, tiny):
    """MLA: the converter has no EAGLE 3 class for Eagle3DeepseekV2ForCausalLM. speculators without
    norm_before_residual: speculators (and vLLM) read it as true, llama.cpp's converter writes false."""
    from drafters import mla_dims, write_speculators

    d, target = tiny
    mla = write_vllm(tmp_path / "mla", Dims(**{**d.__dict__, "mla": mla_dims()}), ids=[1, 4, 6])
    cfg = json.loads((mla / "config.json").read_text())
    cfg.update(architectures=["Eagle3DeepseekV2ForCausalLM"], model_type="deepseek_v3")
    (mla / "config.json").write_text(json.dumps(cfg))
    found, view = findings(cli, mla, target)
    assert (
        view["loads"] is False and "no EAGLE 3 conversion for that architecture" in found["engine.converter"]["effect"]
    )
    spec = write_speculators(tmp_path / "sp", d, ids=[1, 4, 6], norm_before_residual=None)
    found, view = findings(cli, spec, target)
    assert view["loads"] is True
    assert found["engine.flag.norm_before_residual"]["message"] == "the drafter has norm_before_residual=true"
    assert "norm_before_residual=false" in found["engine.flag.norm_before_residual"]["effect"]


def test_validate_cites_the_recorded_runs(cli, tmp_path, tiny):
    """Findings a recorded run of the build covered (eaglekit/engines/llamacpp_observations.json, written by the
    matrix) say `evidence: run (llama.cpp b11434, case NAME)`; the others `evidence: source`."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "engines"))
    import llamacpp_matrix as lm

    entries = [e for e in lm.stored()["observations"] if e["agrees"] and e["checks"] and e["path"] == "converted"]
    if not entries:
        pytest.skip("no recorded run covers a finding (EAGLEKIT_RECORD=1 with the llama.cpp matrix records them)")
    entry = next(e for e in entries if e["case"] == "specforge, ids not the default [converted]")
    source = lm.build_case("specforge, ids not the default", tmp_path / "case")
    target = lm.matrix.write_target(tmp_path / "target")
    report = json.loads(cli("validate", source, "--engine", SPEC, "--target", target, "--json", expect=None).stdout)
    cited = {f["check"]: f for f in report["findings"] if f.get("engine")}
    assert set(entry["checks"]) <= set(cited)
    for check in entry["checks"]:
        assert cited[check]["evidence"] == "run", cited[check]
        assert cited[check]["evidence_ref"].startswith("llama.cpp b11434, case ")
