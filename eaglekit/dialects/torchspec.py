"""TorchSpec (lightseekorg): native ``midlayer.*`` checkpoints and its ``convert_to_hf.py --vllm`` exports.

Ids sit in ``eagle_config`` as output-of-layer ids, except that ``--vllm`` exports of ``kimi_k2`` drafters
have already had 1 added (top-level and nested). Low-rank ``lm_head.{down,up}`` is kept as it is and
materialised into a dense ``lm_head`` by ``convert`` for any dialect that needs one. Read only.
"""

from __future__ import annotations

from ..findings import Finding
from ..io.reader import Checkpoint
from ..model.drafter import INPUT, Convention
from .base import FLAT_FLAGS_FALSE, MIDLAYER, OUTPUT, Clue, ConfigRules, Dialect, NameMap, has_prefix, lookup


def _torchspec_version(c: dict, k: Checkpoint) -> str | None:
    version = c.get("_torchspec_version")
    if isinstance(version, str):
        return version
    for meta in k.file_metadata.values():
        if isinstance(meta.get("torchspec_version"), str):
            return meta["torchspec_version"]
    return None


class TorchspecDialect(Dialect):
    name = "torchspec"
    summary = "TorchSpec: midlayer.* native or layers.N.* --vllm exports, low-rank lm_head, MLA; read only"
    reads = "convert_to_hf.py outputs (native and --vllm), lm_head.{down,up} factorised heads, Kimi MLA drafters"
    names = NameMap(rules=MIDLAYER)
    rules = ConfigRules(
        flags=FLAT_FLAGS_FALSE,
        aux_ids=(
            ("eagle_config.eagle_aux_hidden_state_layer_ids", OUTPUT),
            ("eagle_aux_hidden_state_layer_ids", INPUT),
        ),
    )
    schema = "config/torchspec.schema.json"
    evidence = (
        Clue(
            "config has _torchspec_version or safetensors metadata torchspec_version",
            100,
            lambda c, n, k: _torchspec_version(c, k) is not None,
        ),
        Clue("factorised lm_head.down / lm_head.up", 50, lambda c, n, k: "lm_head.down.weight" in n),
    )

    def framework(self, ckpt: Checkpoint) -> str | None:
        version = _torchspec_version(ckpt.config or {}, ckpt)
        return f"torchspec {version}" if version else "torchspec"

    def pins_convention(self, ckpt: Checkpoint) -> str | None:
        version = _torchspec_version(ckpt.config or {}, ckpt)
        return f"torchspec {version} metadata (TorchSpec writes output-of-layer ids)" if version else None

    def aux_id_rules(self, config: dict, names: dict, notes: list[Finding]) -> tuple[tuple[str, Convention], ...]:
        """A ``--vllm`` export (``layers.N.*`` tensors) of a ``kimi_k2`` drafter has had 1 added to its ids, top-level
        and nested: both are input-of-layer then (read so before the two locations are compared)."""
        if (
            has_prefix(names.values(), "layers.")
            and config.get("model_type") == "kimi_k2"
            and lookup(config, "eagle_config.eagle_aux_hidden_state_layer_ids")
        ):
            notes.append(
                Finding(
                    "aux.convention",
                    "info",
                    "TorchSpec --vllm export of a kimi_k2 drafter: its eagle_config ids already have +1"
                    " (input-of-layer)",
                    "eagle_config.eagle_aux_hidden_state_layer_ids",
                )
            )
            return tuple((location, INPUT) for location, _ in self.rules.aux_ids)
        return self.rules.aux_ids


DIALECT = TorchspecDialect()
