"""Checkpoint IO: the only code in eaglekit that opens tensor files.

The names below load their module on first use, so that importing a light module of this package (``jsonfile``,
``locate``, ``safetensors_header``) does not import torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .atomic import atomic_directory, check_destination
    from .reader import ByteRange, Checkpoint, TensorInfo
    from .writer import DEFAULT_MAX_SHARD_BYTES, TensorPlan, parse_size, write_checkpoint_tensors

_MODULE_OF = {
    "ByteRange": "reader",
    "Checkpoint": "reader",
    "DEFAULT_MAX_SHARD_BYTES": "writer",
    "TensorInfo": "reader",
    "TensorPlan": "writer",
    "atomic_directory": "atomic",
    "check_destination": "atomic",
    "parse_size": "writer",
    "write_checkpoint_tensors": "writer",
}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = sorted(_MODULE_OF)
