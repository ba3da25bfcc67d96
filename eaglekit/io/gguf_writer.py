"""Writing a GGUF file (version 3), one tensor at a time, atomically.

The layout is the one ``gguf_metadata`` reads: the magic, version, tensor and key counts; the key/values; the tensor
index (name, dimensions innermost first, ggml type, offset into the data section); the data section, which starts
at the next multiple of the alignment (32), each tensor padded to it. Values are typed here (``TYPES``: the GGUF value
types a writer names), and keys of another GGUF file (a target's tokenizer) are copied as their stored bytes
(``read_metadata(spans=True)``), so their types and contents stay exactly the source's.

Memory holds one tensor at a time; the file is written under a hidden name beside ``path`` and renamed over it when
complete (``atomic.write_file_atomically``).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from .atomic import write_file_atomically
from .gguf_metadata import read_metadata
from .reader import ByteRange

VERSION = 3
ALIGNMENT = 32
# a writer's type names -> (GGUF value type, struct code); arrays are "NAME[]"
TYPES = {
    "uint8": (0, "B"),
    "int8": (1, "b"),
    "uint16": (2, "H"),
    "int16": (3, "h"),
    "uint32": (4, "I"),
    "int32": (5, "i"),
    "float32": (6, "f"),
    "bool": (7, "?"),
    "string": (8, None),
    "uint64": (10, "Q"),
    "int64": (11, "q"),
    "float64": (12, "d"),
}
ARRAY = 9


@dataclass(frozen=True)
class GGUFTensor:
    """A tensor to write: its name, ggml type, shape (PyTorch's order), byte count and a function giving its bytes
    (bytes, a memoryview, a torch tensor already in the stored layout, or a ``ByteRange`` to copy)."""

    name: str
    ggml_type: int
    shape: tuple[int, ...]
    nbytes: int
    produce: Callable[[], Any]


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def encode_value(type_name: str, value: Any) -> bytes:
    """A value's bytes as a key/value entry holds them after the key: its value type, then the value."""
    if type_name.endswith("[]"):
        element = type_name[:-2]
        kind, code = TYPES[element]
        items = list(value)
        body = b"".join(_string(v) for v in items) if code is None else struct.pack(f"<{len(items)}{code}", *items)
        return struct.pack("<IIQ", ARRAY, kind, len(items)) + body
    kind, code = TYPES[type_name]
    return struct.pack("<I", kind) + (_string(value) if code is None else struct.pack(f"<{code}", value))


def copied_entries(source: Path, keys: Callable[[str], bool], label: str | None = None) -> list[tuple[str, bytes]]:
    """The key/value entries of the GGUF file ``source`` whose key ``keys`` accepts, as stored (type and value)."""
    metadata = read_metadata(source, label, spans=True)
    assert metadata.spans is not None
    wanted = [(k, span) for k, span in metadata.spans.items() if keys(k)]
    with open(source, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        return [(key, bytes(mapped[start:end])) for key, (start, end) in wanted]


def _pad(size: int) -> int:
    return -size % ALIGNMENT


def _index(tensors: list[GGUFTensor]) -> bytes:
    out = bytearray()
    offset = 0
    for t in tensors:
        out += _string(t.name) + struct.pack("<I", len(t.shape))
        out += struct.pack(f"<{len(t.shape)}Q", *reversed(t.shape)) + struct.pack("<IQ", t.ggml_type, offset)
        offset += t.nbytes + _pad(t.nbytes)
    return bytes(out)


def _payload(t: GGUFTensor) -> memoryview:
    data = t.produce()
    if isinstance(data, ByteRange):
        with open(data.path, "rb") as f:
            f.seek(data.offset)
            data = f.read(data.length)
    elif hasattr(data, "numpy"):  # a torch tensor: its bytes as laid out
        import torch

        data = data.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    view = memoryview(data).cast("B")
    if view.nbytes != t.nbytes:
        raise CheckpointError(f"GGUF tensor {t.name!r}: {view.nbytes} bytes produced, {t.nbytes} expected")
    return view


def write_gguf(
    path: str | Path,
    entries: Iterable[tuple[str, bytes]],
    tensors: list[GGUFTensor],
    *,
    progress: Callable[[int], None] | None = None,
) -> Path:
    """Write a GGUF file at ``path`` (atomically): ``entries`` are (key, ``encode_value`` bytes or copied ones), in
    order; ``tensors`` in order. Returns the path."""
    entries = list(entries)
    keys = [k for k, _ in entries]
    if len(set(keys)) != len(keys):
        raise CheckpointError(f"GGUF key {next(k for k in keys if keys.count(k) > 1)!r} written twice")

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as out:
            head = b"GGUF" + struct.pack("<IQQ", VERSION, len(tensors), len(entries))
            head += b"".join(_string(k) + v for k, v in entries) + _index(tensors)
            out.write(head + b"\0" * _pad(len(head)))
            for t in tensors:
                view = _payload(t)
                out.write(view)
                out.write(b"\0" * _pad(t.nbytes))
                if progress is not None:
                    progress(t.nbytes)

    return write_file_atomically(path, write)


__all__ = ["ALIGNMENT", "GGUFTensor", "TYPES", "copied_entries", "encode_value", "write_gguf"]
