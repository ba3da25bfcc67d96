"""How long a Hub id takes to fail when the Hub cannot be reached, beside the floor ``python -c pass``.

A user without a network who types ``eaglekit inspect some-org/some-drafter`` (or a mistyped local path that reads as a
Hub id) waits for this. huggingface_hub's backoff retried a connection that could not be made 5 times (1+2+4+8+8 s of
sleep: 25 s, and 11 warning lines on stderr before eaglekit's error); eaglekit now says it at once, in one line
(``eaglekit/hub/reading.py`` ``open_remote``; ``tests/test_hub_native.py`` holds the one line and no backoff).

Each case runs as a user runs it, a fresh ``python -m eaglekit`` process, in interleaved rounds with the floor; printed:
the median wall time, its ratio to the floor's median, and the lines the command wrote on stderr. Needs no network:

- ``refused``: HF_ENDPOINT is a loopback port nothing listens on (what a firewall or a stopped mirror answers);
- ``no DNS``: HF_ENDPOINT names a host under ``.invalid`` (RFC 6761: never resolves), as huggingface.co does offline;
- ``typo``: ``models/drafter`` where ``models/`` is a folder and ``models/drafter`` is not, endpoint refused;
- ``HF_HUB_OFFLINE``: offline mode, nothing cached.

    python benchmarks/hub_unreachable.py               # 5 rounds
    python benchmarks/hub_unreachable.py --rounds 9 --json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(argv: list[str], env: dict, cwd: Path) -> tuple[float, int, int]:
    """(wall seconds, exit code, stderr lines) of one child process."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return time.perf_counter() - start, done.returncode, len(done.stderr.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved runs of each case")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    eaglekit = [sys.executable, "-m", "eaglekit"]
    with tempfile.TemporaryDirectory(prefix="eaglekit-unreachable-") as tmp:
        work = Path(tmp)
        (work / "models").mkdir()
        base = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_HUB_VERBOSITY")}
        base["HF_HOME"] = str(work / "hf")  # an empty Hub cache
        refused = {**base, "HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}
        cases = {
            "floor: python -c pass": ([sys.executable, "-c", "pass"], base),
            "inspect org/name, refused": ([*eaglekit, "inspect", "some-org/some-drafter"], refused),
            "inspect org/name, no DNS": (
                [*eaglekit, "inspect", "some-org/some-drafter"],
                {**base, "HF_ENDPOINT": "https://hub.eaglekit-benchmark.invalid"},
            ),
            "inspect models/drafter (typo), refused": ([*eaglekit, "inspect", "models/drafter"], refused),
            "convert org/name, refused": (
                [*eaglekit, "convert", "some-org/some-drafter", "out", "--to", "vllm"],
                refused,
            ),
            "inspect org/name, HF_HUB_OFFLINE=1": (
                [*eaglekit, "inspect", "some-org/some-drafter"],
                {**base, "HF_HUB_OFFLINE": "1"},
            ),
        }
        measure(cases["floor: python -c pass"][0], base, work)  # warm the disk cache for the first round
        runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, (argv, env) in cases.items():
                runs[name].append(measure(argv, env, work))

    floor = statistics.median(wall for wall, _, _ in runs["floor: python -c pass"])
    rows = []
    for name, samples in runs.items():
        wall = statistics.median(s[0] for s in samples)
        rows.append(
            {
                "case": name,
                "median_s": round(wall, 3),
                "ratio_to_floor": round(wall / floor, 2),
                "exit_codes": sorted({s[1] for s in samples}),
                "stderr_lines": max(s[2] for s in samples),
            }
        )
    if args.json:
        print(json.dumps({"rounds": args.rounds, "cases": rows}, indent=2))
        return
    print(f"{args.rounds} interleaved rounds; medians (a shared machine's figures move from run to run)")
    width = max(len(r["case"]) for r in rows)
    for r in rows:
        print(
            f"  {r['case']:<{width}}  {r['median_s']:6.2f} s  {r['ratio_to_floor']:6.2f}x floor"
            f"  exit {','.join(map(str, r['exit_codes']))}  stderr {r['stderr_lines']} line(s)"
        )


if __name__ == "__main__":
    main()
