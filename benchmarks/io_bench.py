"""inspect, convert and validate --scan on full-size synthetic drafters: wall time and peak RSS.

    python benchmarks/io_bench.py [--keep] [--workdir DIR]

Prints, for a Kimi-K2.6-shaped MLA drafter (~6 GB bf16 with embeddings) and a Llama-3.1-8B-shaped one:
inspect time and RSS; convert (TorchSpec/SpecForge layout -> vllm) beside `cp -r` of the same bytes, and
peak RSS beside the largest tensor; validate --scan time and RSS. Each measurement runs in its own process;
RSS is that process's peak (VmHWM), which includes ~0.3 GB for Python and torch themselves.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import SHAPES, ensure

PROBE = """
import json, resource, sys, time
from pathlib import Path
start = time.perf_counter()
{body}
elapsed = time.perf_counter() - start
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork+exec
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({{"seconds": elapsed, "peak_rss_mb": hwm / 1024}}))
"""

BODIES = {
    "baseline": "import eaglekit.cli",
    "inspect": (
        "from eaglekit import dialects\nfrom eaglekit.describe import describe\nwith dialects.load({src!r}) as l:"
        " describe(l)"
    ),
    "convert": (
        "from eaglekit.convert import ConvertOptions, convert\nconvert({src!r}, {out!r}, ConvertOptions(to='vllm',"
        " force=True))"
    ),
    "scan": "from eaglekit.validate import validate\nvalidate({src!r}, scan=True)",
}


def probe(kind: str, **kw) -> dict:
    imports = "import eaglekit.cli, eaglekit.convert, eaglekit.validate\n"
    code = imports + PROBE.format(body=BODIES[kind].format(**kw))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - start


def largest_tensor_mb(kind: str) -> float:
    from math import prod

    return (
        max(prod(s) * (8 if n == "d2t" else 1 if n == "t2d" else 2) for n, s in SHAPES[kind]["tensors"].items()) / 2**20
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default=str(Path(__file__).parent / "out"))
    ap.add_argument("--keep", action="store_true", help="keep the synthetic drafters for the next run")
    ap.add_argument("--only", choices=list(SHAPES), action="append")
    ap.add_argument("--repeat", type=int, default=3, help="runs of convert and cp, medians reported")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    base = probe("baseline")
    print(f"python + torch + eaglekit imports: peak RSS {base['peak_rss_mb']:.0f} MB")
    for kind in args.only or list(SHAPES):
        src = ensure(kind, work / f"{kind}-src")
        size = sum(p.stat().st_size for p in src.iterdir()) / 1e9
        print(f"\n{kind}: {size:.2f} GB on disk, largest tensor {largest_tensor_mb(kind):.0f} MB")
        r = probe("inspect", src=str(src))
        print(
            f"  inspect            {r['seconds'] * 1000:8.1f} ms   peak RSS {r['peak_rss_mb']:6.0f} MB"
            f" (+{r['peak_rss_mb'] - base['peak_rss_mb']:.0f} over imports)"
        )
        out = work / f"{kind}-vllm"
        cp_target = work / f"{kind}-cp"
        converts, cps, cp_syncs = [], [], []
        for _ in range(args.repeat):  # page-cache state moves single runs by 2x: interleave and take medians
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run(["sync"], check=True)
            converts.append(probe("convert", src=str(src), out=str(out)))
            shutil.rmtree(cp_target, ignore_errors=True)
            subprocess.run(["sync"], check=True)
            cps.append(timed(["cp", "-r", str(src), str(cp_target)]))
            shutil.rmtree(cp_target, ignore_errors=True)
            subprocess.run(["sync"], check=True)
            cp_syncs.append(timed(["bash", "-c", f"cp -r {src} {cp_target} && sync"]))
            shutil.rmtree(cp_target, ignore_errors=True)
        r = sorted(converts, key=lambda x: x["seconds"])[len(converts) // 2]
        cp, cp_sync = sorted(cps)[len(cps) // 2], sorted(cp_syncs)[len(cp_syncs) // 2]
        print(
            f"  convert -> vllm    {r['seconds']:8.2f} s    (median of {args.repeat})    peak RSS"
            f" {r['peak_rss_mb']:6.0f} MB (+{r['peak_rss_mb'] - base['peak_rss_mb']:.0f} over imports)"
        )
        print(f"  cp -r              {cp:8.2f} s    (cp -r + sync {cp_sync:.2f} s; convert fsyncs its output)")
        print(f"  convert / cp       {r['seconds'] / cp:8.2f} x    (/ cp+sync {r['seconds'] / cp_sync:.2f} x)")
        r = probe("scan", src=str(out))
        print(
            f"  validate --scan    {r['seconds']:8.2f} s    peak RSS {r['peak_rss_mb']:6.0f} MB"
            f" (+{r['peak_rss_mb'] - base['peak_rss_mb']:.0f} over imports)"
        )
        shutil.rmtree(out, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(src, ignore_errors=True)


if __name__ == "__main__":
    main()
