"""Streaming safetensors writer: one tensor in memory at a time, shards up to a size limit.

``safetensors.torch.save_file`` needs every tensor of a file in memory at once, which for a 5 GB shard is
5 GB of RAM. Since a conversion knows every output tensor's name, dtype and shape before reading any of
them, the header can be written first and the data streamed after it. The format is the library's own
(8-byte header length, JSON header padded with spaces to 8 bytes, data sorted by descending alignment so
every tensor is aligned); outputs are read back with ``safetensors.safe_open`` in the tests.

Tensors whose bytes pass through unchanged are copied file-to-file with ``copy_file_range`` (in-kernel,
no user-space buffer), which is what keeps a conversion near ``cp`` speed. Files are not fsynced here: write into an
``atomic.atomic_directory``, whose single fsync pass at the end makes the whole output durable before it is renamed
into place.
"""

from __future__ import annotations

import json
import os
import queue
import re
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ..errors import CheckpointError, UsageError
from . import dtypes, jsonfile
from .reader import SAFETENSORS_INDEX, SAFETENSORS_SINGLE, ByteRange

if TYPE_CHECKING:  # pragma: no cover
    import torch  # imported where a tensor is written (_write_tensor): copies and headers need none

DEFAULT_MAX_SHARD_BYTES = 5 * 10**9
_COPY_CHUNK = 64 * 2**20

Payload = Union["torch.Tensor", ByteRange]


@dataclass(frozen=True)
class TensorPlan:
    """One output tensor: its name, dtype and shape, how to produce it when its turn comes, and, for one copied
    unchanged, where its bytes lie (``source``: the header is padded so that the most such bytes keep their offset
    within a page, ``_aligning_pad``)."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    produce: Callable[[], Payload]
    source: ByteRange | None = None

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * dtypes.itemsize(self.dtype)


def parse_size(text: str | int) -> int:
    """'5GB', '500MB', '2GiB', '1000' (bytes) -> bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*", str(text), flags=re.IGNORECASE)
    if not match:
        raise UsageError(f"size {text!r} is not like 5GB, 500MB or 2GiB")
    number, unit, binary = match.groups()
    base = 1024 if binary else 1000
    power = " KMGT".index(unit.upper() or " ")
    size = int(float(number) * base**power)
    if size <= 0:
        raise UsageError(f"size {text!r} must be positive")
    return size


def plan_shards(plans: list[TensorPlan], max_shard_bytes: int) -> list[list[TensorPlan]]:
    """Group tensors, in order, into shards of at most ``max_shard_bytes`` (a bigger tensor gets its own)."""
    shards: list[list[TensorPlan]] = [[]]
    size = 0
    for plan in plans:
        if shards[-1] and size + plan.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(plan)
        size += plan.nbytes
    return shards if shards[0] else []


def shard_names(count: int) -> list[str]:
    if count <= 1:
        return [SAFETENSORS_SINGLE]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def write_checkpoint_tensors(
    directory: Path,
    plans: list[TensorPlan],
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    metadata: dict[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[str]:
    """Write ``plans`` into ``directory`` as one file or shards plus an index; return the file names."""
    names = [p.name for p in plans]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise CheckpointError(f"two output tensors would both be named {dup!r}")
    metadata = {"format": "pt", **(metadata or {})}
    shards = plan_shards(plans, max_shard_bytes) or [[]]
    files = shard_names(len(shards))
    for file, shard in zip(files, shards):
        write_safetensors(directory / file, shard, metadata, progress)
    if len(files) > 1:
        weight_map = {p.name: file for file, shard in zip(files, shards) for p in shard}
        index = {
            "metadata": {"total_size": sum(p.nbytes for p in plans)},
            "weight_map": dict(sorted(weight_map.items())),
        }
        (directory / SAFETENSORS_INDEX).write_text(jsonfile.dumps(index))
        files.append(SAFETENSORS_INDEX)
    return files


def _header(plans: Iterable[TensorPlan], metadata: dict[str, str]) -> tuple[bytes, list[TensorPlan]]:
    # Largest item size first: with an 8-byte-aligned data start, every tensor is then aligned. Among those of one item
    # size, the tensors copied unchanged in their source's order, so that neighbours there stay neighbours here and are
    # copied as one range (``_runs``)
    ordered = sorted(
        plans,
        key=lambda p: (
            -dtypes.itemsize(p.dtype),
            *((0, str(p.source.path), p.source.offset) if p.source else (1, "", 0)),
        ),
    )
    header: dict = {"__metadata__": metadata}
    offset = 0
    for plan in ordered:
        header[plan.name] = {
            "dtype": dtypes.to_code(plan.dtype),
            "shape": list(plan.shape),
            "data_offsets": [offset, offset + plan.nbytes],
        }
        offset += plan.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    raw += b" " * _aligning_pad(8 + len(raw), ordered)
    return struct.pack("<Q", len(raw)) + raw, ordered


# The page size copies are aligned to (``_aligning_pad``): x86's and most Arm kernels' (a larger page is a multiple).
PAGE = 4096


def _aligning_pad(data_start: int, ordered: list[TensorPlan]) -> int:
    """How many spaces more the header takes (a multiple of 8 below ``PAGE``) so that the most bytes copied unchanged
    sit at the same offset within a page as in their source file. The kernel copies a range whose source and
    destination are aligned alike page by page; misaligned, every page is split across two: the 1.9 GB drafter's copy
    took 1.6-2.7 s that way against 1.0-1.6 s aligned (2026-11-29, copy_file_range with the page cache warm)."""
    votes: dict[int, int] = {}
    offset = 0
    for plan in ordered:
        if plan.source is not None:
            pad = (plan.source.offset - (data_start + offset)) % PAGE
            if pad % 8 == 0:
                votes[pad] = votes.get(pad, 0) + plan.nbytes
        offset += plan.nbytes
    return max(votes, key=lambda pad: (votes[pad], -pad)) if votes else 0


def write_safetensors(
    path: Path,
    plans: list[TensorPlan],
    metadata: dict[str, str],
    progress: Callable[[int], None] | None = None,
) -> None:
    header, ordered = _header(plans, metadata)
    with open(path, "wb", buffering=0) as out:
        out.write(header)
        writeback = _Writeback(out.fileno())
        try:
            _write_plans(ordered, out, writeback, progress)
        finally:
            error = writeback.close()
    if error is not None:
        raise CheckpointError(f"{path}: the kernel refused to start writing it to disk ({error.strerror or error})")


def _write_plans(ordered: list[TensorPlan], out, writeback: _Writeback, progress) -> None:
    for run in _runs(ordered):
        if len(run) > 1 or run[0].source is not None:  # copied unchanged: one range of the source for the whole run
            first, last = run[0].source, run[-1].source
            _copy_range(ByteRange(first.path, first.offset, last.offset + last.length - first.offset), out, writeback)
        else:
            plan = run[0]
            payload = plan.produce()
            if isinstance(payload, ByteRange):
                if payload.length != plan.nbytes:
                    raise CheckpointError(f"{plan.name}: source holds {payload.length} bytes, expected {plan.nbytes}")
                _copy_range(payload, out, writeback)
            else:
                _write_tensor(plan, payload, out)
        writeback.written(out.tell())
        if progress:
            progress(sum(plan.nbytes for plan in run))


def _runs(ordered: list[TensorPlan]) -> list[list[TensorPlan]]:
    """``ordered`` in runs: tensors copied unchanged whose bytes lie one after another in one source file, each of the
    rest alone. One copy per run: on the 1.9 GB drafter, copying tensor by tensor took 0.77-0.94 s of kernel time where
    one range took 0.57-0.75 s (2026-11-29, copy_file_range, the page cache warm)."""
    runs: list[list[TensorPlan]] = []
    for plan in ordered:
        previous = runs[-1][-1].source if runs else None
        source = plan.source
        if (
            source is not None
            and previous is not None
            and source.length == plan.nbytes
            and previous.path == source.path
            and previous.offset + previous.length == source.offset
        ):
            runs[-1].append(plan)
        else:
            runs.append([plan])
    return runs

    # No fsync here: the one caller writes into an atomic_directory, which fsyncs every file in one pass before the
    # rename that makes the output visible (one wait for the disk, as `cp -r` + `sync`, instead of one after each shard
    # and a second fsync of the same file). _Writeback has the disk start on each piece as soon as it is written, so
    # that wait finds little left to write.


class _Writeback:
    """Asks the kernel to start writing each written piece (a ``_COPY_CHUNK`` copied, a tensor written) to disk now,
    without waiting for it (``posix_fadvise(DONTNEED)``: dirty pages are queued for writeback, clean ones leave the
    page cache). The copy then overlaps the disk's work instead of leaving all of it to the final fsync: on this
    project's CI machine a 1.9 GB convert went from 0.56 s copy + 0.82 s fsync to ~0.85 s in all. Durability
    still comes from that fsync alone; this only changes when the writing starts.

    The call itself takes the time to hand the piece's pages to the disk (25-35 ms per 64 MiB piece, 0.34 s of the
    1.9 GB convert's 1.5 s, 2026-11-29), so it runs in a thread of its own while the copy of the next piece goes on
    (``copy_file_range`` and ``posix_fadvise`` both release the GIL): the same copy with the advice made in turn took
    1.16 s (median of 5, caches dropped), in a thread 1.10 s, against 1.26 s for ``cp`` + ``sync``. The pieces are
    advised in the order written; ``close`` waits for the last and returns what any call raised."""

    def __init__(self, fd: int):
        self.fd, self.start = fd, 0
        self._pieces: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None

    def written(self, end: int, *, at_least: int = 0) -> None:
        if end - self.start < max(at_least, 1):
            return
        if hasattr(os, "posix_fadvise"):  # not on macOS or Windows: there the final fsync does it all
            if self._thread is None:
                self._pieces = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._advise, name="eaglekit-writeback", daemon=True)
                self._thread.start()
            self._pieces.put((self.start, end - self.start))
        self.start = end

    def _advise(self) -> None:
        while (piece := self._pieces.get()) is not None:
            if self._error is None:
                try:
                    os.posix_fadvise(self.fd, *piece, os.POSIX_FADV_DONTNEED)
                except OSError as exc:
                    self._error = exc

    def close(self) -> OSError | None:
        """Wait for every piece's advice (before the file is closed); the first error one gave, if any."""
        if self._thread is not None:
            self._pieces.put(None)
            self._thread.join()
            self._thread = None
        return self._error


def _write_tensor(plan: TensorPlan, tensor: torch.Tensor, out) -> None:
    import torch

    if tensor.dtype != plan.dtype or tuple(tensor.shape) != plan.shape:
        raise CheckpointError(
            f"{plan.name}: produced {dtypes.name(tensor.dtype)}{list(tensor.shape)}, "
            f"planned {dtypes.name(plan.dtype)}{list(plan.shape)}"
        )
    if plan.nbytes == 0:
        return
    flat = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    _write_all(out, memoryview(flat.numpy()))


def _write_all(out, view: memoryview | bytes) -> None:
    """An unbuffered write may take only part of what it is given (and one write(2) at most ~2 GiB)."""
    view = memoryview(view)
    written = 0
    while written < len(view):
        written += out.write(view[written:])


def _copy_range(src: ByteRange, out, writeback: _Writeback | None = None) -> None:
    remaining, offset = src.length, src.offset
    with open(src.path, "rb", buffering=0) as f:
        try:
            while remaining:
                n = os.copy_file_range(f.fileno(), out.fileno(), min(remaining, _COPY_CHUNK), offset)
                if n == 0:
                    raise CheckpointError(f"{src.path}: ended {remaining} bytes early")
                offset += n
                remaining -= n
                if writeback is not None:
                    writeback.written(out.tell(), at_least=_COPY_CHUNK)
            return
        except (AttributeError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (18, 22, 38, 95):  # EXDEV EINVAL ENOSYS EOPNOTSUPP
                raise
        f.seek(offset)
        while remaining:
            chunk = f.read(min(_COPY_CHUNK, remaining))
            if not chunk:
                raise CheckpointError(f"{src.path}: ended {remaining} bytes early")
            _write_all(out, chunk)
            remaining -= len(chunk)


# What a conversion writes (and what verify --report may add beside it): the only names --force replaces.
_OUTPUT_FILE = re.compile(
    r"config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json|eaglekit-verify\.json"
)


# The key in each written safetensors header's __metadata__ that says eaglekit wrote those weights (its version). A
# model trained from a conversion keeps the config's eaglekit block but not this (save_pretrained writes its own
# header): --force does not take the trained weights for an earlier output of ours.
WEIGHTS_MARK = "eaglekit"


def foreign_entries(directory: Path) -> list[str]:
    """What stops ``directory`` being an earlier eaglekit conversion that ``--force`` may replace.

    It is one when its config.json carries the ``eaglekit`` block every writer adds, every weights file's header
    carries ``WEIGHTS_MARK``, and it holds nothing but the files a conversion writes. Every other entry is named, so
    the refusal says what would be lost.
    """
    foreign = sorted(p.name + "/" for p in directory.iterdir() if p.is_dir() or p.is_symlink())
    foreign += sorted(
        p.name for p in directory.iterdir() if p.is_file() and not p.is_symlink() and not _OUTPUT_FILE.fullmatch(p.name)
    )
    if foreign:
        return foreign
    try:
        config = jsonfile.load_object(directory / "config.json")
    except CheckpointError:
        config = {}
    block = config.get("eaglekit")
    if not (isinstance(block, dict) and "dialect" in block):
        return sorted(p.name for p in directory.iterdir())  # safetensors and a config, but not eaglekit's
    from .safetensors_header import read_header

    unmarked = []
    for weights in sorted(directory.glob("*.safetensors")):
        try:
            marked = WEIGHTS_MARK in read_header(weights).metadata
        except CheckpointError:
            marked = False
        if not marked:  # another program's, re-saved since (a fine-tune), or an eaglekit's from before the mark
            unmarked.append(f"{weights.name}: weights without eaglekit's mark")
    return unmarked
