"""Reading and checking a safetensors header without touching tensor data.

The safetensors library validates headers too, but with messages that do not name the tensor and only when
a file is opened; eaglekit checks every shard up front (listing a 5 GB checkpoint reads a few KB) and names
the file and tensor in each error. Format: 8-byte little-endian header length N, N bytes of JSON, data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError
from . import dtypes, jsonfile

MAX_HEADER_BYTES = 100 * 2**20  # the safetensors library's own limit
MAX_DIMS = 64  # no tensor an engine loads has more; a header listing thousands is refused before any product is taken


@dataclass(frozen=True)
class HeaderEntry:
    """One tensor of a safetensors header: its dtype, shape and byte range in the data area."""

    dtype: dtypes.DType
    shape: tuple[int, ...]
    begin: int  # offset of the tensor's bytes from the start of the data area
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    """A safetensors file's parsed header: its tensors in data order, its metadata and where the data area starts."""

    entries: dict[str, HeaderEntry]  # in file order of their data
    metadata: dict[str, str]
    data_start: int  # absolute file offset of the data area


def read_header(path: Path, label: str | None = None) -> SafetensorsHeader:
    """Parse and validate the header of ``path``; ``label`` is the name used in errors."""
    label = label or str(path)
    try:
        size = jsonfile.regular_file_size(path, label, "a safetensors file")
        with open(path, "rb") as f:
            if size == 0:
                raise CheckpointError(f"{label}: file is empty (0 bytes)")
            if size < 8:
                raise CheckpointError(f"{label}: truncated ({size} bytes, shorter than the 8-byte header length)")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER_BYTES:
                raise CheckpointError(f"{label}: header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
            if 8 + n > size:
                raise CheckpointError(
                    f"{label}: truncated (header says {n} bytes, file has {size - 8} after the length)"
                )
            raw = f.read(n)
    except OSError as exc:
        raise CheckpointError(f"{label}: cannot read ({exc.strerror})") from None

    header = jsonfile.loads(raw, f"{label} header")
    if not isinstance(header, dict):
        raise CheckpointError(f"{label}: header is not a JSON object")
    data_len = size - 8 - n

    metadata = header.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{label}: __metadata__ must map strings to strings")

    entries: dict[str, HeaderEntry] = {}
    for name, spec in header.items():
        entries[name] = _entry(label, name, spec, data_len)

    # The tensors must tile the data area, back to back from its start to its end, as the safetensors library requires
    # of a file it opens (it refuses a gap as an invalid offset and unused bytes as an incomplete file: run, safetensors
    # 0.8.0, 2026-11-26): engines load
    # with that library, so a file it refuses is refused here, by tensor name.
    ordered = sorted(entries.items(), key=lambda kv: (kv[1].begin, kv[1].end))
    previous_end, previous_name = 0, None
    for name, entry in ordered:
        if entry.begin < previous_end:
            raise CheckpointError(f"{label}: tensor {name!r} overlaps {previous_name!r} in the data area")
        if entry.begin > previous_end:
            where = f"after {previous_name!r}" if previous_name else "at the start of the data area"
            raise CheckpointError(
                f"{label}: tensor {name!r} starts at byte {entry.begin}, leaving a gap {where} (which ends at"
                f" {previous_end})"
            )
        previous_end, previous_name = entry.end, name
    if previous_end != data_len:
        raise CheckpointError(
            f"{label}: the tensors cover {previous_end} of the data area's {data_len} bytes (the rest is not any"
            " tensor's)"
        )
    return SafetensorsHeader(dict(ordered), metadata, 8 + n)


def _entry(label: str, name: str, spec, data_len: int) -> HeaderEntry:
    where = f"{label}: tensor {name!r}"
    if not isinstance(spec, dict):
        raise CheckpointError(f"{where}: header entry is not an object")
    code = spec.get("dtype")
    dtype = dtypes.by_code(code) if isinstance(code, str) else None
    if dtype is None:
        raise CheckpointError(f"{where}: unknown dtype {code!r}")
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise CheckpointError(f"{where}: shape must be a list of non-negative integers, got {shape!r}"[:500])
    if len(shape) > MAX_DIMS:
        raise CheckpointError(f"{where}: shape has {len(shape)} dimensions (at most {MAX_DIMS})")
    offsets = spec.get("data_offsets")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise CheckpointError(f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end, got {offsets!r}")
    begin, end = offsets
    if end > data_len:
        raise CheckpointError(
            f"{where}: data runs past the end of the file (ends at {end}, data area is {data_len} bytes)"
        )
    expected = 0 if 0 in shape else dtype.itemsize
    for d in shape if expected else ():
        expected *= d
        if expected > 2**64:  # more than any file holds: no need to know how much more
            raise CheckpointError(f"{where}: shape {shape} of {code} needs more than 2**64 bytes"[:500])
    if end - begin != expected:
        raise CheckpointError(f"{where}: {end - begin} data bytes, but shape {shape} of {code} needs {expected}")
    return HeaderEntry(dtype, tuple(shape), begin, end)
