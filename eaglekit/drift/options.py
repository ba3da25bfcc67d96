"""What a drift run is asked to do: its options, and the checks on them that need no file."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engines.vllm_scale import Parallel
from ..errors import UsageError
from ..serving import MIN_TEMPERATURE


@dataclass
class DriftOptions:
    target: str
    compare: str | None = None
    sink_tokens: int = 4
    max_context: int | None = None  # None: the target's window (max_position_embeddings)
    prompts: str | None = None  # JSONL long inputs (prompt / text / messages / input_ids); None: built-in long material
    raw_prompts: bool = False  # each {"prompt": ...} taken as raw text, as {"text": ...} is (io.prompts_file)
    inputs_per_bucket: int = 2  # built-in material: sequences per context bucket
    max_new_tokens: int = 32  # the continuation judged after each input
    k: int = 3
    chunk: int = 256  # chain start positions drafted together
    device: str = "cpu"
    dtype: str = "float32"
    source_dialect: str = "auto"
    norm_output_semantics: str = "auto"
    variants: bool = False  # the same content under every prompt framing of data/drift_variants.json
    temperature: float | None = None  # expected acceptance under vLLM's rejection sampler (sampling.py)
    top_p: float = 1.0
    target_engine: str | None = None  # the target run by vLLM (verify.capture), never loaded here
    hidden_states: str | None = None  # the target's states from files (an `eaglekit capture` folder): no target run
    vllm_python: str | None = None
    parallel: Parallel = field(default_factory=Parallel)
    batch_size: int | None = None  # inputs the target decodes together; None: as many as memory allows (batch_rows)


def check_options(options: DriftOptions) -> None:
    """The options that need no file, told before anything is read or loaded."""
    if options.sink_tokens < 1:
        raise UsageError("`sink_tokens` must be at least 1")
    if options.chunk < 1:
        raise UsageError("`chunk` must be at least 1")
    if options.temperature is not None and not options.temperature >= MIN_TEMPERATURE:
        raise UsageError(
            f"`temperature` {options.temperature:g}: at least {MIN_TEMPERATURE} (vLLM raises a lower one to"
            f" {MIN_TEMPERATURE}; the greedy figures, the default report, are temperature 0)"
        )
    if not 0 < options.top_p <= 1:
        raise UsageError("`top_p` must lie in (0, 1]")
    if options.top_p != 1.0 and options.temperature is None:
        raise UsageError("`top_p` applies to sampling: give `temperature` too")
    _refuse_without_target(options)


def _refuse_without_target(options: DriftOptions) -> None:
    """What needs the target's own run, refused where vLLM runs it (its capture keeps no distributions; every framing
    of variants would start an engine) or files bring its states (hidden_states)."""
    needs = {"temperature": options.temperature is not None, "variants": options.variants}
    if options.target_engine and any(needs.values()):
        raise UsageError(
            f"`{next(f for f, v in needs.items() if v)}` needs the target run by eaglekit, not by vLLM"
            " (`target_engine`)"
        )
    needs.update({"target_engine": bool(options.target_engine), "prompts": bool(options.prompts)})
    if options.hidden_states and any(needs.values()):
        raise UsageError(
            f"`hidden_states` brings the target's states; `{next(f for f, v in needs.items() if v)}` runs the target"
        )
