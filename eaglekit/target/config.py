"""What eaglekit needs to know about a target (verifier) model from its config alone: no weights are read,
and neither torch nor transformers is imported (transformers only for a GGUF file whose config is more than a
renaming of its metadata: ``gguf_config``).

A target is a local directory, a Hub id already in the local cache, a GGUF file, or a ``config.json`` file alone
(what ``hf download REPO config.json`` fetches: enough for convert and validate, which read only the config). A GGUF
file's config comes from its metadata (``gguf_config``) for the architectures whose config is a renaming of it, else
from transformers (which needs the ``gguf`` package). A GGUF file verify has loaded before is read from its cache
entry (``gguf_cache``), which keeps the config dict read the first time.

``TargetConfig.config_only`` says the target has no weights to run (a config file, or a directory or cached Hub
snapshot holding no weight files); verify and drift refuse it with ``weights_needed``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError, ConfigError, UsageError
from ..io import jsonfile
from ..io.hub_ids import looks_like_repo_id
from ..io.locate import locate
from ..model.config_view import ConfigView
from ..model.drafter import CONFIG_CLASS_MAX_POSITIONS, Rope
from ..model.hf_config import own_original_context, positive_int, read_rope

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
    config_file: str | None = None  # the target was given as this config file alone
    config_only: bool = False  # no weights to run: a config file, or a directory without weight files
    # a GGUF target's llama.cpp rope divisors (its rope_freqs tensor: Llama 3.x's rope scaling), which transformers
    # does not load: the rope is ``rope`` with each frequency divided by its divisor (``gguf_config``)
    rope_freqs: tuple[float, ...] | None = None
    # what transformers fills a llama3/yarn/longrope scaling's original context from (``Rope.with_original_context``):
    # the model's context (None where the config states no positive one), and for a model type whose config class
    # keeps an original context of its own (Phi-3), that one, which wins over the scaling's
    max_position_embeddings: int | None = None
    own_original_context: int | None = None
    # a max_position_embeddings the config states that is no positive integer (read as none: the class default applies)
    max_positions_unusable: object = None

    @property
    def rope_as_loaded(self) -> Rope:
        """The rope as transformers hands it to an engine, its original context filled in: from the target's own
        original context, else its max_position_embeddings, else (stated neither) its config class's
        (``CONFIG_CLASS_MAX_POSITIONS``), as for a drafter (``Drafter.rope_as_loaded``)."""
        max_positions = self.max_position_embeddings or CONFIG_CLASS_MAX_POSITIONS.get(self.model_type)
        return self.rope.with_original_context(max_positions, own=self.own_original_context)

    @property
    def name(self) -> str:
        """What a drafter should record as its verifier: the Hub id when known, else the path (a config file's
        directory)."""
        return self.hub_id or (str(self.directory) if self.config_file else self.source)

    def require_runnable(self, why: str) -> None:
        """Refuse a target a command cannot run, before torch is imported: a config-only one (``weights_needed``'s
        line), a safetensors file whose header does not hold (named by the header checks every checkpoint gets, where
        transformers' loader failed with an internal error), and an EAGLE drafter given as the target
        (``dialects.looks_like_drafter``, where transformers failed on the sizes).
        """
        if self.config_only:
            raise UsageError(self.weights_needed(why))
        if self.gguf_file:
            return
        _refuse_drafter(self.directory, self.config, self.source)

    def weights_needed(self, why: str) -> str:
        """The one-line refusal for a command that runs the target (``why``: "verify runs the target model")."""
        if self.config_file:
            what = "is a config file, with no weights"
            give = "give the model's directory, a Hub id in the local cache, or a .gguf file"
        else:
            what = f"holds no weights (no *.safetensors or *.bin in {self.directory})"
            give = (
                f"fetch the whole model first (`hf download {self.hub_id}`)"
                if self.hub_id
                else "give the model's directory with its weights, or a .gguf file"
            )
        return f"`target` {self.source}: {what}; {why}, so it needs the weights: {give}"


def _refuse_drafter(directory: Path | None, config: dict, source: str) -> None:
    """An EAGLE drafter given as the target, by its config's keys or (a directory with weights) its tensors' names,
    refused as one: read as a target, it was a 1-layer model whose layer count every aux id seemed to exceed. Reading
    the safetensors headers also refuses, naming the file, one whose header does not hold."""
    from ..dialects import drafter_key, looks_like_drafter
    from ..io.safetensors_header import read_header

    stated = drafter_key(config)
    names: set[str] = set()
    if stated is None and directory is not None:
        for path in sorted(directory.glob("*.safetensors")):
            names |= set(read_header(path, f"`target` {source}: {path.name}").entries)
    if stated is not None or looks_like_drafter(names):
        why = f"its config states {stated}" if stated else "a fusion layer and no decoder stack"
        raise UsageError(
            f"`target` {source}: this is an EAGLE drafter ({why}), not a target model; give the model the drafter was"
            " trained for"
        )


def split_gguf(source: str | Path) -> tuple[Path, str | None]:
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        return path.parent, path.name
    return path, None


WEIGHT_SUFFIXES = (".safetensors", ".bin")  # what transformers loads a model directory's weights from


def _hub_id_of_snapshot(directory: Path) -> str | None:
    """``org/name`` for a Hub cache snapshot directory (``<cache>/models--org--name/snapshots/<rev>``), else None.
    Hub ids cannot contain "--", so the folder name splits one way only."""
    repo = directory.parent.parent.name
    if directory.parent.name != "snapshots" or not repo.startswith("models--"):
        return None
    hub_id = repo[len("models--") :].replace("--", "/")
    return hub_id if looks_like_repo_id(hub_id) else None


def read_target_config(source: str | Path, *, weights: bool = False) -> TargetConfig:
    """The target's config. ``weights``: the caller will run the target, so a Hub id missing from the cache is told to
    fetch the whole model (else only its config.json)."""
    directory, gguf_file = split_gguf(source)
    path = Path(source).expanduser()
    config_file = None
    if gguf_file:
        if not (directory / gguf_file).is_file():
            raise CheckpointError(f"{source}: no such GGUF file")
        from . import gguf_cache

        config = gguf_cache.cached_config(directory / gguf_file) or _gguf_config(
            directory, gguf_file, str(source), weights=weights
        )
        hub_id = None
    elif path.suffix == ".json":  # a config.json alone: everything but running the target
        if not path.is_file():
            raise CheckpointError(f"`target` {source}: no such config file")
        directory, config_file, hub_id = path.parent, str(source), _hub_id_of_snapshot(path.parent)
        config = jsonfile.load_object(path, str(source))
    else:
        what = "" if weights else " config.json"
        located = locate(source, "target model", fetch=lambda repo: f"hf download {repo}{what}")
        directory, hub_id = located.directory, located.hub_id
        config = jsonfile.load_object(directory / "config.json", f"{source}/config.json")
    label = str(source) if gguf_file or config_file else f"{source}/config.json"
    if not gguf_file:
        _refuse_drafter(None if config_file else directory, config, str(source))
    view = ConfigView(config, label)
    for key in TEXT_CONFIG_KEYS:
        nested = view.sub(key)
        if nested is not None and nested.has("num_hidden_layers"):
            view = nested
            break
    arch = config.get("architectures") or []
    if isinstance(arch, str):
        arch = [arch]  # one class named without its list: read as transformers reads it, not letter by letter
    elif not isinstance(arch, list):
        raise ConfigError(f"{label}: architectures should be a list of class names, got {arch!r}")
    return TargetConfig(
        source=str(source),
        directory=directory,
        gguf_file=gguf_file,
        hub_id=hub_id,
        num_layers=view.int("num_hidden_layers", minimum=1),
        hidden_size=view.int("hidden_size", minimum=1),
        vocab_size=view.int("vocab_size", minimum=1),
        rope=_gguf_rope(config, read_rope(view)[0], label) if gguf_file else read_rope(view)[0],
        model_type=view.str("model_type", None),
        architectures=tuple(a for a in arch if isinstance(a, str)),
        config=config,
        config_file=config_file,
        config_only=bool(config_file)
        or (not gguf_file and not any(p.suffix in WEIGHT_SUFFIXES for p in directory.iterdir())),
        rope_freqs=_rope_freqs(config, label) if gguf_file else None,
        max_position_embeddings=positive_int(view.raw("max_position_embeddings")),
        max_positions_unusable=(
            view.raw("max_position_embeddings") if positive_int(view.raw("max_position_embeddings")) is None else None
        ),
        own_original_context=own_original_context(view, view.str("model_type", None)),
    )


def _gguf_rope(config: dict, rope: Rope, label: str) -> Rope:
    """A GGUF target's rope: the config's, with the rope scaling the file states where transformers does not read it
    (``gguf_config.ROPE_SCALING_KEY``)."""
    from .gguf_config import ROPE_SCALING_KEY

    scaling = config.get(ROPE_SCALING_KEY)
    if scaling is None:
        return rope
    if not isinstance(scaling, dict) or not isinstance(scaling.get("rope_type"), str):
        raise ConfigError(f"{label}: {ROPE_SCALING_KEY} must be a rope scaling with a rope_type")
    return Rope(rope.theta, dict(scaling))


def _rope_freqs(config: dict, label: str) -> tuple[float, ...] | None:
    from .gguf_config import ROPE_FREQS_KEY

    freqs = config.get(ROPE_FREQS_KEY)
    if freqs is None:
        return None
    if (
        not isinstance(freqs, list)
        or not freqs
        or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f < math.inf for f in freqs)
    ):
        raise ConfigError(f"{label}: rope_freqs must be positive finite numbers, one per rotary frequency")
    return tuple(float(f) for f in freqs)


def _gguf_config(directory: Path, gguf_file: str, label: str, weights: bool = False) -> dict:
    """The config of a GGUF file: from its metadata alone where that is a renaming (``gguf_config``), else as
    transformers reads it; with llama.cpp's rope divisors, which transformers does not read, where the file has them.
    ``weights``: the caller will load the weights, so a tensor past the file's end (a truncated download) is refused
    here, before torch is imported (a cache entry, read before this, is only ever made from a whole file)."""
    from ..io.gguf_metadata import check_tensors_within, read_metadata
    from .gguf_config import (
        ROPE_FREQS_KEY,
        ROPE_SCALING_KEY,
        ROPE_SCALING_UNREAD_KEY,
        config_from_metadata,
        rope_freqs,
        stated_rope_scaling,
    )

    metadata = read_metadata(directory / gguf_file, label, tensors=True)
    if weights:
        check_tensors_within(directory / gguf_file, metadata, label)
    config = config_from_metadata(metadata)
    if config is None:
        config = _transformers_gguf_config(directory, gguf_file, label)
    freqs = rope_freqs(directory / gguf_file, metadata, label)
    if freqs is not None:
        config[ROPE_FREQS_KEY] = freqs
    stated = stated_rope_scaling(metadata)
    if stated is not None:
        config[ROPE_SCALING_KEY], unread = stated
        if unread:
            config[ROPE_SCALING_UNREAD_KEY] = unread
    return config


def _transformers_gguf_config(directory: Path, gguf_file: str, label: str) -> dict:
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader needs it: missing, it is said here, in eaglekit's words)

        from .transformers_import import import_transformers_models

        import_transformers_models()  # its folder of models read once, not twice
        from transformers import AutoConfig
    except ImportError:
        from ..errors import MissingDependencyError, install_line

        raise MissingDependencyError(
            f"{label}: reading a GGUF target needs the gguf package (eaglekit's [gguf] extra): {install_line('gguf')}"
        ) from None
    try:
        # as JSON types (id2label's keys become strings), so a config read back from the cache compares equal
        return json.loads(
            json.dumps(AutoConfig.from_pretrained(str(directory), gguf_file=gguf_file).to_dict(), default=str)
        )
    except Exception as exc:  # transformers raises many types for unreadable metadata
        raise ConfigError(f"{label}: cannot read GGUF metadata ({type(exc).__name__}: {str(exc)[:200]})") from None
