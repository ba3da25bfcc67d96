"""The target's tokenizer and stop tokens, without its weights: what the transformers run (``runner.TargetModel``) and
a run whose target only vLLM holds (``verify --target-engine``, ``eaglekit capture``) both read, so that both encode
the same prompts and stop at the same tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CheckpointError, MissingDependencyError

if TYPE_CHECKING:  # pragma: no cover
    import torch


def load_tokenizer(config, directory: str, gguf_kwargs: dict):
    """The tokenizer of the target ``config`` describes, loaded from ``directory`` (with ``gguf_kwargs``, from a GGUF
    file); None where its files hold no tokenizer transformers can build (prompts then come as input_ids)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(directory, **gguf_kwargs)
    except Exception as exc:
        # transformers 5.24 raises OSError or ValueError where the files hold no tokenizer it can build (none at
        # all, only a tokenizer_config.json, a GGUF tokenizer it does not read): prompts then come as input_ids. A
        # file that is there but does not parse (json's JSONDecodeError, a ValueError too; KeyError, TypeError,
        # AttributeError from a truncated or mistyped one) or a missing tokenizer package (ImportError) would
        # silently drop the tokenizer's eos id and chat template, or was an internal error: one line instead.
        if isinstance(exc, (OSError, ValueError)) and not isinstance(exc, json.JSONDecodeError):
            return None
        said = " ".join(str(exc).split())[:300]
        where = config.directory / config.gguf_file if config.gguf_file else config.directory
        if isinstance(exc, ImportError):
            raise MissingDependencyError(
                f"`target` {where}: its tokenizer needs a package not installed here ({said})"
            ) from None
        raise CheckpointError(
            f"`target` {where}: its tokenizer does not load ({type(exc).__name__}: {said}); fix or remove "
            "its tokenizer files (prompts given as input_ids need none)"
        ) from None


def eos_ids(generation_config, tokenizer) -> set[int]:
    """Where a continuation stops, as vLLM stops it: the tokenizer's eos and every generation_config eos id
    (SamplingParams.update_from_generation_config adds the latter to the former)."""
    out: set[int] = set()
    for ids in (
        getattr(generation_config, "eos_token_id", None),
        getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None,
    ):
        if ids is not None:
            out |= {int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids])}
    return out


def generation_config(directory: Path):
    """The generation config transformers gives a model loaded from ``directory`` (a transformers directory):
    generation_config.json where there is one, else the one it derives from config.json."""
    from transformers import AutoConfig, GenerationConfig

    try:
        return GenerationConfig.from_pretrained(str(directory))
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(str(directory)))


def first_eos(tokens: torch.Tensor, prompt_len: int, eos_ids: set[int]) -> int | None:
    """The index of the first stop token after the prompt, or None."""
    for i in range(prompt_len, tokens.shape[0]):
        if int(tokens[i]) in eos_ids:
            return i
    return None
