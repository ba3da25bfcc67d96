"""Importing transformers' model code with its folder of models read once, not twice.

``import transformers`` builds its lazy import table by reading every module under ``transformers/models`` (~560
folders, each file's ``__all__`` and ``@requires``: ``utils.import_utils.create_import_structure_from_path``).
Importing any model (``transformers.models.llama``, or ``AutoModelForCausalLM``) then runs
``transformers/models/__init__.py``, which asks for the table of the same folder again, by its ``__init__.py``'s
path where the first import asked by the folder's: another key for the function's ``lru_cache``, whose 128 entries
the ~560 folders below have long pushed out, so every file is read a second time (read in transformers 5.19's and
5.24's source; the cache counted 1,123 reads with transformers 5.24, 563 once the second reading is served from the
first). Both readings give the same table: the function reads a file's folder when given a file.
``import_transformers_models`` serves that second reading from the first. Measured in the environment README
installs (transformers 5.24, 2 cores): importing transformers' Llama and its Auto classes, torch imported before,
3.87-4.20 s -> 2.98-3.65 s (3 runs each); 4.19-7.03 -> 3.66-3.92 s in transformers 5.19 (2 each).

Where transformers lacks that function, or ``transformers.models`` is imported already, transformers is imported as
it is; where the first reading has left the cache meanwhile, the folder is read again (the same table, as before).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def import_transformers_models() -> None:
    """Import ``transformers`` and ``transformers.models``, the models folder read once (see the module's docstring)."""
    if "transformers.models" in sys.modules:
        return
    import transformers
    from transformers.utils import import_utils

    read_folder = getattr(import_utils, "create_import_structure_from_path", None)
    if read_folder is None or not hasattr(read_folder, "cache_info"):  # another transformers: import it as it is
        import transformers.models  # noqa: F401
        return
    models = Path(transformers.__file__).parent / "models"  # the key ``import transformers`` read the folder under

    def by_folder(module_path):
        if os.path.basename(module_path) == "__init__.py" and Path(module_path).parent == models:
            return read_folder(models)
        return read_folder(module_path)

    import_utils.create_import_structure_from_path = by_folder  # the module global its callers look up
    try:
        import transformers.models  # noqa: F401
    finally:
        import_utils.create_import_structure_from_path = read_folder
