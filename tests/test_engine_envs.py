"""Engine environments: `eaglekit engines` and `verify --against vllm==X / --vllm-python`, the runner in another
process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import tiny_pair
from parity import require


@pytest.fixture
def engines_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLEKIT_ENGINES_DIR", str(tmp_path / "engines"))
    return tmp_path / "engines"


def test_list_install_refusal_and_remove(cli, engines_dir):
    assert "no engine environments" in cli("engines", "list").stdout
    assert "0.25/0.26 pin a torch" in cli("engines", "install", "vllm==0.26.0", expect=2).stderr
    assert "vllm==VERSION" in cli("engines", "install", "sglang==0.5.0", expect=2).stderr
    fake = engines_dir / "vllm-0.30.0" / "bin"
    fake.mkdir(parents=True)
    os.symlink(sys.executable, fake / "python")
    listed = json.loads(cli("engines", "list", "--json").stdout)
    assert [e["engine"] for e in listed["engines"]] == ["vllm==0.30.0"] and listed["directory"] == str(engines_dir)
    removed = json.loads(cli("engines", "remove", "vllm==0.30.0", "--json").stdout)
    assert removed["removed"] is True
    assert not (engines_dir / "vllm-0.30.0").exists()
    # both documents hold to schemas/engines.schema.json, as does install's shape
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "engines.schema.json").read_text())
    for doc in (listed, removed, {"schema_version": 2, "ok": True, "engine": "vllm==0.32.0", "path": "/x"}):
        jsonschema.validate(doc, schema)
    with pytest.raises(jsonschema.ValidationError):  # no mixing of the three
        jsonschema.validate({**removed, "directory": "/x"}, schema)


def test_against_a_release_that_is_not_installed_says_how(cli, engines_dir, tmp_path):
    from drafters import Dims, write_vllm

    result = cli(
        "verify",
        write_vllm(tmp_path / "d", Dims()),
        "--target",
        tmp_path / "no-target-needed",
        "--against",
        "vllm==0.30.0",
        expect=2,
    )
    assert "run `eaglekit engines install vllm==0.30.0` first" in result.stderr


@pytest.mark.vllm
@pytest.mark.slow
def test_the_runner_in_another_process_measures_what_the_in_process_one_does(cli, tmp_path):
    """--vllm-python runs engines/vllm_runner.py as a file in that Python (here: this environment's): counters equal the
    simulation and the replayed drafter calls agree, exactly as in-process."""
    require("vllm", "the vLLM runner test")
    from eaglekit.convert import ConvertOptions, convert

    from drafters import Dims, write_tiny_target, write_vllm

    target = write_tiny_target(tmp_path / "target", layers=8, hidden=64, vocab=96, heads=2, attention_scale=0.3)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(json.dumps({"id": f"p{i}", "input_ids": p}) for i, p in enumerate(tiny_pair.prompts(2, 96, 3))) + "\n"
    )
    drafter = write_vllm(
        tmp_path / "drafter",
        Dims(H=64, T=64, V=96, Vd=96, heads=2, kv_heads=1, head_dim=32, I=96, embed=False, lm_head=True),
        ids=[2, 4, 5],
    )
    served = tmp_path / "served"
    convert(drafter, served, ConvertOptions(to="vllm"))
    report = json.loads(
        cli(
            "verify",
            served,
            "--target",
            target,
            "--prompts",
            prompts,
            "--max-new-tokens",
            8,
            "--against",
            "vllm",
            "--vllm-python",
            sys.executable,
            "--json",
        ).stdout
    )
    against = report["against"]
    assert against["vllm"] == against["simulated"] and against["output_mismatches"] == 0
    assert {c["name"]: c["passed"] for c in report["checks"]} == {
        "vllm_target_states": True,
        "vllm_logits": True,
        "vllm_acceptance": True,
        "vllm_batched_acceptance": True,  # the prompts served again all at once: the same counters
    }


def test_the_runner_holds_gc_freezes_back_only_while_it_serves(monkeypatch):
    """vllm_runner.run freezes the heap, makes gc.freeze/unfreeze no-ops while the engine lives (vLLM's own would undo
    its freeze) and gives gc back as it found it, also when serving raises. No vLLM needed: _serve is stood in for."""
    import gc

    from eaglekit.engines import vllm_runner

    freeze, unfreeze = gc.freeze, gc.unfreeze
    seen = {}

    def serve(job):
        seen["frozen"] = gc.get_freeze_count()
        gc.unfreeze()  # what vLLM's shutdown does: held back
        seen["after_unfreeze"] = gc.get_freeze_count()
        _young = [[] for _ in range(1000)]
        gc.freeze()  # what vLLM does once its engine has started: held back
        seen["grew"] = gc.get_freeze_count() - seen["frozen"]
        if job.get("fail"):
            raise RuntimeError("engine failed")
        return {"prompts": []}

    monkeypatch.setattr(vllm_runner, "_import_vllm", lambda: None)
    monkeypatch.setattr(vllm_runner, "_serve", serve)
    assert vllm_runner.run({}) == {"prompts": []}
    # frozen objects may die meanwhile (the count only falls): no unfreeze emptied it, no freeze took the 1000 lists
    assert seen["frozen"] > 1000 and seen["after_unfreeze"] > 1000 and seen["grew"] < 1000, seen
    assert gc.get_freeze_count() == 0 and gc.freeze is freeze and gc.unfreeze is unfreeze
    with pytest.raises(RuntimeError, match="engine failed"):
        vllm_runner.run({"fail": True})
    assert gc.get_freeze_count() == 0 and gc.freeze is freeze and gc.unfreeze is unfreeze


def test_llamacpp_environments_are_named_listed_and_removed_as_vllms(cli, engines_dir):
    """llama.cpp builds as llama.cpp tags them; an environment counts as installed once its record is written (a build
    interrupted before that is not listed, and verify asks for the install)."""
    from eaglekit.engines import envs
    from eaglekit.engines.llamacpp_env import RECORD, cmake_args

    assert envs.split("llamacpp==11434") == ("llama.cpp", "b11434")
    assert envs.env_dir("llama.cpp==b11434") == engines_dir / "llama.cpp-b11434"
    assert "installs llama.cpp b11434" in cli("engines", "install", "llama.cpp==b11000", expect=2).stderr
    partial = engines_dir / "llama.cpp-b11434" / "bin"
    partial.mkdir(parents=True)
    os.symlink(sys.executable, partial / "python")
    assert json.loads(cli("engines", "list", "--json").stdout)["engines"] == []
    from eaglekit.errors import MissingDependencyError

    with pytest.raises(MissingDependencyError, match=r"run `eaglekit engines install llama.cpp==b11434` first"):
        envs.python_for("llama.cpp==b11434")
    (engines_dir / "llama.cpp-b11434" / RECORD).write_text("{}")
    listed = json.loads(cli("engines", "list", "--json").stdout)["engines"]
    assert [e["engine"] for e in listed] == ["llama.cpp==b11434"]
    assert json.loads(cli("engines", "remove", "llama.cpp==b11434", "--json").stdout)["removed"] is True
    # the package's CMake configure step: tests, examples and the app off, the server alone, the build number set
    args = cmake_args(Path("/x/server_only.cmake"), "b11434")
    assert "-DLLAMA_BUILD_TESTS=OFF" in args and "-DLLAMA_BUILD_NUMBER=11434" in args
    assert "-DCMAKE_PROJECT_llama.cpp_INCLUDE=/x/server_only.cmake" in args
