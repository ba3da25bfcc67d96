"""Freed memory handed back to the system between the stages of a long run.

glibc's malloc keeps what a process frees in its heap for reuse rather than returning it: after drift's 5k-token
prefill the process held ~0.4 GB more than its live tensors, and the drafter's first pass over the same input then grew
it by another ~0.4 GB instead of reusing it (fragments of the right sizes are not where the new tensors need them):
drift at 8k context peaked at 1.86 GiB (2026-11-29, benchmarks/drift_long_context.py). ``trim()`` asks glibc to return
the free pages (``malloc_trim(0)``: a walk of the heap, ~1 ms here) once a decode is over and after each sequence a
drifting drafter has read; where the C library has no such call (not glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def trim() -> bool:
    """Return the heap's free pages to the system; whether the C library could be asked."""
    call = _malloc_trim()
    if call is None:
        return False
    call(0)
    return True
