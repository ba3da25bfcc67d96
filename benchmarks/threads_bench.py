"""torch's thread count as verify (or drift) chooses it by default, beside every count a user could set, alone and
beside one busy process: whole processes, interleaved rounds (the settings' order rotates each round), medians.
Issue 56 goal 5 / issue 53 item 6: the default within 10% of the best setting in both conditions.

    python benchmarks/threads_bench.py [--rounds 3] [--command verify|drift] [--conditions alone,busy]

- ``verify``: the demo (SmolLM2 GGUF + the EAGLE 3.1 example, 8 held-out prompts x 64 new tokens);
- ``drift``: the example pair with the built-in inputs up to 2048 tokens (``--max-context 2048 --inputs-per-bucket 1``).

Settings: the default (no ``--threads``; the environment's ``EAGLEKIT_NUM_THREADS``, ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` removed, so that eaglekit measures the load as a user's run does) and ``--threads N`` for N = 1 ..
the cores this process may use. Conditions: ``alone`` (nothing started beside it: on a shared machine, whatever else
runs is there too, so say so) and ``busy``: one ``python -c "while True: pass"`` spinning for the whole round, started
a second before it. Each default run's report says what it chose (``resources``: threads, what chose them, the load it
measured); the script prints it beside the times. Exit 1 when the default is more than 10% over the best median in a
condition.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smollm2 import smollm2

ROOT = Path(__file__).resolve().parent.parent
DRAFTERS = ROOT / "examples" / "drafters"
LIMIT = 1.10
SPINNER = [sys.executable, "-c", "while True: pass"]


def command(kind: str, report: Path) -> list[str]:
    eaglekit = [sys.executable, "-m", "eaglekit"]
    if kind == "verify":
        return [
            *eaglekit,
            *("verify", str(DRAFTERS / "smollm2-eagle3.1-specforge"), "--target", smollm2()),
            *("--prompts", str(ROOT / "examples" / "prompts-heldout.jsonl"), "--num-prompts", "8"),
            *("--max-new-tokens", "64", "--report", str(report)),
        ]
    return [
        *eaglekit,
        *("drift", str(DRAFTERS / "smollm2-eagle3-specforge"), "--target", smollm2()),
        *("--compare", str(DRAFTERS / "smollm2-eagle3.1-specforge")),
        *("--max-context", "2048", "--inputs-per-bucket", "1", "--json"),
    ]


def run(cmd: list[str], env: dict, report: Path, kind: str) -> tuple[float, dict]:
    """(wall seconds, the report's resources) of one run."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{cmd[3]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(report.read_text() if kind == "verify" else proc.stdout)
    return wall, data.get("resources", {})


def condition_rounds(
    condition: str, rounds: int, settings: dict, base: list, env: dict, report: Path, kind: str
) -> bool:
    """Every setting in each round (the order rotating), one spinner beside them where ``condition`` is busy; prints
    each round and the medians; whether the default came within ``LIMIT`` of the best."""
    times: dict[str, list[float]] = {name: [] for name in settings}
    chosen = []
    for r in range(rounds):
        names = list(settings)
        names = names[r % len(names) :] + names[: r % len(names)]
        spinner = subprocess.Popen(SPINNER) if condition == "busy" else None
        try:
            if spinner is not None:
                time.sleep(1)
            for name in names:
                wall, resources = run(base + settings[name], env, report, kind)
                times[name].append(wall)
                if name == "default":
                    chosen.append(resources)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        print(
            f"{condition} round {r + 1}: "
            + ", ".join(f"{name} {times[name][-1]:.1f} s" for name in settings)
            + f" | default chose {chosen[-1]}",
            flush=True,
        )
    medians = {name: statistics.median(t) for name, t in times.items()}
    best = min(medians, key=medians.get)
    ratio = medians["default"] / medians[best]
    paired = statistics.median(times["default"][r] / min(times[name][r] for name in settings) for r in range(rounds))
    print(
        f"{condition}: medians "
        + ", ".join(f"{name} {m:.1f} s" for name, m in medians.items())
        + f"; default / best ({best}) {ratio:.2f} (paired, per round: {paired:.2f}); target <= {LIMIT}:"
        f" {'met' if ratio <= LIMIT else 'MISSED'}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return ratio <= LIMIT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--command", choices=("verify", "drift"), default="verify")
    ap.add_argument("--conditions", default="alone,busy", help="alone, busy or both (comma-separated)")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="eaglekit-threads-"))
    report = work / "report.json"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PYTHONPYCACHEPREFIX": str(work / "pycache"),
    }
    for name in ("EAGLEKIT_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    settings = {"default": []} | {f"--threads {n}": ["--threads", str(n)] for n in range(1, cores + 1)}
    base = command(args.command, report)
    run(base + ["--threads", "1"], env, report, args.command)  # warm: bytecode, the GGUF cache, the page cache
    print(
        f"{args.command}, {cores} cores, load average {os.getloadavg()[0]:.1f}; settings: {', '.join(settings)}",
        flush=True,
    )
    failed = False
    for condition in args.conditions.split(","):
        failed |= not condition_rounds(condition, args.rounds, settings, base, env, report, args.command)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
