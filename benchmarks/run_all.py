"""Run every benchmark and print their figures (`make bench`). Not part of the tests. Wrap it in `flock /tmp/heavy.lock`
on a shared machine: verify_vs_vllm.py starts vLLM engines."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
for script in (
    "startup_bench.py",
    "io_bench.py",
    "convert_vs_cp.py",
    "verify_bench.py",
    "verify_vs_vllm.py",
    "gguf_cold_load.py",
    "hub_unreachable.py",
    "threads_bench.py",
    "drift_long_context.py",
):
    print(f"\n=== {script}", flush=True)
    # exit 1: a target missed (said in the script's last lines); the next benchmark runs all the same
    code = subprocess.run([sys.executable, str(HERE / script)]).returncode
    if code:
        print(f"=== {script} exited {code}", flush=True)
