"""The target as a transformers directory, which is what vLLM loads: a safetensors target as it is, a GGUF file's
dequantised entry in eaglekit's cache (``gguf_cache``). Where there is no entry yet, it is made in a child process
(``python -m eaglekit.target.dequantise FILE``: the file loaded through transformers once, as verify loads it, and
saved), so that the process asking, which never holds the target's weights, does not hold them for that either."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..errors import UnsupportedError
from . import gguf_cache
from .config import TargetConfig


def transformers_directory(config: TargetConfig) -> Path:
    if not config.gguf_file:
        return config.directory
    gguf_path = config.directory / config.gguf_file
    directory = gguf_cache.cached(gguf_path)
    if directory is None:
        done = subprocess.run(
            [sys.executable, "-m", __name__, str(gguf_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        directory = gguf_cache.cached(gguf_path) if done.returncode == 0 else None
        said = " ".join((done.stderr or "").strip().splitlines()[-1:])
    if directory is None:
        raise UnsupportedError(
            f"{gguf_path}: vLLM needs the target as a transformers directory, and eaglekit's cache"
            f" ({gguf_cache.cache_directory(gguf_path).parent}) could not be written"
            + (f" ({said})" if said else "")
            + "; free the cache or give the model's safetensors directory"
        )
    return directory


def _main(path: str) -> int:
    import torch

    from . import read_target_config
    from .runner import TargetModel

    TargetModel.load(read_target_config(path), dtype=torch.float32)  # writes the cache entry
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
