"""Producers' flags read as their own code runs them (issue 15): SpecForge's ``norm_output``.

SpecForge 0.2.0 (``specforge/modeling/draft/llama3_eagle.py``): ``norm_output`` (default true) means "apply the
final norm before lm_head"; false means lm_head reads the un-normalised state; the state fed to the next step is
always the pre-norm one. EAGLE 3.1 / SGLang: ``norm_output`` means post-norm feedback. A SpecForge-style config
cannot tell which; eaglekit warns, lets the user choose, and records its own reading when it writes one.
"""

from __future__ import annotations

import json

import pytest
import torch

from eaglekit import dialects
from eaglekit.convert import ConvertOptions, convert
from eaglekit.errors import UnsupportedError
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.validate import validate

from drafters import Dims, edit_config, write_specforge, write_speculators


def specforge_false(path):
    """A SpecForge checkpoint saved with norm_output: false (written by SpecForge, not by eaglekit)."""
    return edit_config(write_specforge(path, Dims(embed=True)), lambda c: c.__setitem__("norm_output", False))


def checks(findings, severity=None) -> set[str]:
    return {f.check for f in findings if severity is None or f.severity == severity}


def test_norm_output_false_is_ambiguous_and_both_readings_are_named(tmp_path):
    src = specforge_false(tmp_path / "sf")
    with dialects.load(src) as loaded:
        d = loaded.drafter
        assert d.norm_output_semantics == "eagle31" and not d.norm_output_certain
        assert d.flags.norm_before_lm_head and not d.flags.norm_output  # EAGLE 3.1's reading: plain EAGLE 3
        note = next(n for n in loaded.notes if n.check == "flags.norm_output_semantics")
        assert note.severity == "warning"
        assert "SpecForge" in note.message and "un-normalised" in note.message
        assert "`norm_output_semantics`" in note.message and len(note.message) < 170  # one line; at length in detail
        assert "EAGLE 3.1's (plain EAGLE 3; read so) or SpecForge 0.2.0's" in note.detail
    report = validate(src, engine="vllm==0.32")
    # uncertain: a warning, not an error (the only error is SGLang-style ids, which vLLM misreads)
    assert checks(report.findings, "error") == {"engine.aux_ids"}
    engine = next(f for f in report.findings if f.check == "engine.norm_output_reading")
    assert (
        engine.severity == "warning" and "SpecForge" in engine.effect and "cannot be served as trained" in engine.detail
    )


def test_specforge_reading_of_norm_output_false_is_an_error_for_vllm(tmp_path, cli):
    src = specforge_false(tmp_path / "sf")
    with dialects.load(src, norm_output_semantics="specforge") as loaded:
        d = loaded.drafter
        assert d.norm_output_semantics == "specforge" and d.norm_output_certain
        assert not d.flags.norm_before_lm_head and not d.flags.norm_output and d.eagle_version == "3"
        assert "flags.norm_output_semantics" not in checks(loaded.notes)
        assert "flags.lm_head_unnormed" in checks(loaded.notes, "warning")
    report = validate(src, engine="vllm==0.32", norm_output_semantics="specforge")
    assert not report.ok and "engine.lm_head_unnormed" in checks(report.findings, "error")
    out = cli("validate", src, "--engine", "vllm==0.32", "--norm-output-semantics", "specforge", expect=1)
    assert "[engine.lm_head_unnormed]" in out.stdout and "always applies the final norm" in out.stdout
    shown = cli("inspect", src, "--norm-output-semantics", "specforge").stdout
    assert "lm_head reads the un-normalised state" in shown and "read as SpecForge 0.2.0's" in shown
    assert "assumed" in cli("inspect", src).stdout  # auto: the reading taken is said to be an assumption


def test_bad_semantics_value_is_a_usage_error(tmp_path, cli):
    src = specforge_false(tmp_path / "sf")
    result = cli("inspect", src, "--norm-output-semantics", "sglang", expect=2)
    assert "--norm-output-semantics 'sglang'" in result.stderr


def test_reference_skips_the_final_norm_where_specforge_does(tmp_path):
    src = specforge_false(tmp_path / "sf")
    g = torch.Generator().manual_seed(0)
    ids, aux = torch.randint(0, 64, (5,), generator=g), torch.randn(5, 48, generator=g)
    outs = {}
    for semantics in ("eagle31", "specforge"):
        with dialects.load(src, norm_output_semantics=semantics) as loaded:
            ref = ReferenceDrafter(
                loaded.drafter,
                weights_for(loaded, target_embed=torch.randn(64, 16, generator=torch.Generator().manual_seed(1))),
            )
            outs[semantics] = ref.decode(ids, ref.combine(aux), torch.arange(5), ref.causal_attend())
    sf, e31 = outs["specforge"], outs["eagle31"]
    assert torch.equal(sf.y, sf.pre) and torch.equal(sf.feedback, sf.pre)  # lm_head and feedback: pre-norm
    assert torch.equal(e31.feedback, e31.pre) and not torch.allclose(e31.y, e31.pre)  # EAGLE 3: norm before lm_head
    assert torch.equal(e31.pre, sf.pre)


def test_unnormed_lm_head_converts_only_to_specforge_and_back(tmp_path):
    src = specforge_false(tmp_path / "sf")
    for to in ("vllm", "speculators", "eagle"):
        with pytest.raises(UnsupportedError, match="un-normalised"):
            convert(src, tmp_path / to, ConvertOptions(to=to, norm_output_semantics="specforge"))
    out = tmp_path / "sglang"
    convert(src, out, ConvertOptions(to="sglang", norm_output_semantics="specforge"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["norm_output"] is False and cfg["eaglekit"]["norm_output_semantics"] == "specforge"
    with dialects.load(out) as back:  # the output says which reading: no option needed, no ambiguity
        assert not back.drafter.flags.norm_before_lm_head and back.drafter.norm_output_certain
        assert "flags.norm_output_semantics" not in checks(back.notes)


def test_sglang_writer_leaves_norm_output_out_for_eagle3(tmp_path):
    """Changed expectation (issue 15): the writer used to put norm_output: false into every EAGLE 3 output, which
    SpecForge 0.2.0 runs without the final norm. Absent, SGLang and SpecForge both run plain EAGLE 3."""
    out = tmp_path / "sglang"
    src = write_speculators(
        tmp_path / "src", Dims(), norm_before_residual=False
    )  # SGLang reads no norm_before_residual
    convert(src, out, ConvertOptions(to="sglang"))
    cfg = json.loads((out / "config.json").read_text())
    assert "norm_output" not in cfg and "norm_output_semantics" not in cfg["eaglekit"]
    with dialects.load(out) as back:
        assert back.drafter.eagle_version == "3" and back.drafter.flags.norm_before_lm_head
        assert back.drafter.norm_output_semantics is None and not back.notes


def test_sglang_writer_records_the_eagle31_reading(tmp_path):
    out = tmp_path / "sglang"
    src = write_speculators(tmp_path / "src", Dims(fc_norm=True), norm_output=True, norm_before_residual=False)
    convert(src, out, ConvertOptions(to="sglang"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["norm_output"] is True and cfg["eaglekit"]["norm_output_semantics"] == "eagle31"
    with dialects.load(out) as back:
        assert back.drafter.flags.norm_output and back.drafter.norm_output_certain
        assert "flags.norm_output_semantics" not in checks(back.notes)


def test_specforge_norm_output_true_read_as_specforge_is_eagle3(tmp_path):
    """SpecForge's norm_output: true is plain EAGLE 3 (pre-norm feedback); vLLM reads the key as post-norm feedback."""
    src = write_specforge(tmp_path / "sf", Dims(embed=True), norm_output=True)
    with dialects.load(src, norm_output_semantics="specforge") as loaded:
        assert not loaded.drafter.flags.norm_output and loaded.drafter.flags.norm_before_lm_head
    report = validate(src, engine="vllm==0.32", norm_output_semantics="specforge")
    flag = next(f for f in report.findings if f.check == "engine.flag.norm_output")
    assert flag.severity == "error" and "post-norm state" in flag.effect
    out = tmp_path / "vllm"
    convert(src, out, ConvertOptions(to="vllm", norm_output_semantics="specforge"))
    assert json.loads((out / "config.json").read_text())["norm_output"] is False
    assert validate(out, engine="vllm==0.32").ok


# -- EAGLE-layout EAGLE 3.1 (issue 15, item 3) ------------------------------------------------------------


def eagle_layout_31(path):
    """An original-EAGLE-layout pytorch_model.bin whose config states fc_norm and norm_output, with fc_norm.*
    tensors."""
    from drafters import write_eagle

    src = write_eagle(path, Dims(fc_norm=True))
    return edit_config(src, lambda c: c.update(fc_norm=True, norm_output=True))


def test_eagle_layout_31_is_read_with_the_flags_its_config_states(tmp_path, cli):
    src = eagle_layout_31(tmp_path / "e31")
    assert (src / "pytorch_model.bin").exists()
    for dialect in ("auto", "eagle", "vllm", "sglang"):
        with dialects.load(src, dialect) as loaded:
            d = loaded.drafter
            assert d.flags.fc_norm and d.flags.norm_output and d.eagle_version == "3.1", dialect
    report = validate(src)
    assert "flags.fc_norm_without_flag" not in checks(report.findings)
    report = validate(src, engine="vllm==0.32")
    assert not checks(report.findings) & {
        "flags.fc_norm_without_flag",
        "engine.flag.fc_norm",
        "engine.flag.norm_output",
        "engine.unknown_tensor",
    }
    assert "3.1 (fc_norm, norm_output)" in cli("inspect", src).stdout


# -- smaller (item 4) ---------------------------------------------------------------------------------------


def test_inspect_hints_when_fc_norm_tensors_are_missing(tmp_path, cli):
    from drafters import edit_tensors

    src = write_speculators(tmp_path / "s", Dims(fc_norm=True), norm_output=True)
    edit_tensors(src, lambda t: t.pop("fc_norm.1.weight"))
    shown = cli("inspect", src).stdout
    assert "[tensor.missing]" in shown and "fc_norm.1.weight" in shown and "unit weights" in shown


def test_convert_says_a_dropped_embed_tokens_without_dry_run(tmp_path, cli):
    # ships embed_tokens; sglang takes the target's (norm_before_residual false: no SGLang release reads it)
    src = write_speculators(tmp_path / "s", Dims(), norm_before_residual=False)
    shown = cli("convert", src, tmp_path / "out", "--to", "sglang").stdout
    assert "embed_tokens.weight dropped: sglang takes embeddings from the target" in shown
