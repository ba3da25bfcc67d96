"""``import_transformers_models`` reads transformers' folder of models once, and transformers gets the very table its own
second reading would have built (eaglekit/target/transformers_import.py). Each check runs in a fresh interpreter:
what it measures is the first import of transformers."""

from __future__ import annotations

import json
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
    served = import_utils.define_import_structure(init)  # what transformers.models was built from (cached under that key)
    import_utils.define_import_structure.cache_clear()
    read_folder.cache_clear()
    fresh = import_utils.define_import_structure(init)  # the folder read afresh, as transformers alone reads it
    # transformers alone: the folder by its path, then the package by its __init__.py, as its two imports ask
    read_folder.cache_clear()
    read_folder(models)
    read_folder(init)
    print(json.dumps({"reads": reads, "folders": folders, "same_table": served == fresh,
                      "reads_alone": read_folder.cache_info().misses,
                      "patched_back": import_utils.create_import_structure_from_path is read_folder}))
""")


def run(script: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_models_folder_is_read_once_into_the_same_table():
    facts = run(FACTS)
    assert facts["reads"] <= facts["folders"] + 2, facts  # each folder once (transformers alone: each twice)
    assert facts["reads_alone"] >= 2 * facts["folders"] - 2, facts  # the premise: by two keys the folder is read twice
    assert facts["same_table"], facts
    assert facts["patched_back"], facts


def test_already_imported_and_other_transformers_import_as_they_are():
    facts = run(textwrap.dedent("""
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
        print(json.dumps({"imported": imported, "untouched": untouched and import_utils.create_import_structure_from_path is uncached}))
    """))
    assert facts == {"imported": True, "untouched": True}
