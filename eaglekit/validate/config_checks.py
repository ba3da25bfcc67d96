"""The config's switches and statements: the EAGLE 3 / 3.1 flags against each other and the tensors, and the keys an
engine rejects or runs otherwise (activation, dtype, MLA's q_lora_rank, a head or embeddings the drafter needs); the
rope's own checks are in ``rope_checks``."""

from __future__ import annotations

from ..findings import Finding
from ..io import dtypes
from ..model.config_view import shown
from .catalogue import CheckInput, finding, hf_blocks
from .rope_checks import mla_rope_reading, partial_rotary, rope_parameters, rope_theta_locations


def check_flags(x: CheckInput) -> list[Finding]:
    """The EAGLE 3 / 3.1 switches against each other and against the tensors they govern."""
    d, present = x.drafter, x.present
    out = []
    if d.provenance.untrained_upgrade:
        out.append(
            finding(
                "flags.untrained_upgrade",
                "warning",
                "eaglekit upgraded this drafter to EAGLE 3.1 with fc_norm weights of ones and "
                "it has not been trained since: its acceptance will be poor until it is fine-tuned",
                "fc_norm",
            )
        )
    if d.flags.fc_norm and d.flags.norm_before_fc:
        out.append(
            finding(
                "flags.fc_norm_and_norm_before_fc",
                "error",
                "fc_norm and norm_before_fc are both true; a drafter uses one or neither",
                "fc_norm",
            )
        )
    if not d.flags.fc_norm and any(n.startswith("fc_norm.") for n in present):
        out.append(
            finding(
                "flags.fc_norm_without_flag",
                "error",
                "fc_norm.* tensors are present but fc_norm is not true (engines refuse or ignore them)",
                "fc_norm",
            )
        )
    if not d.flags.norm_before_fc and "input_norm.weight" in present:
        out.append(
            finding(
                "flags.input_norm_without_flag",
                "error",
                "input_norm.weight is present but norm_before_fc is not true: vLLM silently drops the norm",
                "norm_before_fc",
            )
        )
    if not d.flags.use_aux_hidden_state and "fc.weight" in present:
        out.append(
            finding(
                "flags.fc_without_aux",
                "warning",
                "fc.weight is present but use_aux_hidden_state is false: engines drop fc",
                "use_aux_hidden_state",
            )
        )
    return out


def check_config(x: CheckInput) -> list[Finding]:
    """config.json's statements an engine rejects or runs otherwise: activation, dtypes, rope, MLA, a head or the
    embeddings it needs."""
    d = x.drafter
    out = []
    if d.hidden_act != "silu":
        out.append(
            finding(
                "config.hidden_act",
                "error",
                f"hidden_act is {d.hidden_act!r}; EAGLE 3 drafters use silu (vLLM rejects others)",
                "hidden_act",
            )
        )
    out += _config_dtypes(x)
    out += partial_rotary(x)
    out += rope_theta_locations(x)
    if d.attention == "mla" and (d.mla is None or not d.mla.q_lora_rank):
        out.append(
            finding(
                "mla.q_lora_rank",
                "error",
                "MLA drafter without q_lora_rank: vLLM and SGLang cannot load it",
                "q_lora_rank",
            )
        )
    if d.attention == "mla" and d.rope.rope_type not in ("default", "yarn", "deepseek_yarn"):
        out.append(mla_rope_reading(d))
    else:
        out += rope_parameters(d)
    if not x.present.get("lm_head.weight") and not x.present.get("lm_head.up.weight"):
        if d.pruned_vocab or d.hidden_size != d.target_hidden_size:
            why = "draft_vocab_size != vocab_size" if d.pruned_vocab else "hidden_size != target_hidden_size"
            out.append(
                finding(
                    "vocab.lm_head_needed",
                    "error",
                    f"no lm_head.weight although {why}: the target's lm_head cannot stand in",
                    "lm_head.weight",
                )
            )
    if d.hidden_size != d.target_hidden_size and "embed_tokens.weight" not in x.present:
        out.append(
            finding(
                "embed.needed",
                "error",
                f"no embed_tokens.weight although hidden_size {d.hidden_size} != target_hidden_size"
                f" {d.target_hidden_size}: the target's embeddings do not fit (vLLM keeps uninitialised ones)",
                "embed_tokens.weight",
            )
        )
    return out


def _config_dtypes(x: CheckInput) -> list[Finding]:
    """config.json's ``torch_dtype`` and ``dtype`` (transformers 5 writes the latter), where it holds HF keys, beside
    torch's dtype names and the weights' own dtype. transformers' config classes raise on a name torch has none of, at
    the top level and (built from it) in speculators' transformer_layer_config (5.19 and 5.24, run here). eaglekit
    itself reads the weights' dtype and never the config's (convert writes the weights').
    """
    out = []
    weights = x.drafter.dtype
    stated = (
        (prefix + name, block.get(name)) for prefix, block in hf_blocks(x.config) for name in ("torch_dtype", "dtype")
    )
    for key, value in stated:
        if value is None:
            continue
        if not isinstance(value, str):
            out.append(
                finding(
                    "config.dtype",
                    "error",
                    f"{key} is {shown(value)}; expected the name of a torch dtype such as 'bfloat16'",
                    key,
                )
            )
            continue
        own = dtypes.torch_name(value)
        if own is None:
            out.append(
                finding(
                    "config.dtype",
                    "error",
                    f"{key} is {shown(value)}, which names no torch dtype: transformers cannot load this config "
                    f"(its config classes raise on it){_weights_are(weights)}",
                    key,
                )
            )
        elif not dtypes.is_floating_name(own):
            out.append(
                finding(
                    "config.dtype",
                    "warning",
                    f"{key} is {shown(value)}, not a floating-point dtype: a reader that takes the drafter's "
                    f"dtype from config.json casts its weights to {own}{_weights_are(weights)}",
                    key,
                )
            )
        elif weights is not None and own != weights:
            out.append(
                finding(
                    "config.dtype",
                    "info",
                    f"{key} is {shown(value)} but the weights are {weights}: a reader that takes the dtype "
                    "from config.json casts them",
                    key,
                )
            )
    return out


def _weights_are(weights: str | None) -> str:
    return f"; the weights are {weights} (eaglekit convert writes that)" if weights else ""
