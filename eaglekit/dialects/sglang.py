"""SGLang / SpecForge layout: ``LlamaForCausalLMEagle3``, ``midlayer.*``, ids nested in ``eagle_config`` as
output-of-layer ids (SGLang adds 1 when capturing).

Two traps are handled here. SGLang's legacy 3.1 spellings (``use_aux_norm``, ``aux_norm_{low,mid,high}``)
are read as ``fc_norm``. And ``norm_output`` means two things in this layout:

- SGLang (the engine) and EAGLE 3.1: feed the state *after* the final norm to the next draft step.
- SpecForge 0.2.0 (``specforge/modeling/draft/llama3_eagle.py``: ``self.norm_output = getattr(config,
  "norm_output", True)``; ``compute_logits`` applies ``self.norm`` only when it is true): apply the final norm
  before lm_head; false means lm_head reads the un-normalised state. The state fed to the next step is always
  the pre-norm one (``backbone``'s output). SpecForge 0.1.0 has no such key: it always applies the norm.

The key cannot tell which; a config eaglekit wrote records the reading (``eaglekit.norm_output_semantics``),
``--norm-output-semantics`` lets the user say, and otherwise the EAGLE 3.1 reading is taken with a warning that
names both. Absent, both meanings agree (plain EAGLE 3), so the writer leaves the key out for EAGLE 3 drafters.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import UnsupportedError
from ..findings import Finding
from ..io.reader import Checkpoint
from ..model.architectures import written_as
from ..model.config_view import ConfigView
from ..model.drafter import NORM_OUTPUT_SEMANTICS, Drafter
from ..model.hf_config import base_config, model_type_for
from .base import (
    INPUT,
    MIDLAYER,
    OUTPUT,
    Clue,
    ConfigRules,
    Dialect,
    Key,
    NameMap,
    architecture_clue,
    has_prefix,
    written_by_eaglekit,
)

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
    reads = (
        "SpecForge and lmsys sglang-EAGLE3 checkpoints, legacy use_aux_norm / aux_norm_{low,mid,high}, MLA; SpecForge's"
        " P-EAGLE (PEagleDraftModel)"
    )
    writes = "config.json + model.safetensors: midlayer.* (loads in older SGLang too), no embeddings, t2d and d2t"
    names = NameMap(rules=MIDLAYER)
    rules = ConfigRules(
        flags=SGLANG_FLAGS,
        aux_ids=(
            ("eagle_config.eagle_aux_hidden_state_layer_ids", OUTPUT),
            ("eagle_aux_hidden_state_layer_ids", INPUT),
        ),
        # P-EAGLE (SpecForge's PEagleDraftModel): SpecForge keeps the token in its training config, where a draft
        # config's dflash_config.mask_token_id is read first (specforge 0.2.0's training/model_utils.py
        # resolve_mask_token_id); eaglekit's writer states mask_token_id
        mask_token=("mask_token_id", "dflash_config.mask_token_id"),
    )
    schema = "config/sglang.schema.json"
    library_name = "sglang"
    hub_tags = ("sglang",)
    served_by = ("sglang",)
    writes_t2d = True
    drops_full_vocab_maps = False
    holds_unnormed_lm_head = True  # SpecForge's norm_output: false
    window_caveat = (
        "SGLang is not known to apply them: its llama_eagle3.py reads neither key for the draft layer (source, not"
        " run); SpecForge 0.2.0's EAGLE 3 draft model (llama3_eagle.py) reads neither and runs full attention (source)"
    )
    evidence = (
        architecture_clue("sglang", 30),
        Clue("tensors named midlayer.*", 20, lambda c, n, k: has_prefix(n, "midlayer.")),
        Clue(
            "aux layer ids only in eagle_config",
            20,
            lambda c, n, k: (
                bool((c.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids"))
                and "eagle_aux_hidden_state_layer_ids" not in c
            ),
        ),
        Clue(
            "SGLang's legacy use_aux_norm / aux_norm_* names",
            40,
            lambda c, n, k: "use_aux_norm" in c or has_prefix(n, "aux_norm_"),
        ),
        Clue(
            "safetensors file, no embeddings, t2d shipped",
            10,
            lambda c, n, k: k.format == "safetensors" and "t2d" in n and not has_prefix(n, "embed_tokens"),
        ),
    )
    single_layer_model = True

    def pins_convention(self, ckpt: Checkpoint) -> str | None:
        config = ckpt.config or {}
        if "use_aux_norm" in config or has_prefix(ckpt.tensors, "aux_norm_"):
            return "SGLang's own legacy names (use_aux_norm / aux_norm_*)"
        return None

    def read_norm_output(self, d: Drafter, top: ConfigView, semantics: str, notes: list[Finding]) -> Drafter:
        raw = top.data.get("norm_output")
        if not isinstance(raw, bool):
            return d  # absent: SGLang and SpecForge agree (EAGLE 3); a non-boolean was refused by read_flags
        block = top.data.get("eaglekit") if isinstance(top.data.get("eaglekit"), dict) else {}
        recorded = (
            block.get("norm_output_semantics") if block.get("norm_output_semantics") in NORM_OUTPUT_SEMANTICS else None
        )
        if recorded is None and written_by_eaglekit(top.data, self.name):
            recorded = "eagle31"  # eaglekit wrote it before it recorded the reading: always EAGLE 3.1's
        chosen = semantics if semantics in NORM_OUTPUT_SEMANTICS else recorded
        reading = chosen or "eagle31"
        if reading == "specforge":
            flags = replace(d.flags, norm_output=False, norm_before_lm_head=raw)
        else:
            flags = replace(d.flags, norm_output=raw, norm_before_lm_head=True)
        d = d.with_(flags=flags, norm_output_semantics=reading, norm_output_certain=chosen is not None)
        if chosen is None:
            notes.append(ambiguity(raw))
        elif not flags.norm_before_lm_head:
            notes.append(
                Finding(
                    "flags.lm_head_unnormed",
                    "warning",
                    "norm_output: false read as SpecForge's: lm_head reads the un-normalised state (no final norm"
                    " before lm_head); vLLM and SGLang always apply the final norm, so no engine serves it as trained",
                    "norm_output",
                )
            )
        return d

    def check_writable(self, d: Drafter) -> None:
        if d.parallel is not None:
            _check_peagle_writable(d)
            return
        if d.attention == "qwen3":
            raise UnsupportedError(
                "SGLang's EAGLE 3 Llama drafter has no q_norm/k_norm: a qwen3-attention drafter cannot be written as"
                " sglang"
            )
        if d.flags.norm_before_fc:
            raise UnsupportedError("SGLang's EAGLE 3 drafter has no norm_before_fc (input_norm) path")
        if d.flags.norm_output and not d.flags.norm_before_lm_head:
            raise UnsupportedError(
                "the drafter feeds the post-norm state forward (norm_output) and its lm_head reads the un-normalised "
                "state: one norm_output key cannot say both"
            )
        if d.attention == "mla" and (d.mla is None or not d.mla.q_lora_rank):
            raise UnsupportedError("SGLang's MLA drafter requires q_lora_rank")

    def tensor_names(self, d: Drafter) -> dict[str, str]:
        if d.parallel is not None:  # SpecForge's PEagleDraftModel: layers.N.*, its own embedding, mask_hidden
            return {c: c for c in sorted(d.tensors)}
        # midlayer.* loads in every SGLang; multi-layer and MLA drafters need layers.N.* (newer SGLang)
        rename = (
            (lambda c: self.names.from_canonical(c)) if d.num_layers == 1 and d.attention != "mla" else (lambda c: c)
        )
        names = {c: rename(c) for c in sorted(d.tensors)}
        if d.hidden_size == d.target_hidden_size:
            names.pop("embed_tokens.weight", None)  # SGLang shares the target's embedding
        return names

    def config_keys(self, d: Drafter) -> dict:
        if d.parallel is not None:
            return _peagle_config(d)
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
            "norm_before_residual": d.flags.norm_before_residual,
            "eagle_config": eagle_config,
        }
        # norm_output as both readers of this layout run it: absent is EAGLE 3 for SGLang and SpecForge alike;
        # true is EAGLE 3.1 for SGLang; false is SpecForge's "no final norm before lm_head"
        if not d.flags.norm_before_lm_head:
            config["norm_output"] = False
        elif d.flags.norm_output:
            config["norm_output"] = True
        return config

    def write_config(self, d: Drafter) -> dict:
        config = super().write_config(d)
        if "norm_output" in config:
            config["eaglekit"]["norm_output_semantics"] = "specforge" if not d.flags.norm_before_lm_head else "eagle31"
        return config


def _check_peagle_writable(d: Drafter) -> None:
    """What SpecForge's P-EAGLE draft model (specforge 0.2.0's modeling/draft/peagle.py PEagleDraftModel) cannot
    hold: it has a Llama layer stack over fc of exactly 3 fused states, no fc_norm, input_norm or q/k norms, and feeds
    nothing forward (no norm_output). No SGLang release serves P-EAGLE (0.5.23's source: no mask_hidden, no parallel
    drafting)."""
    why = []
    if d.flags.fc_norm or d.flags.norm_output:
        why.append("EAGLE 3.1 flags (fc_norm / norm_output)")
    if d.flags.norm_before_fc:
        why.append("norm_before_fc")
    if d.attention != "llama":
        why.append(f"{d.attention} attention")
    if d.num_aux != 3:
        why.append(f"{d.num_aux} fused states (it fuses exactly 3)")
    if d.parallel.mask_token_id is None:
        why.append("no mask token")
    if why:
        raise UnsupportedError(
            "SpecForge's P-EAGLE draft model (PEagleDraftModel) cannot hold this drafter: "
            + ", ".join(why)
            + "; write speculators or vllm"
        )


def _peagle_config(d: Drafter) -> dict:
    """SpecForge's P-EAGLE draft config: its LlamaConfig with the class name, norm_before_residual and the draft
    vocabulary, ids output-of-layer in eagle_config (as its capture layers are resolved), the mask token stated."""
    ids = d.aux.as_output()
    config = {
        "architectures": [written_as("sglang", d.attention, True)],
        "model_type": model_type_for(d),
        **base_config(d),
        "draft_vocab_size": d.draft_vocab_size,
        "target_hidden_size": d.target_hidden_size,
        "norm_before_residual": d.flags.norm_before_residual,
        "mask_token_id": d.parallel.mask_token_id,
    }
    if ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(ids)}
    return config


def ambiguity(raw: bool) -> Finding:
    """The warning for a norm_output key nobody said the meaning of: one line (the reading taken, the other, how to
    choose), the two readings at length in its ``detail``."""
    if raw:
        message = (
            "norm_output: true read as EAGLE 3.1's; SpecForge 0.2.0 meant plain EAGLE 3 by it: `norm_output_semantics`"
            " says which, `eaglekit verify` measures both"
        )
        readings = (
            "EAGLE 3.1's (the state after the final norm feeds the next step; read so) or SpecForge 0.2.0's (final "
            "norm before lm_head, pre-norm feedback: plain EAGLE 3, which engines would run with post-norm feedback)"
        )
    else:
        message = (
            "norm_output: false read as plain EAGLE 3; SpecForge 0.2.0 meant an un-normalised lm_head by it:"
            " `norm_output_semantics` says which, `eaglekit verify` measures both"
        )
        readings = (
            "EAGLE 3.1's (plain EAGLE 3; read so) or SpecForge 0.2.0's (lm_head reads the un-normalised state, no final"
            " norm: vLLM and SGLang always apply it, so the drafter could not be served as trained)"
        )
    detail = (
        f"norm_output: {str(raw).lower()} in a SpecForge-style config has two readings: {readings}; pass "
        "`norm_output_semantics` eagle31 or specforge to say which training used; verify measures the acceptance "
        "under each and names the one the weights were trained with. A conversion records the reading it was made "
        "with, so its output is not in doubt"
    )
    return Finding("flags.norm_output_semantics", "warning", message, "norm_output", detail=detail)


DIALECT = SglangDialect()
