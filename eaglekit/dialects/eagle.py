"""SafeAILab EAGLE (the original EAGLE-3 code): ``midlayer.*``, usually ``pytorch_model.bin``, no embeddings.

EAGLE records no aux layer ids (it always captures input-of-layer 2, L//2, L-3), computes head_dim as
H // heads whatever the config says, and treats a missing ``rope_theta`` as 10000. Its EAGLE 3 math is plain
(pre-norm feedback, residual = h); an EAGLE 3.1 drafter in this layout says so in its config
(``fc_norm: true, norm_output: true``, with ``fc_norm.*`` tensors), and those flags are read as stated. The
writer still writes only plain EAGLE 3 Llama drafters: no 3.1, MLA, Qwen3 attention, several layers, or ids
other than the default.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..findings import Finding
from ..io.reader import Checkpoint
from ..model.architectures import written_as
from ..model.config_view import ConfigView
from ..model.drafter import INPUT, AuxLayers, Drafter, default_aux_ids
from ..model.hf_config import base_config
from .base import MIDLAYER, Clue, ConfigRules, Dialect, Key, NameMap, architecture_clue, has_prefix

NO_FLAGS = {
    "fc_norm": Key(("fc_norm",), False),  # EAGLE 3.1 in the EAGLE layout states its flags; EAGLE 3 has none
    "norm_before_fc": Key((), False),
    "norm_output": Key(("norm_output",), False),
    "norm_before_residual": Key((), False),
    "use_aux_hidden_state": Key((), True),
}


def is_default_pattern(ids: tuple[int, ...]) -> bool:
    """True when ids are (2, L//2, L-3) for some target depth L."""
    if len(ids) != 3:
        return False
    L = ids[2] + 3
    return tuple(sorted(ids)) == default_aux_ids(L)


class EagleDialect(Dialect):
    name = "eagle"
    summary = "SafeAILab EAGLE original: midlayer.*, pytorch_model.bin, no embeddings, ids fixed"
    reads = "EAGLE-3 training outputs and yuhuili/EAGLE3-* drafters (.bin or .safetensors)"
    writes = "config.json + model.safetensors, midlayer.*, explicit rope_theta; EAGLE 3 Llama drafters only"
    names = NameMap(rules=MIDLAYER)
    rules = ConfigRules(flags=NO_FLAGS, aux_ids=())
    schema = "config/eagle.schema.json"
    # vLLM and SGLang both load EAGLE's own layout (LlamaForCausalLM -> their Llama drafter, default capture layers)
    served_by = ("vllm", "sglang")
    evidence = (
        Clue("pytorch_model.bin", 30, lambda c, n, k: k.format == "bin"),
        architecture_clue("eagle", 20, alone=True),
        Clue("tensors named midlayer.*", 20, lambda c, n, k: has_prefix(n, "midlayer.")),
        Clue(
            "no eagle_config, no EAGLE 3.1 flags",
            10,
            lambda c, n, k: not any(x in c for x in ("eagle_config", "fc_norm", "norm_output", "speculators_config")),
        ),
        Clue(
            "no rope_theta (EAGLE assumes 10000)",
            5,
            lambda c, n, k: "rope_theta" not in c and "rope_parameters" not in c,
        ),
    )
    single_layer_model = True
    window_caveat = (
        "EAGLE's own code (cnets.py) builds full attention and reads neither key: run by EAGLE, the drafter attends"
        " past its window, unlike training (engines reading the keys apply them)"
    )

    def adjust(self, d: Drafter, top: ConfigView, ckpt: Checkpoint, notes: list[Finding]) -> Drafter:
        computed = d.hidden_size // d.num_heads
        if d.head_dim != computed:
            notes.append(
                Finding(
                    "config.head_dim",
                    "warning",
                    f"config head_dim {d.head_dim} is ignored by EAGLE's code, which uses hidden_size // heads ="
                    f" {computed}",
                    "head_dim",
                )
            )
            d = d.with_(head_dim=computed)
        recorded = (top.data.get("eaglekit") or {}).get("aux_layer_ids_input_convention")
        if d.aux.ids is None and isinstance(recorded, list) and all(isinstance(i, int) for i in recorded):
            # EAGLE ignores it; eaglekit wrote down which (default) layers the drafter was trained on
            d = d.with_(aux=AuxLayers(tuple(recorded), INPUT))
        return d

    def check_writable(self, d: Drafter) -> None:
        problems = []
        if d.eagle_version != "3":
            problems.append("it is an EAGLE 3.1 drafter (fc_norm / norm_output)")
        if d.flags.norm_before_fc:
            problems.append("it uses norm_before_fc")
        if d.parallel is not None:
            problems.append("it is a P-EAGLE drafter (parallel drafting, mask_hidden)")
        if d.attention != "llama":
            problems.append(f"its attention is {d.attention}, not Llama GQA")
        if d.num_layers != 1:
            problems.append(f"it has {d.num_layers} decoder layers")
        if d.flags.norm_before_residual:
            problems.append("it was trained with norm_before_residual")
        if not d.flags.use_aux_hidden_state:
            problems.append("it does not fuse aux hidden states")
        if d.attention_bias or d.mlp_bias:
            problems.append("it has biases")
        if d.hidden_size != d.target_hidden_size:
            problems.append("its hidden size differs from the target's (EAGLE takes embeddings from the target)")
        if d.num_aux != 3:
            problems.append(f"it fuses {d.num_aux} target layers, EAGLE always 3")
        ids = d.aux.as_input()
        if ids is not None:
            L = d.target_num_layers
            ok = ids == default_aux_ids(L) if L else is_default_pattern(ids)
            if not ok:
                problems.append(f"its aux layers {list(ids)} are not EAGLE's fixed default (2, L//2, L-3)")
        if d.low_rank_lm_head:
            problems.append("its lm_head is factorised")  # materialised by convert before this point
        if d.head_dim != d.hidden_size // d.num_heads:
            problems.append(f"its head_dim {d.head_dim} is not hidden_size // heads (EAGLE ignores head_dim)")
        if d.partial_rotary_factor != 1.0:  # EAGLE's cnets.py rotates every dimension of each head
            problems.append(f"its rope rotates {d.rotary_dim} of {d.head_dim} dimensions (partial_rotary_factor)")
        if problems:
            raise UnsupportedError("the eagle format cannot hold this drafter: " + "; ".join(problems))

    writes_t2d = True
    drops_full_vocab_maps = True  # EAGLE deletes the maps when the vocabularies are equal

    def tensor_names(self, d: Drafter) -> dict[str, str]:
        return {c: self.names.from_canonical(c) for c in sorted(d.tensors) if c != "embed_tokens.weight"}

    def config_keys(self, d: Drafter) -> dict:
        return {
            "architectures": [written_as(self.name, d.attention)],
            "model_type": "llama",
            **base_config(d),
            "draft_vocab_size": d.draft_vocab_size,
        }


DIALECT = EagleDialect()
