"""What a verify run is asked to do: the command line's options, read by every stage."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engines.vllm_scale import Parallel


@dataclass
class VerifyOptions:
    target: str
    prompts: str | None = None  # JSONL file; None: the built-in set
    raw_prompts: bool = False  # each {"prompt": ...} taken as raw text, as {"text": ...} is (io.prompts_file)
    num_prompts: int | None = None
    max_new_tokens: int = 64
    k: int = 3
    engine: str | None = None
    reference: str | None = None
    # "vllm" (the vLLM importable here), "vllm==X" (its engine environment) or "llama.cpp==bN" (llama-server of build N)
    against: str | None = None
    vllm_python: str | None = None  # vLLM from this Python's environment (for --against and --target-engine)
    target_engine: str | None = None  # "vllm" / "vllm==X": the target run by vLLM, never loaded here (verify.capture)
    parallel: Parallel = field(default_factory=Parallel)  # vLLM's workers, for --target-engine and --against
    min_acceptance_length: float | None = None
    device: str = "cpu"
    dtype: str = "float32"
    device_map: str | None = None
    hidden_states: str | None = None
    source_dialect: str = "auto"
    norm_output_semantics: str = "auto"  # how to read a SpecForge-style norm_output (see dialects.load)
    atol: float | None = None  # logit tolerance for --reference; None: 0 for same dtypes, else dtype-based
    batch_size: int | None = None  # prompts the target decodes together; None: as many as memory allows (batch_rows)
    command: str = "verify"  # the command running, for messages (drift runs the Verifier too)
