"""``import_transformers_models`` reads transformers' folder of models at most once, keeps the table on disk for the
processes after, and transformers gets the very table its own readings would have built
(eaglekit/target/transformers_import.py). Each check runs in a fresh interpreter with a cache of its own: what it
measures is the first import of transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FACTS = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from eaglekit.target.transformers_import import import_transformers_models

    import_transformers_models()
    import transformers
    from transformers.utils import import_utils
    read_folder = import_utils.create_import_structure_from_path
    reads = read_folder.cache_info().misses
    models = Path(transformers.__file__).parent / "models"
    folders = sum(1 for _ in os.walk(models, topdown=True)
                  if "__pycache__" not in _[0].split(os.sep))
    init = str(models / "__init__.py")
    # what transformers.models was built from (cached under that key)
    served = import_utils.define_import_structure(init)
    import_utils.define_import_structure.cache_clear()
    read_folder.cache_clear()
    fresh = import_utils.define_import_structure(init)  # the folder read afresh, as transformers alone reads it
    # transformers alone: the folder by its path, then the package by its __init__.py, as its two imports ask
    read_folder.cache_clear()
    read_folder(models)
    read_folder(init)
    print(json.dumps({"reads": reads, "folders": folders, "same_table": served == fresh,
                      "model_loads": "LlamaConfig" in dir(transformers),
                      "reads_alone": read_folder.cache_info().misses,
                      "patched_back": import_utils.create_import_structure_from_path is read_folder}))
""")


def run(script: str, cache: Path | None = None) -> dict:
    env = {**os.environ, **({"XDG_CACHE_HOME": str(cache)} if cache is not None else {})}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "eaglekit" / "transformers").glob("import-table-*.json"))


def test_models_folder_is_read_once_then_kept_on_disk(tmp_path):
    first = run(FACTS, tmp_path)
    assert first["reads"] <= first["folders"] + 2, first  # each folder once (transformers alone: each twice)
    assert first["reads"] >= first["folders"] - 2, first  # the premise of the next: a first process reads them all
    assert first["reads_alone"] >= 2 * first["folders"] - 2, first  # the premise: by two keys the folder is read twice
    assert first["same_table"] and first["patched_back"] and first["model_loads"], first
    assert len(entries(tmp_path)) == 1
    later = run(FACTS, tmp_path)  # the table from disk: no folder under models read but those imported
    assert later["reads"] <= 5, later
    assert later["same_table"] and later["patched_back"] and later["model_loads"], later


def test_a_damaged_entry_is_read_afresh_and_replaced(tmp_path):
    run(FACTS, tmp_path)
    (entry,) = entries(tmp_path)
    entry.write_text('{"dict": [["llama", {"set": ')  # cut short
    facts = run(FACTS, tmp_path)
    assert facts["reads"] >= facts["folders"] - 2 and facts["same_table"] and facts["patched_back"], facts
    assert json.loads(entry.read_text())  # written whole again
    entry.write_text(json.dumps({"dict": [["llama", 3]]}))  # whole JSON, not a table
    facts = run(FACTS, tmp_path)
    assert facts["reads"] >= facts["folders"] - 2 and facts["same_table"], facts


def test_the_entry_follows_the_installation(tmp_path, monkeypatch):
    """The key changes with the installation record and with a folder added under models; an editable install or one
    without a record gets no entry (its files change in place)."""
    from importlib import metadata

    from eaglekit.target import transformers_import

    package = tmp_path / "site" / "transformers"
    (package / "models" / "llama").mkdir(parents=True)
    files = {"RECORD": "transformers/__init__.py,sha256=abc,10\n", "direct_url.json": None}

    class Installed:
        version = "9.9.9"

        def read_text(self, name):
            return files.get(name)

        def locate_file(self, name):
            return tmp_path / "site" / name

    monkeypatch.setattr(metadata, "distribution", lambda name: Installed())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    models = package / "models"
    first = transformers_import._entry_path(models)
    assert first is not None and first.parent == tmp_path / "cache" / "eaglekit" / "transformers"
    assert transformers_import._entry_path(models) == first
    files["RECORD"] += "transformers/models/llama/x.py,sha256=def,5\n"
    rewritten = transformers_import._entry_path(models)
    assert rewritten not in (None, first)
    (models / "new_model").mkdir()
    assert transformers_import._entry_path(models) not in (None, rewritten)
    assert transformers_import._entry_path(tmp_path / "elsewhere" / "models") is None  # not the installation's folder
    files["direct_url.json"] = json.dumps({"url": "file:///src/transformers", "dir_info": {"editable": True}})
    assert transformers_import._entry_path(models) is None
    files["direct_url.json"], files["RECORD"] = None, None
    assert transformers_import._entry_path(models) is None


def test_already_imported_and_other_transformers_import_as_they_are():
    facts = run(
        textwrap.dedent("""
        import json, sys
        import transformers
        from transformers.utils import import_utils
        read = import_utils.create_import_structure_from_path.__wrapped__
        uncached = lambda path: read(path)
        import_utils.create_import_structure_from_path = uncached  # a transformers whose reading has no cache
        from eaglekit.target.transformers_import import import_transformers_models
        import_transformers_models()
        imported = "transformers.models" in sys.modules
        untouched = import_utils.create_import_structure_from_path is uncached
        import_transformers_models()  # imported already: nothing to do
        untouched = untouched and import_utils.create_import_structure_from_path is uncached
        print(json.dumps({"imported": imported, "untouched": untouched}))
    """)
    )
    assert facts == {"imported": True, "untouched": True}
