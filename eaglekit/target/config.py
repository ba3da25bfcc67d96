"""What eaglekit needs to know about a target (verifier) model from its config alone: no weights are read,
and neither torch nor transformers is imported (transformers only to read a GGUF file's metadata).

A target is a local directory, a Hub id already in the local cache, or a GGUF file (whose metadata
transformers turns into a config; needs the ``gguf`` package). A GGUF file verify has loaded before is read from
its cache entry (``gguf_cache``), which keeps the config dict the metadata gave.
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError, ConfigError
from ..io import jsonfile
from ..io.locate import locate
from ..model.config_view import ConfigView
from ..model.drafter import Rope
from ..model.hf_config import read_rope

TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")  # multimodal wrappers


@dataclass(frozen=True)
class TargetConfig:
    source: str  # as the user gave it
    directory: Path
    gguf_file: str | None
    hub_id: str | None
    num_layers: int
    hidden_size: int
    vocab_size: int
    rope: Rope
    model_type: str | None
    architectures: tuple[str, ...]
    config: dict

    @property
    def name(self) -> str:
        """What a drafter should record as its verifier: the Hub id when known, else the path."""
        return self.hub_id or self.source


def split_gguf(source: str | Path) -> tuple[Path, str | None]:
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        return path.parent, path.name
    return path, None


def read_target_config(source: str | Path) -> TargetConfig:
    directory, gguf_file = split_gguf(source)
    if gguf_file:
        if not (directory / gguf_file).is_file():
            raise CheckpointError(f"{source}: no such GGUF file")
        from . import gguf_cache

        config = gguf_cache.cached_config(directory / gguf_file) or _gguf_config(directory, gguf_file, str(source))
        hub_id = None
    else:
        located = locate(source, "target model")
        directory, hub_id = located.directory, located.hub_id
        config = jsonfile.load_object(directory / "config.json", f"{source}/config.json")
    label = f"{source}/config.json" if not gguf_file else str(source)
    view = ConfigView(config, label)
    for key in TEXT_CONFIG_KEYS:
        nested = view.sub(key)
        if nested is not None and nested.has("num_hidden_layers"):
            view = nested
            break
    arch = config.get("architectures") or []
    return TargetConfig(
        source=str(source),
        directory=directory,
        gguf_file=gguf_file,
        hub_id=hub_id,
        num_layers=view.int("num_hidden_layers", minimum=1),
        hidden_size=view.int("hidden_size", minimum=1),
        vocab_size=view.int("vocab_size", minimum=1),
        rope=read_rope(view)[0],
        model_type=view.str("model_type", None),
        architectures=tuple(a for a in arch if isinstance(a, str)),
        config=config,
    )


def _gguf_config(directory: Path, gguf_file: str, label: str) -> dict:
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF metadata)
        from transformers import AutoConfig
    except ImportError:
        from ..errors import MissingDependencyError

        raise MissingDependencyError(f"{label}: reading a GGUF target needs the gguf package (pip install gguf)") from None
    try:
        # as JSON types (id2label's keys become strings), so a config read back from the cache compares equal
        return json.loads(json.dumps(AutoConfig.from_pretrained(str(directory), gguf_file=gguf_file).to_dict(), default=str))
    except Exception as exc:  # transformers raises many types for unreadable metadata
        raise ConfigError(f"{label}: cannot read GGUF metadata ({type(exc).__name__}: {str(exc)[:200]})") from None
