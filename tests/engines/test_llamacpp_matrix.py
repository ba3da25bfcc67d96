"""The conformance matrix on llama.cpp (tests/engines/llamacpp_matrix.py): every case served by llama-server of the
build ``EAGLEKIT_LLAMACPP`` names (default llama.cpp==b11434; `eaglekit engines install` it first), through llama.cpp's
own converter and as eaglekit's GGUF, plus GGUF files no converter writes; what it did compared with what
``validate --engine llama.cpp==bN`` predicts. A difference fails: the build's rules (eaglekit/engines/
llamacpp_releases.json, eaglekit/engines/llamacpp.py) are wrong for that case. ``EAGLEKIT_RECORD=1`` writes the
observations into eaglekit/engines/llamacpp_observations.json, which validate cites."""

from __future__ import annotations

import datetime
import os

import pytest

import llamacpp_matrix as lm

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

CASES = [f"{name} [converted]" for name in lm.HF_CASES]
CASES += [f"{name} [eaglekit]" for name in lm.HF_CASES]
CASES += list(lm.GGUF_CASES)


def _serve_case(env, target, target_gguf, served, predicted, log) -> dict:
    return lm.observe(served, lm.serve(env, target_gguf, served, log), predicted, target)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    from eaglekit import engines

    env = lm.environment()
    if env is None:
        if os.environ.get("EAGLEKIT_REQUIRE_LLAMACPP") == "1":
            pytest.fail(f"{lm.SPEC} is not installed (eaglekit engines install {lm.SPEC})")
        pytest.skip(f"{lm.SPEC} is not installed (eaglekit engines install {lm.SPEC})")
    release = engines.parse(lm.SPEC).requested
    root = tmp_path_factory.mktemp("llamacpp-matrix")
    target_dir, target_gguf = lm.write_target(root, env)
    target = lm.Target(target_dir)
    results: dict[str, dict] = {}
    plain = root / "plain.gguf"  # eaglekit's GGUF of the plain case: what the GGUF cases edit
    assert lm.eaglekit_gguf(lm.build_case("eagle3", root / "plain"), target_gguf, plain) is None
    for i, name in enumerate(lm.HF_CASES):
        source = lm.build_case(name, root / f"case{i}")
        converted = root / f"case{i}-converted.gguf"
        failed = lm.run_converter(env, source, converted, target_dir)
        predicted = lm.predict(source, release)
        if failed:
            observed = {"converted": False, "error": failed}
        else:
            observed = {
                "converted": True,
                **_serve_case(env, target, target_gguf, converted, predicted, root / f"{i}c.log"),
            }
        results[f"{name} [converted]"] = {"path": "converted", "predicted": predicted, "observed": observed}
        mine = root / f"case{i}-eaglekit.gguf"
        refused = lm.eaglekit_gguf(source, target_gguf, mine)
        if refused:
            results[f"{name} [eaglekit]"] = {"path": "gguf", "refused_by_eaglekit": refused}
            continue
        predicted = lm.predict(mine, release)
        observed = _serve_case(env, target, target_gguf, mine, predicted, root / f"{i}e.log")
        results[f"{name} [eaglekit]"] = {"path": "gguf", "predicted": predicted, "observed": observed}
    for j, name in enumerate(lm.GGUF_CASES):
        served = lm.build_gguf_case(name, plain, root / f"gguf{j}.gguf")
        predicted = lm.predict(served, release)
        observed = _serve_case(env, target, target_gguf, served, predicted, root / f"{j}g.log")
        results[name] = {"path": "gguf", "predicted": predicted, "observed": observed}
    for r in results.values():
        if "predicted" in r:
            r["disagreements"] = lm.disagreements(r["predicted"], r["observed"])
            r["predicted"] = {k: v for k, v in r["predicted"].items() if k != "drafter"}
    if os.environ.get("EAGLEKIT_RECORD") == "1":
        lm.record(release, datetime.date.today().isoformat(), {k: v for k, v in results.items() if "predicted" in v})
    return {"release": release, "results": results}


@pytest.mark.parametrize("case", CASES)
def test_llamacpp_does_what_validate_predicts(runs, case):
    r = runs["results"][case]
    if "refused_by_eaglekit" in r:
        pytest.skip(f"eaglekit writes no GGUF of it: {r['refused_by_eaglekit']}")
    assert not r["disagreements"], (
        f"llama.cpp {runs['release']}, case {case!r}: {r['disagreements']}\nobserved: {r['observed']}"
    )


@pytest.mark.parametrize("case", CASES)
def test_recorded_observation_is_what_llamacpp_does(runs, case):
    """The evidence validate cites must be what the build does today: a stale entry fails (re-record it)."""
    r = runs["results"][case]
    entries = [e for e in lm.stored()["observations"] if e["release"] == runs["release"] and e["case"] == case]
    if "refused_by_eaglekit" in r or not entries:
        pytest.skip(f"no recorded observation of {case!r} (EAGLEKIT_RECORD=1 records it)")
    (entry,) = entries
    assert lm.semantic(entry["observation"]) == lm.semantic(r["observed"]), "stale: re-record with EAGLEKIT_RECORD=1"
    assert entry["checks"] == r["predicted"]["checks"] and entry["agrees"] == (not r["disagreements"])
