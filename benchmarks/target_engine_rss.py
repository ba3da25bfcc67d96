"""issue 54: eaglekit's own process, measured whole, while vLLM runs the target (``verify --target-engine``): the
demo's verify (SmolLM2-135M-Instruct GGUF + the example EAGLE 3.1 drafter, 8 held-out prompts x 64 tokens) with the
target in vLLM, beside the same verify with the target in transformers (eaglekit's process holds it) and beside the
floor (a Python that imports what verify imports and nothing more).

    flock /tmp/heavy.lock python benchmarks/target_engine_rss.py [--engine vllm|vllm==X] [--tensor-parallel-size N]
        [--rounds 1] [--json FILE]

Peak RSS is each process's own ``ru_maxrss`` (``os.wait4`` on the process eaglekit runs in): vLLM's runner and its
workers are other processes and are reported apart (the largest of them, ``RUSAGE_CHILDREN`` of a wrapper around
eaglekit). The acceptance length is printed too: it must be the demo's 2.042 whichever runs the target. Target:
eaglekit's process under 1 GiB whatever the target (it holds the drafter, the target's embedding, lm_head and
tokenizer, and the captured states of the prompts; never the target's layers).
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

sys.path.insert(0, str(Path(__file__).parent))
from _smollm2 import smollm2

ROOT = Path(__file__).resolve().parent.parent
DRAFTER = ROOT / "examples" / "drafters" / "smollm2-eagle3.1-specforge"
PROMPTS = ROOT / "examples" / "prompts-heldout.jsonl"

# runs `eaglekit` in this process and reports its own peak RSS, and its children's, as JSON on the descriptor
# EAGLEKIT_BENCH_FD names
WRAPPER = """
import json, os, resource, sys
from eaglekit.cli import main
code = 0
try:
    main(sys.argv[1:], prog_name="eaglekit")
except SystemExit as done:
    code = done.code
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
with os.fdopen(int(os.environ["EAGLEKIT_BENCH_FD"]), "w") as f:
    json.dump({"code": code, "own_kib": own, "children_kib": children}, f)
"""


def run(args: list[str], log: Path) -> dict:
    read_end, write_end = os.pipe()
    start = time.perf_counter()
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", WRAPPER, *args],
            pass_fds=(write_end,),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "EAGLEKIT_BENCH_FD": str(write_end)},
        )
        os.close(write_end)
        stdout, _ = process.communicate()
    seconds = time.perf_counter() - start
    with os.fdopen(read_end) as f:
        said = json.loads(f.read() or "{}")
    report = json.loads(stdout) if stdout.strip() else {}
    return {
        "exit": said.get("code"),
        "seconds": round(seconds, 1),
        "eaglekit_peak_rss_mib": round(said.get("own_kib", 0) / 1024, 1),
        "largest_child_peak_rss_mib": round(said.get("children_kib", 0) / 1024, 1),
        "acceptance_length": report.get("acceptance_length"),
    }


def floor() -> float:
    """Peak RSS (MiB) of a Python importing what verify imports (torch, transformers, eaglekit.verify)."""
    code = "import eaglekit.verify, transformers, resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    return round(int(subprocess.check_output([sys.executable, "-c", code], text=True)) / 1024, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="vllm", help="--target-engine (default: the vLLM beside eaglekit)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-transformers", action="store_true", help="skip the run with the target in transformers")
    parser.add_argument("--json", help="also write the figures here")
    options = parser.parse_args()
    common = ["verify", str(DRAFTER), "--target", smollm2(), "--prompts", str(PROMPTS), "--num-prompts", "8"]
    common += ["--max-new-tokens", "64", "--json"]
    engine = [*common, "--target-engine", options.engine, "--tensor-parallel-size", str(options.tensor_parallel_size)]
    figures: dict = {"floor_peak_rss_mib": floor(), "rounds": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(options.rounds):
            entry = {"target_engine": run(engine, Path(tmp) / "engine.log")}
            if entry["target_engine"]["exit"] != 0:  # what went wrong, from its stderr (vLLM's log included)
                print((Path(tmp) / "engine.log").read_text()[-3000:], file=sys.stderr)
            if not options.no_transformers:
                entry["transformers"] = run(common, Path(tmp) / "transformers.log")
            figures["rounds"].append(entry)
            print(json.dumps(entry), flush=True)
    figures["limit_mib"] = 1024
    worst = max(r["target_engine"]["eaglekit_peak_rss_mib"] for r in figures["rounds"])
    figures["met"] = worst < 1024 and all(r["target_engine"]["exit"] == 0 for r in figures["rounds"])
    print(json.dumps({k: v for k, v in figures.items() if k != "rounds"}))
    if options.json:
        Path(options.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
