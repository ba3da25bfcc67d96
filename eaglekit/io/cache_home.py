"""Where eaglekit keeps what it can rebuild: ``$XDG_CACHE_HOME/eaglekit`` (default ``~/.cache/eaglekit``).

Its users: dequantised GGUF targets (``target/gguf_cache.py``), engine environments (``engines/envs.py``, unless
``EAGLEKIT_ENGINES_DIR`` says otherwise), file digests (``io/digests.py``) and transformers' lazy import table
(``target/transformers_import.py``). Anything under it may be deleted.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eaglekit"
