"""sha256 of local files, remembered across runs, so that a file of several GB is read to hash it once.

``push --dry-run`` lists every file's sha256, and ``push`` gives the same digests to the Hub client (which then does
not hash again); without a memory, a dry run followed by the push reads every weight file twice, and each new push
of an unchanged drafter reads it again. Each digest is kept in eaglekit's cache
(``$XDG_CACHE_HOME/eaglekit/sha256/``), one small JSON entry per file path, and used only while the file is the
same file with the same content as far as ``stat`` can tell: device, inode, size, mtime and ctime all as they were
when it was hashed (what git's index trusts). A write changes mtime and ctime; replacing the file (an atomic
writer's rename) changes the inode; ``touch -d`` changes ctime. What stat cannot see, this cannot either (as for git):
a second write through a shared memory map into pages not yet written back leaves mtime as it was.

A timestamp has a granularity (a few ms on ext4, 2 s on FAT), so a file written twice within one tick keeps its
times. A digest is therefore remembered only for a file whose last change is more than ``SETTLED_SECONDS`` older than
the moment its hashing began, and only if its ``stat`` did not change while it was read: a later write then lands
in a later tick and makes the entry stale. Files under ``MIN_BYTES`` are hashed every time (faster than reading an
entry). Past ``MAX_ENTRIES``, writing an entry first removes the entries whose file is gone or has changed, then the
oldest. A cache that cannot be read or written (read-only home, a corrupt entry) is ignored, never an error; deleting
it is always safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path

from .cache_home import cache_home

MIN_BYTES = 1 << 20
SETTLED_SECONDS = 2.0  # FAT's mtime granularity, the coarsest in common use
MAX_ENTRIES = 512
_CHUNK = 1 << 20


def cache_directory() -> Path:
    return cache_home() / "sha256"


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _entry_path(path: Path) -> Path:
    return cache_directory() / (hashlib.sha256(os.fsencode(path)).hexdigest()[:32] + ".json")


def _recorded(entry: Path) -> dict | None:
    try:
        record = json.loads(entry.read_bytes())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _remembered(entry: Path, path: Path, identity: list[int]) -> str | None:
    record = _recorded(entry)
    if record is None or record.get("path") != str(path) or record.get("identity") != identity:
        return None
    digest = record.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
        return None
    return digest


def _still_true(entry: Path) -> bool:
    record = _recorded(entry)
    try:
        return record is not None and record.get("identity") == _identity(os.stat(record["path"]))
    except (OSError, KeyError, TypeError, ValueError):
        return False


def _written_ns(entry: Path) -> int:
    try:
        return entry.stat().st_mtime_ns
    except OSError:  # removed by another process meanwhile
        return 0


def _prune(directory: Path) -> None:
    """Down to ``MAX_ENTRIES // 2``: the entries no file can use go first, then the least recently written; and the
    temporary files of writers killed before their rename."""
    stale_before = time.time_ns() - 60 * 10**9
    for tmp in directory.glob(".*.tmp"):
        if _written_ns(tmp) < stale_before:
            tmp.unlink(missing_ok=True)
    entries = sorted(directory.glob("*.json"), key=_written_ns)
    if len(entries) <= MAX_ENTRIES:
        return
    live = [e for e in entries if _still_true(e)]
    stale = set(entries) - set(live)
    for entry in (*stale, *live[: max(0, len(live) - MAX_ENTRIES // 2)]):
        entry.unlink(missing_ok=True)


def _remember(entry: Path, path: Path, identity: list[int], digest: str) -> None:
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        _prune(entry.parent)
        tmp.write_text(json.dumps({"path": str(path), "identity": identity, "sha256": digest}))
        os.replace(tmp, entry)  # a reader sees the old entry or the new one, never half of one
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _hash(f) -> str:
    if hasattr(hashlib, "file_digest"):  # Python >= 3.11: into one reused buffer, half the time of read() + update()
        return hashlib.file_digest(f, "sha256").hexdigest()
    hasher = hashlib.sha256()
    while block := f.read(_CHUNK):
        hasher.update(block)
    return hasher.hexdigest()


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file at ``path`` (streamed), taken from the cache while the entry is still true.

    The file is opened before anything else and its identity read from the open handle: opening makes NFS revalidate
    what it caches of a file's attributes (close-to-open), where a bare ``stat`` may answer from a cache up to a minute
    old after another machine rewrote the file."""
    path = Path(os.path.realpath(path))
    with open(path, "rb") as f:
        before = os.fstat(f.fileno())
        cacheable = before.st_size >= MIN_BYTES
        if cacheable:
            entry = _entry_path(path)
            digest = _remembered(entry, path, _identity(before))
            if digest is not None:
                return digest
        started = time.time()
        digest = _hash(f)
        after = os.fstat(f.fileno())
    if cacheable:
        settled = max(after.st_mtime_ns, after.st_ctime_ns) / 1e9 < started - SETTLED_SECONDS
        if settled and _identity(after) == _identity(before):
            _remember(entry, path, _identity(after), digest)
    return digest
