"""Strict, bounded JSON reading for files that come from strangers (config.json, index files, headers).

Python's json module accepts NaN/Infinity, silently keeps the last of duplicate keys, and recurses without
limit on nested input; each of those has caused real mis-reads. Here they are clear errors.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..errors import CheckpointError

MAX_JSON_BYTES = 64 * 2**20  # a drafter's config or index is a few KB; 64 MB is far past any real one
MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _Reject(ValueError):
    pass


def _no_constants(token: str):
    raise _Reject(f"{token} is not valid JSON")


def _no_duplicates(pairs):
    out = dict(pairs)  # in C; a key given twice leaves fewer entries than pairs
    if len(out) != len(pairs):
        seen: set = set()
        for key, _ in pairs:  # the first key given again, by name
            if key in seen:
                raise _Reject(f"duplicate key {key!r}")
            seen.add(key)
    return out


def _depth(value: Any, limit: int) -> int:
    if not isinstance(value, (dict, list)):
        return 1
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > limit:
            return depth
        values = item.values() if isinstance(item, dict) else item  # only containers are stacked
        if depth >= limit and any(not isinstance(v, (dict, list)) for v in values):
            return depth + 1  # a value one level below counts as a level, as it always did
        stack.extend((v, depth + 1) for v in values if isinstance(v, (dict, list)))
    return deepest


def loads(text: str | bytes, what: str) -> Any:
    """Parse JSON strictly; ``what`` names the source in the error (e.g. 'ckpt/config.json')."""
    given_str = isinstance(text, str)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointError(f"{what}: not valid UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates)
    except _Reject as exc:
        raise CheckpointError(f"{what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{what}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise CheckpointError(f"{what}: JSON nested too deeply") from None
    except ValueError as exc:  # an integer past Python's digit limit for str -> int
        raise CheckpointError(f"{what}: not valid JSON here ({exc})"[:300]) from None
    if _depth(value, MAX_DEPTH) > MAX_DEPTH:
        raise CheckpointError(f"{what}: JSON nested deeper than {MAX_DEPTH} levels")
    # "\ud800" parses to half a character, which no text can hold (printing it failed; safetensors refuses it); only a
    # text with such an escape can hold one, or a str given with one in it (text decoded from UTF-8 holds none)
    if _SURROGATE_ESCAPE.search(text) or (given_str and not _encodes(text)):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CheckpointError(
                f"{what}: a string holds a lone surrogate escape (\\u{ord(exc.object[exc.start]):04x}), which is not"
                " text"
            ) from None
    return value


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def regular_file_size(path: Path, label: str, expected: str) -> int:
    """``path``'s size, refusing anything but a regular file (``expected`` names what it should be): a directory, and a
    FIFO or a device, where opening would wait for a writer that never comes. OSError propagates to the caller."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(
            f"{label}: {'is a directory' if stat.S_ISDIR(info.st_mode) else 'not a regular file'}, expected {expected}"
        )
    return info.st_size


def load(path: Path, what: str | None = None) -> Any:
    """Read and parse a JSON file, refusing files larger than ``MAX_JSON_BYTES``."""
    what = what or str(path)
    try:
        size = regular_file_size(path, what, "a JSON file")
        if size > MAX_JSON_BYTES:
            raise CheckpointError(f"{what}: {size} bytes is too large for a JSON file (limit {MAX_JSON_BYTES})")
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise CheckpointError(f"{what}: file not found") from None
    except OSError as exc:
        raise CheckpointError(f"{what}: cannot read ({exc.strerror})") from None
    return loads(data, what)


def load_object(path: Path, what: str | None = None) -> dict:
    value = load(path, what)
    if not isinstance(value, dict):
        raise CheckpointError(f"{what or path}: expected a JSON object, got {type(value).__name__}")
    return value


def dumps(value: Any) -> str:
    """The one JSON style eaglekit writes: indented, key order kept, trailing newline."""
    return json.dumps(value, indent=2, allow_nan=False) + "\n"
