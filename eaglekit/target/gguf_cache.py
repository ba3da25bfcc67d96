"""A GGUF target, dequantised once and kept as a transformers directory in eaglekit's cache.

Reading a GGUF file through transformers parses the whole file (metadata, the tokenizer's 49k-entry arrays, every
tensor) once for the config, once for the tokenizer and once for the weights, and dequantises every tensor: on a
2-core machine that was about half of a whole ``verify``. The first load saves what it built beside the user's
cache (``$XDG_CACHE_HOME/eaglekit/targets/``): the dequantised weights as float32 safetensors, the config, the
tokenizer and the generation config, plus the exact config dict read from the GGUF metadata (so that
``read_target_config`` gives the same dict either way). Later runs, and vLLM in ``verify --against vllm``, load
that directory instead. The key is the GGUF file's resolved path, size and modification time, so an edited or
replaced file gets a fresh entry. The directory is written beside its final name and renamed into place: a killed
run leaves no half entry. A cache that cannot be written (read-only home) is skipped, never an error.

Each entry records the GGUF path it was made from, so that writing an entry also removes the entries no file can
use any more (``prune``): their GGUF file is gone (a deleted virtual environment, a moved download) or has changed
since. Without that, every new location of the same file (each fresh environment) left ~0.5 GB behind for good.

This module imports neither torch nor transformers at import time (``read_target_config`` uses it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from ..io.atomic import pid_alive
from ..io.cache_home import cache_home

# Part of every entry's key: an entry written in an older layout is no file's entry any more, so ``prune`` removes it
# and the next load writes it afresh. 2: tokenizer_config.json lists the added tokens (``_save_tokenizer``). 3: the
# config dict keeps llama.cpp's rope divisors (``gguf_config.ROPE_FREQS_KEY``), which an older entry's dict lacks. 4:
# it keeps a rope scaling stated in keys (``ROPE_SCALING_KEY``), and config.json states it (``target.gguf_rope``).
FORMAT = 4
# the config dict read_target_config read from the GGUF file (gguf_config's keys, or transformers' whole config for
# the other architectures), so that it reads the same dict from the entry
GGUF_CONFIG = "eaglekit-gguf-config.json"
COMPLETE = "eaglekit-complete"  # written last: a directory without it is not used


def cache_root() -> Path:
    return cache_home() / "targets"


def cache_directory(gguf_path: Path) -> Path:
    resolved = gguf_path.resolve()
    stat = resolved.stat()
    key = hashlib.sha256(f"{resolved}\0{stat.st_size}\0{stat.st_mtime_ns}\0{FORMAT}".encode()).hexdigest()[:12]
    return cache_root() / f"{resolved.stem}-{key}"


def _is_stale(entry: Path) -> bool:
    """A complete entry whose GGUF file (the path its COMPLETE marker records) is gone or no longer the file it was
    made from. Entries without a readable marker (being written, or not eaglekit's) are never judged stale."""
    try:
        source = Path((entry / COMPLETE).read_text().strip())
    except OSError:
        return False
    try:
        return cache_directory(source) != entry
    except OSError:  # the file is gone
        return True


def prune(keep: Path | None = None) -> list[Path]:
    """Remove the stale entries (``_is_stale``) and the temporary directories of runs that died while writing one;
    the entries removed. ``keep`` is never removed."""
    removed = []
    try:
        entries = list(cache_root().iterdir())
    except OSError:
        return removed
    for entry in entries:
        if entry == keep or not entry.is_dir():
            continue
        stem, tmp, pid = entry.name.rpartition(".tmp")
        if tmp and pid.isdigit():
            stale = not pid_alive(int(pid))
        else:
            stale = _is_stale(entry)
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def cached(gguf_path: Path) -> Path | None:
    """The complete cache directory of this GGUF file, or None."""
    try:
        directory = cache_directory(gguf_path)
    except OSError:
        return None
    return directory if (directory / COMPLETE).is_file() else None


def cached_config(gguf_path: Path) -> dict | None:
    directory = cached(gguf_path)
    if directory is None:
        return None
    try:
        config = json.loads((directory / GGUF_CONFIG).read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _save_tokenizer(tokenizer, directory: Path) -> None:
    """``save_pretrained``, with the added tokens listed in tokenizer_config.json (``added_tokens_decoder``, as
    transformers writes it for its other tokenizer classes). transformers 5 leaves them out for a tokenizers-backed
    tokenizer, and loading such a config parses the whole tokenizer.json in Python once more only to find them
    (SmolLM2: ~0.1 s of every later load, measured); listed, that parse is skipped and the tokenizer is the same (the
    tests compare the prompts' ids, chat template included)."""
    tokenizer.save_pretrained(directory)
    path = directory / "tokenizer_config.json"
    added = getattr(tokenizer, "added_tokens_decoder", None)
    try:
        config = json.loads(path.read_text())
        if not isinstance(config, dict) or "added_tokens_decoder" in config or not added:
            return
        config["added_tokens_decoder"] = {str(i): token.__getstate__() for i, token in sorted(added.items())}
    except (OSError, ValueError, AttributeError, TypeError):
        return
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def save(gguf_path: Path, model, tokenizer, gguf_config: dict) -> Path | None:
    """Save a GGUF-loaded float32 model (and its tokenizer) as the cache entry; the entry, or None if it cannot be
    written. Only float32 weights are saved: they are the dequantised values exactly, whatever dtype a later run
    asks for."""
    import torch

    from ..io.tensorfile import write_safetensors

    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    if any(v.is_floating_point() and v.dtype != torch.float32 for v in state.values()):
        return None
    try:
        directory = cache_directory(gguf_path)
        if (directory / COMPLETE).is_file():
            return directory
        tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            # transformers refuses save_pretrained on a GGUF-loaded model; its weights are already dequantised, so
            # the state dict and a config without the GGUF quantisation entry are a plain transformers directory
            if getattr(model.config, "tie_word_embeddings", False):
                state.pop("lm_head.weight", None)
            write_safetensors(tmp / "model.safetensors", state, {"format": "pt"})
            config = model.config.to_dict()
            config.pop("quantization_config", None)
            config["torch_dtype"] = config["dtype"] = "float32"
            (tmp / "config.json").write_text(json.dumps(config, indent=2, default=str))
            if getattr(model, "generation_config", None) is not None:
                model.generation_config.save_pretrained(tmp)
            if tokenizer is not None:
                _save_tokenizer(tokenizer, tmp)
            (tmp / GGUF_CONFIG).write_text(json.dumps(gguf_config, default=str))
            (tmp / COMPLETE).write_text(str(gguf_path.resolve()) + "\n")
            if directory.exists():  # an incomplete entry of a killed run
                shutil.rmtree(directory, ignore_errors=True)
            tmp.replace(directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        prune(keep=directory)
        return directory
    except OSError:
        return None
