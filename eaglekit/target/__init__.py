"""The target (verifier) model a drafter serves.

- ``config``: what its config says (layers, widths, rope), from a directory, a cached Hub id or a GGUF file;
- ``weights``: its input embedding and lm_head, read alone from its checkpoint;
- ``runner``: the model itself through transformers (verify only): generation and the aux hidden states.

Importing this package gives the config part only and imports neither torch nor transformers (validate and
convert need no more); import ``eaglekit.target.weights`` or ``eaglekit.target.runner`` by name for the rest.
"""

from .config import TEXT_CONFIG_KEYS, TargetConfig, read_target_config, split_gguf

__all__ = ["TEXT_CONFIG_KEYS", "TargetConfig", "read_target_config", "split_gguf"]
