"""The first `eaglekit verify` on a GGUF target (nothing in eaglekit's cache: the file is parsed, dequantised and
written to the cache) beside the next one (loaded from the cache), whole processes, interleaved rounds, medians. On the
demo: the SmolLM2 GGUF file and the EAGLE 3.1 example drafter, 8 held-out prompts x 64 tokens. Each cold round gets a
fresh ``XDG_CACHE_HOME``; the warm rounds share one that the first cold round filled.

    python benchmarks/gguf_cold_load.py [--rounds 3] [--eaglekit-python PY]

Prints each round's walls and verify's ``target_load`` stage (from its report), cold and warm, and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smollm2 import smollm2

ROOT = Path(__file__).resolve().parent.parent
DRAFTER = ROOT / "examples" / "drafters" / "smollm2-eagle3.1-specforge"
PROMPTS = ROOT / "examples" / "prompts-heldout.jsonl"


def verify(python: str, target: str, cache: Path, report: Path) -> tuple[float, float]:
    """(whole-process wall, the report's target_load) of one verify with ``cache`` as XDG_CACHE_HOME."""
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(cache),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    cmd = [
        python,
        "-m",
        "eaglekit",
        "verify",
        str(DRAFTER),
        "--target",
        target,
        "--prompts",
        str(PROMPTS),
        "--num-prompts",
        "8",
        "--max-new-tokens",
        "64",
        "--report",
        str(report),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"verify failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads(report.read_text())["timings"]["target_load"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--eaglekit-python", default=sys.executable)
    args = ap.parse_args()
    target = smollm2()
    work = Path(tempfile.mkdtemp(prefix="eaglekit-cold-"))
    warm_cache = work / "warm"
    cold, warm = [], []
    try:
        for r in range(args.rounds):
            cache = work / f"cold-{r}"
            cold.append(verify(args.eaglekit_python, target, cache, work / "report.json"))
            if r == 0:
                shutil.copytree(cache, warm_cache)
            shutil.rmtree(cache)
            warm.append(verify(args.eaglekit_python, target, warm_cache, work / "report.json"))
            print(
                f"round {r + 1}: cold {cold[-1][0]:.1f} s (target_load {cold[-1][1]:.1f}) | warm {warm[-1][0]:.1f} s"
                f" (target_load {warm[-1][1]:.1f})",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = lambda rows, i: statistics.median(row[i] for row in rows)
    print(
        f"\nmedian of {args.rounds}: first verify (GGUF parsed) {med(cold, 0):.1f} s, target_load {med(cold, 1):.1f} s;"
        f" from the cache {med(warm, 0):.1f} s, target_load {med(warm, 1):.1f} s"
    )


if __name__ == "__main__":
    main()
