"""The reference drafter on CUDA, on full-size synthetic drafters (benchmarks/synthetic.py): chain-simulation
throughput in fp32, bf16 and fp16, and how far bf16/fp16 logits and drafts stray from fp32 on the same GPU.

    python benchmarks/gpu_bench.py [--positions 1024] [--only llama8b] [--repeat 5] [--workdir DIR] [--json FILE]

Random weights and random aux states: the figures are speed and numerical agreement, not acceptance. Needs a
CUDA device; the results of the runs we made are in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from eaglekit import dialects
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.reference.simulate import draft_chains

from synthetic import SHAPES, ensure

K = 3
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def run_one(model: ReferenceDrafter, tokens: torch.Tensor, aux: torch.Tensor, starts: torch.Tensor, repeat: int = 1):
    """Teacher-forced chains (every dtype follows the same tokens, so logits stay comparable), timed after a warm-up;
    `repeat` timed runs, of which the median is returned (one run of 30-100 ms swings by tens of percent)."""
    device = model.device.type
    times = []
    with torch.no_grad():
        draft_chains(model, tokens[:64], aux[:64], starts[starts < 62], K, teacher=True)
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        for _ in range(repeat):
            begin = time.perf_counter()
            chains = draft_chains(model, tokens, aux, starts, K, teacher=True)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - begin)
        seconds = statistics.median(times)
        logits = torch.stack([model.draft_logits(chains.y[:, s]).float() for s in range(K)], dim=1)  # [J, K, Vd]
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    return chains, logits, seconds, peak


def bench(kind: str, workdir: Path, positions: int, cpu_positions: int, device: str = "cuda", repeat: int = 1) -> dict:
    path = ensure(kind, workdir / kind)
    with dialects.load(path) as loaded:
        drafter = loaded.drafter
        weights = weights_for(loaded)
    T = drafter.target_hidden_size
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, drafter.vocab_size, (positions + 1,), generator=g)
    aux = torch.randn(positions + 1, drafter.num_aux * T, generator=g)
    starts = torch.arange(0, positions - 1)
    result: dict = {"drafter": kind, "positions": positions, "K": K, "repeat": repeat, "runs": {}}

    fp32_logits = fp32_drafts = None
    for name, dtype in DTYPES.items():
        model = ReferenceDrafter(drafter, weights, device=device, dtype=dtype)
        chains, logits, seconds, peak = run_one(model, tokens, aux, starts, repeat)
        run = {
            "seconds": seconds,
            "repeat": repeat,
            "drafted_tokens_per_s": starts.numel() * K / seconds,
            "peak_gpu_gib": peak,
        }
        if fp32_logits is None:
            fp32_logits, fp32_drafts = logits.cpu(), chains.drafts.cpu()
        else:
            diff = (logits.cpu() - fp32_logits).abs()
            scale = fp32_logits.abs().amax(dim=-1, keepdim=True)
            run["max_logit_diff_rel"] = [float((diff[:, s] / scale[:, s]).max()) for s in range(K)]
            run["draft_agreement"] = [
                float((chains.drafts.cpu()[:, s] == fp32_drafts[:, s]).float().mean()) for s in range(K)
            ]
        result["runs"][f"{device} {name}"] = run
        del model, chains, logits
        if device == "cuda":
            torch.cuda.empty_cache()

    # the same forward on the host's CPU, fp32, over fewer positions: the speed a CPU-only user gets
    model = ReferenceDrafter(drafter, weights)
    cpu_starts = starts[starts <= cpu_positions - K]  # chains whose teacher tokens all lie inside the shorter sequence
    chains, logits, seconds, _ = run_one(model, tokens[: cpu_positions + 1], aux[: cpu_positions + 1], cpu_starts)
    diff = (logits - fp32_logits[: cpu_starts.numel()]).abs().max() / fp32_logits[: cpu_starts.numel()].abs().max()
    result["runs"]["cpu float32"] = {
        "seconds": seconds,
        "positions": cpu_positions,
        "drafted_tokens_per_s": cpu_starts.numel() * K / seconds,
        "max_logit_diff_rel_vs_cuda_fp32": float(diff),
        "draft_agreement_vs_cuda_fp32": float((chains.drafts == fp32_drafts[: cpu_starts.numel()]).float().mean()),
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--cpu-positions", type=int, default=128)
    ap.add_argument("--only", choices=list(SHAPES), action="append")
    ap.add_argument("--workdir", default=str(Path(__file__).parent / "out"))
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per dtype on CUDA; the median is reported")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_bench.py needs a CUDA device")
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, K={K}, {args.positions} chain starts (CPU:"
        f" {args.cpu_positions}), median of {args.repeat} timed runs per CUDA dtype"
    )
    results = []
    for kind in args.only or ["llama8b", "kimi"]:
        r = bench(kind, Path(args.workdir), args.positions, args.cpu_positions, repeat=args.repeat)
        results.append(r)
        print(f"\n{kind}")
        for name, run in r["runs"].items():
            line = f"  {name:15s} {run['drafted_tokens_per_s']:>10,.0f} drafted tokens/s"
            if run.get("peak_gpu_gib") is not None:
                line += f"  peak {run['peak_gpu_gib']:.1f} GiB"
            if "max_logit_diff_rel" in run:
                line += "  max|dlogit|/max|logit| per step " + ", ".join(f"{x:.2e}" for x in run["max_logit_diff_rel"])
                line += "  drafts agree " + ", ".join(f"{x:.1%}" for x in run["draft_agreement"])
            if "max_logit_diff_rel_vs_cuda_fp32" in run:
                line += (
                    f"  vs cuda fp32: {run['max_logit_diff_rel_vs_cuda_fp32']:.1e} rel, drafts agree"
                    f" {run['draft_agreement_vs_cuda_fp32']:.1%}"
                )
            print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
