"""Opening a drafter checkpoint of either layout: a directory (``reader.Checkpoint``: config.json and safetensors or
.bin files) or one GGUF file (``gguf_tensors.GGUFCheckpoint``: llama.cpp's format)."""

from __future__ import annotations

from pathlib import Path

from .gguf_tensors import open_gguf
from .locate import Located, locate
from .reader import Checkpoint


def open_checkpoint(source: str | Path | Located) -> Checkpoint:
    located = locate(source)
    if located.file is not None:
        return open_gguf(located, str(source))
    return Checkpoint.open(located)


__all__ = ["open_checkpoint"]
