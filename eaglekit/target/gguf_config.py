"""A GGUF target's config from its metadata alone (``io.gguf_metadata``), for the architectures whose config
transformers makes by renaming keys: no transformers, no torch, no gguf, milliseconds.

transformers reads a GGUF file's config in ``load_gguf_checkpoint`` (modeling_gguf_pytorch_utils.py) with a table per
architecture (``GGUF_CONFIG_MAPPING``, integrations/ggml.py) and rules of its own. For the architectures in
``ARCHITECTURES``, the keys eaglekit reads come out of that as plain renamings, the same for each (read in
transformers 5.19's and 5.24's source): ``{arch}.block_count`` is ``num_hidden_layers``, and so on (``KEYS``); the
vocabulary size is ``{arch}.vocab_size``, else the length of ``tokenizer.ggml.tokens``; the architecture names the
model type, a llama file whose ``general.name`` is exactly ``mistral`` being a mistral one. Nothing names
``architectures``. tests/test_gguf_config.py holds each architecture's reading against transformers' own.

Anything else is left to transformers (``config_from_metadata`` gives None): another architecture (gemma's rope per
layer type, phi3's partial rotary, t5's and gpt2's own key names, ...), or a key the config needs missing (a file
without ``rope.freq_base`` or ``context_length`` takes the config class's default, which only transformers knows).
``rope.scaling`` keys do not send a file there: transformers drops them for the architectures here (below).

Both releases send only a few newer architectures (qwen35, qwen35moe, and lfm2 in 5.24: ``GGUF_CONFIG_ARCHS``) through
per-architecture readers of their own, which also name ``architectures``; should a later release move one of the
architectures here to such a reader, the tests comparing with the installed transformers say so.

llama.cpp keeps Llama 3.x's rope scaling in no key at all: its converter writes the per-frequency divisors as a tensor,
``rope_freqs.weight`` (``generate_extra_tensors`` for ``rope_type: llama3``), and its rope divides each frequency by
its divisor in every layer (``get_rope_factors``, ``ggml_rope_cache_init``; read in llama.cpp's source as vendored by
llama-cpp-python 0.3.36). transformers' GGUF loader reads neither that tensor nor a key for it: a Llama-3.1 GGUF
loads with the default rope, in silence (run: tests/fixtures/gguf_rope). So the divisors are read here from the
tensor itself, for every GGUF target, and kept in the config dict under ``ROPE_FREQS_KEY``; the runner applies them
to the loaded model (``target.gguf_rope``) and validate compares them with the drafter's rope.

llama.cpp's converter keeps the other rope scalings in keys (``{arch}.rope.scaling.type`` linear or yarn, with
``.factor``, ``.original_context_length`` and YaRN's optional ones). transformers reads those for gpt-oss alone
(``load_gguf_checkpoint``); for every other architecture it drops them (run: a YaRN llama file loads with the default
rope and attention scaling 1). So they are kept here too (``ROPE_SCALING_KEY``), mapped back onto the HF rope parameters
the converter wrote them from: the target's rope is the one the file states, validate compares the drafter's with it,
and the runner sets it on the loaded model (``target.gguf_rope``), or refuses the file where a key maps to no HF
parameter.

The dict holds only the keys below; the whole config transformers makes is what the loaded target carries. It is
also laxer: a file whose hidden size is no multiple of its head count reads here (nothing here uses the heads), and
transformers refuses it when verify loads the target.
"""

from __future__ import annotations

from pathlib import Path

from ..io.gguf_metadata import GGUFMetadata, SkippedArray, read_vector

# general.architecture -> model_type
ARCHITECTURES = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen2moe": "qwen2_moe",
    "qwen3moe": "qwen3_moe",
}
# transformers' rule for llama files that are mistral models: general.name is exactly this
MISTRAL_NAME = "mistral"
# {arch}.<key> -> config key
KEYS = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "vocab_size": "vocab_size",
    "context_length": "max_position_embeddings",
    "rope.freq_base": "rope_theta",
}
# without any of these the config class's defaults would fill in: only transformers knows them
REQUIRED = ("num_hidden_layers", "hidden_size", "vocab_size", "max_position_embeddings", "rope_theta")
# llama.cpp's rope divisors, one per rotary frequency, and the config dict key eaglekit keeps them under
ROPE_FREQS_TENSOR = "rope_freqs.weight"
ROPE_FREQS_KEY = "eaglekit_rope_freqs"
# llama.cpp's rope scaling keys ({arch}.rope.scaling.<suffix>) -> the HF rope parameter each was written from (its
# converter: conversion/base.py); the suffixes that change no rope (a flag of old converters); the architectures whose
# keys transformers reads itself; the config dict keys eaglekit keeps a stated scaling under, and the suffixes it does
# not map (yarn_ext_factor, yarn_log_multiplier, alpha, ...)
SCALING_KEYS = {
    "factor": "factor",
    "original_context_length": "original_max_position_embeddings",
    "yarn_attn_factor": "attention_factor",
    "yarn_beta_fast": "beta_fast",
    "yarn_beta_slow": "beta_slow",
}
NO_ROPE_CHANGE = ("type", "finetuned")
READS_ROPE_SCALING = ("gpt-oss",)
ROPE_SCALING_KEY = "eaglekit_rope_scaling"
ROPE_SCALING_UNREAD_KEY = "eaglekit_rope_scaling_unread"


def config_from_metadata(metadata: GGUFMetadata) -> dict | None:
    """The config keys eaglekit reads (``KEYS`` and ``model_type``), as transformers would set them from this
    metadata; None where only transformers can say (see the module's docstring)."""
    arch = metadata.architecture()
    if arch not in ARCHITECTURES:
        return None
    values = metadata.values
    model_type = ARCHITECTURES[arch]
    if arch == "llama" and values.get("general.name") == MISTRAL_NAME:
        model_type = "mistral"
    config: dict = {"model_type": model_type}
    for suffix, key in KEYS.items():
        if f"{arch}.{suffix}" in values:
            config[key] = values[f"{arch}.{suffix}"]
    tokens = values.get("tokenizer.ggml.tokens")
    if "vocab_size" not in config and isinstance(tokens, (list, SkippedArray)):
        config["vocab_size"] = len(tokens) if isinstance(tokens, list) else tokens.length
    if any(key not in config for key in REQUIRED):
        return None
    return config


def rope_freqs(path: Path, metadata: GGUFMetadata, label: str) -> list[float] | None:
    """The file's ``rope_freqs`` divisors, None where it has none; ``metadata`` read with its tensor index."""
    if ROPE_FREQS_TENSOR not in (metadata.tensors or {}):
        return None
    return list(read_vector(path, metadata, ROPE_FREQS_TENSOR, label))


def stated_rope_scaling(metadata: GGUFMetadata) -> tuple[dict, list[str]] | None:
    """(the rope scaling the file's keys state, as an HF ``rope_scaling`` dict; the ``rope.scaling`` suffixes it holds
    that map to none of its keys) where transformers does not read them; None where the file states none (or
    ``none``), or transformers reads it."""
    arch = metadata.architecture()
    prefix = f"{arch}.rope.scaling."
    kind = metadata.values.get(f"{prefix}type")
    if arch in READS_ROPE_SCALING or not isinstance(kind, str) or kind == "none":
        return None
    scaling: dict = {"rope_type": kind}
    for suffix, key in SCALING_KEYS.items():
        value = metadata.values.get(f"{prefix}{suffix}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            scaling[key] = value
    unread = sorted(
        k[len(prefix) :]
        for k in metadata.values
        if k.startswith(prefix) and k[len(prefix) :] not in (*SCALING_KEYS, *NO_ROPE_CHANGE)
    )
    return scaling, unread
