"""A GGUF file read as a checkpoint: its tensor index listed without reading data, one tensor read at a time.

A GGUF drafter (llama.cpp's ``eagle3`` architecture) is one file: metadata (``gguf_metadata``) then a tensor index
and the data. ``GGUFCheckpoint`` presents it the way ``reader.Checkpoint`` presents a directory: ``tensors`` (name,
dtype, shape in PyTorch's order: the file states dimensions innermost first), ``read`` / ``read_values`` /
``read_chunks`` / ``byte_range``. It has no ``config.json``: ``metadata`` holds the key/values, and the dialect that
reads GGUF makes a config of them.

Two of llama.cpp's storage conventions change values, not just names; the dialect says which tensors they apply to
(``adapt``) and the reads here undo them, so every caller sees the canonical (Hugging Face) values:

- ``row_interleaved``: llama.cpp's converter reorders the rows of a Llama q/k projection so that each head's rotary
  pairs are adjacent (its ``permute``: within a head, rows [0..d/2) and [d/2..d) interleaved). ``unpermute_rows``
  undoes it, ``permute_rows`` does it;
- ``absolute_index``: a draft->target vocabulary map stored as the target ids themselves, where the canonical ``d2t``
  holds offsets (target = i + d2t[i]).

Plain element types (F32, F16, BF16, F64, I8..I64) are read as stored; a block-quantised one (Q8_0, Q4_K, ...) is
read dequantised to float32 through the ``gguf`` package and listed as float32.
"""

from __future__ import annotations

import os
from array import array
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CheckpointError, MissingDependencyError
from . import dtypes
from .gguf_metadata import GGUFMetadata, read_metadata
from .locate import Located
from .reader import ByteRange, Checkpoint, TensorInfo

if TYPE_CHECKING:  # pragma: no cover
    import torch

# ggml element types stored as plain elements: type number -> eaglekit dtype (ggml.h's ggml_type)
PLAIN_TYPES = {
    0: dtypes.FLOAT32,
    1: dtypes.FLOAT16,
    30: dtypes.BFLOAT16,
    28: dtypes.by_name("float64"),
    24: dtypes.by_name("int8"),
    25: dtypes.by_name("int16"),
    26: dtypes.by_name("int32"),
    27: dtypes.INT64,
}
GGML_TYPE_OF = {dtype.name: number for number, dtype in PLAIN_TYPES.items()}


def ggml_type(dtype) -> int:
    """The ggml type number a tensor of ``dtype`` is stored as (plain types only)."""
    number = GGML_TYPE_OF.get(dtypes.name(dtype))
    if number is None:
        raise CheckpointError(f"GGUF has no plain element type for {dtypes.name(dtype)}")
    return number


def permute_rows(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's converter's q/k row order: per head, the first and second half of the rows interleaved."""
    rows = tensor.shape[0]
    return tensor.reshape(heads, 2, rows // heads // 2, *tensor.shape[1:]).swapaxes(1, 2).reshape(tensor.shape)


def unpermute_rows(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of ``permute_rows``: the Hugging Face row order back."""
    rows = tensor.shape[0]
    return tensor.reshape(heads, rows // heads // 2, 2, *tensor.shape[1:]).swapaxes(1, 2).reshape(tensor.shape)


class GGUFCheckpoint(Checkpoint):
    """A GGUF file opened as a checkpoint (see the module's docstring)."""

    def __init__(self, located: Located, label: str):
        super().__init__(located, label)
        self.format = "gguf"
        self.metadata: GGUFMetadata | None = None
        self.ggml_types: dict[str, int] = {}  # tensor -> its ggml type number
        self.quantized: dict[str, int] = {}  # block-quantised tensors (read dequantised), by ggml type
        self._rows: dict[str, int] = {}  # tensors whose rows llama.cpp interleaved, with their head count
        self._absolute: set[str] = set()  # vocabulary maps stored as absolute ids

    @property
    def path(self) -> Path:
        return self._resolve(self.files[0], self.label)

    def _discover(self) -> None:
        name = self.located.file
        assert name is not None
        self.files = [name]
        metadata = read_metadata(self.path, self.label, tensors=True)
        if metadata.byte_order != "<":
            raise CheckpointError(f"{self.label}: a big-endian GGUF file; eaglekit reads little-endian ones")
        self.metadata = metadata
        size = os.stat(self.path).st_size
        for tensor, info in (metadata.tensors or {}).items():
            shape = tuple(reversed(info.shape))
            dtype = PLAIN_TYPES.get(info.ggml_type)
            nbytes = prod(shape) * dtype.itemsize if dtype is not None else _quantized_bytes(info.ggml_type, shape)
            if nbytes is None:
                raise CheckpointError(
                    f"{self.label}: GGUF tensor {tensor!r} has ggml type {info.ggml_type}, which eaglekit cannot read"
                    " (install the gguf package for block-quantised types)"
                )
            if metadata.data_offset + info.offset + nbytes > size:
                raise CheckpointError(
                    f"{self.label}: GGUF tensor {tensor!r} runs past the end of the file (to byte"
                    f" {metadata.data_offset + info.offset + nbytes}; the file has {size}): a truncated or damaged file"
                )
            if dtype is None:
                self.quantized[tensor] = info.ggml_type
            self.ggml_types[tensor] = info.ggml_type
            self.tensors[tensor] = TensorInfo(tensor, dtype or dtypes.FLOAT32, shape, name)

    def adapt(self, *, row_interleaved: dict[str, int] | None = None, absolute_index: tuple[str, ...] = ()) -> None:
        """Tensors stored in llama.cpp's conventions, undone on read: q/k rows interleaved per head (name -> heads),
        vocabulary maps holding absolute target ids."""
        self._rows = {n: h for n, h in (row_interleaved or {}).items() if n in self.tensors}
        self._absolute = {n for n in absolute_index if n in self.tensors}

    # -- reading -------------------------------------------------------------------------------------

    def _raw(self, name: str) -> bytearray:
        info = self.info(name)
        self._refuse_remote()
        assert self.metadata is not None and self.metadata.tensors is not None
        entry = self.metadata.tensors[name]
        if name in self.quantized:
            nbytes = _quantized_bytes(entry.ggml_type, info.shape)
        else:
            nbytes = info.nbytes
        buffer = bytearray(nbytes or 0)
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.metadata.data_offset + entry.offset)
            got = f.readinto(buffer) if buffer else 0
        if got != len(buffer):
            raise CheckpointError(f"{self.label}: GGUF tensor {name!r} is truncated ({got} of {len(buffer)} bytes)")
        return buffer

    def byte_range(self, name: str) -> ByteRange | None:
        """The stored bytes, where they are the canonical tensor's (not for an adapted or quantised tensor)."""
        self._refuse_remote()
        info = self.info(name)
        if name in self.quantized or name in self._rows or name in self._absolute:
            return None
        assert self.metadata is not None and self.metadata.tensors is not None
        return ByteRange(self.path, self.metadata.data_offset + self.metadata.tensors[name].offset, info.nbytes)

    def read(self, name: str) -> torch.Tensor:
        """One tensor with canonical values (dequantised, rows and ids as Hugging Face keeps them)."""
        import torch

        info = self.info(name)
        raw = self._raw(name)
        if name in self.quantized:
            tensor = _dequantize(raw, self.quantized[name], info.shape, self.label, name)
        elif not raw:
            tensor = torch.empty(info.shape, dtype=info.dtype.torch)
        else:
            tensor = torch.frombuffer(raw, dtype=torch.uint8).view(info.dtype.torch).reshape(info.shape)
        if name in self._rows:
            tensor = unpermute_rows(tensor, self._rows[name]).contiguous()
        if name in self._absolute:
            tensor = tensor - torch.arange(tensor.shape[0], dtype=tensor.dtype)
        return tensor

    def read_values(self, name: str) -> array:
        info = self.info(name)
        if info.dtype.is_floating_point:
            raise CheckpointError(f"{self.label}: GGUF tensor {name!r} holds floats, not integers")
        values = dtypes.values(self._raw(name), info.dtype)
        if name in self._absolute:
            values = array(values.typecode, (v - i for i, v in enumerate(values)))
        return values

    def read_chunks(self, name: str, max_bytes: int = 64 * 2**20):
        yield self.read(name).reshape(-1)

    def _handle(self, file: str):  # every read opens the one file itself
        raise AssertionError("GGUFCheckpoint reads through _raw")


def _quantized_bytes(ggml: int, shape: tuple[int, ...]) -> int | None:
    """The bytes a block-quantised tensor takes (the gguf package's block sizes); None where unknown."""
    try:
        from gguf.constants import GGML_QUANT_SIZES
    except ImportError:
        return None
    sizes = GGML_QUANT_SIZES.get(ggml)
    if sizes is None or not shape or shape[-1] % sizes[0]:
        return None
    return prod(shape) // sizes[0] * sizes[1]


def _dequantize(raw: bytearray, ggml: int, shape: tuple[int, ...], label: str, name: str):
    import torch

    try:
        import numpy as np
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import dequantize
    except ImportError:
        raise MissingDependencyError(
            f"{label}: tensor {name!r} is block-quantised (ggml type {ggml}); reading it needs the gguf package"
            " (pip install 'eaglekit[gguf]')"
        ) from None
    values = dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), GGMLQuantizationType(ggml))
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(shape)


def open_gguf(located: Located, label: str) -> GGUFCheckpoint:
    ckpt = GGUFCheckpoint(located, label)
    ckpt._discover()
    return ckpt


__all__ = ["GGUFCheckpoint", "PLAIN_TYPES", "ggml_type", "open_gguf", "permute_rows", "unpermute_rows"]
