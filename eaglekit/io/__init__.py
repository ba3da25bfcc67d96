"""Checkpoint IO: the only code in eaglekit that opens tensor files."""

from .atomic import atomic_directory, check_destination
from .reader import ByteRange, Checkpoint, TensorInfo
from .writer import DEFAULT_MAX_SHARD_BYTES, TensorPlan, parse_size, write_checkpoint_tensors

__all__ = [
    "ByteRange",
    "Checkpoint",
    "DEFAULT_MAX_SHARD_BYTES",
    "TensorInfo",
    "TensorPlan",
    "atomic_directory",
    "check_destination",
    "parse_size",
    "write_checkpoint_tensors",
]
