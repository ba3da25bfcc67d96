"""The GGUF target cache keeps only entries a file can still use: no torch, no real target (entries are made by hand
the way ``gguf_cache.save`` leaves them: a directory named by the file's key, its COMPLETE marker naming the file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eaglekit.target import gguf_cache


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def entry_for(gguf: Path) -> Path:
    """A complete entry for ``gguf``, as save() leaves one."""
    directory = gguf_cache.cache_directory(gguf)
    directory.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(b"x" * 64)
    (directory / gguf_cache.COMPLETE).write_text(str(gguf.resolve()) + "\n")
    return directory


def gguf_file(path: Path, content: bytes = b"GGUF-1") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_prune_removes_entries_of_deleted_and_changed_files_and_keeps_the_rest(cache_home):
    live = entry_for(gguf_file(cache_home / "venv-a" / "model.gguf"))
    gone_file = gguf_file(cache_home / "venv-b" / "model.gguf")  # a deleted environment's copy of the same file
    gone = entry_for(gone_file)
    gone_file.unlink()
    changed_file = gguf_file(cache_home / "other.gguf")
    changed = entry_for(changed_file)
    changed_file.write_bytes(b"GGUF-2, longer")  # replaced since: its entry no longer matches it
    assert gguf_cache.cached(changed_file) is None  # never used...
    foreign = gguf_cache.cache_root() / "not-ours"  # ...and what eaglekit cannot judge is left alone
    foreign.mkdir()

    removed = gguf_cache.prune()

    assert sorted(removed) == sorted([gone, changed])
    assert not gone.exists() and not changed.exists()
    assert gguf_cache.cached(cache_home / "venv-a" / "model.gguf") == live
    assert foreign.is_dir()


def test_prune_removes_a_dead_writers_temporary_directory_but_not_a_live_ones(cache_home):
    root = gguf_cache.cache_root()
    dead_pid = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dead = root / f"model-abc.tmp{dead_pid}"
    alive = root / f"model-def.tmp{os.getpid()}"
    for d in (dead, alive):
        d.mkdir(parents=True)

    assert gguf_cache.prune() == [dead]
    assert alive.is_dir() and not dead.exists()


def test_prune_never_removes_the_entry_it_keeps(cache_home):
    source = gguf_file(cache_home / "model.gguf")
    entry = entry_for(source)
    source.unlink()
    assert gguf_cache.prune(keep=entry) == []
    assert entry.is_dir()


def test_prune_without_a_cache_is_a_no_op(cache_home):
    assert gguf_cache.prune() == []
