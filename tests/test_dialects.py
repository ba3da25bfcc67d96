"""Every reader: detection (with evidence) and every canonical field, on tiny checkpoints written as each framework
does."""

from __future__ import annotations

import pytest
import torch

from eaglekit import dialects
from eaglekit.errors import ConfigError, UsageError

from drafters import (
    Dims,
    default_input_ids,
    default_output_ids,
    mla_dims,
    write_automodel,
    write_eagle,
    write_modelopt,
    write_specforge,
    write_speculators,
    write_torchspec,
    write_vllm,
)


def load(path, dialect="auto"):
    loaded = dialects.load(path, dialect)
    loaded.close()
    return loaded


def assert_dims(d, dims: Dims):
    assert (d.hidden_size, d.target_hidden_size, d.num_layers) == (dims.H, dims.T, dims.layers)
    assert (d.vocab_size, d.draft_vocab_size, d.num_aux) == (dims.V, dims.Vd, dims.n)
    assert (d.num_heads, d.intermediate_size) == (dims.heads, dims.I)
    if dims.mla:
        assert d.attention == "mla"
        assert d.mla.__dict__ == dims.mla
    else:
        assert d.attention == ("qwen3" if dims.qwen3 else "llama")
        assert (d.num_kv_heads, d.head_dim) == (dims.kv_heads, dims.head_dim)


def test_eagle_original(tmp_path):
    dims = Dims()
    loaded = load(write_eagle(tmp_path / "c", dims))
    d = loaded.drafter
    assert loaded.dialect == "eagle"
    assert "pytorch_model.bin" in loaded.detection.evidence
    assert_dims(d, dims)
    assert d.aux.ids is None  # EAGLE records none
    assert d.flags.__dict__ == dict(
        fc_norm=False,
        norm_before_fc=False,
        norm_output=False,
        norm_before_residual=False,
        use_aux_hidden_state=True,
        norm_before_lm_head=True,
    )
    assert d.rope.theta == 10000.0 and any(n.check == "rope.defaulted" for n in loaded.notes)
    assert not d.ships_embed and d.has_d2t and d.has_t2d
    assert loaded.names["layers.0.self_attn.q_proj.weight"] == "midlayer.self_attn.q_proj.weight"
    assert d.eagle_version == "3"


def test_eagle_head_dim_is_computed_like_eagle_does(tmp_path):
    src = write_eagle(tmp_path / "c", Dims())
    import json

    cfg = json.loads((src / "config.json").read_text())
    cfg["head_dim"] = 4  # EAGLE ignores it
    (src / "config.json").write_text(json.dumps(cfg))
    loaded = load(src)
    assert loaded.drafter.head_dim == 8
    assert any(n.check == "config.head_dim" for n in loaded.notes)


@pytest.mark.parametrize("legacy", [False, True])
def test_specforge_31(tmp_path, legacy):
    dims = Dims(fc_norm=True)
    loaded = load(write_specforge(tmp_path / "c", dims, norm_output=True, legacy=legacy))
    d = loaded.drafter
    assert loaded.dialect == "sglang"
    assert_dims(d, dims)
    assert d.aux.ids == tuple(default_output_ids(dims)) and d.aux.convention == "output"
    assert d.aux.as_input() == tuple(default_input_ids(dims))
    assert d.flags.fc_norm and d.flags.norm_output and d.eagle_version == "3.1"
    assert {f"fc_norm.{i}.weight" for i in range(3)} <= d.tensors
    if legacy:
        assert loaded.names["fc_norm.0.weight"] == "aux_norm_low.weight"
        assert "SGLang's legacy use_aux_norm / aux_norm_* names" in loaded.detection.evidence
    assert any(n.check == "flags.norm_output_semantics" for n in loaded.notes)


def test_speculators(tmp_path):
    dims = Dims(fc_norm=True, T=24)
    loaded = load(write_speculators(tmp_path / "c", dims, norm_output=True))
    d = loaded.drafter
    assert loaded.dialect == "speculators" and loaded.detection.score >= 100
    assert_dims(d, dims)
    assert d.aux.ids == tuple(default_input_ids(dims)) and d.aux.convention == "input"
    assert d.flags.norm_before_residual and d.flags.fc_norm and d.flags.norm_output
    assert d.verifier == "org/target" and d.verifier_architectures == ("LlamaForCausalLM",)
    assert d.provenance.framework == "speculators 0.9.0"


def test_speculators_without_norm_before_residual_reads_as_vllm_serves_it(tmp_path):
    loaded = load(write_speculators(tmp_path / "c", Dims(), norm_before_residual=None))
    assert loaded.drafter.flags.norm_before_residual is True
    assert any(n.check == "flags.defaulted" for n in loaded.notes)


def test_speculators_qwen3(tmp_path):
    dims = Dims(qwen3=True)
    loaded = load(write_speculators(tmp_path / "c", dims))
    assert loaded.drafter.attention == "qwen3"
    assert "layers.0.self_attn.q_norm.weight" in loaded.drafter.tensors


def test_vllm_native(tmp_path):
    dims = Dims(layers=2)
    loaded = load(write_vllm(tmp_path / "c", dims))
    d = loaded.drafter
    assert loaded.dialect == "vllm"
    assert_dims(d, dims)
    assert d.aux.convention == "input" and d.aux.ids == tuple(default_input_ids(dims))


def test_vllm_angelslim_midlayer(tmp_path):
    loaded = load(write_vllm(tmp_path / "c", Dims(), midlayer=True))
    assert loaded.dialect == "vllm"
    assert loaded.names["layers.0.mlp.up_proj.weight"] == "midlayer.mlp.up_proj.weight"


def test_vllm_mla(tmp_path):
    dims = Dims(mla=mla_dims(), Vd=64, fc_norm=True)
    loaded = load(write_vllm(tmp_path / "c", dims, norm_output=True))
    d = loaded.drafter
    assert_dims(d, dims)
    assert d.rope.rope_type == "yarn" and d.rope.scaling["factor"] == 4.0
    assert d.eagle_version == "3.1"


@pytest.mark.parametrize("mla", [False, True])
def test_torchspec_native(tmp_path, mla):
    dims = Dims(Vd=64, mla=mla_dims() if mla else None, fc_norm=mla)
    loaded = load(write_torchspec(tmp_path / "c", dims, norm_output=mla))
    d = loaded.drafter
    assert loaded.dialect == "torchspec"
    assert_dims(d, dims)
    assert d.aux.convention == "output" and d.aux.as_input() == tuple(default_input_ids(dims))
    assert d.provenance.framework == "torchspec 0.4.0"
    assert d.model_type == ("kimi_k2" if mla else "llama")


def test_torchspec_vllm_export_of_kimi_has_shifted_ids(tmp_path):
    dims = Dims(Vd=64, mla=mla_dims(), fc_norm=True)
    loaded = load(write_torchspec(tmp_path / "c", dims, vllm_export=True, norm_output=True))
    d = loaded.drafter
    assert d.aux.as_input() == tuple(default_input_ids(dims))  # not shifted twice


def test_torchspec_low_rank_lm_head(tmp_path):
    loaded = load(write_torchspec(tmp_path / "c", Dims(Vd=64), low_rank=4))
    assert loaded.drafter.low_rank_lm_head and loaded.drafter.ships_lm_head
    assert "factorised lm_head.down / lm_head.up" in loaded.detection.evidence


@pytest.mark.parametrize("mla", [False, True])
def test_modelopt(tmp_path, mla):
    dims = Dims(mla=mla_dims() if mla else None, Vd=32)
    loaded = load(write_modelopt(tmp_path / "c", dims))
    d = loaded.drafter
    assert loaded.dialect == "modelopt"
    assert_dims(d, dims)
    assert d.has_d2t and not d.has_t2d and not d.ships_embed
    assert d.aux.convention == "output"


def test_automodel(tmp_path):
    dims = Dims(fc_norm=True)
    loaded = load(write_automodel(tmp_path / "c", dims, norm_output=True))
    d = loaded.drafter
    assert loaded.dialect == "automodel"
    assert loaded.names["fc.weight"] == "model.fc.weight"
    assert loaded.names["lm_head.weight"] == "lm_head.weight"
    assert loaded.names["fc_norm.1.weight"] == "model.fc_norm.1.weight"
    assert d.eagle_version == "3.1"


def test_from_overrides_detection(tmp_path):
    loaded = load(write_specforge(tmp_path / "c", Dims()), "torchspec")
    assert loaded.dialect == "torchspec"


def test_unknown_dialect_name(tmp_path):
    with pytest.raises(UsageError, match="unknown dialect 'nope'"):
        dialects.load(write_vllm(tmp_path / "c", Dims()), "nope")


def test_no_config(tmp_path):
    src = write_vllm(tmp_path / "c", Dims())
    (src / "config.json").unlink()
    with pytest.raises(ConfigError, match="no config.json"):
        dialects.load(src)


def test_bad_config_value_names_the_key(tmp_path):
    import json

    src = write_vllm(tmp_path / "c", Dims())
    cfg = json.loads((src / "config.json").read_text())
    cfg["hidden_size"] = "sixteen"
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="config.json: hidden_size must be an integer, got 'sixteen'"):
        dialects.load(src)


def test_names_colliding_after_renaming(tmp_path):
    from safetensors.torch import load_file, save_file

    src = write_vllm(tmp_path / "c", Dims(), midlayer=True)
    tensors = load_file(str(src / "model.safetensors"))
    tensors["layers.0.mlp.up_proj.weight"] = tensors["midlayer.mlp.up_proj.weight"].clone()
    save_file(tensors, str(src / "model.safetensors"))
    with pytest.raises(ConfigError, match="both map to 'layers.0.mlp.up_proj.weight'"):
        dialects.load(src)


def test_inspect_is_header_only_and_complete(tmp_path, cli):
    import json

    src = write_specforge(tmp_path / "c", Dims(fc_norm=True), norm_output=True)
    result = cli("inspect", src, "--json")
    data = json.loads(result.stdout)
    assert data["dialect"]["dialect"] == "sglang"
    assert data["eagle_version"] == "3.1"
    assert data["aux_layers"] == {
        "ids": [1, 3, 4],
        "convention": "output",
        "input_ids": [2, 4, 5],
        "readings": [
            {
                "dialect": "sglang",
                "score": None,
                "ids": [1, 3, 4],
                "convention": "output",
                "input_ids": [2, 4, 5],
                "why": "the reading taken",
            }
        ],
        "num_aux": 3,
    }
    assert data["vocab"]["draft_vocab_size"] == 32 and data["vocab"]["d2t"] and data["vocab"]["t2d"]
    assert data["num_tensors"] == len(data["tensors"]) == 18
    human = cli("inspect", src).stdout
    assert "output-of-layer = [2, 4, 5] input-of-layer" in human
    assert "3.1 (fc_norm, norm_output)" in human


def test_inspect_of_nothing_is_a_clean_error(tmp_path, cli):
    result = cli("inspect", tmp_path / "missing", expect=2)
    assert result.stderr.startswith("error: ") and "no such checkpoint directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_d2t_is_int64_and_t2d_bool_in_every_fixture(tmp_path):
    loaded = dialects.load(write_specforge(tmp_path / "c", Dims()))
    with loaded:
        assert loaded.read("d2t").dtype == torch.int64
        assert loaded.read("t2d").dtype == torch.bool


@pytest.mark.parametrize(
    "fc_norm, norm_output, label",
    [(True, True, "3.1 (fc_norm, norm_output)"), (True, False, "3.1 (fc_norm)"), (False, True, "3.1 (norm_output)")],
)
def test_inspect_names_only_the_31_flags_that_are_set(fc_norm, norm_output, label, cli, tmp_path):
    src = write_vllm(tmp_path / "s", Dims(fc_norm=fc_norm), norm_output=norm_output)
    line = next(t for t in cli("inspect", src).stdout.splitlines() if t.startswith("EAGLE"))
    assert line.split(None, 1)[1].strip() == label


def test_a_torchspec_vllm_export_of_a_kimi_k2_drafter_has_no_conflict_between_its_two_id_locations(tmp_path):
    """Both locations of a TorchSpec --vllm kimi_k2 export hold input-of-layer ids; they used to be compared with the
    nested ones read output-of-layer first, so that a false aux.conflicting_locations warning preceded the note."""
    from drafters import mla_dims

    src = write_torchspec(tmp_path / "ts", Dims(mla=mla_dims(), Vd=64), vllm_export=True)
    with dialects.load(src) as loaded:
        checks = [n.check for n in loaded.notes]
        assert loaded.dialect == "torchspec" and loaded.drafter.aux.convention == "input"
    assert "aux.conflicting_locations" not in checks and "aux.convention" in checks


def test_an_eagle_config_that_is_not_an_object_is_a_config_error(tmp_path):
    """It used to read as no aux ids at all (convert wrote a drafter without them, exit 0)."""
    from drafters import edit_config

    src = edit_config(write_specforge(tmp_path / "sf", Dims()), lambda cfg: cfg.update(eagle_config=[1, 2, 3]))
    with pytest.raises(ConfigError, match=r"eagle_config must be an object"):
        dialects.load(src)


def test_a_flag_stated_otherwise_in_its_second_place_is_named(tmp_path):
    """A SpecForge-style config with eagle_config.norm_before_fc false and a top-level norm_before_fc true read the
    first in silence; an engine reading the top level first runs the other value."""
    from drafters import edit_config

    def both(cfg):
        cfg["eagle_config"] = {**cfg["eagle_config"], "norm_before_fc": False}
        cfg["norm_before_fc"] = True

    src = edit_config(write_specforge(tmp_path / "sf", Dims()), both)
    with dialects.load(src) as loaded:
        (note,) = [n for n in loaded.notes if n.check == "flags.conflicting_locations"]
        assert loaded.drafter.flags.norm_before_fc is False and note.severity == "warning"
        assert (
            "eagle_config.norm_before_fc false and norm_before_fc true disagree; eagle_config.norm_before_fc is used"
            in note.message
        )
    agreeing = edit_config(write_specforge(tmp_path / "agree", Dims()), lambda cfg: cfg.update(norm_before_fc=False))
    with dialects.load(agreeing) as loaded:
        assert "flags.conflicting_locations" not in {n.check for n in loaded.notes}


def test_detection_evidence_names_the_architecture_the_config_has(tmp_path):
    """The evidence says what the file has (LlamaForCausalLMEagle3), not every string the dialect claims (SGLang's
    layout is also SpecForge's P-EAGLE, PEagleDraftModel): inspect's first line read 'X or PEagleDraftModel'."""
    from drafters import Dims, write_specforge

    detection = dialects.detect(dialects.Checkpoint.open(write_specforge(tmp_path / "d", Dims())))
    sglang = next(d for d in detection if d.dialect == "sglang")
    said = [e for e in sglang.evidence if e.startswith("architectures is")]
    assert said == ["architectures is LlamaForCausalLMEagle3"]
