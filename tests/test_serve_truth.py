"""convert never contradicts validate (issue 53, item 1): for every drafter the suite builds (tests/drafters.py's
writers, the example drafters, the checkpoints rebuilt from reports in the wild, the conformance matrix's cases) and
every writable dialect, what convert writes, and each serve line it prints, validate clean (no error) with
``--engine E==X`` for every release X the line names; or convert refuses and says why. An engine the layout is for that
serves none of it is said in a note, not left to a serve line that would fail.

Header-only: in-process conversions of tiny checkpoints and validate's release rules, no engine is run (the rules' own
evidence, run or source, is what tests/engines and docs/engines.md hold)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from eaglekit import api, dialects
from eaglekit.engines import support
from eaglekit.engines.common import load_table, release_key
from eaglekit.errors import EaglekitError

sys.path.insert(0, str(Path(__file__).resolve().parent / "engines"))  # the conformance matrix's cases
from test_wild import (
    target_config,
    write_angelslim_qwen3,
    write_headless,
    write_issue14_mla,
    write_nvidia_gpt_oss,
)

import matrix
from drafters import (
    Dims,
    edit_config,
    mla_dims,
    write_automodel,
    write_eagle,
    write_modelopt,
    write_specforge,
    write_speculators,
    write_torchspec,
    write_vllm,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "drafters"


def _copy(path: Path):
    return lambda out: Path(shutil.copytree(path, out))


def _with(config: dict):
    """A writer's drafter with config keys set (or, with None, removed)."""

    def edit(c):
        for key, value in config.items():
            c.pop(key, None) if value is None else c.update({key: value})

    return edit


# name -> (writer of the drafter into a directory, the target's depth to convert with, or None)
FIXTURES = {
    "eagle": (lambda p: write_eagle(p, Dims()), None),
    "eagle safetensors": (lambda p: write_eagle(p, Dims(), bin_file=False), None),
    "specforge": (lambda p: write_specforge(p, Dims()), None),
    "specforge 3.1": (lambda p: write_specforge(p, Dims(fc_norm=True), norm_output=True), None),
    "specforge legacy 3.1": (lambda p: write_specforge(p, Dims(fc_norm=True), legacy=True), None),
    "specforge wider target": (lambda p: write_specforge(p, Dims(T=24)), None),
    "speculators": (lambda p: write_speculators(p, Dims()), None),
    "speculators nbr false": (lambda p: write_speculators(p, Dims(), norm_before_residual=False), None),
    "speculators 3.1": (lambda p: write_speculators(p, Dims(fc_norm=True), norm_output=True), None),
    "speculators qwen3": (lambda p: write_speculators(p, Dims(qwen3=True)), None),
    "speculators norm_before_fc": (lambda p: write_speculators(p, Dims(norm_before_fc=True)), None),
    "vllm": (lambda p: write_vllm(p, Dims()), None),
    "vllm 2 layers": (lambda p: write_vllm(p, Dims(layers=2)), None),
    "vllm full vocab": (lambda p: write_vllm(p, Dims(Vd=64)), None),
    "vllm headless": (lambda p: write_vllm(p, Dims(Vd=64, lm_head=False)), None),
    "vllm 4 aux": (lambda p: write_vllm(p, Dims(n=4), ids=[1, 3, 5, 7]), None),
    "vllm norm_before_residual": (
        lambda p: edit_config(write_vllm(p, Dims()), _with({"norm_before_residual": True})),
        None,
    ),
    "vllm window": (
        lambda p: edit_config(
            write_vllm(p, Dims()), _with({"sliding_window": 8, "layer_types": ["sliding_attention"]})
        ),
        None,
    ),
    "vllm qwen3": (lambda p: write_vllm(p, Dims(qwen3=True)), None),
    "vllm partial rotary": (
        lambda p: edit_config(write_vllm(p, Dims()), _with({"partial_rotary_factor": 0.5})),
        None,
    ),
    "specforge tied head": (
        lambda p: edit_config(write_specforge(p, Dims()), _with({"tie_word_embeddings": True})),
        None,
    ),
    "vllm mla 3.1": (lambda p: write_vllm(p, Dims(mla=mla_dims(), Vd=64, fc_norm=True), norm_output=True), None),
    "vllm with target": (lambda p: write_vllm(p, Dims()), 8),
    "torchspec": (lambda p: write_torchspec(p, Dims(Vd=64)), None),
    "torchspec low rank": (lambda p: write_torchspec(p, Dims(), low_rank=2), None),
    "torchspec mla 3.1": (
        lambda p: write_torchspec(p, Dims(Vd=64, mla=mla_dims(), fc_norm=True), norm_output=True),
        None,
    ),
    "modelopt": (lambda p: write_modelopt(p, Dims()), None),
    "modelopt mla": (lambda p: write_modelopt(p, Dims(mla=mla_dims(), Vd=64)), None),
    "automodel 3.1": (lambda p: write_automodel(p, Dims(fc_norm=True), norm_output=True), None),
    # the example drafters (SpecForge's layout, SmolLM2's 30 layers)
    "example eagle3": (_copy(EXAMPLES / "smollm2-eagle3-specforge"), 30),
    "example eagle3.1": (_copy(EXAMPLES / "smollm2-eagle3.1-specforge"), 30),
    # checkpoints rebuilt from reports in the wild (tests/test_wild.py)
    "gpt-oss v3": (lambda p: write_nvidia_gpt_oss(p, [24, 30, 36]), 36),
    "gpt-oss v3 without target": (lambda p: write_nvidia_gpt_oss(p, [24, 30, 36]), None),
    "gpt-oss long context": (lambda p: write_nvidia_gpt_oss(p, [1, 17, 32]), 36),
    "kimi headless, draft_vocab_size 64": (lambda p: write_headless(p, draft_vocab_size=64), None),
    "gpt-oss headless, draft_vocab_size null": (lambda p: write_headless(p, draft_vocab_size=None), None),
    "angelslim qwen3 label": (write_angelslim_qwen3, None),
    "issue 14 ambiguous mla": (write_issue14_mla, None),
    # the conformance matrix's cases (tests/engines/matrix.py), as vLLM was run on them
    **{f"matrix {name}": (lambda p, name=name: matrix.build(name, p), matrix.TARGET_LAYERS) for name in matrix.CASES},
}
WRITERS = dialects.names(writable=True)


def releases_named(engine: str, specifier: str) -> list[str]:
    """The releases of ``engine`` whose rules differ or that were run (table rows, the newest wheel read, vLLM releases
    run: between two rows a release reads a drafter as the first does) that ``specifier`` (``>=0.25.0``,
    ``>=0.22.0,<0.30.0``, joined by " or ") takes, and one past the newest for an open range (newer releases are
    assumed to keep the newest rules)."""
    table = load_table(support.TABLES[engine])
    known = set(table["releases"]) | {table.get("newest_read", min(table["releases"]))}
    if engine == "vllm":
        known |= {e["release"] for e in load_table("vllm_observations.json")["observations"]}
    newest = max(known, key=release_key)
    past = ".".join(map(str, (*release_key(newest)[:1], release_key(newest)[1] + 1, 0)))
    chosen = []
    for part in specifier.split(" or "):
        bounds = dict(b.split("=", 1) if b.startswith(">=") else ("<", b[1:]) for b in part.split(","))
        low, high = release_key(bounds[">"]), release_key(bounds["<"]) if "<" in bounds else None
        chosen += [v for v in known if release_key(v) >= low and (high is None or release_key(v) < high)]
        if high is None:
            chosen.append(past)
    return sorted(set(chosen), key=release_key)


def test_releases_named_reads_a_specifier():
    assert releases_named("vllm", ">=0.30.0,<0.31.0") == ["0.30.0"]
    assert releases_named("vllm", ">=0.31.0")[:3] == ["0.31.0", "0.32.0", "0.33.0"]
    assert releases_named("sglang", ">=0.4.9,<0.5.13") == ["0.4.9", "0.5.2", "0.5.12"]
    assert releases_named("sglang", ">=0.5.17") == ["0.5.17", "0.5.23", "0.6.0"]


def target_for(tmp_path: Path, fixture: str, src: Path, depth: int | None) -> str | None:
    """The target to convert ``fixture`` with: a config of ``depth`` layers (none: no target), of the drafter's target
    width and vocabulary."""
    if depth is None:
        return None
    with dialects.load(src) as loaded:
        d = loaded.drafter
    target = target_config(tmp_path / "target", depth)
    edit_config(target, _with({"hidden_size": d.target_hidden_size, "vocab_size": d.vocab_size}))
    return str(target)


def _errors(path: Path, engine: str, target: str | None) -> list[str]:
    report = api.validate(path, engine=engine, target=target)
    return [f"[{f.check}] {f.line()}" for f in report.findings if f.severity == "error"]


@pytest.mark.parametrize("fixture", list(FIXTURES))
def test_what_convert_writes_and_serves_validates_clean_for_that_engine(tmp_path, fixture):
    write, depth = FIXTURES[fixture]
    src = write(tmp_path / "src")
    target = target_for(tmp_path, fixture, src, depth)
    for to in WRITERS:
        out = tmp_path / to
        try:
            result = api.convert(src, out, to=to, target=target)
        except EaglekitError as exc:
            assert str(exc).strip() and not out.exists(), (to, str(exc))  # refused, saying why, nothing written
            continue
        served = {line["engine"]: line for line in result.data["serving"]}
        assert set(served) <= set(dialects.get(to).served_by), to
        for engine in dialects.get(to).served_by:
            if engine not in served:  # not for this engine: said, with the reason
                assert any(
                    n["check"] == "convert.unservable" and n["severity"] == "info" for n in result.data["notes"]
                ), (to, engine, result.data["notes"])
                continue
            line = served[engine]
            assert line["command"].startswith("vllm serve " if engine == "vllm" else "python -m sglang.launch_server")
            for release in releases_named(engine, line["releases"]):
                problems = _errors(out, f"{engine}=={release}", target)
                assert not problems, f"{fixture} -> {to}: {line['for']} printed, {engine}=={release}: {problems}"
        # a layout its engines serve none of is refused, but where it is the trainer's own: a P-EAGLE 3.1 drafter as
        # speculators, which trains it and whose flags no vLLM release reads there (said by its own note)
        trainers_layout = any(n["check"] == "convert.peagle_flags_dropped" for n in result.data["notes"])
        assert served or trainers_layout or not dialects.get(to).served_by, (to, result.data["notes"])
        shutil.rmtree(out)


def test_the_reported_contradiction_is_refused_with_its_reason(tmp_path, cli):
    """`convert --to sglang` wrote norm_before_residual: true, which every SGLang release ignores (validate --engine
    sglang==X errors on it), and printed SGLang's serve line all the same: now refused, exit 2, naming why."""
    # what it wrote before: the sglang layout holding norm_before_residual: true
    api.convert(
        write_speculators(tmp_path / "plain", Dims(), norm_before_residual=False), tmp_path / "before", to="sglang"
    )
    before = edit_config(tmp_path / "before", _with({"norm_before_residual": True}))
    for release in support.rows("sglang"):
        report = api.validate(before, engine=f"sglang=={release}")
        assert [f.check for f in report.findings if f.severity == "error"] == ["engine.flag.norm_before_residual"]
    src = write_speculators(tmp_path / "src", Dims())  # speculators' training default: norm_before_residual true
    result = cli("convert", src, tmp_path / "out", "--to", "sglang", expect=2)
    assert "norm_before_residual" in result.stderr and "no SGLang release" in result.stderr
    assert not (tmp_path / "out").exists() and "serve it" not in result.stdout


def test_a_speculators_31_line_names_the_releases_that_read_its_flags(tmp_path, cli):
    """vLLM 0.22-0.24 drop a speculators config's top-level fc_norm / norm_output: the line says >= 0.25.0."""
    src = write_specforge(tmp_path / "src", Dims(fc_norm=True), norm_output=True)
    text = cli("convert", src, tmp_path / "out", "--to", "speculators").stdout
    assert "serve it (vLLM >= 0.25.0): vllm serve" in text
    data = json.loads(cli("convert", src, tmp_path / "out2", "--to", "sglang", "--json").stdout)
    assert [(s["engine"], s["first"]) for s in data["serving"]] == [("sglang", "0.5.12")]
