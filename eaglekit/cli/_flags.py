"""The one table from the core's parameters to the CLI's flags, and the translation of messages through it.

The core (everything outside ``cli/``) names a parameter in a message as `` `name` ``, its Python name (``api.convert``
raises "`resolve` needs `target`"); a library user reads that as it is. The CLI prints every message it shows (errors,
findings, notes, the JSON documents) through ``as_flags``, which writes each such name as the flag that sets it
("--resolve needs --target"). A name not in the table is left as it is, backticks and all.
"""

from __future__ import annotations

import re

# parameter (as the core and eaglekit.api name it) -> the flag that sets it
PARAMETER_FLAGS: dict[str, str] = {
    "against": "--against",
    "allow_ambiguous": "--allow-ambiguous",
    "allow_untrained": "--allow-untrained",
    "atol": "--atol",
    "aux_layers": "--aux-layers",
    "base_model": "--base-model",
    "batch_size": "--batch-size",
    "chunk": "--chunk",
    "commit_message": "--commit-message",
    "compare": "--compare",
    "create_pr": "--create-pr",
    "data_parallel_size": "--data-parallel-size",
    "device": "--device",
    "device_map": "--device-map",
    "distributed_executor_backend": "--distributed-executor-backend",
    "download": "--download",
    "dry_run": "--dry-run",
    "dtype": "--dtype",
    "endpoint": "--endpoint",
    "engine": "--engine",
    "force": "--force",
    "from_file": "--from-file",
    "hidden_states": "--hidden-states",
    "inputs_per_bucket": "--inputs-per-bucket",
    "jobs": "--jobs",
    "json": "--json",
    "k": "--num-speculative-tokens",
    "list_dialects": "--list",
    "max_context": "--max-context",
    "max_new_tokens": "--max-new-tokens",
    "max_shard_bytes": "--max-shard-size",
    "min_acceptance_length": "--min-acceptance-length",
    "norm_output_semantics": "--norm-output-semantics",
    "num_prompts": "--num-prompts",
    "overwrite_card": "--overwrite-card",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "private": "--private",
    "prompts": "--prompts",
    "raw_prompts": "--raw-prompts",
    "ray_address": "--ray-address",
    "reference": "--reference",
    "report": "--report",
    "resolve": "--resolve",
    "revision": "--revision",
    "scan": "--scan",
    "sink_tokens": "--sink-tokens",
    "source_dialect": "--from",
    "target": "--target",
    "target_engine": "--target-engine",
    "target_id": "--target-id",
    "temperature": "--temperature",
    "tensor_parallel_size": "--tensor-parallel-size",
    "threads": "--threads",
    "to": "--to",
    "token": "--token",
    "top_p": "--top-p",
    "upgrade": "--upgrade",
    "validate": "--no-validate",
    "variants": "--variants",
    "vllm_python": "--vllm-python",
}

_NAMED = re.compile(r"`([a-z_]+)`")


def as_flags(text: str) -> str:
    """``text`` with each `` `parameter` `` the table knows written as its flag."""
    if "`" not in text:
        return text
    return _NAMED.sub(lambda m: PARAMETER_FLAGS.get(m.group(1), m.group(0)), text)


__all__ = ["PARAMETER_FLAGS", "as_flags"]
