"""P-EAGLE (parallel drafting): read and written in every dialect that has it, byte-exact round trips, vLLM's reading
per release (its rules: the run evidence is tests/engines' and tests/test_vllm_peagle.py's), the simulation of parallel
drafting, and the other drafter families named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from eaglekit import dialects, schemas
from eaglekit.convert import ConvertOptions, convert
from eaglekit.errors import OtherFamilyError, UnsupportedError
from eaglekit.validate import validate

from drafters import (
    Dims,
    edit_config,
    edit_tensors,
    same_bits,
    write_peagle_automodel,
    write_peagle_specforge,
    write_peagle_speculators,
    write_peagle_vllm,
    write_speculators,
    write_tiny_target,
)

SOURCES = {
    "speculators-3.1": lambda p: write_peagle_speculators(p, Dims(fc_norm=True), norm_output=True),
    "speculators-3": lambda p: write_peagle_speculators(p, Dims()),
    "vllm-3.1": lambda p: write_peagle_vllm(p, Dims(fc_norm=True), norm_output=True),
    "vllm-mask_token_id": lambda p: write_peagle_vllm(p, Dims(), key="mask_token_id"),
    "vllm-ptd_token_id": lambda p: write_peagle_vllm(p, Dims(), key="ptd_token_id"),
    "specforge": lambda p: write_peagle_specforge(p, Dims()),
    "automodel-3.1": lambda p: write_peagle_automodel(p, Dims(fc_norm=True), norm_output=True),
}
# (dialect read, the config key the mask token was read from)
READ_AS = {
    "speculators-3.1": ("speculators", "mask_token_id"),
    "speculators-3": ("speculators", "mask_token_id"),
    "vllm-3.1": ("vllm", "pard_token"),
    "vllm-mask_token_id": ("vllm", "mask_token_id"),
    "vllm-ptd_token_id": ("vllm", "ptd_token_id"),
    "specforge": ("sglang", "mask_token_id"),
    "automodel-3.1": ("automodel", "mask_token_id"),
}


@pytest.mark.parametrize("kind", list(SOURCES))
def test_every_layout_is_read_as_a_parallel_drafter_with_its_mask_token(tmp_path, kind):
    src = SOURCES[kind](tmp_path / "src")
    with dialects.load(src) as loaded:
        d = loaded.drafter
        assert (loaded.dialect, d.parallel.mask_token_key) == READ_AS[kind]
        assert d.parallel.mask_token_id == 60
        assert d.eagle_version == ("3.1" if kind.endswith("3.1") else "3")
        assert "mask_hidden" in loaded.names
        assert not [n for n in loaded.notes if n.severity == "error"]
    assert validate(src).ok, kind


def test_the_trained_depth_is_read_where_a_producer_states_it(tmp_path):
    with dialects.load(write_peagle_speculators(tmp_path / "s", Dims())) as loaded:
        assert loaded.drafter.parallel_depth == 8  # speculators: the proposal's speculative_tokens (num_depths)
    with dialects.load(write_peagle_automodel(tmp_path / "a", Dims())) as loaded:
        assert loaded.drafter.parallel_depth == 8  # NeMo Automodel: num_depths
    convert(tmp_path / "a", tmp_path / "as", ConvertOptions(to="speculators"))
    written = json.loads((tmp_path / "as" / "config.json").read_text())
    assert written["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 8


def test_an_eagle3_config_is_not_read_as_parallel(tmp_path):
    with dialects.load(write_speculators(tmp_path / "e", Dims())) as loaded:
        assert loaded.drafter.parallel is None


def test_a_parallel_drafter_without_a_mask_token_is_an_error(tmp_path):
    src = write_peagle_speculators(tmp_path / "s", Dims(), mask_token_id=None)
    report = validate(src)
    assert not report.ok
    assert [f.subject for f in report.findings if f.check == "config.mask_token"] == ["mask_token_id"]
    with pytest.raises(UnsupportedError, match="mask token"):
        convert(src, tmp_path / "out", ConvertOptions(to="vllm"))


def test_a_mask_token_outside_the_vocabulary_is_an_error(tmp_path):
    src = write_peagle_speculators(tmp_path / "s", Dims(), mask_token_id=64)  # V = 64: ids 0..63
    [finding] = [f for f in validate(src).findings if f.check == "config.mask_token"]
    assert finding.severity == "error" and "0..63" in finding.message


def test_mask_token_keys_that_disagree_are_said(tmp_path):
    src = write_peagle_vllm(tmp_path / "v", Dims(), key="pard_token", token=60)
    edit_config(src, lambda c: c.update(mask_token_id=7))
    with dialects.load(src) as loaded:
        assert (loaded.drafter.parallel.mask_token_key, loaded.drafter.parallel.mask_token_id) == ("mask_token_id", 7)
        [note] = [n for n in loaded.notes if n.check == "config.mask_token_conflict"]
        assert "pard_token 60" in note.message


def test_mask_hidden_of_another_width_is_a_shape_error(tmp_path):
    src = write_peagle_speculators(tmp_path / "s", Dims())
    edit_tensors(src, lambda t: t.update(mask_hidden=torch.zeros(1, 1, 40)))
    report = validate(src)
    [finding] = [f for f in report.findings if f.check == "tensor.shape"]
    assert finding.subject == "mask_hidden" and "expected [1, 1, 48]" in finding.message


# -- round trips -------------------------------------------------------------------------------------------------------

# the writers each source can be written by (sglang: SpecForge's PEagleDraftModel, which has no EAGLE 3.1 flags)
ROUND_TRIPS = {
    "speculators-3.1": ["vllm", "speculators"],
    "vllm-3.1": ["vllm", "speculators"],
    "automodel-3.1": ["vllm", "speculators"],
    "speculators-3": ["vllm", "speculators", "sglang"],
    "specforge": ["vllm", "speculators", "sglang"],
}


@pytest.mark.parametrize("kind", list(ROUND_TRIPS))
def test_round_trips_between_the_peagle_dialects_are_byte_exact(tmp_path, kind):
    src = SOURCES[kind](tmp_path / "src")
    writers = ROUND_TRIPS[kind]
    with dialects.load(src) as loaded:
        original = {c: loaded.read(c) for c in loaded.names}
    for a in writers:
        first = tmp_path / a
        convert(src, first, ConvertOptions(to=a))
        for c, t in load_file(str(first / "model.safetensors")).items():
            if c in original:
                assert same_bits(t, original[c]), (a, c)
        for b in writers:
            if a == b:
                continue
            mid, back = tmp_path / f"{a}-{b}", tmp_path / f"{a}-{b}-{a}"
            convert(first, mid, ConvertOptions(to=b))
            convert(mid, back, ConvertOptions(to=a))
            assert (first / "model.safetensors").read_bytes() == (back / "model.safetensors").read_bytes(), (a, b)
            c1, c2 = json.loads((first / "config.json").read_text()), json.loads((back / "config.json").read_text())
            c1.pop("eaglekit"), c2.pop("eaglekit")
            assert c1 == c2, (a, b)


@pytest.mark.parametrize("kind", ["speculators-3.1", "speculators-3", "specforge"])
def test_each_output_validates_clean_for_the_engine_its_serve_line_names(tmp_path, cli, kind):
    src = SOURCES[kind](tmp_path / "src")
    target = write_tiny_target(tmp_path / "target", layers=8, hidden=16, vocab=64)  # the verifier SpecForge omits
    for writer in ROUND_TRIPS[kind]:
        out = tmp_path / writer
        cmd = ("convert", src, out, "--to", writer, "--target", target, "--target-id", "tester/tiny-target", "--json")
        result = json.loads(cli(*cmd).stdout)
        serve = result["serve"]
        if serve is None:  # no engine serves it as written: a 3.1 P-EAGLE as speculators, SpecForge's layout
            assert writer == "sglang" or kind.endswith("3.1"), (kind, writer)
            continue
        assert serve.startswith("vllm serve") and '"parallel_drafting": true' in serve, serve
        report = validate(out, engine="vllm==0.32.0", target=target)
        assert report.ok and not [f for f in report.findings if f.severity == "warning"], (kind, writer, report)


def test_a_31_peagle_drafter_written_as_speculators_is_said_to_lose_its_flags_in_vllm(tmp_path, cli):
    src = SOURCES["vllm-3.1"](tmp_path / "src")
    result = cli("convert", src, tmp_path / "out", "--to", "speculators")
    assert "convert.peagle_flags_dropped" in result.stdout and "serve it:" not in result.stdout
    assert "0.22.0 to 0.33.0" in result.stdout


def test_specforge_and_eagle_layouts_refuse_what_they_cannot_hold(tmp_path):
    src = SOURCES["speculators-3.1"](tmp_path / "src")
    with pytest.raises(UnsupportedError, match="EAGLE 3.1 flags"):
        convert(src, tmp_path / "sg", ConvertOptions(to="sglang"))
    with pytest.raises(UnsupportedError, match="P-EAGLE"):
        convert(SOURCES["speculators-3"](tmp_path / "s3"), tmp_path / "eg", ConvertOptions(to="eagle"))


def test_the_speculators_and_specforge_outputs_keep_each_frameworks_shape(tmp_path):
    src = SOURCES["vllm-3.1"](tmp_path / "src")
    convert(src, tmp_path / "spec", ConvertOptions(to="speculators"))
    config = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert config["speculators_model_type"] == "peagle" and config["speculators_config"]["algorithm"] == "peagle"
    assert config["mask_token_id"] == 60 and config["architectures"] == ["PEagleDraftModel"]
    assert schemas.check(config, "config/speculators.schema.json") == []
    convert(SOURCES["speculators-3"](tmp_path / "s3"), tmp_path / "sg", ConvertOptions(to="sglang"))
    config = json.loads((tmp_path / "sg" / "config.json").read_text())
    names = set(load_file(str(tmp_path / "sg" / "model.safetensors")))
    assert config["architectures"] == ["PEagleDraftModel"] and config["mask_token_id"] == 60
    assert "layers.0.self_attn.q_proj.weight" in names and "mask_hidden" in names and "embed_tokens.weight" in names
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # output-of-layer


# -- vLLM's reading --------------------------------------------------------------------------------------------------


def _engine(src: Path, release: str = "vllm==0.32.0") -> dict[str, object]:
    report = validate(src, engine=release)
    return {f.check: f for f in report.findings}


def test_vllm_drops_the_31_flags_of_a_speculators_peagle_config(tmp_path):
    found = _engine(SOURCES["speculators-3.1"](tmp_path / "src"))
    assert found["engine.flag.fc_norm"].severity == "error"
    assert "update_peagle does not pass fc_norm on" in found["engine.flag.fc_norm"].effect
    assert found["engine.unknown_tensor"].severity == "error"  # its fc_norm tensors: load refused
    assert found["engine.flag.norm_output"].severity == "warning"  # no effect on parallel drafting
    assert "no effect while it drafts in parallel" in found["engine.flag.norm_output"].effect
    assert found["engine.parallel_drafting"].severity == "info"


def test_vllm_reads_the_native_31_flags_of_a_peagle_drafter(tmp_path):
    found = _engine(SOURCES["vllm-3.1"](tmp_path / "src"))
    assert not [f for f in found.values() if f.severity in ("error", "warning")], found


@pytest.mark.parametrize("release", ["vllm==0.22.0", "vllm==0.27.1", "vllm==0.33.0"])
def test_norm_before_residual_absent_is_false_for_peagle_and_true_for_eagle3(tmp_path, release):
    peagle = write_peagle_speculators(tmp_path / "p", Dims(), norm_before_residual=None)
    with dialects.load(peagle) as loaded:
        assert loaded.drafter.flags.norm_before_residual is False
    assert "engine.flag.norm_before_residual" not in _engine(peagle, release)
    eagle3 = write_speculators(tmp_path / "e", Dims(), norm_before_residual=None)
    with dialects.load(eagle3) as loaded:
        assert loaded.drafter.flags.norm_before_residual is True
    assert "engine.flag.norm_before_residual" not in _engine(eagle3, release)


def test_vllm_refuses_a_peagle_config_without_mask_token_or_mask_hidden(tmp_path):
    no_token = write_peagle_speculators(tmp_path / "t", Dims(), mask_token_id=None)
    assert "KeyError" in _engine(no_token)["engine.peagle_mask_token"].effect
    no_mask = edit_tensors(write_peagle_speculators(tmp_path / "m", Dims()), lambda t: t.pop("mask_hidden"))
    assert "mask_hidden not found" in _engine(no_mask)["engine.peagle_mask_hidden"].effect


def test_a_qwen3_peagle_drafter_gets_the_llama_class_before_024(tmp_path):
    src = write_peagle_speculators(tmp_path / "q", Dims(qwen3=True))
    assert "engine.architecture" not in _engine(src, "vllm==0.24.0")
    finding = _engine(src, "vllm==0.22.0")["engine.architecture"]  # update_peagle names PeagleLlamaForCausalLM
    assert finding.severity == "error" and "builds the Llama drafter" in finding.message


def test_a_native_config_naming_a_peagle_class_is_refused(tmp_path):
    src = write_peagle_vllm(tmp_path / "v", Dims(), arch="PeagleLlamaForCausalLM")
    finding = _engine(src)["engine.architecture"]
    assert "Eagle3PeagleLlamaForCausalLM" in finding.message


# -- the simulation --------------------------------------------------------------------------------------------------


def test_parallel_chains_are_one_causal_pass_over_the_prefix_and_the_mask_rows(tmp_path):
    """The batched chain machinery (simulate.chains_from) against an independent computation: one causal pass over
    positions 0..j (token x_{t+1}, state h_t) then K-1 mask rows at j+1..j+K-1, as vLLM's proposer lays them out."""
    from eaglekit.reference.model import ReferenceDrafter, weights_for
    from eaglekit.reference.simulate import draft_chains

    d = Dims(layers=2, Vd=64)
    src = write_peagle_speculators(tmp_path / "s", d)
    with dialects.load(src) as loaded:
        model = ReferenceDrafter(loaded.drafter, weights_for(loaded))
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, d.V, (12,), generator=g)
    aux = torch.randn(12, d.n * d.T, generator=g)
    K = 4
    starts = torch.arange(3, 10)
    chains = draft_chains(model, tokens, aux, starts, K)
    ids, state = model.mask_rows(K - 1)
    for row, j in enumerate(starts.tolist()):
        hidden = torch.cat([model.combine(aux[: j + 1]), state])
        inputs = torch.cat([tokens[1 : j + 2], ids])
        out = model.decode(inputs, hidden, torch.arange(j + K), model.causal_attend())
        expected = model.greedy(out.y[j:])
        assert torch.equal(chains.drafts[row], expected), j
        torch.testing.assert_close(chains.y[row], out.y[j:], rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # trains for ~30 s on 2 cores
def test_a_trained_tiny_peagle_drafter_accepts(tmp_path, cli):
    import tiny_pair

    pair = tiny_pair.build(tmp_path, eagle="3.1", mask_token_id=0, steps=60)
    with dialects.load(pair["drafter"]) as loaded:
        assert loaded.dialect == "speculators" and loaded.drafter.parallel.mask_token_id == 0
    result = json.loads(
        cli(
            "verify",
            pair["drafter"],
            "--target",
            pair["target"],
            "--prompts",
            pair["prompts"],
            "--max-new-tokens",
            "16",
            "--json",
        ).stdout
    )
    assert result["acceptance_length"] > 2.0, result["acceptance_length"]


# -- the rest of the family ------------------------------------------------------------------------------------------


def _speculators_config(kind: str, directory: Path) -> Path:
    """A tiny config written by speculators' own config class for ``kind`` (its save_pretrained), with a tensor that an
    EAGLE 3 reader would take for a fusion layer."""
    from safetensors.torch import save_file
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import Qwen3Config

    layer = Qwen3Config(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        vocab_size=96,
    )
    spec = SpeculatorsConfig(
        algorithm=kind,
        proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
        default_proposal_method="greedy",
        verifier=VerifierConfig(name_or_path="org/target", architectures=["Qwen3ForCausalLM"]),
    )
    if kind == "mtp":
        from speculators.models.mtp.config import MTPSpeculatorConfig as Config

        config = Config(transformer_layer_config=layer, speculators_config=spec)
    else:
        module = {"dflash": "dflash", "dflash2": "dflash2", "dspark": "dspark"}[kind]
        name = {"dflash": "DFlash", "dflash2": "DFlash2", "dspark": "DSpark"}[kind]
        Config = getattr(__import__(f"speculators.models.{module}.config", fromlist=["x"]), f"{name}SpeculatorConfig")
        config = Config(
            transformer_layer_config=layer,
            draft_vocab_size=96,
            block_size=4,
            aux_hidden_state_layer_ids=[1, 4, 6],
            mask_token_id=95,
            speculators_config=spec,
        )
    directory.mkdir(parents=True)
    config.save_pretrained(directory)
    save_file(
        {"fc.weight": torch.zeros(64, 192), "layers.0.mlp.up_proj.weight": torch.zeros(96, 64)},
        str(directory / "model.safetensors"),
    )
    return directory


def _vllm_dflash(directory: Path) -> Path:
    """vLLM's native DFlash layout (its registry's DFlashDraftModel, the config update_dflash produces): a Qwen3 config
    named DFlashDraftModel with dflash_config (mask token, target layers)."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True)
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "vocab_size": 96,
        "block_size": 4,
        "dflash_config": {"mask_token_id": 95, "target_layer_ids": [0, 3, 5]},
    }
    (directory / "config.json").write_text(json.dumps(config))
    save_file(
        {"fc.weight": torch.zeros(64, 192), "hidden_norm.weight": torch.ones(64)}, str(directory / "model.safetensors")
    )
    return directory


FAMILY_CASES = {
    "speculators dflash": (lambda p: _speculators_config("dflash", p), "DFlash"),
    "speculators dflash2": (lambda p: _speculators_config("dflash2", p), "DFlash2"),
    "speculators dspark": (lambda p: _speculators_config("dspark", p), "DSpark"),
    "speculators mtp": (lambda p: _speculators_config("mtp", p), "MTP"),
    "vllm dflash": (_vllm_dflash, "DFlash"),
}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=[pytest.mark.speculators] if case.startswith("speculators") else [])
        for case in FAMILY_CASES
    ],
)
def test_other_families_are_named_by_inspect_and_refused_by_the_rest(tmp_path, cli, case):
    if case.startswith("speculators"):
        pytest.importorskip("speculators")
    make, label = FAMILY_CASES[case]
    src = make(tmp_path / "src")
    shown = cli("inspect", src)
    assert f"{label}:" in shown.stdout and f"does not handle {label} drafters yet" in shown.stdout
    assert "unknown" not in shown.stdout.lower() and "EAGLE       3" not in shown.stdout
    doc = json.loads(cli("inspect", src, "--json").stdout)
    assert doc["family"]["label"] == label and doc["handled"] is False
    assert schemas.check(doc, "inspect.schema.json") == []
    for args in (["convert", src, tmp_path / "out", "--to", "vllm"], ["validate", src]):
        refused = cli(*args, expect=2)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and f"a {label} drafter" in lines[0] and "does not handle" in lines[0], lines
    assert not (tmp_path / "out").exists()
    with pytest.raises(OtherFamilyError):
        dialects.load(src)


def test_no_sglang_release_drafts_in_parallel(tmp_path):
    src = SOURCES["speculators-3"](tmp_path / "src")
    convert(src, tmp_path / "sg", ConvertOptions(to="sglang"))
    for path in (src, tmp_path / "sg"):
        finding = _engine(path, "sglang==0.5.23")["engine.parallel_drafting"]
        assert finding.severity == "error" and "no mask_hidden" in finding.effect
