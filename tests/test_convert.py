"""convert: every reader to every writer, bit-identical tensors, id conventions, upgrade, refusals, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglekit import dialects
from eaglekit.convert import ConvertOptions, convert, plan_conversion
from eaglekit.errors import ConfigError, OutputExistsError, UnsupportedError, UsageError, ValidationFailed

from drafters import (
    Dims,
    default_input_ids,
    edit_config,
    edit_tensors,
    mla_dims,
    same_bits,
    write_automodel,
    write_eagle,
    write_modelopt,
    write_specforge,
    write_speculators,
    write_torchspec,
    write_vllm,
)

SOURCES = {
    "eagle": lambda p: write_eagle(p, Dims()),
    "specforge": lambda p: write_specforge(p, Dims()),
    "specforge-3.1": lambda p: write_specforge(p, Dims(fc_norm=True), norm_output=True),
    "speculators-3.1": lambda p: write_speculators(p, Dims(fc_norm=True), norm_output=True),
    "speculators-qwen3": lambda p: write_speculators(p, Dims(qwen3=True)),
    "vllm": lambda p: write_vllm(p, Dims(layers=2)),
    "vllm-mla-3.1": lambda p: write_vllm(p, Dims(mla=mla_dims(), Vd=64, fc_norm=True), norm_output=True),
    "torchspec": lambda p: write_torchspec(p, Dims(Vd=64)),
    "torchspec-mla-3.1": lambda p: write_torchspec(p, Dims(Vd=64, mla=mla_dims(), fc_norm=True), norm_output=True),
    "modelopt": lambda p: write_modelopt(p, Dims()),
    "modelopt-mla": lambda p: write_modelopt(p, Dims(mla=mla_dims(), Vd=64)),
    "automodel-3.1": lambda p: write_automodel(p, Dims(fc_norm=True), norm_output=True),
}
WRITERS = ["vllm", "speculators", "sglang", "eagle"]

# (source, writer) pairs the writer must refuse, with the reason it gives
REFUSED = {
    ("specforge-3.1", "eagle"): "EAGLE 3.1",
    ("speculators-3.1", "eagle"): "EAGLE 3.1",
    ("speculators-qwen3", "eagle"): "qwen3",
    ("speculators-qwen3", "sglang"): "q_norm/k_norm",
    # speculators' training default norm_before_residual: true, which no SGLang release reads
    ("speculators-3.1", "sglang"): "no SGLang release eaglekit knows serves the sglang output",
    ("vllm", "eagle"): "2 decoder layers",
    ("vllm-mla-3.1", "eagle"): "mla",
    ("vllm-mla-3.1", "speculators"): "no MLA drafter",
    ("torchspec-mla-3.1", "eagle"): "mla",
    ("torchspec-mla-3.1", "speculators"): "no MLA drafter",
    ("modelopt-mla", "eagle"): "mla",
    ("modelopt-mla", "speculators"): "no MLA drafter",
    ("automodel-3.1", "eagle"): "EAGLE 3.1",
}


def read_all(path: Path) -> dict[str, torch.Tensor]:
    with dialects.load(path) as loaded:
        return {c: loaded.read(c) for c in loaded.names}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("source", list(SOURCES))
def test_every_reader_to_every_writer(tmp_path, source, writer):
    src = SOURCES[source](tmp_path / "src")
    out = tmp_path / "out"
    with dialects.load(src) as loaded:
        before = loaded.drafter
    if (source, writer) in REFUSED:
        with pytest.raises((UnsupportedError, ValidationFailed), match=REFUSED[(source, writer)]):
            convert(src, out, ConvertOptions(to=writer))
        assert not out.exists()
        return
    plan = convert(src, out, ConvertOptions(to=writer))
    with dialects.load(out) as converted:
        after = converted.drafter
        assert converted.dialect == writer
        # the math is kept
        for field in (
            "attention",
            "hidden_size",
            "target_hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "draft_vocab_size",
            "num_aux",
            "flags",
            "rope",
            "rms_norm_eps",
            "mla",
        ):
            assert getattr(after, field) == getattr(before, field), field
        if writer != "eagle":  # EAGLE cannot record ids; it always uses its default
            assert after.aux.as_input() == before.aux.as_input()
        # every tensor in both is bit-identical (materialised/synthesised ones are checked elsewhere)
        original = read_all(src)
        for canonical in converted.names:
            if canonical in original:
                assert same_bits(converted.read(canonical), original[canonical]), canonical
    config = json.loads((out / "config.json").read_text())
    assert config["eaglekit"]["source_dialect"] == plan.loaded.dialect
    assert config["eaglekit"]["dialect"] == writer
    assert (out / "model.safetensors").exists()


def test_vllm_writer_config(tmp_path):
    out = tmp_path / "out"
    convert(write_specforge(tmp_path / "src", Dims(fc_norm=True), norm_output=True), out, ConvertOptions(to="vllm"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3LlamaForCausalLM"]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]  # SpecForge's [1, 3, 4] + 1
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert cfg["num_aux_hidden_states"] == 3
    for flag, value in (
        ("fc_norm", True),
        ("norm_output", True),
        ("norm_before_fc", False),
        ("norm_before_residual", False),
    ):
        assert cfg[flag] is value
    assert cfg["draft_vocab_size"] == 32 and cfg["vocab_size"] == 64
    names = set(load_file(str(out / "model.safetensors")))
    assert "layers.0.self_attn.q_proj.weight" in names and not any(n.startswith("midlayer.") for n in names)
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.metadata()["format"] == "pt"


def test_speculators_writer_config(tmp_path):
    out = tmp_path / "out"
    convert(
        write_specforge(tmp_path / "src", Dims(fc_norm=True), norm_output=True), out, ConvertOptions(to="speculators")
    )
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3"
    assert cfg["speculators_config"]["algorithm"] == "eagle3"
    assert cfg["transformer_layer_config"]["model_type"] == "llama"
    assert cfg["transformer_layer_config"]["vocab_size"] == 64
    assert cfg["transformer_layer_config"]["num_aux_hidden_states"] == 3
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert cfg["norm_before_residual"] is False  # written explicitly: vLLM would assume true if absent
    assert cfg["fc_norm"] is True and cfg["norm_output"] is True and cfg["norm_before_fc"] is False


def test_sglang_writer_layout(tmp_path):
    out = tmp_path / "out"
    convert(write_speculators(tmp_path / "src", Dims(), norm_before_residual=False), out, ConvertOptions(to="sglang"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # output-of-layer
    assert "eagle_aux_hidden_state_layer_ids" not in cfg
    names = set(load_file(str(out / "model.safetensors")))
    assert "midlayer.self_attn.q_proj.weight" in names
    assert "embed_tokens.weight" not in names  # SGLang shares the target's
    assert {"t2d", "d2t"} <= names


def test_sglang_keeps_embeddings_when_widths_differ(tmp_path):
    out = tmp_path / "out"
    src = write_speculators(tmp_path / "src", Dims(T=24), norm_before_residual=False)
    convert(src, out, ConvertOptions(to="sglang"))
    assert "embed_tokens.weight" in load_file(str(out / "model.safetensors"))


def test_eagle_writer_layout(tmp_path):
    out = tmp_path / "out"
    convert(write_specforge(tmp_path / "src", Dims()), out, ConvertOptions(to="eagle"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["rope_theta"] == 10000.0  # explicit: EAGLE would assume 10000 anyway, engines might not
    assert "eagle_aux_hidden_state_layer_ids" not in cfg and "fc_norm" not in cfg
    names = set(load_file(str(out / "model.safetensors")))
    assert "midlayer.mlp.down_proj.weight" in names and "embed_tokens.weight" not in names


def test_eagle_refuses_non_default_ids(tmp_path):
    with pytest.raises(UnsupportedError, match=r"aux layers \[3, 5, 6\] are not EAGLE's fixed default"):
        convert(write_specforge(tmp_path / "src", Dims(), ids=[2, 4, 5]), tmp_path / "out", ConvertOptions(to="eagle"))


def test_t2d_synthesised_from_d2t(tmp_path):
    src = write_modelopt(tmp_path / "src", Dims())  # ModelOpt ships d2t without t2d
    out = tmp_path / "out"
    plan = convert(src, out, ConvertOptions(to="sglang"))
    assert any(t.name == "t2d" and t.op == "synth:t2d" for t in plan.tensors)
    t = load_file(str(out / "model.safetensors"))
    mapped = torch.arange(32) + t["d2t"]
    assert t["t2d"].dtype == torch.bool and int(t["t2d"].sum()) == 32 and bool(t["t2d"][mapped].all())


def test_low_rank_lm_head_materialised(tmp_path):
    src = write_torchspec(tmp_path / "src", Dims(Vd=64), low_rank=4)
    out = tmp_path / "out"
    convert(src, out, ConvertOptions(to="vllm"))
    t = load_file(str(out / "model.safetensors"))
    s = load_file(str(src / "model.safetensors"))
    assert "lm_head.down.weight" not in t
    torch.testing.assert_close(t["lm_head.weight"], s["lm_head.up.weight"] @ s["lm_head.down.weight"])


def test_vllm_drops_identity_d2t_for_full_vocab(tmp_path):
    src = write_specforge(tmp_path / "src", Dims(Vd=64))  # SpecForge ships t2d/d2t even at full vocab? here none
    t = load_file(str(src / "model.safetensors"))
    t["d2t"] = torch.zeros(64, dtype=torch.int64)
    t["t2d"] = torch.ones(64, dtype=torch.bool)
    save_file(t, str(src / "model.safetensors"))
    out = tmp_path / "out"
    plan = convert(src, out, ConvertOptions(to="vllm"))
    names = set(load_file(str(out / "model.safetensors")))
    assert "d2t" not in names and "t2d" not in names
    assert "d2t" in plan.dropped


def test_dtype_casts_floats_only(tmp_path):
    out = tmp_path / "out"
    convert(write_specforge(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", dtype=torch.bfloat16))
    t = load_file(str(out / "model.safetensors"))
    assert t["fc.weight"].dtype == torch.bfloat16 and t["norm.weight"].dtype == torch.bfloat16
    assert t["d2t"].dtype == torch.int64 and t["t2d"].dtype == torch.bool
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"


def test_auto_dtype_keeps_each_tensors_dtype(tmp_path):
    src = write_specforge(tmp_path / "src", Dims())
    t = load_file(str(src / "model.safetensors"))
    t["norm.weight"] = t["norm.weight"].to(torch.bfloat16)
    save_file(t, str(src / "model.safetensors"))
    out = tmp_path / "out"
    convert(src, out, ConvertOptions(to="vllm"))
    o = load_file(str(out / "model.safetensors"))
    assert o["norm.weight"].dtype == torch.bfloat16 and o["fc.weight"].dtype == torch.float32


# -- aux layer ids ---------------------------------------------------------------------------------------------


def test_target_resolves_default_ids_when_none_recorded(tmp_path, target_dir):
    out = tmp_path / "out"
    plan = convert(write_eagle(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", target=str(target_dir)))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]  # (2, L//2, L-3) for L = 8
    assert any(n.check == "aux.resolved" for n in plan.notes)


def test_without_target_the_output_says_the_engine_default_applies(tmp_path):
    out = tmp_path / "out"
    plan = convert(write_eagle(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm"))
    cfg = json.loads((out / "config.json").read_text())
    assert "eagle_aux_hidden_state_layer_ids" not in cfg
    assert any(n.check == "aux.not_recorded" for n in plan.notes)


def test_aux_layers_option_sets_input_convention_ids(tmp_path):
    out = tmp_path / "out"
    convert(write_eagle(tmp_path / "src", Dims()), out, ConvertOptions(to="sglang", aux_layers=(2, 3, 6)))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 5]


# -- upgrade -------------------------------------------------------------------------------------------------


def test_upgrade_to_31(tmp_path, cli):
    src = write_speculators(tmp_path / "src", Dims())
    out = tmp_path / "out"
    result = cli("convert", src, out, "--to", "speculators", "--upgrade", "3.1")
    # said once, with the result (issue 20: each message in one place), not also on stderr before writing
    assert result.stdout.count("changes the drafter's numerics") == 1 and "numerics" not in result.stderr
    with dialects.load(out) as loaded:
        d = loaded.drafter
        assert d.flags.fc_norm and d.flags.norm_output and d.eagle_version == "3.1"
        for i in range(3):
            w = loaded.read(f"fc_norm.{i}.weight")
            assert w.shape == (16,) and w.dtype == torch.float32 and torch.all(w == 1)
    cfg = json.loads((out / "config.json").read_text())
    assert any("upgraded EAGLE 3 -> 3.1" in n for n in cfg["eaglekit"]["notes"])
    # the record survives a further conversion, and inspect says where the checkpoint came from
    again = tmp_path / "again"
    convert(out, again, ConvertOptions(to="vllm"))
    cfg = json.loads((again / "config.json").read_text())
    assert cfg["eaglekit"]["source_dialect"] == "speculators"
    assert [n for n in cfg["eaglekit"]["notes"] if "upgraded EAGLE 3 -> 3.1" in n] and len(
        cfg["eaglekit"]["notes"]
    ) == 1
    shown = cli("inspect", again).stdout
    assert "(converted from speculators)" in shown and "upgraded EAGLE 3 -> 3.1" in shown


def test_upgrade_refused_when_already_31_and_downgrade_refused(tmp_path):
    src = write_speculators(tmp_path / "src", Dims(fc_norm=True), norm_output=True)
    with pytest.raises(UsageError, match="already EAGLE 3.1"):
        convert(src, tmp_path / "o1", ConvertOptions(to="vllm", upgrade="3.1"))
    with pytest.raises(UsageError, match="downgrading"):
        convert(src, tmp_path / "o2", ConvertOptions(to="vllm", upgrade="3"))
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


# -- round trips -----------------------------------------------------------------------------------------------

ROUND_TRIP_SOURCES = {
    "3.0": (
        lambda p: write_speculators(p, Dims(), norm_before_residual=False),
        ["vllm", "speculators", "sglang", "eagle"],
    ),
    "3.1": (
        # norm_before_residual false: no SGLang release reads it (convert refuses a true one for sglang)
        lambda p: write_speculators(p, Dims(fc_norm=True, T=24), norm_output=True, norm_before_residual=False),
        ["vllm", "speculators", "sglang"],
    ),
    "mla-3.1": (
        lambda p: write_vllm(p, Dims(mla=mla_dims(), Vd=64, fc_norm=True), norm_output=True),
        ["vllm", "sglang"],
    ),
}


@pytest.mark.parametrize("kind", list(ROUND_TRIP_SOURCES))
def test_round_trips_between_every_pair_of_writers(tmp_path, kind):
    make, writers = ROUND_TRIP_SOURCES[kind]
    src = make(tmp_path / "src")
    for a in writers:
        first = tmp_path / f"{a}"
        if not first.exists():
            convert(src, first, ConvertOptions(to=a))
        for b in writers:
            if a == b:
                continue
            mid, back = tmp_path / f"{a}-{b}", tmp_path / f"{a}-{b}-{a}"
            convert(first, mid, ConvertOptions(to=b))
            convert(mid, back, ConvertOptions(to=a))
            t1, t2 = load_file(str(first / "model.safetensors")), load_file(str(back / "model.safetensors"))
            # sglang and eagle take embeddings from the target (when widths match): a trip through them drops them
            lost = {"embed_tokens.weight"} - set(load_file(str(mid / "model.safetensors")))
            assert set(t2) == set(t1) - lost, (a, b)
            for name in t2:
                assert same_bits(t1[name], t2[name]), (a, b, name)
            c1, c2 = json.loads((first / "config.json").read_text()), json.loads((back / "config.json").read_text())
            c1.pop("eaglekit"), c2.pop("eaglekit")
            assert c1 == c2, (a, b)


# -- refusals and errors ---------------------------------------------------------------------------------------


BROKEN = {
    "unknown tensor": (
        lambda p: edit_tensors(write_vllm(p, Dims()), lambda t: t.update({"mystery.weight": torch.zeros(2)})),
        "unknown tensor mystery.weight",
    ),
    "missing tensor": (
        lambda p: edit_tensors(write_vllm(p, Dims()), lambda t: t.pop("layers.0.mlp.up_proj.weight")),
        "missing tensor layers.0.mlp.up_proj.weight",
    ),
    "fc width": (
        lambda p: edit_tensors(write_vllm(p, Dims()), lambda t: t.update({"fc.weight": torch.zeros(16, 32)})),
        r"fc.weight has shape \[16, 32\], expected \[16, 48\]",
    ),
    "q in-features": (
        lambda p: edit_tensors(
            write_vllm(p, Dims()), lambda t: t.update({"layers.0.self_attn.q_proj.weight": torch.zeros(16, 16)})
        ),
        r"q_proj.weight has shape \[16, 16\], expected \[16, 32\]",
    ),
    "fc_norm with norm_before_fc": (
        lambda p: write_vllm(p, Dims(fc_norm=True, norm_before_fc=True)),
        "fc_norm and norm_before_fc are both true",
    ),
    "fc_norm without tensors": (
        lambda p: edit_tensors(
            write_vllm(p, Dims(fc_norm=True)), lambda t: [t.pop(f"fc_norm.{i}.weight") for i in range(3)]
        ),
        r"missing tensor fc_norm.0.weight \(required by fc_norm: true\)",
    ),
    "fc_norm tensors without flag": (
        lambda p: edit_config(write_vllm(p, Dims(fc_norm=True)), lambda c: c.update(fc_norm=False)),
        "fc_norm.\\* tensors are present but fc_norm is not true",
    ),
    "duplicate ids": (lambda p: write_vllm(p, Dims(), ids=[2, 2, 5]), r"aux layer ids \[2, 2, 5\] repeat a layer"),
    "negative ids": (lambda p: write_vllm(p, Dims(), ids=[-1, 2, 5]), "outside"),
    "d2t out of order": (
        lambda p: edit_tensors(write_vllm(p, Dims()), lambda t: t.update({"d2t": t["d2t"].flip(0)})),
        "not strictly increasing",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_sources_are_refused_and_nothing_is_written(tmp_path, case, cli):
    make, message = BROKEN[case]
    src = make(tmp_path / "src")
    out = tmp_path / "out"
    with pytest.raises(ValidationFailed, match="refusing to write") as info:
        convert(src, out, ConvertOptions(to="speculators"))
    assert any(__import__("re").search(message, f.message) for f in info.value.findings), [
        f.message for f in info.value.findings
    ]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    result = cli("convert", src, out, "--to", "speculators", expect=1)
    assert (
        result.stderr.startswith("error: refusing to write")
        and "\n" == result.stderr[-1]
        and result.stderr.count("\n") == 1
    )


def test_out_of_range_ids_with_target(tmp_path, target_dir):
    src = write_vllm(tmp_path / "src", Dims(), ids=[2, 4, 9])
    with pytest.raises(ValidationFailed) as info:
        convert(src, tmp_path / "out", ConvertOptions(to="vllm", target=str(target_dir)))
    assert any(f.check == "aux.range" for f in info.value.findings)


def test_source_is_never_modified(tmp_path):
    src = write_specforge(tmp_path / "src", Dims(fc_norm=True), norm_output=True)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    convert(src, tmp_path / "out", ConvertOptions(to="vllm", dtype=torch.float16, upgrade=None))
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


def test_existing_output_needs_force(tmp_path):
    src = write_vllm(tmp_path / "src", Dims())
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(OutputExistsError):
        convert(src, out, ConvertOptions(to="vllm"))
    convert(src, out, ConvertOptions(to="vllm", force=True))
    assert (out / "config.json").exists()


def test_force_leaves_a_users_project_alone(tmp_path, cli, monkeypatch):
    """`cd project && eaglekit convert SRC . --force` once deleted train.py: user files must survive --force."""
    src = write_vllm(tmp_path / "src", Dims())
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "train.py").write_text("print('mine')\n")
    (project / "data" / "notes.txt").write_text("precious")
    monkeypatch.chdir(project)
    r = cli("convert", src, ".", "--to", "vllm", "--force", expect=2)
    assert "did not write (data/, train.py)" in r.stderr
    assert (project / "train.py").read_text() == "print('mine')\n"
    assert (project / "data" / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in project.iterdir()) == ["data", "train.py"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project", "src"]  # no temporary left beside it


def test_a_folder_of_user_files_is_refused_first_time_without_a_force_hint(tmp_path, cli):
    """Without --force, a folder holding a user's files said "already exists (pass --force to replace it)", and the
    --force the user then passed was refused too: what --force cannot replace is said the first time."""
    src = write_vllm(tmp_path / "src", Dims())
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('mine')\n")
    first = cli("convert", src, project, "--to", "vllm", expect=2).stderr
    assert "not replaced even with --force: it holds files eaglekit did not write (train.py)" in first
    assert "pass --force" not in first
    empty = tmp_path / "empty"
    empty.mkdir()  # what --force may replace still says so
    assert "already exists (pass --force to replace it)" in cli("convert", src, empty, "--to", "vllm", expect=2).stderr


def test_force_run_from_inside_its_own_earlier_output_succeeds(tmp_path, cli, monkeypatch):
    """`cd out && eaglekit convert SRC . --force` replaced the working directory itself, then resolved `.` to print the
    serve line: the conversion was written, and reported as failed ("No such file or directory", exit 1)."""
    src = write_vllm(tmp_path / "src", Dims())
    out = tmp_path / "out"
    cli("convert", src, out, "--to", "vllm")
    monkeypatch.chdir(out)
    data = json.loads(cli("convert", src, ".", "--to", "speculators", "--force", "--json").stdout)
    assert data["ok"] and data["written"] and str(out) in data["serve"]
    assert json.loads((out / "config.json").read_text())["eaglekit"]["dialect"] == "speculators"


def test_force_refuses_an_earlier_output_with_a_file_added(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    out = tmp_path / "out"
    cli("convert", src, out, "--to", "vllm")
    (out / "notes.txt").write_text("mine")
    r = cli("convert", src, out, "--to", "speculators", "--force", expect=2)
    assert "notes.txt" in r.stderr and (out / "notes.txt").exists()
    (out / "notes.txt").unlink()
    cli("convert", src, out, "--to", "speculators", "--force")  # its own output alone: replaced
    assert json.loads((out / "config.json").read_text())["eaglekit"]["dialect"] == "speculators"


def test_a_key_no_writer_places_is_named_not_dropped_in_silence(tmp_path, cli):
    """A config key eaglekit does not know (a custom one, a newer engine's) vanished from every conversion without a
    word (only --dry-run's key diff listed it). It is named in a warning; the keys every reader reads, the dialects'
    structure and bookkeeping without effect on a served drafter are not."""
    src = edit_config(
        write_vllm(tmp_path / "src", Dims()),
        lambda c: c.update(custom_key="hello", rope_interleave=True, transformers_version="4.51", use_cache=True),
    )
    for to in ("vllm", "speculators", "sglang", "eagle"):
        notes = json.loads(cli("convert", src, tmp_path / to, "--to", to, "--json").stdout)["notes"]
        [dropped] = [n for n in notes if n["check"] == "config.keys_dropped"]
        assert (
            dropped["severity"] == "warning" and "left out: 'custom_key', 'rope_interleave';" in dropped["message"]
        ), to
    # a speculators config keeps its token ids with its other HF keys, in transformer_layer_config: carried as the
    # top level's are (they were dropped, and named so)
    nested = edit_config(
        write_speculators(tmp_path / "nested", Dims()),
        lambda c: c["transformer_layer_config"].update(bos_token_id=1, eos_token_id=2),
    )
    notes = json.loads(cli("convert", nested, tmp_path / "nested-vllm", "--to", "vllm", "--json").stdout)["notes"]
    assert not [n for n in notes if n["check"] == "config.keys_dropped"]
    written = json.loads((tmp_path / "nested-vllm" / "config.json").read_text())
    assert (written["bos_token_id"], written["eos_token_id"]) == (1, 2)
    # speculators' own structure, read through to vllm and back (norm_before_residual false: SGLang reads none)
    plain = write_speculators(tmp_path / "spec", Dims(), norm_before_residual=False)
    for to in ("vllm", "sglang", "speculators"):
        notes = json.loads(cli("convert", plain, tmp_path / f"spec-{to}", "--to", to, "--json").stdout)["notes"]
        assert not [n for n in notes if n["check"] == "config.keys_dropped"], to


def test_force_refuses_weights_trained_from_an_earlier_output(tmp_path, cli):
    """A drafter fine-tuned from an --upgrade 3.1 output and saved in place keeps config.json's eaglekit block: it
    looked like an earlier output of ours, and --force replaced the trained weights. eaglekit marks the weights it
    writes."""
    from safetensors.torch import load_file, save_file

    src = write_vllm(tmp_path / "src", Dims())
    out = tmp_path / "out"
    cli("convert", src, out, "--to", "vllm")
    save_file(
        load_file(out / "model.safetensors"), out / "model.safetensors", metadata={"format": "pt"}
    )  # as a trainer saves
    r = cli("convert", src, out, "--to", "speculators", "--force", expect=2)
    assert "did not write (model.safetensors: weights without eaglekit's mark)" in r.stderr
    assert json.loads((out / "config.json").read_text())["eaglekit"]["dialect"] == "vllm"


def test_force_refuses_a_checkpoint_eaglekit_did_not_write(tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    theirs = write_specforge(tmp_path / "theirs", Dims())  # the same file names, but someone else's drafter
    before = {p.name: p.read_bytes() for p in theirs.iterdir()}
    cli("convert", src, theirs, "--to", "vllm", "--force", expect=2)
    assert {p.name: p.read_bytes() for p in theirs.iterdir()} == before


def test_dry_run_writes_nothing_and_shows_the_plan(tmp_path, cli):
    src = write_specforge(tmp_path / "src", Dims())
    out = tmp_path / "out"
    human = cli("convert", src, out, "--to", "vllm", "--dry-run").stdout
    assert "midlayer.self_attn.q_proj.weight -> layers.0.self_attn.q_proj.weight" in human
    assert "nothing written (--dry-run)" in human
    data = json.loads(cli("convert", src, out, "--to", "vllm", "--dry-run", "--json").stdout)
    assert data["written"] is False and data["files"] == ["model.safetensors", "config.json"]
    assert "eagle_aux_hidden_state_layer_ids" in data["config_diff"]["added"]
    assert not out.exists()


def test_sharded_output(tmp_path):
    out = tmp_path / "out"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", max_shard_bytes=4000))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    with dialects.load(out) as loaded:
        assert loaded.checkpoint.index_file == "model.safetensors.index.json"


def test_convert_list(cli):
    data = json.loads(cli("convert", "--list", "--json").stdout)
    by_name = {d["name"]: d for d in data["dialects"]}
    assert set(by_name) == {"vllm", "speculators", "sglang", "eagle", "torchspec", "modelopt", "automodel", "gguf"}
    assert by_name["torchspec"]["writes"] is None and by_name["vllm"]["writes"]


def test_convert_usage_errors(tmp_path, cli):
    assert cli("convert", tmp_path, expect=2).stderr.startswith("error: convert needs SRC, OUT")
    src = write_vllm(tmp_path / "src", Dims())
    assert "can be read but not written" in cli("convert", src, tmp_path / "o", "--to", "modelopt", expect=2).stderr
    assert "--aux-layers" in cli("convert", src, tmp_path / "o", "--to", "vllm", "--aux-layers", "a,b", expect=2).stderr
    # an empty item is a typo, not one id fewer (it was dropped: the run then failed validation, exit 1)
    for typo in ("1,,2", "2,4,", "٢,4,5"):
        assert (
            f"--aux-layers {typo!r}: expected comma-separated integers"
            in cli("convert", src, tmp_path / "o", "--to", "vllm", "--aux-layers", typo, expect=2).stderr
        )
    # an empty size is a typo, not the default
    assert (
        "size '' is not like 5GB"
        in cli("convert", src, tmp_path / "o", "--to", "vllm", "--max-shard-size", "", expect=2).stderr
    )
    # a negative id is a bad option value (exit 2), not a conversion that would not validate (exit 1)
    assert (
        "layer ids are 0 or more"
        in cli("convert", src, tmp_path / "o", "--to", "vllm", "--aux-layers", "-1,4,5", expect=2).stderr
    )
    assert not (tmp_path / "o").exists()


def test_plan_reports_renames_and_config_diff(tmp_path):
    plan = plan_conversion(write_specforge(tmp_path / "src", Dims()), None, ConvertOptions(to="vllm"))
    plan.loaded.close()
    renames = {t.source: t.name for t in plan.tensors if t.source}
    assert renames["midlayer.hidden_norm.weight"] == "layers.0.hidden_norm.weight"
    assert "architectures" in plan.config_diff()["changed"]
    assert plan.drafter.aux.as_input() == tuple(default_input_ids(Dims()))


def test_conversion_prints_the_command_that_serves_it(tmp_path, cli, target_dir):
    src = write_specforge(tmp_path / "src", Dims())
    out = tmp_path / "out"
    text = cli("convert", src, out, "--to", "vllm", "--target", target_dir).stdout
    serve = next(line for line in text.splitlines() if line.startswith("serve it (vLLM >= 0.22.0): "))
    spec = json.loads(serve.split("--speculative-config ", 1)[1].strip("'"))
    assert (
        serve.startswith(f"serve it (vLLM >= 0.22.0): vllm serve {target_dir} ")
        and spec["model"] == str(out.resolve())
        and spec["method"] == "eagle3"
    )
    data = json.loads(cli("convert", src, tmp_path / "sg", "--to", "sglang", "--json").stdout)
    assert data["serve"].startswith("python -m sglang.launch_server --model-path <target model>")
    # EAGLE's own layout loads in both engines: a line for each, with the releases it is for
    eagle = json.loads(cli("convert", src, tmp_path / "e", "--to", "eagle", "--json").stdout)["serving"]
    assert [(s["engine"], s["releases"]) for s in eagle] == [("vllm", ">=0.22.0"), ("sglang", ">=0.4.4.post2")]
    # an --upgrade 3.1 output is to be fine-tuned first (its fc_norm weights are ones): no command to serve it
    upgraded = cli("convert", src, tmp_path / "up", "--to", "vllm", "--upgrade", "3.1")
    assert "fine-tune before serving" in upgraded.stdout and "serve it" not in upgraded.stdout


# -- --dry-run: what would change, old -> new, and what would happen to OUT (issue 20, item 17) ---------------------


def test_dry_run_shows_old_and_new_values_of_what_changes(tmp_path, cli):
    from eaglekit import schemas

    from drafters import write_specforge

    src = write_specforge(tmp_path / "src", Dims(), ids=[1, 3, 4])  # SGLang's output-of-layer ids
    out = tmp_path / "out"
    data = json.loads(cli("convert", src, out, "--to", "vllm", "--dry-run", "--json").stdout)
    assert schemas.check(data, "convert.schema.json") == []
    changes = {c["what"]: c for c in data["changes"]}
    assert changes["aux layer ids"]["old"] == {
        "keys": ["eagle_config.eagle_aux_hidden_state_layer_ids"],
        "value": [1, 3, 4],
        "convention": "output",
    }
    assert changes["aux layer ids"]["new"] == {
        "keys": ["eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids"],
        "value": [2, 4, 5],
        "convention": "input",
    }
    assert changes["architectures"]["old"]["value"] == ["LlamaForCausalLMEagle3"] and changes["architectures"]["new"][
        "value"
    ] == ["Eagle3LlamaForCausalLM"]
    assert changes["fc_norm"]["old"] == {"keys": [], "value": False} and changes["fc_norm"]["new"] == {
        "keys": ["fc_norm"],
        "value": False,
    }
    assert not out.exists()
    text = cli("convert", src, out, "--to", "vllm", "--dry-run").stdout
    assert (
        "aux layer ids         eagle_config.eagle_aux_hidden_state_layer_ids [1, 3, 4] (output-of-layer) -> "
        "eagle_aux_hidden_state_layer_ids, eagle_config.eagle_aux_hidden_state_layer_ids [2, 4, 5] (input-of-layer)"
        in text
    )
    assert 'architectures         ["LlamaForCausalLMEagle3"] -> ["Eagle3LlamaForCausalLM"]' in text
    assert "fc_norm               absent (default false) -> false" in text
    # to speculators, model_type moves into transformer_layer_config and norm_before_residual's default differs
    to_spec = {
        c["what"]: c
        for c in json.loads(cli("convert", src, out, "--to", "speculators", "--dry-run", "--json").stdout)["changes"]
    }
    assert to_spec["model_type"]["old"] == {"keys": ["model_type"], "value": "llama"}
    assert to_spec["model_type"]["new"] == {"keys": ["transformer_layer_config.model_type"], "value": "llama"}
    # the way back changes nothing of substance: no setting is reported when it already sits where the dialect keeps it
    cli("convert", src, out, "--to", "vllm")
    again = json.loads(cli("convert", out, tmp_path / "again", "--to", "vllm", "--dry-run", "--json").stdout)
    assert again["changes"] == []


def test_dry_run_says_what_would_happen_to_out(tmp_path, cli):
    from eaglekit import schemas

    src = write_vllm(tmp_path / "src", Dims())
    out = tmp_path / "out"

    def dry(*extra):
        result = cli("convert", src, out, "--to", "speculators", "--dry-run", *extra)
        data = json.loads(cli("convert", src, out, "--to", "speculators", "--dry-run", "--json", *extra).stdout)
        assert schemas.check(data, "convert.schema.json") == []
        return result.stdout, data["destination"]

    text, d = dry()
    assert (
        d == {"path": str(out), "exists": False, "needs_force": False, "replaces": [], "refusal": None}
        and not out.exists()
    )
    assert f"output: {out} does not exist; the conversion creates it" in text
    cli("convert", src, out, "--to", "speculators")  # an earlier eaglekit output
    text, d = dry()
    assert (
        d["exists"]
        and d["needs_force"]
        and d["replaces"] == ["config.json", "model.safetensors"]
        and "already exists" in d["refusal"]
    )
    assert (
        f"output: {out} exists; the conversion needs --force, which would replace its 2 entries (config.json,"
        " model.safetensors)" in text
    )
    text, d = dry("--force")
    assert d["refusal"] is None and d["needs_force"] and f"output: {out} exists; --force replaces its 2 entries" in text
    (out / "notes.txt").write_text("mine")  # a user's file: even --force refuses
    for extra in ((), ("--force",)):
        text, d = dry(*extra)
        assert (
            not d["needs_force"]
            and d["replaces"] == []
            and "not replaced even with `force`" in d["refusal"]  # the JSON document names the parameter
            and "notes.txt" in d["refusal"]
        )
        assert "output: the conversion would stop: " in text
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("to", ["vllm", "sglang"])
def test_a_kimi_k2_drafter_stating_no_context_keeps_its_yarn_original_context_through_convert(tmp_path, to):
    """A kimi_k2 MLA drafter stating no max_position_embeddings and a YaRN scaling without its original context gets
    DeepseekV3Config's 4096 for it from its config class; the converted config used to state 2048 (LlamaConfig's), so
    that the engine ran another rope after conversion."""

    def strip(cfg):
        cfg.pop("max_position_embeddings", None)
        cfg["rope_scaling"] = {
            "type": "yarn",
            "factor": 4.0,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        }

    src = edit_config(write_vllm(tmp_path / "src", Dims(mla=mla_dims())), strip)
    with dialects.load(src) as loaded:
        before = loaded.drafter.rope_as_loaded
    assert loaded.drafter.model_type == "kimi_k2" and before.scaling["original_max_position_embeddings"] == 4096
    convert(src, tmp_path / "out", ConvertOptions(to=to))
    with dialects.load(tmp_path / "out") as loaded:
        after = loaded.drafter.rope_as_loaded
    assert json.loads((tmp_path / "out" / "config.json").read_text())["max_position_embeddings"] == 4096
    assert before.differences(after, mla=True, other_mla=True) == []


def test_speculators_proposal_methods_and_token_ids_survive_a_round_trip(tmp_path):
    """speculative_tokens (the lookahead vLLM serves a speculators drafter with) was written as 3 whatever the source
    said, and HF token ids were lost through the speculators format, which carries none: both now ride in eaglekit's
    block where the format has no place for them."""

    def k5(cfg):
        cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] = 5

    src = edit_config(write_speculators(tmp_path / "src", Dims()), k5)
    convert(src, tmp_path / "vllm", ConvertOptions(to="vllm"))
    convert(tmp_path / "vllm", tmp_path / "back", ConvertOptions(to="speculators"))
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert back["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 5

    ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    sf = edit_config(write_specforge(tmp_path / "sf", Dims()), lambda cfg: cfg.update(ids))
    convert(sf, tmp_path / "spec", ConvertOptions(to="speculators"))
    convert(tmp_path / "spec", tmp_path / "sf-back", ConvertOptions(to="sglang"))
    again = json.loads((tmp_path / "sf-back" / "config.json").read_text())
    assert {k: again.get(k) for k in ids} == ids


def test_a_malformed_speculators_proposal_list_is_a_one_line_config_error(tmp_path):
    src = edit_config(
        write_speculators(tmp_path / "src", Dims()),
        lambda cfg: cfg["speculators_config"]["proposal_methods"][0].update(speculative_tokens=0),
    )
    with pytest.raises(ConfigError, match=r"proposal_methods\[0\]\.speculative_tokens should be an integer >= 1"):
        convert(src, tmp_path / "out", ConvertOptions(to="vllm"))
    assert not (tmp_path / "out").exists()


# -- what the output's schema or a flag's type rejects is refused before anything is written
# -----------------------------


def _one_line_refusal(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert (
        result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and "internal error" not in result.stderr
    )
    return result.stderr


@pytest.mark.parametrize("to", ["vllm", "speculators"])
def test_a_config_the_output_schema_rejects_is_refused_before_writing(tmp_path, cli, to):
    """rope_theta 0 converted, and `validate` on the output then reported schema.config."""
    src = edit_config(write_vllm(tmp_path / "src", Dims()), lambda cfg: cfg.update(rope_theta=0))
    err = _one_line_refusal(cli("convert", src, tmp_path / "out", "--to", to, expect=None), 1)
    assert "refusing to write" in err and "rope_theta = 0" in err and "minimum of 0" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no OUT, no temporary folder left
    dry = json.loads(cli("convert", src, tmp_path / "out", "--to", to, "--dry-run", "--json", expect=None).stdout)
    assert [f["check"] for f in dry["findings"] if f["severity"] == "error"] == ["schema.config"]


@pytest.mark.parametrize(
    "write, stated",
    [
        # the flag at the location read first, as a boolean; "yes" where it may be stated too
        (write_vllm, {"eagle_config": {"norm_before_fc": False}, "norm_before_fc": "yes"}),
        (write_specforge, {"fc_norm": False, "use_aux_norm": "yes"}),
        (write_vllm, {"eagle_config": {"use_aux_hidden_state": True}, "use_aux_hidden_state": "yes"}),
    ],
)
def test_a_flag_that_is_not_a_boolean_is_refused_wherever_it_is_stated(tmp_path, cli, write, stated):
    """A non-boolean at a flag's second location was passed over and the output wrote the first location's value."""

    def state(cfg):
        for key, value in stated.items():
            cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and isinstance(cfg.get(key), dict) else value

    src = edit_config(write(tmp_path / "src", Dims()), state)
    key = next(k for k, v in stated.items() if v == "yes")
    err = _one_line_refusal(cli("convert", src, tmp_path / "out", "--to", "vllm", expect=None), 2)
    assert f"config.json: {key} must be true or false, got 'yes'" in err
    assert not (tmp_path / "out").exists()


def test_a_cast_that_would_overflow_to_inf_is_refused_naming_the_tensor(tmp_path, cli):
    """--dtype float16 turned a weight of 1e6 into inf without a word (validate --scan found it afterwards)."""
    src = edit_tensors(write_vllm(tmp_path / "src", Dims()), lambda t: t["fc.weight"].__setitem__((0, 0), 1e6))
    err = _one_line_refusal(cli("convert", src, tmp_path / "out", "--to", "vllm", "--dtype", "float16", expect=None), 2)
    assert "--dtype float16: tensor fc.weight holds 1 value up to 1e+06" in err and "65504" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no OUT, no temporary folder left
    cli("convert", src, tmp_path / "bf16", "--to", "vllm", "--dtype", "bfloat16")  # within bfloat16's range
    assert load_file(str(tmp_path / "bf16" / "model.safetensors"))["fc.weight"].isfinite().all()


@pytest.mark.parametrize("to", ["vllm", "sglang"])
def test_the_serve_line_pastes_into_a_shell_whatever_the_paths_hold(tmp_path, cli, target_dir, to):
    """An OUT with a ' in it broke the printed `vllm serve ... --speculative-config '{...}'` line."""
    import shlex
    import shutil

    target = tmp_path / "the team's target"
    shutil.copytree(target_dir, target)
    out = tmp_path / "it's out; rm -rf ~"
    text = cli("convert", write_specforge(tmp_path / "src", Dims()), out, "--to", to, "--target", target).stdout
    words = shlex.split(next(line for line in text.splitlines() if line.startswith("serve it (")).split("): ", 1)[1])
    if to == "vllm":
        assert words[:3] == ["vllm", "serve", str(target)] and words[3] == "--speculative-config" and len(words) == 5
        assert json.loads(words[4])["model"] == str(out.resolve())
    else:
        assert words[words.index("--model-path") + 1] == str(target)
        assert words[words.index("--speculative-draft-model-path") + 1] == str(out.resolve())


def test_no_recorded_aux_ids_are_said_once(tmp_path, cli):
    """convert said aux.not_recorded twice: its own note, and the same check run on the output."""
    data = json.loads(
        cli("convert", write_eagle(tmp_path / "src", Dims()), tmp_path / "out", "--to", "vllm", "--json").stdout
    )
    said = [n["message"] for n in data["notes"] + data["findings"] if n["check"] == "aux.not_recorded"]
    assert len(said) == 1 and "the output records none" in said[0]
