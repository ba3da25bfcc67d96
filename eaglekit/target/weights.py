"""The target's input embedding and lm_head, read alone from its checkpoint (no model is built): what a drafter
that ships neither borrows, and what validate compares a drafter's lm_head rows with."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..io.reader import Checkpoint
from .config import TargetConfig

if TYPE_CHECKING:  # pragma: no cover
    import torch

EMBED_NAMES = ("model.embed_tokens.weight", "embed_tokens.weight", "transformer.wte.weight")
LM_HEAD_NAMES = ("lm_head.weight", *EMBED_NAMES)  # a tied lm_head is stored as the input embedding only


def read_target_weight(
    config: TargetConfig, kind: Literal["embed", "lm_head"], directory: Path | None = None
) -> torch.Tensor | None:
    """The tensor as stored, or None where the target has none under a known name, has no weights (``config_only``)
    or is a GGUF file (whose tensors only transformers reads) and no ``directory`` is given (its dequantised
    transformers directory: ``target.dequantise``). A checkpoint that cannot be read raises, as ``Checkpoint`` does
    (CheckpointError): the caller decides whether that matters."""
    if config.config_only or (config.gguf_file and directory is None):
        return None
    names = EMBED_NAMES if kind == "embed" else LM_HEAD_NAMES
    with Checkpoint.open(directory or config.directory) as target:
        for name in names:
            if name in target.tensors:
                return target.read(name)
    return None
