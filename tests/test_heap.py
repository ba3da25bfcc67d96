"""Freed memory goes back to the system when a long run's stage ends (eaglekit/target/heap.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from eaglekit.target import heap

PROBE = textwrap.dedent(
    """
    import torch
    from eaglekit.target import heap

    def rss_mib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))

    pieces = [torch.ones(16_000) for _ in range(4_000)]  # 256 MB in 64 KB pieces: malloc's heap, not mmap
    kept = pieces[::50]
    del pieces
    freed = rss_mib()
    print(heap.trim(), freed, rss_mib())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc: Linux")
def test_memory_freed_by_a_stage_goes_back_to_the_system():
    trimmed, before, after = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.split()
    assert trimmed == "True"
    assert int(before) - int(after) > 150, (before, after)  # ~250 MB of freed pieces held until trimmed


def test_without_malloc_trim_nothing_is_done(monkeypatch):
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert heap.trim() is False
