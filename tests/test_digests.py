"""File digests remembered across runs (eaglekit.io.digests): a remembered digest is used only while the file is the
same file with the same content as far as stat can tell, and the cache never makes a digest wrong or a run fail."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from eaglekit.io import digests
from eaglekit.upload import UploadFile

MIB = 1 << 20


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "eaglekit" / "sha256"


def settled_file(path: Path, content: bytes, age: float = 60.0) -> Path:
    """A file whose last change (mtime; ctime follows the clock, so the age is given by waiting on it) is old enough."""
    path.write_bytes(content)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


@pytest.fixture
def hashing_counted(monkeypatch) -> list[Path]:
    calls: list[Path] = []
    real = digests._hash

    def counted(f):
        calls.append(Path(f.name))
        return real(f)

    monkeypatch.setattr(digests, "_hash", counted)
    return calls


@pytest.fixture
def settled_now(monkeypatch):
    """Hashing 'begins' SETTLED_SECONDS + 1 s from now: a file written a moment ago counts as settled (its ctime,
    which no utime can set back, is then old enough)."""
    real = time.time
    monkeypatch.setattr(digests.time, "time", lambda: real() + digests.SETTLED_SECONDS + 1)


def test_a_settled_file_is_hashed_once(tmp_path, cache_home, hashing_counted, settled_now):
    path = settled_file(tmp_path / "model.safetensors", os.urandom(2 * MIB))
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digests.file_sha256(path) == expected
    assert digests.file_sha256(path) == expected
    assert UploadFile("model.safetensors", local_path=path).sha256 == expected
    assert len(hashing_counted) == 1
    assert len(list(cache_home.glob("*.json"))) == 1


@pytest.mark.parametrize(
    "change", ["rewritten in place, times set back", "replaced by a rename", "same bytes appended and cut"]
)
def test_a_changed_file_is_hashed_again(tmp_path, hashing_counted, settled_now, change):
    path = settled_file(tmp_path / "model.safetensors", b"a" * (2 * MIB))
    digests.file_sha256(path)
    before = os.stat(path)
    time.sleep(
        0.05
    )  # past a coarse clock tick (what the real cache's SETTLED_SECONDS guard stands for; settled_now fakes it)
    if change == "rewritten in place, times set back":  # size and mtime as they were: ctime still moves
        with open(path, "r+b") as f:
            f.write(b"b")
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif change == "replaced by a rename":  # an atomic writer: a new inode
        settled_file(tmp_path / "new", b"b" + b"a" * (2 * MIB - 1))
        os.replace(tmp_path / "new", path)
    else:
        with open(path, "ab") as f:
            f.write(b"x")
        os.truncate(path, 2 * MIB)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert digests.file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(hashing_counted) == 2


def test_a_file_changed_within_the_last_seconds_is_not_remembered(tmp_path, cache_home, hashing_counted):
    path = tmp_path / "model.safetensors"
    path.write_bytes(os.urandom(2 * MIB))  # written now: a second write within the same clock tick would keep its times
    digests.file_sha256(path)
    digests.file_sha256(path)
    assert len(hashing_counted) == 2 and not cache_home.exists()


def test_small_files_are_hashed_every_time(tmp_path, cache_home, hashing_counted, settled_now):
    path = settled_file(tmp_path / "config.json", b"{}" * 100)
    assert digests.file_sha256(path) == digests.file_sha256(path) == hashlib.sha256(b"{}" * 100).hexdigest()
    assert len(hashing_counted) == 2 and not cache_home.exists()


@pytest.mark.parametrize("entry", ["not json", "[]", '{"path": 1}', "a digest of the wrong form"])
def test_a_corrupt_entry_is_ignored_and_replaced(tmp_path, cache_home, settled_now, entry):
    path = settled_file(tmp_path / "model.safetensors", os.urandom(2 * MIB))
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    digests.file_sha256(path)
    (written,) = cache_home.glob("*.json")
    if entry == "a digest of the wrong form":
        record = json.loads(written.read_text())
        written.write_text(json.dumps({**record, "sha256": "Z" * 64}))
    else:
        written.write_text(entry)
    assert digests.file_sha256(path) == expected
    assert json.loads(written.read_text())["sha256"] == expected


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch, settled_now):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    path = settled_file(tmp_path / "model.safetensors", os.urandom(2 * MIB))
    assert digests.file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_full_cache_drops_stale_entries_first_then_the_oldest(tmp_path, cache_home, monkeypatch, settled_now):
    monkeypatch.setattr(digests, "MAX_ENTRIES", 4)
    files = [settled_file(tmp_path / f"f{i}", bytes([i]) * MIB) for i in range(5)]
    for f in files:
        digests.file_sha256(f)
    assert len(list(cache_home.glob("*.json"))) == 5  # the 5th write found 4 entries: not over the cap yet
    files[1].unlink()  # its entry is stale
    digests.file_sha256(settled_file(tmp_path / "f5", b"5" * MIB))  # 5 entries present: pruned to 2, then this one
    kept = {json.loads(e.read_text())["path"] for e in cache_home.glob("*.json")}
    assert kept == {str(files[3].resolve()), str(files[4].resolve()), str((tmp_path / "f5").resolve())}


def test_a_killed_writers_temporary_file_is_removed_when_entries_are_written(tmp_path, cache_home, settled_now):
    cache_home.mkdir(parents=True)
    leftover, fresh = cache_home / ".abc.json.999999.tmp", cache_home / ".def.json.999998.tmp"
    leftover.write_text("{")
    fresh.write_text("{")  # perhaps a writer at work right now
    old = time.time() - 3600
    os.utime(leftover, (old, old))
    digests.file_sha256(settled_file(tmp_path / "model.safetensors", os.urandom(2 * MIB)))
    assert not leftover.exists() and fresh.exists()
