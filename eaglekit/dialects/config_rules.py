"""Config rules: where a dialect's config.json keeps the HF dimensions, each flag (its places and default), the aux
layer ids and the target width; the HF keys carried from source to output; reading a dotted key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.drafter import Convention


@dataclass(frozen=True)
class Key:
    """A flag's locations in config.json (dotted paths, first present wins) and its default when absent."""

    locations: tuple[str, ...]
    default: bool


@dataclass(frozen=True)
class ConfigRules:
    """Where a dialect's config keeps the HF dimensions, the flags, the aux layer ids and the target width."""

    base: str | None = None  # dotted path of the dict holding the HF dimensions; None = top level
    flags: Mapping[str, Key] = field(default_factory=dict)
    aux_ids: tuple[tuple[str, Convention], ...] = ()  # id locations in precedence order
    num_aux: tuple[str, ...] = ("num_aux_hidden_states",)
    target_hidden: tuple[str, ...] = ("target_hidden_size",)
    # P-EAGLE's mask token: the config keys that may hold it, in the order the dialect's readers take them
    mask_token: tuple[str, ...] = ()


def lookup(config: dict, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


# The flags of dialects that keep them as flat top-level keys (two also in ``eagle_config``), with their defaults
FLAT_FLAGS_FALSE = {
    "fc_norm": Key(("fc_norm",), False),
    "norm_before_fc": Key(("eagle_config.norm_before_fc", "norm_before_fc"), False),
    "norm_output": Key(("norm_output",), False),
    "norm_before_residual": Key(("norm_before_residual",), False),
    "use_aux_hidden_state": Key(("eagle_config.use_aux_hidden_state", "use_aux_hidden_state"), True),
}

# HF keys harmless to any engine that ride along from source to output (``Drafter.extra_config``)
CARRIED_HF_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def carried_keys(config: dict, base: str | None) -> dict:
    """The ``CARRIED_HF_KEYS`` a config states: at its top level, or in the block holding its HF keys (speculators'
    ``transformer_layer_config``), the top level's first."""
    block = lookup(config, base) if base else None
    nested = {k: block[k] for k in CARRIED_HF_KEYS if k in block} if isinstance(block, dict) else {}
    return {**nested, **{k: config[k] for k in CARRIED_HF_KEYS if k in config}}
