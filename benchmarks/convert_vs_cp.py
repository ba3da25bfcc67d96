"""`eaglekit convert` of a full-size drafter beside its floor, `cp -r` of the same files followed by `sync`: whole
processes, paired and interleaved (the order alternates each round), medians. Issue 16 goal 2: ratio <= 1.15 and
peak RSS <= 100 MiB.

    python benchmarks/convert_vs_cp.py [--rounds 5] [--kind llama8b] [--workdir DIR]

The drafter is benchmarks/synthetic.py's Llama-3.1-8B-shaped EAGLE 3 (1.90 GB bf16, one 1 GB embedding), in
SpecForge's layout, converted to vLLM's. Both sides write beside the source on the same filesystem; each output
is removed (and `sync`ed away) before the next run. Peak RSS is the convert process's own (GNU time's %M).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import ensure

ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str], env: dict | None = None) -> tuple[float, int]:
    """(wall seconds, peak RSS KiB) of one child process. The RSS comes from GNU time, whose own child starts small:
    Linux carries ru_maxrss over from a parent across fork+exec, and this process built a 1.9 GB drafter."""
    with tempfile.NamedTemporaryFile("r") as rss:
        start = time.perf_counter()
        # from ROOT: `python -m` puts the working directory first on sys.path, before PYTHONPATH
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", rss.name, *cmd],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wall = time.perf_counter() - start
        if proc.returncode:
            sys.exit(f"{cmd} failed (exit {proc.returncode}): {proc.stderr.decode()[-2000:]}")
        return wall, int(rss.read().split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kind", default="llama8b")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/eaglekit-bench"))
    args = ap.parse_args()
    src = ensure(args.kind, args.workdir / args.kind)
    size = sum(f.stat().st_size for f in src.rglob("*") if f.is_file())
    # As an installed package runs: bytecode cached (pip compiles on install), in a scratch prefix, not the source tree
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PYTHONPYCACHEPREFIX": str(args.workdir / "pycache"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = args.workdir / f"{args.kind}-out"
    convert = [sys.executable, "-m", "eaglekit", "convert", str(src), str(out), "--to", "vllm"]
    copy = ["sh", "-c", f"cp -r '{src}' '{out}' && sync"]
    subprocess.run(
        convert + ["--dry-run"], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL
    )  # writes the bytecode cache
    subprocess.run("sync", shell=True)
    rows = []
    for r in range(args.rounds):
        row = {}
        for name in ["convert", "cp"] if r % 2 == 0 else ["cp", "convert"]:
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run("sync", shell=True)
            row[name] = run(convert if name == "convert" else copy, env)
        shutil.rmtree(out, ignore_errors=True)
        rows.append(row)
        print(
            f"round {r + 1}: convert {row['convert'][0]:.2f} s ({row['convert'][1] / 1024:.0f} MiB peak) | cp -r + sync"
            f" {row['cp'][0]:.2f} s | ratio {row['convert'][0] / row['cp'][0]:.2f}",
            flush=True,
        )
    conv = statistics.median(r["convert"][0] for r in rows)
    cp = statistics.median(r["cp"][0] for r in rows)
    ratios = sorted(r["convert"][0] / r["cp"][0] for r in rows)
    print(
        f"\n{args.kind}, {size / 1e9:.2f} GB, median of {args.rounds} paired rounds: convert {conv:.2f} s vs cp -r +"
        f" sync {cp:.2f} s: ratio {conv / cp:.2f} (per round {', '.join(f'{x:.2f}' for x in ratios)}; target <= 1.15);"
        f" convert's peak RSS {max(r['convert'][1] for r in rows) / 1024:.0f} MiB (target <= 100)"
    )


if __name__ == "__main__":
    main()
