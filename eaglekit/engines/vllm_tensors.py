"""The tensors vLLM's drafter has parameters for against those a checkpoint ships, release by release: what it
refuses, drops without a word, starts at zeros or leaves uninitialised, and where its embeddings and head come
from; a stage of ``engines/vllm.py`` ``interpret``."""

from __future__ import annotations

from dataclasses import replace

from ..model.drafter import Drafter, Flags
from ..model.layout import expected_tensors
from .common import Recorder, listed, missing_tensors
from .vllm_reading import Reading

# the shard names DeepseekV2Eagle3Model.load_weights maps onto fused parameters (vLLM 0.22.0-0.24.0)
_MLA_STACKED = (".gate_proj", ".up_proj", ".q_a_proj", ".kv_a_proj_with_mqa")


def _mla_dropped(out: Recorder, unknown: list[str]) -> list[str]:
    """vLLM 0.22.0-0.24.0's MLA drafter (deepseek_eagle3.py DeepseekV2Eagle3Model.load_weights) skips a name it has no
    parameter for without a word. Still refused there, and returned: a name with lm_head (the top-level
    AutoWeightsLoader raises) or with a shard name it maps onto a fused parameter (params_dict[name]: KeyError)."""
    refused = [n for n in unknown if "lm_head" in n or any(s in n for s in _MLA_STACKED)]
    dropped = [n for n in unknown if n not in refused]
    if dropped:
        many = len(dropped) > 1
        out.add(
            "engine.unknown_tensor",
            "error",
            f"{'tensors' if many else 'tensor'} {listed(dropped)} {'are' if many else 'is'} not a parameter of the"
            " drafter it builds",
            f"skips {'them' if many else 'it'} without a word (its MLA drafter's loader drops names it has no parameter"
            " for): the drafter runs without them",
            dropped[0],
        )
    return refused


def _unknown_refusal(unknown: list[str], drops_unknown: bool) -> str:
    """How vLLM's load fails on the tensors ``unknown`` (non-empty) it has no parameter for. Where its MLA loader drops
    such names (``drops_unknown``), only those ``_mla_dropped`` returns are left: a name with lm_head, refused by the
    top-level loader, else a shard name mapped onto a fused parameter the drafter lacks."""
    named = next((n for n in unknown if "lm_head" in n), None) if drops_unknown else unknown[0]
    if named is not None:
        return f"refuses to load: no module or parameter named {named!r}"
    return f"refuses to load: its loader maps {unknown[0]!r} onto a fused parameter it does not have (KeyError)"


def _unknown_names(out: Recorder, r: Reading, unexpected: list[str], flags: Flags) -> list[str]:
    """Of the shipped names vLLM's drafter has no parameter for (``unexpected``), those its load stumbles on: not the
    ones it skips (the maps it reads apart, an input_norm it drops, with a finding where it matters, an fc it does not
    build, the embeddings and head it may take from the target) nor those already reported (a model. prefix)."""
    intended, family, loaded = r.intended, r.family, r.loaded
    unknown: list[str] = []
    for name in unexpected:
        if name == "t2d" or name == "mask_hidden":
            continue
        if name == "input_norm.weight" and not flags.norm_before_fc and family != "mla":
            if intended.flags.norm_before_fc or "input_norm.weight" in loaded.names:
                out.add(
                    "engine.input_norm_dropped",
                    "error",
                    "input_norm.weight is shipped",
                    "drops it silently (norm_before_fc is not set as it reads the config): runs without the pre-fc"
                    " norm",
                    name,
                )
            continue
        if name == "fc.weight" and not flags.use_aux_hidden_state:
            continue
        if name.startswith("embed_tokens") or name.startswith("lm_head.weight"):
            continue
        if name.startswith("model."):
            continue  # already reported
        unknown.append(name)
    return unknown


def tensors(out: Recorder, r: Reading, engine_drafter: Drafter, flags: Flags, counted: int, fc_states: int) -> None:
    """The tensors vLLM's drafter has parameters for against those shipped: refused, dropped, left uninitialised."""
    intended, family, loaded = r.intended, r.family, r.loaded
    vllm_names = {("layers.0." + n[len("midlayer.") :] if n.startswith("midlayer.") else n) for n in r.raw_names}
    expected = expected_tensors(
        replace(engine_drafter, flags=flags, num_aux=fc_states if "fc.weight" in loaded.names else counted)
    )
    if "d2t" in vllm_names and not intended.pruned_vocab and r.rules["full_vocab_d2t"] == "refused":
        out.refuse(
            "engine.full_vocab_d2t",
            "d2t is shipped although draft_vocab_size == vocab_size",
            "refuses to load: no module or parameter named 'draft_id_to_target_id'",
            "d2t",
        )
    unknown = _unknown_names(out, r, sorted(vllm_names - set(expected)), flags)
    drops_unknown = family == "mla" and r.rules.get("mla_unknown_tensors") == "dropped"
    if unknown and drops_unknown:
        unknown = _mla_dropped(out, unknown)
    if unknown:
        out.refuse(
            "engine.unknown_tensor",
            f"{'tensors' if len(unknown) > 1 else 'tensor'} {listed(unknown)} {'are' if len(unknown) > 1 else 'is'} not"
            " a parameter of the drafter it builds",
            _unknown_refusal(unknown, drops_unknown),
            unknown[0],
        )
    # llama_eagle3.py (0.22.0-0.32.0) allocates draft_id_to_target_id with torch.zeros
    missing_tensors(
        out, expected, vllm_names, zeroed={"d2t": "draft token i is taken for target token i (the offsets are all 0)"}
    )
    if not intended.ships_embed and intended.hidden_size != intended.target_hidden_size:
        if r.rules["v1_embed_width_check"]:
            effect = "keeps uninitialised embeddings (v1) or fails with a width mismatch (MRv2)"
        else:  # _maybe_share_embeddings shares the target's whatever its width (vLLM 0.22.0-0.24.0)
            effect = (
                f"gives it the target's embeddings, {intended.target_hidden_size} wide, on either runner: its forward"
                " fails the first time it runs (it asserts the embeddings are as wide as its"
                f" {intended.hidden_size}-wide hidden states)"
            )
        out.add("engine.embed", "error", "no embed_tokens and hidden_size != target hidden", effect)
    if r.config.get("tie_word_embeddings") is True and "lm_head.weight" in loaded.names:
        out.add(
            "engine.lm_head_tied",
            "info",
            "tie_word_embeddings is true beside a shipped lm_head.weight",
            "never reads tie_word_embeddings: runs the shipped lm_head (its EAGLE 3 drafter classes, every wheel read)",
            "tie_word_embeddings",
        )
    if intended.pruned_vocab and "lm_head.weight" not in loaded.names:
        # _maybe_share_lm_head gives the drafter the target's V-row head; compute_logits then scatters V logits onto
        # the draft_vocab_size mapped ids (llama_eagle3.py, 0.32.0 source)
        out.add(
            "engine.lm_head_shape",
            "error",
            f"no lm_head.weight, and draft_vocab_size {intended.draft_vocab_size} < vocab_size {intended.vocab_size}",
            "loads with the target's head, then crashes at the first draft step: its logits have vocab_size columns"
            " where the d2t map places draft_vocab_size",
            "lm_head.weight",
        )
    if not r.speculators and "target_hidden_size" in r.config and r.config["target_hidden_size"] is None:
        out.refuse(
            "engine.target_hidden_size",
            "target_hidden_size is null",
            "refuses to build the drafter: it multiplies target_hidden_size (None, not the default) by the fused-state"
            " count",
            "target_hidden_size",
        )
