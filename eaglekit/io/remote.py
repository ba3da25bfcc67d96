"""A drafter on the Hub, looked at without downloading its weights.

``fetch_headers`` reads ``config.json``, the safetensors index if any, and each shard's 8-byte header length and
JSON header, by HTTP range requests through huggingface_hub (``eaglekit.hub.read_bytes``), into a local *stub*:
the same files, each shard a sparse file holding its real header bytes and a hole of the remote size after it.
The ordinary :class:`~eaglekit.io.reader.Checkpoint` then lists it with exactly the rules it applies to local
files (``safetensors_header``: lengths, offsets, dtypes, overlaps, "header length exceeds the file"), and refuses
to read tensor values from it (``Located.remote``): checks that need values say they were skipped, or the user
passes ``--download``. Nothing here imports torch.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from ..errors import CheckpointError
from ..hub import RemoteRepo, read_bytes
from .reader import (
    BIN_INDEX,
    BIN_SINGLE,
    CONFIG,
    SAFETENSORS_INDEX,
    SAFETENSORS_SINGLE,
)  # the reader's names (no torch at import)
from .safetensors_header import MAX_HEADER_BYTES

_SAFE_NAME = re.compile(r"[\w.-]+(/[\w.-]+)*")


def _safe(name: object) -> bool:
    return isinstance(name, str) and bool(_SAFE_NAME.fullmatch(name)) and ".." not in name.split("/")


def fetch_headers(remote: RemoteRepo, dest: Path, label: str) -> list[str]:
    """Write the stub of ``remote`` into the empty directory ``dest``; returns the shards stubbed.

    A repo whose weights are ``.bin`` only raises: a pickle has no header to range-read."""
    files = remote.files
    if CONFIG in files:
        _write(dest, CONFIG, read_bytes(remote, CONFIG))
    shards: list[str] = []
    if SAFETENSORS_INDEX in files:
        raw = read_bytes(remote, SAFETENSORS_INDEX)
        _write(dest, SAFETENSORS_INDEX, raw)
        try:  # the reader re-parses it with its own rules; here only: which shards to fetch
            weight_map = json.loads(raw).get("weight_map")
        except (ValueError, AttributeError, UnicodeDecodeError):
            weight_map = None
        if isinstance(weight_map, dict):
            shards = [f for f in dict.fromkeys(weight_map.values()) if _safe(f) and f in files]
    elif SAFETENSORS_SINGLE in files:
        shards = [SAFETENSORS_SINGLE]
    elif BIN_INDEX in files or BIN_SINGLE in files:
        name = BIN_INDEX if BIN_INDEX in files else BIN_SINGLE
        raise CheckpointError(
            f"{label}: its weights are .bin only ({name}), which have no header to read remotely; "
            "pass `download` to download them"
        )
    else:
        candidates = sorted(
            f for f in files if f.endswith(".safetensors") and "/" not in f and not f.startswith("adapter_")
        )
        if len(candidates) == 1:
            shards = candidates
        else:  # none, or several without an index: empty stand-ins let the reader say which
            for name in candidates:
                _write(dest, name, b"", size=0)
    for shard in shards:
        _stub_shard(remote, shard, dest)
    return shards


def _stub_shard(remote: RemoteRepo, shard: str, dest: Path) -> None:
    size = remote.files.get(shard)
    if size is None:
        raise CheckpointError(f"{remote.repo_id}/{shard}: the Hub did not say its size; pass `download`")
    if size < 8:  # the reader says empty / truncated
        _write(dest, shard, b"", size=size)
        return
    prefix = read_bytes(remote, shard, 0, 8)
    (n,) = struct.unpack("<Q", prefix)
    if n > MAX_HEADER_BYTES or 8 + n > size:  # not fetched: the reader names the problem from the stub
        _write(dest, shard, prefix, size=size)
        return
    _write(dest, shard, prefix + read_bytes(remote, shard, 8, n), size=size)


def _write(dest: Path, name: str, data: bytes, *, size: int | None = None) -> None:
    path = dest / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        if size is not None:
            f.truncate(size)  # a hole: no disk blocks, whatever the remote size
