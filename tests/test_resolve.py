"""convert --target T --resolve on an ambiguous checkpoint: a tiny drafter trained on its target with input-of-layer
ids [2, 4, 5], saved SpecForge-style (output-of-layer [1, 3, 4] in eagle_config only) but labelled with a vLLM-native
architecture, so the sglang reading ([2, 4, 5]) and the vllm reading ([1, 3, 4]) both fit the files. --resolve measures
both on the target and converts with the one the weights were trained with; when neither wins by verify's margin it
refuses, writing nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from eaglekit import schemas
from eaglekit.verify.readings import DECISIVE_MARGIN


@pytest.fixture(scope="module")
def pair(trained_pair) -> dict:
    return trained_pair(eagle="3", steps=60)


def ambiguous_copy(pair: dict, directory: Path) -> Path:
    shutil.copytree(pair["drafter"], directory)
    cfg = json.loads((directory / "config.json").read_text())
    cfg["architectures"] = ["Eagle3LlamaForCausalLM"]  # a vLLM-native name over SpecForge's files
    cfg.pop("torch_dtype", None)
    (directory / "config.json").write_text(json.dumps(cfg))
    return directory


def test_the_copy_is_ambiguous(tmp_path, pair, cli):
    info = json.loads(cli("inspect", ambiguous_copy(pair, tmp_path / "amb"), "--json").stdout)
    assert info["ambiguous"]
    assert {r["dialect"]: r["input_ids"] for r in info["ambiguity"]["readings"]} == {
        "sglang": [2, 4, 5],
        "vllm": [1, 3, 4],
    }


def test_resolve_converts_with_the_reading_the_weights_were_trained_with(tmp_path, pair, cli):
    src = ambiguous_copy(pair, tmp_path / "amb")
    out = tmp_path / "out"
    run = cli(
        "convert",
        src,
        out,
        "--to",
        "vllm",
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--resolve",
        "--json",
    )
    data = json.loads(run.stdout)
    assert schemas.check(data, "convert.schema.json") == []
    resolved = data["resolved"]
    assert resolved["aux_layers"] == [2, 4, 5] and resolved["trained_with"].startswith("sglang ids [2, 4, 5]")
    by = {m["reading"].split()[0]: m["every_position_acceptance_length"] for m in resolved["measured"]}
    assert by["sglang"] > by["vllm"] * (1 + DECISIVE_MARGIN)  # the margin verify states, met
    assert any(n["check"] == "convert.resolved" and "acceptance length" in n["message"] for n in data["notes"])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    text = cli(
        "convert",
        src,
        tmp_path / "out2",
        "--to",
        "vllm",
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--resolve",
    ).stdout
    assert "--resolve measured" in text and "trained with sglang" in text  # the text output says what was measured


def test_resolve_refuses_when_no_reading_wins(tmp_path, pair, cli):
    """fc zeroed: the drafter no longer looks at the target's states, both readings accept exactly alike."""
    src = ambiguous_copy(pair, tmp_path / "amb")
    t = load_file(str(src / "model.safetensors"))
    t["fc.weight"].zero_()
    save_file(t, str(src / "model.safetensors"))
    out = tmp_path / "out"
    run = cli(
        "convert",
        src,
        out,
        "--to",
        "vllm",
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--resolve",
        expect=2,
    )
    assert "no reading wins by the margin" in run.stderr and "every-position acceptance length" in run.stderr
    assert not out.exists()


def test_resolve_needs_a_target(tmp_path, pair, cli):
    out = tmp_path / "out"
    run = cli("convert", ambiguous_copy(pair, tmp_path / "amb"), out, "--to", "vllm", "--resolve", expect=2)
    assert "--resolve needs --target" in run.stderr and not out.exists()


def test_resolve_reads_its_prompts_before_the_target_loads(tmp_path, pair, cli, monkeypatch):
    """A bad --prompts line was told only after torch, a Hub source's download and the target had loaded."""
    from eaglekit.target.runner import TargetModel

    def never(*a, **kw):
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(TargetModel, "load", never)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_ids": [1, "x"]}\n')
    out = tmp_path / "out"
    run = cli(
        "convert",
        ambiguous_copy(pair, tmp_path / "amb"),
        out,
        "--to",
        "vllm",
        "--target",
        pair["target"],
        "--prompts",
        bad,
        "--resolve",
        expect=2,
    )
    assert "bad.jsonl line 1: input_ids should be a list of token ids" in run.stderr and not out.exists()


def test_verify_measures_the_aux_readings_and_reuses_the_one_it_read(tmp_path, pair, cli, monkeypatch):
    """verify on the ambiguous copy measures both aux-id readings; the one the drafter was read as is the drafter
    itself (the same target layers), so it takes the drafter's results: two simulations per prompt, not three."""
    from eaglekit.verify import run as verify_run

    simulated = []
    real_simulate = verify_run.simulate
    monkeypatch.setattr(
        verify_run,
        "simulate",
        lambda model, prompt, *rest: simulated.append(prompt.id) or real_simulate(model, prompt, *rest),
    )
    src = ambiguous_copy(pair, tmp_path / "amb")
    report = json.loads(
        cli(
            "verify", src, "--target", pair["target"], "--prompts", pair["prompts"], "--max-new-tokens", 16, "--json"
        ).stdout
    )
    measured = {m["reading"].split()[0]: m for m in report["readings"]["measured"]}
    assert set(measured) == {"sglang", "vllm"}
    read_as = "sglang" if report["aux_layer_ids"] == [2, 4, 5] else "vllm"
    assert measured[read_as]["every_position_acceptance_length"] == report["every_position"]["acceptance_length"]
    assert measured[read_as]["acceptance_length"] == report["acceptance_length"]
    assert len(simulated) == 2 * len(report["prompts"])


def unsettled_copy(pair: dict, directory: Path, cli) -> Path:
    """The pair's drafter in the vllm dialect with its ids only in eagle_config, written output-of-layer ([1, 3, 4]) as
    SGLang and SpecForge write them there: vLLM's dialect reads them input-of-layer, and on the 8-layer target both
    readings fit, so the files alone cannot say which the weights were trained with (aux.unsettled_convention)."""
    cli("convert", pair["drafter"], directory, "--to", "vllm")
    cfg = json.loads((directory / "config.json").read_text())
    for key in ("eaglekit", "eagle_aux_hidden_state_layer_ids"):
        cfg.pop(key, None)
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 3, 4]
    (directory / "config.json").write_text(json.dumps(cfg))
    return directory


def test_an_unsettled_convention_is_measured_not_only_named(tmp_path, pair, cli):
    """With a target, the convention doubt is no longer a refusal (both readings fit 0..L): the dialect's reading is
    taken with a warning. verify measures both; the other reading is the trained drafter itself, so its figures are
    the original checkpoint's exactly. convert --resolve converts with it."""
    src = unsettled_copy(pair, tmp_path / "unsettled", cli)
    args = ("--target", pair["target"], "--prompts", pair["prompts"], "--max-new-tokens", 16, "--json")
    report = json.loads(cli("verify", src, *args).stdout)
    assert report["aux_layer_ids"] == [1, 3, 4]
    # measured here, so said by its readings, not also as the warning to go and measure them (validate says that)
    assert not any(f["check"] == "aux.unsettled_convention" for f in report["findings"])
    validated = json.loads(cli("validate", src, "--target", pair["target"], "--json").stdout)
    assert any(f["check"] == "aux.unsettled_convention" for f in validated["findings"])
    measured = {m["reading"]: m for m in report["readings"]["measured"]}
    assert set(measured) == {"vllm ids [1, 3, 4] (input-of-layer)", "vllm ids [2, 4, 5] (input-of-layer)"}
    original = json.loads(cli("verify", pair["drafter"], *args).stdout)
    trained = measured["vllm ids [2, 4, 5] (input-of-layer)"]
    assert trained["every_position_acceptance_length"] == original["every_position"]["acceptance_length"]
    assert trained["acceptance_length"] == original["acceptance_length"]
    assert (
        measured["vllm ids [1, 3, 4] (input-of-layer)"]["every_position_acceptance_length"]
        == report["every_position"]["acceptance_length"]
    )
    assert report["readings"]["trained_with"] == "vllm ids [2, 4, 5] (input-of-layer)"

    out = tmp_path / "out"
    data = json.loads(
        cli(
            "convert",
            src,
            out,
            "--to",
            "vllm",
            "--target",
            pair["target"],
            "--prompts",
            pair["prompts"],
            "--resolve",
            "--json",
        ).stdout
    )
    assert data["resolved"]["aux_layers"] == [2, 4, 5]
    assert json.loads((out / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
