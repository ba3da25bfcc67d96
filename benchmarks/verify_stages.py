"""verify's target side, two ways in one process (rounds interleaved, so that a loaded machine hits both alike):

- before: transformers' batched ``generate`` for the greedy continuations, then one full target pass per sequence
  for the aux states (``TargetModel.aux_states``, which still serves layers nobody captured);
- now: ``TargetModel.decode_batch``, the lean greedy loop that keeps the aux states of the forwards that pick the
  tokens.

Prints both times (wall, and CPU seconds of this process: on a machine other jobs load, the CPU seconds are the
steadier comparison; run with OMP_NUM_THREADS=1 for that), whether the tokens are identical, and how far the captured
states are from the full pass (max
|diff|, and relative where |x| > 1), per aux layer. On the demo's prompts and target (SmolLM2 GGUF from the cache).

    python benchmarks/verify_stages.py [--prompts 8] [--max-new-tokens 64] [--rounds 2]

``--speculative-floor RATES`` measures instead what decoding the way vLLM does (the target checks K' drafted tokens
per forward) would cost the target, given the drafts' per-position acceptance rates (vLLM's on the demo:
0.506,0.301,0.234, from its counters): the same KV-cached batched forwards ``decode_batch`` makes (room reserved,
prepacked linears) fed 1 token per row and K'+1 tokens per row, ms per forward, and the target's decode time each
way for the continuation (one forward per token, or one per 1 + r_1 + ... + r_K' tokens). The drafted tokens' cost is
not counted, so this is a floor for that route: if it is not fast enough, no drafting makes it so.

``--packed`` compares ``decode_batch`` with its steps' linears through oneDNN's prepacked weights
(eaglekit/target/packed_gemm.py, what verify does) beside the plain GEMM (the packing switched off for that run): wall
and CPU seconds, whether the tokens are identical, and how far the aux states are apart.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from unittest import mock

import torch

from eaglekit.reference.simulate import continuation_length
from eaglekit.target import packed_gemm, read_target_config
from eaglekit.target.reserved_cache import reserve
from eaglekit.target.runner import TargetModel
from eaglekit.verify.prompts import encode_prompts, read_prompt_records

from _smollm2 import smollm2

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "examples" / "prompts-heldout.jsonl"
IDS = (2, 15, 27)  # the example drafters' layers on the 30-layer SmolLM2


@torch.no_grad()
def with_generate(target: TargetModel, prompts: list[list[int]], new: int) -> list[torch.Tensor]:
    """The continuations as transformers' generate gives them for the same left-padded batch."""
    pad, eos = target.pad_token_id(), target.eos_token_ids()
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = target.model.generate(
        ids, attention_mask=mask, max_new_tokens=new, do_sample=False, num_beams=1, pad_token_id=pad
    )
    rows = []
    for p, row in zip(prompts, out[:, width:]):
        stop = next((j + 1 for j, t in enumerate(row.tolist()) if t in eos), row.shape[0])
        rows.append(torch.cat([torch.tensor(p), row[:stop]]))
    return rows


@torch.inference_mode()
def forward_ms(target: TargetModel, prompts: list[list[int]], width_per_step: int, steps: int) -> float:
    """Milliseconds per KV-cached forward of every prompt fed ``width_per_step`` new tokens (after a padded prefill), as
    ``decode_batch`` runs its steps: a cache with room reserved, the linears through oneDNN's prepacked weights."""
    from transformers import DynamicCache

    model, pad = target.model, target.pad_token_id()
    width = max(len(p) for p in prompts)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = reserve(DynamicCache(config=model.config), width + steps * width_per_step)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    with packed_gemm.packed_linears(model, len(prompts) * width_per_step, steps):
        model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        generator = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        for _ in range(steps):
            fed = torch.randint(0, model.config.vocab_size, (len(prompts), width_per_step), generator=generator)
            mask = torch.cat([mask, mask.new_ones(len(prompts), width_per_step)], dim=-1)
            positions = positions[:, -1:] + 1 + torch.arange(width_per_step)[None]
            out = model(
                input_ids=fed,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=width_per_step,
            )
            out.logits.argmax(-1)
        return (time.perf_counter() - start) / steps * 1000


def speculative_floor(target: TargetModel, prompts: list[list[int]], new: int, rates: list[float], rounds: int) -> None:
    """For K' = 1..len(rates) drafts per step: the forward fed K'+1 tokens per prompt, and the continuation's decode
    at the acceptance length those per-position rates give (1 + the first K' rates), every row assumed to advance
    together (a batch cannot quite: it waits for its slowest row) and the drafter's own forwards not counted."""
    for r in range(rounds):
        one = forward_ms(target, prompts, 1, new)
        parts = [f"forward fed 1 token per prompt {one:.1f} ms, {new} forwards {new * one / 1000:.2f} s"]
        for k in range(1, len(rates) + 1):
            al = 1 + sum(rates[:k])
            forwards = math.ceil(new / al)
            ms = forward_ms(target, prompts, k + 1, forwards)
            parts.append(
                f"K={k}: fed {k + 1} {ms:.1f} ms, AL {al:.2f}, {forwards} forwards {forwards * ms / 1000:.2f} s"
            )
        print(f"round {r + 1}, {len(prompts)} prompts: " + " | ".join(parts), flush=True)


def packed_vs_plain(target: TargetModel, prompts: list[list[int]], new: int, rounds: int) -> None:
    for r in range(rounds):
        runs = {}
        for name in ["packed", "plain"] if r % 2 == 0 else ["plain", "packed"]:
            with mock.patch.object(packed_gemm, "MIN_ROWS", packed_gemm.MIN_ROWS if name == "packed" else 10**9):
                start, cpu = time.perf_counter(), time.process_time()
                decoded = target.decode_batch(prompts, new, capture=IDS)
                runs[name] = (time.perf_counter() - start, time.process_time() - cpu, decoded)
        (p, pc, fast), (q, qc, plain) = runs["packed"], runs["plain"]
        same = all(a.tokens.tolist() == b.tokens.tolist() for a, b in zip(fast, plain))
        apart = max((a.states[k] - b.states[k]).abs().max().item() for a, b in zip(fast, plain) for k in IDS)
        print(
            f"round {r + 1}: decode_batch, {len(prompts)} rows x {new} tokens: prepacked {p:.2f} s (CPU {pc:.2f} s) |"
            f" plain GEMM {q:.2f} s (CPU {qc:.2f} s) | tokens identical: {same}, aux states at most {apart:.1e} apart",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--packed", action="store_true", help="decode_batch with oneDNN's prepacked weights beside the plain GEMM"
    )
    ap.add_argument(
        "--speculative-floor",
        metavar="RATES",
        help=(
            "per-position acceptance rates, comma-separated (vLLM's on the demo: 0.506,0.301,0.234): the target's cost"
            " of decoding by checking K' drafts per forward, for each K' up to their number"
        ),
    )
    args = ap.parse_args()
    target = TargetModel.load(read_target_config(smollm2()))
    prompts = [p.ids for p in encode_prompts(read_prompt_records(str(PROMPTS)), target.tokenizer, args.prompts)]
    new = continuation_length(args.max_new_tokens, args.k)  # what verify decodes: as far as the trajectory judges
    if args.packed:
        packed_vs_plain(target, prompts, new, args.rounds)
        return
    if args.speculative_floor:
        speculative_floor(target, prompts, new, [float(x) for x in args.speculative_floor.split(",")], args.rounds)
        return
    for r in range(args.rounds):
        times = {}
        for name in ["before", "now"] if r % 2 == 0 else ["now", "before"]:
            start, cpu = time.perf_counter(), time.process_time()
            if name == "before":
                tokens = with_generate(target, prompts, new)
                generated, generated_cpu = time.perf_counter() - start, time.process_time() - cpu
                full = [target.aux_states(t, IDS)[0] for t in tokens]
                times["before"] = (
                    generated,
                    time.perf_counter() - start - generated,
                    generated_cpu,
                    time.process_time() - cpu - generated_cpu,
                )
            else:
                decoded = target.decode_batch(prompts, new, capture=IDS)
                times["now"] = (time.perf_counter() - start, time.process_time() - cpu)
        same = all(a.tolist() == d.tokens.tolist() for a, d in zip(tokens, decoded))
        (g, a, gc, ac), (n, nc) = times["before"], times["now"]
        print(
            f"round {r + 1}: before: generate {g:.2f} s + aux pass {a:.2f} s = {g + a:.2f} s (CPU {gc:.2f} + {ac:.2f} ="
            f" {gc + ac:.2f} s) | now: decode_batch with capture {n:.2f} s (CPU {nc:.2f} s) | tokens identical: {same}",
            flush=True,
        )
    T = target.config.hidden_size
    for j, k in enumerate(IDS):
        diff = rel = top = 0.0
        for f, row in zip(full, decoded):
            ref, got = f[:-1, j * T : (j + 1) * T], row.states[k]  # decode_batch keeps no states for the last token
            d = (got - ref).abs()
            diff, top = max(diff, d.max().item()), max(top, ref.abs().max().item())
            rel = max(rel, (d / ref.abs())[ref.abs() > 1].max().item())
        print(
            f"layer {k}: captured vs full pass: max |diff| {diff:.2e} (largest |x| {top:.3g}), max relative where |x| >"
            f" 1: {rel:.2e}"
        )


if __name__ == "__main__":
    main()
