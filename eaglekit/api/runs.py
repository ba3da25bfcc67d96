"""The commands that run the drafter's target: ``verify``, ``drift`` and ``capture``. What can be refused without
torch (a missing drafter or target, a bad prompts file, an engine environment that is not installed, a layout vLLM
cannot run) is refused before torch is imported; each function imports what it needs when it runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .results import Capture, DriftReport, Verification, document, option_fields

if TYPE_CHECKING:  # pragma: no cover
    from ..engines.vllm_scale import Parallel
    from ..verify.capture import Plan as CapturePlan


def _refuse_before_torch(
    command: str, drafters: tuple[str | Path | None, ...], fields: dict[str, Any], revision: str | None = None
) -> None:
    """What ``command`` (its options' ``fields``) is refused before torch is imported, in this order: a drafter that
    is neither a path nor a possible Hub id; the engine environment ``against`` names, not installed; a ``--target``
    that is not there (no such file, a Hub id missing from the cache) or holds no weights where the command runs it,
    and a ``--prompts`` file that does not read (a bad line, a FIFO): reading a target's config and a prompts file
    needs neither torch nor transformers (the ``Verifier`` reads both again for library callers); what vLLM cannot
    run (``check_request``)."""
    from ..engines import envs
    from ..engines.vllm_serving import check_request, refuse_contradictions
    from ..io.prompts_file import read_prompt_records
    from ..io.sources import refuse_missing
    from ..target import read_target_config

    target, against, vllm_python = fields["target"], fields.get("against"), fields["vllm_python"]
    for drafter in drafters:
        if drafter is not None:
            refuse_missing(drafter, revision=revision)  # before the target loads (~5 s), not after it
    if command == "verify":  # settings that contradict each other, whatever is installed
        refuse_contradictions(
            hidden_states=fields["hidden_states"],
            against=against,
            target_engine=fields["target_engine"],
            prompts=fields["prompts"],
        )
    envs.require_environment(against, vllm_python)  # then the engine, before the target
    config = read_target_config(target, weights=True)
    if not fields["hidden_states"]:
        config.require_runnable(f"{command} runs the target model")
    if fields["prompts"] is not None:
        read_prompt_records(fields["prompts"])
    check_request(  # what vLLM cannot run, refused before torch and before any engine starts
        target,
        target_engine=fields["target_engine"],
        against=against,
        vllm_python=vllm_python,
        parallel=fields.get("parallel"),
    )


def verify(
    path: str | Path,
    *,
    target: str,
    prompts: str | None = None,
    raw_prompts: bool = False,
    num_prompts: int | None = None,
    max_new_tokens: int = 64,
    k: int = 3,
    engine: str | None = None,
    reference: str | None = None,
    against: str | None = None,
    vllm_python: str | None = None,
    target_engine: str | None = None,
    parallel: Parallel | None = None,
    min_acceptance_length: float | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    device_map: str | None = None,
    hidden_states: str | None = None,
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
    atol: float | None = None,
    batch_size: int | None = None,
    revision: str | None = None,
    progress: Callable[[str, int], object] | None = None,
    threads: int | None = None,
) -> Verification:
    """Run the drafter on its target's hidden states and measure acceptance (``eaglekit.verify.VerifyOptions``).

    Args:
        path: the drafter: a directory, a file, or a Hub id (``org/name[@revision]``, downloaded into the Hub cache).
        target: the target model, with its weights: a directory, a Hub id in the local cache, or a .gguf file.
        prompts: a JSONL file, one object a line: ``prompt``, ``text``, ``messages`` or ``input_ids``; None: the
            built-in chat/code/math/long-context set.
        raw_prompts: each ``{"prompt": ...}`` taken as raw text, as ``{"text": ...}`` is (no chat template).
        num_prompts: only the first N prompts; None: all.
        max_new_tokens: the length of each greedy continuation.
        k: K, the drafted chain length.
        engine: an engine release ("vllm==0.24"): its view of the drafter applied to the run.
        reference: another checkpoint of the same drafter (a conversion's source): parity per draft step.
        against: also run the engine and compare: "vllm" (the vLLM importable here), "vllm==X" (its engine
            environment) or "llama.cpp==bN" (llama-server of build N).
        vllm_python: vLLM from this Python's environment (for ``against`` and ``target_engine``).
        target_engine: "vllm" / "vllm==X": the target run by vLLM, never loaded in this process.
        parallel: vLLM's workers for ``target_engine`` and ``against``; None: one.
        min_acceptance_length: the run fails below this acceptance length.
        device: where the drafter and target run: "cpu", "cuda", "cuda:N" or "auto".
        dtype: the float type the target and the drafter run in.
        device_map: transformers' ``device_map`` for a target larger than one device ("auto").
        hidden_states: the target's states from files (an ``eaglekit capture`` folder) instead of running it.
        source_dialect: the drafter's dialect (``eaglekit.dialects``); "auto": detected from its files.
        norm_output_semantics: how to read a SpecForge-style ``norm_output`` ("eagle31", "specforge"; "auto").
        atol: the logit tolerance for ``reference``; None: bit-identical when the stored dtypes match, else by dtype.
        batch_size: prompts the target decodes together; None: as many as memory allows.
        revision: the Hub revision of ``path`` (a branch, tag or commit), instead of ``org/name@revision``.
        progress: called with a stage's name and a count as the run goes.
        threads: torch's CPU threads; None: the cores other processes leave at least half free
            (``eaglekit.target.threads``).
    """
    fields = option_fields(locals(), "path", "revision", "progress", "threads")
    from ..io.sources import open_source
    from ..target.long_lived import frozen_scope, long_lived
    from ..target.threads import chosen as chosen_threads

    with chosen_threads(threads):
        _refuse_before_torch("verify", (path,), fields, revision=revision)  # before a Hub drafter downloads
        with open_source(path, revision=revision, mode="download") as located:
            # torch's and the target's objects out of the collector's walks while this runs (target/long_lived.py)
            with frozen_scope():
                with long_lived():
                    from ..verify import VerifyOptions  # torch: ~2 s, after the paths are known to be there
                    from ..verify import verify as run
                report = document(path, False, run(located, VerifyOptions(**fields), progress))
    report["origin"] = located.origin
    report["ok"] = report["passed"]  # `passed` stays for readers of schema version 0
    return Verification(str(path), report["acceptance_length"], report["passed"], report["checks"], report)


def capture(
    target: str,
    out: str | Path,
    *,
    prompts: str | None = None,
    num_prompts: int | None = None,
    max_new_tokens: int = 64,
    k: int = 3,
    aux_layers: tuple[int, ...] | None = None,
    dtype: str = "float32",
    target_engine: str = "vllm",
    vllm_python: str | None = None,
    parallel: Parallel | None = None,
    force: bool = False,
    on_plan: Callable[[CapturePlan], None] | None = None,
    progress: Callable[[str, int], object] | None = None,
) -> Capture:
    """Run ``target`` in vLLM and write into ``out`` each prompt's greedy continuation and the states of its aux
    layers at every position, captured by vLLM's own ``extract_hidden_states``, in the dtype the target runs in: the
    folder ``verify(hidden_states=...)`` and many drafters' runs read. eaglekit's process never loads the target's
    weights. A rerun into the same folder with the same settings captures only the prompts still missing.

    Args:
        target: the target model, with its weights: a directory, a Hub id in the local cache, or a .gguf file.
        out: the capture folder.
        prompts: a JSONL file, as ``verify`` reads it; None: the built-in set.
        num_prompts: only the first N prompts; None: all.
        max_new_tokens: the length of each greedy continuation.
        k: K, the drafted chain length the capture is for (its lookahead past each continuation).
        aux_layers: the target layers whose states are kept, input-of-layer ids; None: vLLM's (2, L//2, L-3).
        dtype: the float type the target runs in.
        target_engine: "vllm" (the vLLM importable here) or "vllm==X" (its engine environment).
        vllm_python: vLLM from this Python's environment instead.
        parallel: vLLM's workers (``eaglekit.engines.vllm_scale.Parallel``); None: one.
        force: replace a capture of other settings in ``out``.
        on_plan: sees the plan (the sequences and the bytes they take) before the engine starts.
        progress: called with a stage's name and a count as the run goes.
    """
    from ..engines.vllm_scale import Parallel
    from ..engines.vllm_serving import check_request
    from ..io.prompts_file import read_prompt_records
    from ..target import read_target_config
    from ..target.long_lived import long_lived

    parallel = parallel or Parallel()
    config = read_target_config(target, weights=True)
    config.require_runnable("capture runs the target model")
    records = read_prompt_records(prompts)
    check_request(target, target_engine=target_engine, vllm_python=vllm_python, parallel=parallel)
    with long_lived():
        from ..verify.capture import Engine, capture_to_folder
    result = capture_to_folder(
        config,
        records,
        Path(out),
        Engine(target_engine, vllm_python, parallel),
        aux_layers=aux_layers,
        dtype=dtype,
        max_new_tokens=max_new_tokens,
        k=k,
        num_prompts=num_prompts,
        force=force,
        on_plan=on_plan,
        progress=progress,
    )
    data = document(out, True, result)
    return Capture(str(out), result["sequences"], result["captured"], data)


def drift(
    path: str | Path,
    *,
    target: str,
    report: str | Path | None = None,
    compare: str | None = None,
    sink_tokens: int = 4,
    max_context: int | None = None,
    prompts: str | None = None,
    raw_prompts: bool = False,
    inputs_per_bucket: int = 2,
    max_new_tokens: int = 32,
    k: int = 3,
    chunk: int = 256,
    device: str = "cpu",
    dtype: str = "float32",
    source_dialect: str = "auto",
    norm_output_semantics: str = "auto",
    variants: bool = False,
    temperature: float | None = None,
    top_p: float = 1.0,
    target_engine: str | None = None,
    hidden_states: str | None = None,
    vllm_python: str | None = None,
    parallel: Parallel | None = None,
    batch_size: int | None = None,
    progress: Callable[[str, int], object] | None = None,
    threads: int | None = None,
) -> DriftReport:
    """Measure attention drift, fed-back norms, fused-input balance and acceptance by context length
    (``eaglekit.drift.options.DriftOptions``).

    Args:
        path: the drafter: a directory or a file.
        target: the target model, with its weights: a directory, a Hub id in the local cache, or a .gguf file.
        report: a directory for report.json, PNG plots and report.html (needs matplotlib: ``eaglekit[report]``).
        compare: a second drafter run on the same sequences: every figure for both, with ratios.
        sink_tokens: S: attention on the first S positions counts as on sinks.
        max_context: the longest input, in tokens; None: the target's window (``max_position_embeddings``).
        prompts: long inputs, a JSONL file as ``verify`` reads it; None: passages of CPython's documentation.
        raw_prompts: each ``{"prompt": ...}`` taken as raw text, as ``{"text": ...}`` is (no chat template).
        inputs_per_bucket: built-in inputs per context-length bucket.
        max_new_tokens: the length of the greedy continuation judged after each input.
        k: K, the drafted chain length.
        chunk: chain start positions drafted together (bounds memory).
        device: where the drafter and target run: "cpu", "cuda", "cuda:N" or "auto".
        dtype: the float type the target and the drafter run in.
        source_dialect: the drafter's dialect (``eaglekit.dialects``); "auto": detected from its files.
        norm_output_semantics: how to read a SpecForge-style ``norm_output`` ("eagle31", "specforge"; "auto").
        variants: also the same content under every prompt framing of ``data/drift_variants.json``.
        temperature: also the expected acceptance under vLLM's rejection sampler at this temperature.
        top_p: with ``temperature``: the target's top-p cut, as vLLM applies it.
        target_engine: "vllm" / "vllm==X": the target run by vLLM, never loaded in this process.
        hidden_states: the target's sequences and states from files (an ``eaglekit capture`` folder): no target run.
        vllm_python: vLLM from this Python's environment (for ``target_engine``).
        parallel: vLLM's workers for ``target_engine``; None: one.
        batch_size: inputs the target decodes together; None: as many as memory allows.
        progress: called with a stage's name and a count as the run goes.
        threads: torch's CPU threads; None: as ``verify`` chooses them.
    """
    fields = option_fields(locals(), "path", "report", "progress", "threads")
    from ..drift.report import check_report_destination, require_matplotlib, write_report
    from ..target.long_lived import frozen_scope, long_lived
    from ..target.threads import chosen as chosen_threads

    with chosen_threads(threads):
        _refuse_before_torch("drift", (path, compare), fields)
        inputs = (path, compare, target, prompts)
        if report is not None:  # before the long run, not after it
            check_report_destination(report, inputs)
            require_matplotlib()
        # torch's and the target's objects out of the collector's walks while this runs (target/long_lived.py)
        with frozen_scope():
            with long_lived():
                from ..drift.options import DriftOptions
                from ..drift.run import drift as run
            result = run(str(path), DriftOptions(**fields), progress)
        data = document(path, not result["findings"], result)
        files = write_report(data, report, inputs) if report is not None else []
    return DriftReport.of(str(path), data, files)
