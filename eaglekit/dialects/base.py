"""What a dialect is: name rules, config rules and detection evidence as data, plus a reader and a writer.

A dialect module declares
- ``names``: prefix rules between its tensor names and canonical (vLLM) names, and read-only aliases;
- ``rules``: where its config keeps the HF dimensions, each flag (with its default) and the aux layer ids
  (with their convention);
- ``evidence``: scored clues for detection;
and, if it can hold a drafter, a writer (``write_config`` and ``output_names``).

The reading algorithm is shared (``read``); dialects hook in only where their semantics differ.

This module gathers what dialect modules and the rest of eaglekit import; the pieces live in sibling modules:
- ``name_maps``: ``NameMap``, the legacy fc_norm aliases every reader accepts, ``MIDLAYER``;
- ``config_rules``: ``Key``, ``ConfigRules``, ``lookup``, ``FLAT_FLAGS_FALSE``, the carried HF keys;
- ``detection``: ``Clue``, ``Detection``, ``architecture_clue`` and the other clue tests;
- ``aux_readings``: ``Reading``, ``Ambiguity``, the default-ids tests and the target-boundary rule;
- ``loaded``: ``LoadedDrafter``;
- ``reading``: the shared reading's steps that need no dialect (dimensions, attention, dtype, mask token);
- ``provenance``: the ``eaglekit`` block a writer adds (``provenance_block``) and what reading takes back from it;
- ``dialect``: the ``Dialect`` class (its ``read`` as named steps, the hooks, the shared writer).
"""

from __future__ import annotations

from ..model.drafter import INPUT, OUTPUT
from .aux_readings import (
    MAX_AUX_STATES,
    Ambiguity,
    Reading,
    apply_boundaries,
    is_input_default,
    is_output_default,
    within_boundaries,
)
from .config_rules import CARRIED_HF_KEYS, FLAT_FLAGS_FALSE, ConfigRules, Key, lookup
from .detection import Clue, Detection, architecture_clue, architectures, has_prefix, written_by_eaglekit
from .dialect import Dialect
from .loaded import LoadedDrafter
from .name_maps import LEGACY_FC_NORM_ALIASES, LEGACY_FC_NORM_FAMILIES, MIDLAYER, NameMap
from .provenance import provenance_block
from .reading import MAX_MISSING_LAYERS, attention_from_tensors

__all__ = [
    "CARRIED_HF_KEYS",
    "FLAT_FLAGS_FALSE",
    "INPUT",
    "LEGACY_FC_NORM_ALIASES",
    "LEGACY_FC_NORM_FAMILIES",
    "MAX_AUX_STATES",
    "MAX_MISSING_LAYERS",
    "MIDLAYER",
    "OUTPUT",
    "Ambiguity",
    "Clue",
    "ConfigRules",
    "Detection",
    "Dialect",
    "Key",
    "LoadedDrafter",
    "NameMap",
    "Reading",
    "apply_boundaries",
    "architecture_clue",
    "architectures",
    "attention_from_tensors",
    "has_prefix",
    "is_input_default",
    "is_output_default",
    "lookup",
    "provenance_block",
    "within_boundaries",
    "written_by_eaglekit",
]
