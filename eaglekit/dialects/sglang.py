"""SGLang / SpecForge layout: ``LlamaForCausalLMEagle3``, ``midlayer.*``, ids nested in ``eagle_config`` as
output-of-layer ids (SGLang adds 1 when capturing).

Two traps are handled here. SGLang's legacy 3.1 spellings (``use_aux_norm``, ``aux_norm_{low,mid,high}``)
are read as ``fc_norm``. And SpecForge before PR #879 (2026-09-15) wrote ``norm_output: true`` meaning
"apply the final norm before lm_head" while still feeding the *pre*-norm state to the next step; engines
read the flag as EAGLE 3.1 post-norm feedback. The flag cannot tell which, so reading one says so.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..findings import Finding
from ..io.reader import Checkpoint
from ..model.config_view import ConfigView
from ..model.drafter import Drafter
from ..model.architectures import written_as
from ..model.hf_config import base_config, model_type_for
from .base import INPUT, MIDLAYER, OUTPUT, Clue, ConfigRules, Dialect, Key, NameMap, architecture_clue, has_prefix, written_by_eaglekit

SGLANG_FLAGS = {
    "fc_norm": Key(("fc_norm", "use_aux_norm"), False),
    "norm_before_fc": Key(("eagle_config.norm_before_fc", "norm_before_fc"), False),
    "norm_output": Key(("norm_output",), False),
    "norm_before_residual": Key(("norm_before_residual",), False),
    "use_aux_hidden_state": Key(("eagle_config.use_aux_hidden_state",), True),
}


class SglangDialect(Dialect):
    name = "sglang"
    aliases = ("specforge",)
    summary = "SGLang / SpecForge: LlamaForCausalLMEagle3, midlayer.*, ids in eagle_config (output-of-layer)"
    reads = "SpecForge and lmsys sglang-EAGLE3 checkpoints, legacy use_aux_norm / aux_norm_{low,mid,high}, MLA"
    writes = "config.json + model.safetensors: midlayer.* (loads in older SGLang too), no embeddings, t2d and d2t"
    names = NameMap(rules=MIDLAYER)
    rules = ConfigRules(
        flags=SGLANG_FLAGS,
        aux_ids=(
            ("eagle_config.eagle_aux_hidden_state_layer_ids", OUTPUT),
            ("eagle_aux_hidden_state_layer_ids", INPUT),
        ),
    )
    schema = "config/sglang.schema.json"
    library_name = "sglang"
    hub_tags = ("sglang",)
    writes_t2d = True
    drops_full_vocab_maps = False
    evidence = (
        architecture_clue("sglang", 30),
        Clue("tensors named midlayer.*", 20, lambda c, n, k: has_prefix(n, "midlayer.")),
        Clue(
            "aux layer ids only in eagle_config",
            20,
            lambda c, n, k: bool((c.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids"))
            and "eagle_aux_hidden_state_layer_ids" not in c,
        ),
        Clue("SGLang's legacy use_aux_norm / aux_norm_* names", 40, lambda c, n, k: "use_aux_norm" in c or has_prefix(n, "aux_norm_")),
        Clue("safetensors file, no embeddings, t2d shipped", 10, lambda c, n, k: k.format == "safetensors" and "t2d" in n and not has_prefix(n, "embed_tokens")),
    )
    single_layer_model = True

    def pins_convention(self, ckpt: Checkpoint) -> str | None:
        config = ckpt.config or {}
        if "use_aux_norm" in config or has_prefix(ckpt.tensors, "aux_norm_"):
            return "SGLang's own legacy names (use_aux_norm / aux_norm_*)"
        return None

    def adjust(self, d: Drafter, top: ConfigView, ckpt: Checkpoint, notes: list[Finding]) -> Drafter:
        if d.flags.norm_output and not written_by_eaglekit(top.data, self.name):
            notes.append(
                Finding(
                    "flags.norm_output_semantics",
                    "warning",
                    "norm_output: true in a SpecForge-style config: SpecForge before PR #879 (2026-09-15) trained such "
                    "drafters with pre-norm feedback (EAGLE 3), while engines feed the post-norm state; check with "
                    "`eaglekit verify`, and set norm_output to what training did",
                    "norm_output",
                )
            )
        return d

    def check_writable(self, d: Drafter) -> None:
        if d.attention == "qwen3":
            raise UnsupportedError("SGLang's EAGLE 3 Llama drafter has no q_norm/k_norm: a qwen3-attention drafter cannot be written as sglang")
        if d.flags.norm_before_fc:
            raise UnsupportedError("SGLang's EAGLE 3 drafter has no norm_before_fc (input_norm) path")
        if d.attention == "mla" and (d.mla is None or not d.mla.q_lora_rank):
            raise UnsupportedError("SGLang's MLA drafter requires q_lora_rank")

    def tensor_names(self, d: Drafter) -> dict[str, str]:
        # midlayer.* loads in every SGLang; multi-layer and MLA drafters need layers.N.* (newer SGLang)
        rename = (lambda c: self.names.from_canonical(c)) if d.num_layers == 1 and d.attention != "mla" else (lambda c: c)
        names = {c: rename(c) for c in sorted(d.tensors)}
        if d.hidden_size == d.target_hidden_size:
            names.pop("embed_tokens.weight", None)  # SGLang shares the target's embedding
        return names

    def config_keys(self, d: Drafter) -> dict:
        ids = d.aux.as_output()
        eagle_config: dict = {}
        if ids is not None:
            eagle_config["eagle_aux_hidden_state_layer_ids"] = list(ids)
        eagle_config["use_aux_hidden_state"] = d.flags.use_aux_hidden_state
        config = {
            "architectures": [written_as(self.name, d.attention)],
            "model_type": model_type_for(d),
            **base_config(d),
            # SGLang loads the target's lm_head only when draft_vocab_size is null; a number with no lm_head shipped
            # makes it run an uninitialised head (sglang#27829/#27908; SGLang's llama_eagle3.py, not run here)
            "draft_vocab_size": d.draft_vocab_size if d.ships_lm_head else None,
            "target_hidden_size": d.target_hidden_size,
            "num_aux_hidden_states": d.num_aux,
            "fc_norm": d.flags.fc_norm,
            "norm_output": d.flags.norm_output,
            "norm_before_residual": d.flags.norm_before_residual,
            "eagle_config": eagle_config,
        }
        return config


DIALECT = SglangDialect()
