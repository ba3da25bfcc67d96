"""`eaglekit convert` of a full-size drafter beside its floor, `cp -r` of the same files followed by `sync`: whole
processes, paired rounds whose order alternates, medians. Issues 16 and 56: ratio <= 1.15 in every order, alone and
beside a busy process, and convert's peak RSS <= 100 MiB.

    python benchmarks/convert_vs_cp.py [--rounds 6] [--kind llama8b] [--conditions alone,busy] [--workdir DIR]

The drafter is benchmarks/synthetic.py's Llama-3.1-8B-shaped EAGLE 3 (1.90 GB bf16, one 1 GB embedding), in
SpecForge's layout, converted to vLLM's. Both sides write beside the source on the same filesystem.

The page cache is put in the same state before every timed run, so that which side ran before cannot help or hurt the
other (the order effect: on one disk `cp -r` + `sync` took 2.6-3.5 s when it ran first in a round and 1.1-1.35 s
second): the last output removed and `sync`ed away, then, where this process may (root: `/proc/sys/vm/drop_caches`),
every cache dropped and the source read back in (as it is when a download or a training run has just written it), and
the program about to run started once (convert's `--dry-run`: the interpreter, its modules, the source's headers; or
`cp --version`). Where caches cannot be dropped
the script says so and reports the two orders apart as well. Each condition gives the median of the per-round ratios,
the ratio of the medians, and the median ratio of each order (convert first, cp first).

Conditions: ``alone``, and ``busy``: one ``python -c "while True: pass"`` spinning for the whole round (a user's
machine has other work on it). Peak RSS is the convert process's own (GNU time's %M).
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
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
SPINNER = [sys.executable, "-c", "while True: pass"]
LIMIT = 1.15


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


def can_drop_caches() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


def settle(out: Path, src: Path, warm: list[str], env: dict, drop: bool) -> None:
    """The same start for either side: no output, nothing dirty, (where allowed) caches dropped and the source read back
    in, the program about to run started once."""
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["sync"], check=True)
    if drop:
        DROP_CACHES.write_text("3\n")
        for f in sorted(p for p in src.rglob("*") if p.is_file()):
            with open(f, "rb") as fh:
                while fh.read(64 * 2**20):
                    pass
    subprocess.run(warm, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)


def rounds(args, src: Path, out: Path, env: dict, drop: bool, condition: str) -> list[dict]:
    convert = [sys.executable, "-m", "eaglekit", "convert", str(src), str(out), "--to", "vllm"]
    copy = ["sh", "-c", f"cp -r '{src}' '{out}' && sync"]
    sides = {
        "convert": (convert, convert + ["--dry-run"]),  # the interpreter, the modules convert imports, the headers
        "cp": (copy, ["cp", "--version"]),
    }
    rows = []
    for r in range(args.rounds):
        order = ["convert", "cp"] if r % 2 == 0 else ["cp", "convert"]
        spinner = subprocess.Popen(SPINNER) if condition == "busy" else None
        row: dict = {"first": order[0]}
        try:
            for name in order:
                cmd, warm = sides[name]
                settle(out, src, warm, env, drop)
                row[name] = run(cmd, env)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        shutil.rmtree(out, ignore_errors=True)
        rows.append(row)
        print(
            f"{condition} round {r + 1} ({row['first']} first): convert {row['convert'][0]:.2f} s"
            f" ({row['convert'][1] / 1024:.0f} MiB peak) | cp -r + sync {row['cp'][0]:.2f} s | ratio"
            f" {row['convert'][0] / row['cp'][0]:.2f}",
            flush=True,
        )
    return rows


def report(condition: str, rows: list[dict], size: int, kind: str) -> bool:
    def ratio(row):
        return row["convert"][0] / row["cp"][0]

    conv = statistics.median(r["convert"][0] for r in rows)
    cp = statistics.median(r["cp"][0] for r in rows)
    per_order = {
        first: statistics.median(ratio(r) for r in rows if r["first"] == first)
        for first in ("convert", "cp")
        if any(r["first"] == first for r in rows)
    }
    worst = max([statistics.median(ratio(r) for r in rows), *per_order.values()])
    print(
        f"{condition}: {kind}, {size / 1e9:.2f} GB, {len(rows)} paired rounds: median ratio"
        f" {statistics.median(ratio(r) for r in rows):.2f} (per round {', '.join(f'{ratio(r):.2f}' for r in rows)});"
        f" ratio of the medians {conv:.2f} s / {cp:.2f} s = {conv / cp:.2f}; by order: "
        + ", ".join(f"{first} first {m:.2f}" for first, m in per_order.items())
        + f"; target <= {LIMIT} in every order: {'met' if worst <= LIMIT else 'MISSED'}; convert's peak RSS"
        f" {max(r['convert'][1] for r in rows) / 1024:.0f} MiB (target <= 100); load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return worst <= LIMIT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="paired rounds per condition (even: each order as often)")
    ap.add_argument("--kind", default="llama8b")
    ap.add_argument("--conditions", default="alone,busy", help="alone, busy or both (comma-separated)")
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
    subprocess.run(
        [sys.executable, "-m", "eaglekit", "convert", str(src), str(out), "--to", "vllm", "--dry-run"],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )  # writes the bytecode cache
    drop = can_drop_caches()
    print(
        "page cache: "
        + (
            "dropped before every run, the source read back in"
            if drop
            else "cannot be dropped here (not root): the orders are reported apart"
        )
        + f"; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    ok = True
    for condition in args.conditions.split(","):
        ok &= report(condition, rounds(args, src, out, env, drop, condition), size, args.kind)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
