"""Importing transformers' model code without reading its folder of models: the table kept on disk from the first time.

``import transformers`` builds its lazy import table by reading every module under ``transformers/models`` (~560
folders, each file's ``__all__`` and ``@requires``: ``utils.import_utils.create_import_structure_from_path``).
Importing any model (``transformers.models.llama``, or ``AutoModelForCausalLM``) then runs
``transformers/models/__init__.py``, which asks for the table of the same folder again, by its ``__init__.py``'s
path where the first import asked by the folder's: another key for the function's ``lru_cache``, whose 128 entries
the ~560 folders below have long pushed out, so every file is read a second time (read in transformers 5.19's and
5.24's source; the cache counted 1,123 reads with transformers 5.24). Both readings give the same table: the
function reads a file's folder when given a file.

``import_transformers_models`` serves both readings from one table, and keeps that table on disk
(``$XDG_CACHE_HOME/eaglekit/transformers/``), so that a later process reads no folder at all. What a reading
depends on is the folder's files; the entry is found by what changes whenever they do: transformers' version and
place, its installation record (``RECORD``: every installed file with its digest) and the modification time of
every folder under ``models`` (a file added, removed or renamed since). A transformers installed editable (from a source
tree, whose files change in place) or without a record is read as before, once per process. Measured in the environment
README installs (transformers 5.24, 2 cores): importing transformers' Llama and its Auto classes, torch imported before,
3.87-4.20 s -> 2.98-3.65 s with one reading instead of two; the reading left is ~0.6-0.9 s of it.

transformers' function is patched while ``transformers`` imports (a finder on ``sys.meta_path`` that sees
``transformers.utils.import_utils`` executed, before ``transformers/__init__.py`` asks for the table) and put back
once ``transformers.models`` is imported. Where transformers lacks that function, or is imported already, it is
imported as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

from ..io.cache_home import cache_home

READER_MODULE = "transformers.utils.import_utils"
READER = "create_import_structure_from_path"
FORMAT = 1  # of the entries on disk


def import_transformers_models() -> None:
    """Import ``transformers`` and ``transformers.models`` with the models folder's table read at most once, from
    disk where an entry fits (see the module's docstring)."""
    if "transformers.models" in sys.modules:
        return
    models = _models_folder()
    reading = _TableReading(models, _entry_path(models)) if models is not None else None
    with (
        _patched_on_import(reading)
        if reading is not None and "transformers" not in sys.modules
        else contextlib.nullcontext()
    ):
        import transformers
        from transformers.utils import import_utils

        if reading is None or reading.original is None:  # transformers imported before, or its reader not seen running
            read_folder = getattr(import_utils, READER, None)
            if read_folder is None or not hasattr(
                read_folder, "cache_info"
            ):  # another transformers: import it as it is
                import transformers.models

                return
            if reading is None:
                reading = _TableReading(Path(transformers.__file__).parent / "models", None)
            reading.original = read_folder
            setattr(import_utils, READER, reading.read)
        try:
            import transformers.models
        finally:
            setattr(import_utils, READER, reading.original)


class _TableReading:
    """transformers' reading of the models folder, served from one table: from ``entry`` (a file) where it holds one
    for this installation, else read once (and written to ``entry``). Any other folder is read as transformers reads it.
    """

    def __init__(self, models: Path, entry: Path | None):
        self.models = models
        self.entry = entry
        self.original = None  # transformers' function, once its module has run
        self.table = None

    def read(self, module_path):
        path = Path(module_path)
        if path == self.models or (path.name == "__init__.py" and path.parent == self.models):
            if self.table is None:
                self.table = self._load() or self._read_and_keep()
            return self.table
        return self.original(module_path)

    def _load(self):
        if self.entry is None:
            return None
        try:
            table = _decode(json.loads(self.entry.read_text()))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):  # absent or damaged
            return None
        return table if isinstance(table, dict) and table else None

    def _read_and_keep(self):
        table = self.original(self.models)
        if self.entry is not None:
            try:
                encoded = json.dumps(_encode(table))
            except TypeError:  # something other than the dicts, sets and strings it is made of: not kept
                return table
            from ..io.atomic import write_file_atomically

            try:
                self.entry.parent.mkdir(parents=True, exist_ok=True)
                write_file_atomically(self.entry, encoded)
            except OSError:  # a cache that cannot be written is a cache not kept
                pass
        return table


@contextlib.contextmanager
def _patched_on_import(reading: _TableReading):
    """While inside, the module holding transformers' reader gets ``reading.read`` in its place as soon as it has
    run (transformers' ``__init__.py`` imports it, then asks for the table)."""
    finder = _PatchingFinder(reading)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)


class _PatchingFinder:
    def __init__(self, reading: _TableReading):
        self.reading = reading

    def find_spec(self, name, path=None, target=None):
        if name != READER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:  # else: imported as it is
            spec.loader = _PatchingLoader(spec.loader.name, spec.loader.path, self.reading)
        return spec


class _PatchingLoader(importlib.machinery.SourceFileLoader):
    """The module's own loader, that hands transformers' reader to ``reading`` and puts ``reading.read`` in its place
    once the module has run."""

    def __init__(self, fullname: str, path: str, reading: _TableReading):
        super().__init__(fullname, path)
        self.reading = reading

    def exec_module(self, module):
        super().exec_module(module)
        original = getattr(module, READER, None)
        if original is not None and hasattr(original, "cache_info"):
            self.reading.original = original
            setattr(module, READER, self.reading.read)


def _models_folder() -> Path | None:
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "models"


def _entry_path(models: Path) -> Path | None:
    """Where this installation's table is kept, or None where no key follows its files (an editable install, no
    installation record, a models folder not the installation's, a folder that cannot be listed)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("transformers")
        direct = dist.read_text("direct_url.json")
        if direct and json.loads(direct).get("dir_info", {}).get("editable"):
            return None
        record = dist.read_text("RECORD")  # every installed file with its digest
        if not record or models.resolve().parent != Path(dist.locate_file("transformers")).resolve():
            return None
        key = hashlib.sha256(f"{FORMAT}\0{dist.version}\0{models.resolve()}\0".encode() + record.encode())
        with os.scandir(models) as entries:  # a file added, removed or renamed since
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir() and entry.name != "__pycache__":
                    key.update(f"\0{entry.name}\0{entry.stat().st_mtime_ns}".encode())
    except (metadata.PackageNotFoundError, OSError, ValueError, AttributeError):
        return None
    return cache_home() / "transformers" / f"import-table-{dist.version}-{key.hexdigest()[:16]}.json"


# The table is nested dicts keyed by folder names (str) and backend sets (frozenset), down to sets of object names.
def _encode(value):
    if isinstance(value, dict):
        return {"dict": [[_encode_key(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)) and all(isinstance(x, str) for x in value):
        return {"set": sorted(value)}
    if isinstance(value, str):
        return value
    raise TypeError(f"not a part of an import table: {type(value).__name__}")


def _encode_key(key):
    if isinstance(key, str):
        return key
    if isinstance(key, frozenset) and all(isinstance(x, str) for x in key):
        return {"frozenset": sorted(key)}
    raise TypeError(f"not a key of an import table: {type(key).__name__}")


def _decode(value):
    if isinstance(value, str):
        return value
    if "dict" in value:
        return {(k if isinstance(k, str) else frozenset(k["frozenset"])): _decode(v) for k, v in value["dict"]}
    return set(value["set"])
