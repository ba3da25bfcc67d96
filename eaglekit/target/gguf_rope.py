"""A GGUF target runs the rope its file states, or not at all: llama.cpp's rope divisors (a GGUF file's ``rope_freqs``
tensor, ``gguf_config``) are put onto the target transformers loaded from that file, which runs the default rope
without them; a rope scaling stated in keys that transformers does not read (``gguf_config.stated_rope_scaling``) is
refused before the load.

llama.cpp rotates frequency i of every layer by ``theta_base / rope_freqs[i]`` (its llama model; ``ggml_rope_cache_init``):
the default inverse frequencies, each divided by its divisor. transformers computes a Llama model's rotation from its
rotary module's ``inv_freq`` buffer, the default ``1 / theta^(2i/d)`` when it read no rope scaling. Dividing that
buffer by the divisors gives llama.cpp's rope, and for a file converted from a Llama 3.x checkpoint the rope of the
original model (``rope_type: llama3``): tests/test_gguf_rope.py holds the states so loaded to those of the original
checkpoint, on a file written by llama.cpp's own converter.

Only where both sides are known: a llama (or mistral) model, whose every layer llama.cpp rotates with the divisors, and
a rotary module whose ``inv_freq`` is still the default (were a later transformers to apply the divisors itself, its
buffer would already be divided, and is left). Anything else is refused with the reason, never run with a rope that
may not be the file's.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedError
from .config import TargetConfig

# transformers model types of the GGUF architectures whose every layer llama.cpp rotates with rope_freqs (its
# llama model serves both: src/models/llama.cpp)
EVERY_LAYER = ("llama", "mistral")


def _label(config: TargetConfig) -> str:
    return str(config.directory / config.gguf_file) if config.gguf_file else config.source


def check_loadable(config: TargetConfig) -> None:
    """Refuse, before the load, a GGUF target whose rope eaglekit would not run as the file states it."""
    from .gguf_config import ROPE_SCALING_KEY

    scaling = config.config.get(ROPE_SCALING_KEY) if config.gguf_file else None
    if scaling is not None:
        stated = ", ".join(f"{k} {v}" for k, v in scaling.items() if k != "rope_type")
        raise UnsupportedError(f"{_label(config)}: states rope scaling {scaling['rope_type']}{f' ({stated})' if stated else ''}, which transformers "
                               f"does not load (it would run the default rope) and eaglekit does not apply: give the model's safetensors directory")
    if config.rope_freqs is not None and config.model_type not in EVERY_LAYER:
        raise UnsupportedError(f"{_label(config)}: holds llama.cpp's rope_freqs, which transformers does not load; eaglekit applies them to "
                               f"{' and '.join(EVERY_LAYER)} targets only, not {config.model_type!r}: give the model's safetensors directory")


def apply_rope_freqs(model, config: TargetConfig) -> None:
    """Divide the rotary frequencies of ``model`` (loaded by transformers from ``config``'s GGUF file) by the file's
    ``rope_freqs``; nothing where the file has none."""
    if config.rope_freqs is None:
        return
    check_loadable(config)
    label = _label(config)
    rotaries = [m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor)]
    if not rotaries:
        raise UnsupportedError(f"{label}: holds llama.cpp's rope_freqs, and eaglekit finds no rotary module (inv_freq) in the loaded model to apply them to")
    for rotary in rotaries:
        inv_freq = rotary.inv_freq
        divisors = torch.tensor(config.rope_freqs, dtype=inv_freq.dtype, device=inv_freq.device)
        dim = 2 * divisors.shape[0]
        default = 1.0 / (config.rope.theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=inv_freq.device) / dim))
        if inv_freq.shape != divisors.shape:
            raise UnsupportedError(f"{label}: rope_freqs holds {divisors.shape[0]} divisors, the loaded model rotates {inv_freq.shape[0]} frequencies")
        if torch.allclose(inv_freq, default / divisors, rtol=1e-6, atol=0):
            continue  # the loader applied them
        if not torch.allclose(inv_freq, default, rtol=1e-6, atol=0):
            raise UnsupportedError(f"{label}: holds llama.cpp's rope_freqs, and the loaded model's rope is neither the default "
                                   f"(theta {config.rope.theta:g}) nor divided by them: eaglekit cannot tell which rope the file means")
        with torch.no_grad():
            for name in ("inv_freq", "original_inv_freq"):
                buffer = getattr(rotary, name, None)
                if isinstance(buffer, torch.Tensor) and buffer.shape == divisors.shape:
                    buffer.copy_(buffer / divisors)
