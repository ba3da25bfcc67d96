"""Whether the vLLM a command names can run the target with the workers asked for: checked before torch is imported
and before any engine starts, for ``verify`` and ``drift`` (``--target-engine``, ``--against``) and ``capture``."""

from __future__ import annotations

from ..errors import UsageError
from . import envs, vllm_scale
from .common import engine_name


def check_request(
    target: str,
    *,
    target_engine: str | None,
    against: str | None = None,
    vllm_python: str | None = None,
    parallel: vllm_scale.Parallel | None = None,
) -> None:
    """The environments named are installed, the layout makes sense and the release can run it on this target
    (``vllm_scale.check``); each refusal one line, exit 2."""
    from ..target import read_target_config

    parallel = parallel or vllm_scale.Parallel()
    if is_llamacpp(against):
        _check_llamacpp_request(against, target_engine, vllm_python, parallel)
        return
    envs.require_environment(against, vllm_python)
    envs.require_environment(target_engine, vllm_python)
    vllm_scale.check_parallel(parallel)
    if not (against or target_engine):
        if not parallel.plain:
            raise UsageError("a parallel layout says how vLLM runs the target: it needs `target_engine` or `against`")
        if vllm_python:
            raise UsageError("`vllm_python` says which vLLM runs the target: it needs `target_engine` or `against`")
        return
    config = read_target_config(target, weights=True)
    if target_engine:
        vllm_scale.check(envs.served(target_engine, vllm_python)[1], parallel, config, purpose="capture")
    if against:
        if parallel.data > 1:
            raise UsageError(
                "`against` serves the drafter in one engine; `data_parallel_size` applies to the target's capture"
                " (`target_engine`) only"
            )
        vllm_scale.check(envs.served(against, vllm_python)[1], parallel, config, purpose="serve")


def is_llamacpp(against: str | None) -> bool:
    """``against`` names a llama.cpp build (``llama.cpp==bN``), run as llama-server, not vLLM."""
    return bool(against) and engine_name(against) == "llama.cpp"


def _check_llamacpp_request(against: str, target_engine, vllm_python, parallel: vllm_scale.Parallel) -> None:
    """llama-server runs from the build's engine environment beside eaglekit's own target run: no vLLM is involved."""
    if vllm_python:
        raise UsageError(f"`vllm_python` runs vLLM; `against` {against} runs llama-server from its engine environment")
    if target_engine:
        raise UsageError(
            f"`against` {against} compares llama-server with eaglekit's own run of the target; `target_engine` runs it"
            " in vLLM: give one"
        )
    if not parallel.plain:
        raise UsageError(f"a parallel layout says how vLLM runs the target; `against` {against} runs llama-server")
    envs.require_environment(against)


def refuse_contradictions(*, hidden_states, against, target_engine, prompts) -> None:
    """verify's settings that contradict each other over what runs the target: refused first, whatever is installed
    (``api.verify`` asks before it checks the engine environment)."""
    if hidden_states and against:
        raise UsageError("`against` vllm runs the target itself; it cannot use `hidden_states`")
    if hidden_states and prompts:
        raise UsageError(
            "`hidden_states` brings its own sequences (prompt and continuation); `prompts` would be ignored: pass one"
            " of them"
        )
    if hidden_states and target_engine:
        raise UsageError("`hidden_states` brings the target's states; `target_engine` would run the target: give one")
