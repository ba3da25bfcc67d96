"""Run every benchmark and print their figures (`make bench`). Not part of the tests."""

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
):
    print(f"\n=== {script}", flush=True)
    subprocess.run([sys.executable, str(HERE / script)], check=True)
