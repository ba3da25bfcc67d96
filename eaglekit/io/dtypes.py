"""The dtypes eaglekit can read and write, as data: safetensors header code <-> torch dtype.

One table, used by the header parser, the writer, inspect's output and ``--dtype`` parsing.
"""

from __future__ import annotations

import torch

from ..errors import UsageError

# safetensors header code -> torch dtype. Only dtypes that both torch and the safetensors format know.
_CODES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
    "F8_E8M0": torch.float8_e8m0fnu,
    "C64": torch.complex64,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U64": torch.uint64,
    "U32": torch.uint32,
    "U16": torch.uint16,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_BY_DTYPE = {dtype: code for code, dtype in _CODES.items()}

# Names a user may pass to --dtype (floating targets only: casting never touches integer tensors).
CAST_TARGETS: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def from_code(code: str) -> torch.dtype | None:
    """The torch dtype of a safetensors dtype code, or None when eaglekit does not know it."""
    return _CODES.get(code)


def to_code(dtype: torch.dtype) -> str:
    try:
        return _BY_DTYPE[dtype]
    except KeyError:
        raise UsageError(f"dtype {dtype} cannot be stored in safetensors") from None


def name(dtype: torch.dtype) -> str:
    """Short human name: 'bfloat16', 'float8_e4m3fn', 'int64', 'bool'."""
    return str(dtype).removeprefix("torch.")


def itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def parse_cast(value: str) -> torch.dtype | None:
    """Parse a ``--dtype`` value; ``auto`` (keep each tensor's own dtype) is None."""
    if value == "auto":
        return None
    try:
        return CAST_TARGETS[value]
    except KeyError:
        choices = ", ".join(["auto", *CAST_TARGETS])
        raise UsageError(f"--dtype {value!r} is not one of {choices}") from None
