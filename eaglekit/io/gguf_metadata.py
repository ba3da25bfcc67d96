"""Reading a GGUF file's metadata (its key/value section) and, where asked, its tensor index and a small tensor, without
numpy or gguf.

What ``read_target_config`` needs of a GGUF target is a handful of numbers (layers, widths, vocabulary, rope base).
gguf's ``GGUFReader``, which transformers reads a GGUF config through, builds every field of the file first, each of
the tokenizer's ~49k tokens and ~48k merges included: 3.2 s for SmolLM2-135M on 2 cores, 4.6 s through transformers'
``AutoConfig`` (whose import adds torch's). Here an array longer than ``KEEP_ARRAY`` is stepped over and kept as its
element type and length alone (``SkippedArray``); the whole metadata section of that file reads in milliseconds.

The layout (GGUF versions 2 and 3, the ones gguf's reader accepts; the byte order is the file's own, told by its
version field as gguf's reader tells it): the magic ``GGUF``, a u32 version, a u64 tensor count, a u64 key count,
then per key a string key, a u32 value type and the value. A string is a u64 byte length and UTF-8 bytes; an array
is a u32 element type, a u64 element count and the elements (arrays may nest). The tensor index follows: per tensor a
string name, a u32 dimension count, that many u64 dimensions (innermost first), a u32 ggml type and a u64 offset into
the data section, which starts at the next multiple of ``general.alignment`` (32 where the file states none).
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
KEEP_ARRAY = 1024  # arrays up to this many elements are read; longer ones are stepped over
MAX_STRING = (
    64 * 2**20
)  # one string's bytes at most (a chat template is ~100 KB): a damaged length is refused, not copied
MAX_NESTING = 8  # arrays of arrays nest no deeper than this: a deeper one is refused, not recursed into
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS: a tensor of more dimensions is refused
DEFAULT_ALIGNMENT = 32
ALIGNMENT_KEY, ALIGNMENT_TYPE = "general.alignment", 4  # uint32, the one type gguf's reader and llama.cpp take it as
STRING, ARRAY = 8, 9
# GGUF's value types with a fixed width: struct code per type number (bool is one byte)
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
TYPE_NAMES = {
    0: "uint8",
    1: "int8",
    2: "uint16",
    3: "int16",
    4: "uint32",
    5: "int32",
    6: "float32",
    7: "bool",
    8: "string",
    9: "array",
    10: "uint64",
    11: "int64",
    12: "float64",
}


@dataclass(frozen=True)
class SkippedArray:
    """An array value longer than ``KEEP_ARRAY``: its element type (a ``TYPE_NAMES`` name) and its length."""

    element_type: str
    length: int


# ggml tensor types read as numbers here (``read_vector``): struct code per type number
VECTOR_TYPES = {0: "f", 1: "e"}  # F32, F16


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]  # as the file states it: innermost dimension first
    ggml_type: int
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class GGUFMetadata:
    version: int
    tensor_count: int
    values: dict[str, object]  # key -> int, float, bool, str, list (an array) or SkippedArray
    tensors: dict[str, TensorInfo] | None = (
        None  # the tensor index, where it was read (``read_metadata(tensors=True)``)
    )
    data_offset: int | None = None  # where the data section starts, with the index
    byte_order: str = "<"
    # per key, the bytes of its value type and value (``read_metadata(spans=True)``): what a writer copies unchanged
    spans: dict[str, tuple[int, int]] | None = None

    def architecture(self) -> str | None:
        value = self.values.get("general.architecture")
        return value if isinstance(value, str) else None


class _Cursor:
    """Reads GGUF values from ``buffer`` in one byte order, each read checked against the buffer's end."""

    def __init__(self, buffer, order: str, label: str):
        self.buffer, self.order, self.label, self.offset = buffer, order, label, 0
        self.size = len(buffer)
        self.key = None  # what is being read, for errors: "key 'name'" or "tensor 'name'"

    def fail(self, what: str) -> CheckpointError:
        where = f" ({self.key})" if self.key is not None else ""
        return CheckpointError(f"{self.label}: GGUF metadata {what} at byte {self.offset}{where}")

    def take(self, code: str, count: int = 1):
        width = struct.calcsize(code) * count
        if self.offset + width > self.size:
            raise self.fail(f"ends early: {width} more bytes expected, the file has {self.size - self.offset}")
        values = struct.unpack_from(f"{self.order}{count}{code}", self.buffer, self.offset)
        self.offset += width
        return values

    def string(self) -> str:
        (length,) = self.take("Q")
        if self.offset + length > self.size:
            raise self.fail(f"ends early: a string of {length} bytes, the file has {self.size - self.offset}")
        if length > MAX_STRING:
            raise self.fail(f"holds a string of {length} bytes, more than the {MAX_STRING} eaglekit reads")
        try:
            text = str(self.buffer[self.offset : self.offset + length], "utf-8")
        except UnicodeDecodeError:
            raise self.fail("holds a string that is not UTF-8") from None
        self.offset += length
        return text

    def skip_strings(self, count: int) -> None:
        unpack, order, buffer, size, offset = struct.unpack_from, f"{self.order}Q", self.buffer, self.size, self.offset
        for _ in range(count):
            if offset + 8 > size:
                self.offset = offset
                raise self.fail("ends early inside an array of strings")
            offset += 8 + unpack(order, buffer, offset)[0]
        if offset > size:
            raise self.fail("ends early inside an array of strings")
        self.offset = offset

    def value(self, kind: int, depth: int = 0):
        if kind in SCALARS:
            return self.take(SCALARS[kind])[0]
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            if depth == MAX_NESTING:
                raise self.fail(f"nests arrays more than {MAX_NESTING} deep")
            element, length = self.take("I")[0], self.take("Q")[0]
            if element not in SCALARS and element not in (STRING, ARRAY):
                raise self.fail(f"has an array of value type {element}, not one of GGUF's 0..12")
            if length <= KEEP_ARRAY:
                if element in SCALARS:
                    return list(self.take(SCALARS[element], length))
                return [self.value(element, depth + 1) for _ in range(length)]
            if element in SCALARS:
                width = struct.calcsize(SCALARS[element]) * length
                if self.offset + width > self.size:
                    raise self.fail(
                        f"ends early: an array of {length} {TYPE_NAMES[element]} values, the file has"
                        f" {self.size - self.offset} bytes"
                    )
                self.offset += width
            elif element == STRING:
                self.skip_strings(length)
            else:
                for _ in range(length):
                    self.value(ARRAY, depth + 1)
            return SkippedArray(TYPE_NAMES[element], length)
        raise self.fail(f"has value type {kind}, not one of GGUF's 0..12")


def read_metadata(path: Path, label: str | None = None, *, tensors: bool = False, spans: bool = False) -> GGUFMetadata:
    """The key/values of the GGUF file ``path`` (``label`` names it in errors), with its tensor index where
    ``tensors`` and each value's byte span where ``spans``. Raises CheckpointError, naming the file, the byte and the
    key or tensor, for anything that is not a GGUF v2/v3 metadata section (and tensor index)."""
    label = label or str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise CheckpointError(f"{label}: not a GGUF file ({size} bytes, shorter than GGUF's 24-byte header)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                with memoryview(mapped) as view:
                    return _parse(view, label, tensors, spans)
    except OSError as exc:
        raise CheckpointError(f"{label}: cannot read ({exc.strerror or exc})") from None


def _parse(buffer, label: str, tensors: bool, spans: bool = False) -> GGUFMetadata:
    if bytes(buffer[:4]) != MAGIC:
        raise CheckpointError(f"{label}: not a GGUF file (starts with {bytes(buffer[:4])!r}, not {MAGIC!r})")
    (version,) = struct.unpack_from("<I", buffer, 4)
    order = "<"
    if version & 0xFFFF == 0:  # written in the other byte order (gguf's reader tells it the same way)
        order, (version,) = ">", struct.unpack_from(">I", buffer, 4)
    if version not in VERSIONS:
        raise CheckpointError(
            f"{label}: GGUF version {version}; eaglekit reads versions {' and '.join(map(str, VERSIONS))}"
        )
    cursor = _Cursor(buffer, order, label)
    cursor.offset = 8
    tensor_count, key_count = cursor.take("Q", 2)
    if key_count > cursor.size // 13:  # each key/value takes at least 13 bytes (an empty key and a one-byte value)
        raise cursor.fail(f"claims {key_count} keys, more than {cursor.size} bytes can hold")
    values: dict[str, object] = {}
    where: dict[str, tuple[int, int]] = {}
    for _ in range(key_count):
        cursor.key = None
        key = cursor.string()
        cursor.key = f"key {key!r}"
        if key in values:  # gguf's reader refuses such a file too
            raise cursor.fail("states this key a second time")
        start = cursor.offset
        (kind,) = cursor.take("I")
        if (
            key == ALIGNMENT_KEY and kind != ALIGNMENT_TYPE
        ):  # gguf's reader refuses any other type; llama.cpp reads it as uint32
            raise cursor.fail(
                f"states {ALIGNMENT_KEY} as {TYPE_NAMES.get(kind, f'type {kind}')}, not {TYPE_NAMES[ALIGNMENT_TYPE]}"
            )
        values[key] = cursor.value(kind)
        where[key] = (start, cursor.offset)
    kept = where if spans else None
    if not tensors:
        return GGUFMetadata(version, tensor_count, values, byte_order=order, spans=kept)
    cursor.key = None
    index, data_offset = _tensor_index(cursor, tensor_count, values)
    return GGUFMetadata(version, tensor_count, values, index, data_offset, order, kept)


def _tensor_index(cursor: _Cursor, count: int, values: dict) -> tuple[dict[str, TensorInfo], int]:
    if count > (cursor.size - cursor.offset) // 24:  # each entry takes at least 24 bytes (an empty name, no dimension)
        raise cursor.fail(f"claims {count} tensors, more than the {cursor.size - cursor.offset} bytes left can index")
    index: dict[str, TensorInfo] = {}
    for _ in range(count):
        name = cursor.string()
        cursor.key = f"tensor {name!r}"
        if name in index:
            raise cursor.fail("names this tensor a second time")
        (dims,) = cursor.take("I")
        if dims > MAX_DIMS:
            raise cursor.fail(f"gives a tensor {dims} dimensions, more than ggml's {MAX_DIMS}")
        shape = cursor.take("Q", dims)
        ggml_type, offset = cursor.take("I")[0], cursor.take("Q")[0]
        index[name] = TensorInfo(tuple(shape), ggml_type, offset)
        cursor.key = None
    alignment = values.get(ALIGNMENT_KEY, DEFAULT_ALIGNMENT)  # a uint32 (read above)
    if alignment <= 0 or alignment & (alignment - 1):
        raise cursor.fail(f"states {ALIGNMENT_KEY} {alignment}, not a power of two")
    return index, -(-cursor.offset // alignment) * alignment


def check_tensors_within(path: Path, metadata: GGUFMetadata, label: str | None = None) -> None:
    """Refuse a GGUF file whose tensor index places a tensor's data past the file's end (a truncated download: loading
    it failed deep in a reshape), naming the first such tensor. The bytes each tensor type takes per block are the
    gguf package's (``GGML_QUANT_SIZES``); without that package, or for a type it does not know, nothing is checked
    here (the loader, which needs the same package, says so)."""
    label = label or str(path)
    try:
        from gguf.constants import GGML_QUANT_SIZES
    except ImportError:
        return
    if metadata.tensors is None or metadata.data_offset is None:
        return
    size = os.stat(path).st_size
    for name, info in metadata.tensors.items():
        sizes = GGML_QUANT_SIZES.get(info.ggml_type)
        if sizes is None:
            continue
        block, block_bytes = sizes
        end = metadata.data_offset + info.offset + math.prod(info.shape) // block * block_bytes
        if end > size:
            raise CheckpointError(
                f"{label}: GGUF tensor {name!r} runs past the end of the file (to byte {end}; the file has {size}): "
                "a truncated or damaged file"
            )


def read_vector(path: Path, metadata: GGUFMetadata, name: str, label: str | None = None) -> tuple[float, ...]:
    """The values of the one-dimensional F32 or F16 tensor ``name`` of the GGUF file ``path``, whose ``metadata`` was
    read with its tensor index. Raises CheckpointError, naming the file and the tensor, for another type or shape, or
    data past the file's end."""
    label = label or str(path)
    info = (metadata.tensors or {}).get(name)
    if info is None or metadata.data_offset is None:
        raise CheckpointError(f"{label}: no tensor {name!r} in the GGUF tensor index")
    if len(info.shape) != 1 or info.ggml_type not in VECTOR_TYPES:
        raise CheckpointError(
            f"{label}: GGUF tensor {name!r} has shape {list(info.shape)} and ggml type {info.ggml_type}; "
            "eaglekit reads it as a vector of F32 or F16 values (types 0 and 1)"
        )
    code = VECTOR_TYPES[info.ggml_type]
    start, width = metadata.data_offset + info.offset, struct.calcsize(code) * info.shape[0]
    try:
        with open(path, "rb") as f:
            if start + width > os.fstat(f.fileno()).st_size:  # a damaged offset or length: refused before any read
                raise CheckpointError(
                    f"{label}: GGUF tensor {name!r} ends past the file's end (bytes {start}..{start + width})"
                )
            f.seek(start)
            data = f.read(width)
    except OSError as exc:
        raise CheckpointError(f"{label}: cannot read ({exc.strerror or exc})") from None
    return struct.unpack(f"{metadata.byte_order}{info.shape[0]}{code}", data)
