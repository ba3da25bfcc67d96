from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/drafters.py, tests/fakehub.py

from fakehub import fake_hub  # noqa: F401  (a fixture: every test module may ask for it)

# pytest-xdist's workers (`make test` runs `-n 2`) share the cores: each takes its share, not all of them (two workers
# of two threads each on 2 cores: `make test-fast` 2m24s serial -> 3m41s; one thread each: 1m20s)
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1) // _workers))
# ... and every verify, drift and convert the tests run (in this process or a child) takes that share too, rather than
# a count measured from whatever else the machine runs that moment (eaglekit/target/threads.py; tests/test_threads.py)
os.environ["EAGLEKIT_NUM_THREADS"] = str(torch.get_num_threads())


@pytest.fixture(scope="session")
def trained_pair(tmp_path_factory):
    """``trained_pair(eagle="3.1", steps=120)``: ``tiny_pair.build``'s trained target and drafter, built once per
    session for each (eagle, steps) and shared by every module that asks (tests only read them; copy to change one).
    A fresh dict each call."""
    import tiny_pair

    built: dict[tuple[str, int], dict] = {}

    def get(eagle: str = "3", steps: int = 120) -> dict:
        if (eagle, steps) not in built:
            built[eagle, steps] = tiny_pair.build(
                tmp_path_factory.mktemp(f"pair{eagle}-{steps}"), eagle=eagle, steps=steps
            )
        return dict(built[eagle, steps])

    return get


@pytest.fixture
def target_dir(tmp_path) -> Path:
    """A target model's config.json only (8 layers, hidden 16, vocab 64), which is all convert/validate read."""
    d = tmp_path / "target"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 16,
                "num_hidden_layers": 8,
                "num_attention_heads": 2,
                "vocab_size": 64,
                "intermediate_size": 32,
                "rope_theta": 10000.0,
            }
        )
    )
    return d


def run_cli(*args: str, expect: int | None = 0):
    """Invoke the CLI in-process; returns the click Result (stdout in .stdout, stderr in .stderr)."""
    from click.testing import CliRunner

    from eaglekit.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    if expect is not None:
        assert result.exit_code == expect, (
            f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def wheel_files(tmp_path_factory) -> list[str]:
    """The names in eaglekit's wheel, built once per session from this tree (pip, no dependencies, no isolation)."""
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out)]
    subprocess.run([*command, str(root)], check=True)
    return zipfile.ZipFile(next(out.glob("eaglekit-*.whl"))).namelist()
