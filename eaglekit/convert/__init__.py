"""Conversion between dialects: plan (pure, from headers and the tiny vocab maps), then stream.

``plan_conversion`` reads the source into the canonical drafter, applies what the user asked (target
resolution, aux ids, the 3.0 -> 3.1 upgrade, dtype), lets the destination dialect name and select the
tensors, and validates the result. ``execute`` writes it: tensors one at a time (raw byte copies where the
bytes do not change), config.json last, all inside an atomic output directory.

Planning and copying import no torch (dtypes are ``dtypes.DType`` values, the vocab maps are read as ints); torch
is imported only to make a tensor: a cast, fc_norm ones, a materialised lm_head, a t2d synthesised from d2t.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError, ValidationFailed
from ..findings import errors
from ..io import dtypes, jsonfile
from ..io.atomic import atomic_directory
from ..io.reader import Checkpoint
from ..io.writer import WEIGHTS_MARK, Payload, TensorPlan, foreign_entries, write_checkpoint_tensors
from ..model.vocab_map import t2d_from_d2t
from .plan import (
    ConversionPlan,
    ConvertOptions,
    OutputTensor,
    check_output,
    plan_conversion,
    plan_loaded,
    refusal,
)


def _producer(t: OutputTensor, plan: ConversionPlan) -> Callable[[], Payload]:
    loaded = plan.loaded
    ckpt: Checkpoint = loaded.checkpoint
    if t.op.startswith(("rows:", "absolute", "synth:rope_freqs")):  # GGUF's stored forms (GGUFDialect.stored_value)

        def produce() -> Payload:
            values = plan.dialect.stored_value(t.op, ckpt.read(t.source) if t.source else None, plan.drafter)
            return _cast(values, t) if t.dtype != t.dtype_in else values

    elif t.op == "copy":

        def produce() -> Payload:
            return ckpt.byte_range(t.source) or ckpt.read(t.source)

    elif t.op == "cast":

        def produce() -> Payload:
            return _cast(ckpt.read(t.source), t)

    elif t.op == "synth:ones":

        def produce() -> Payload:
            import torch

            return torch.ones(t.shape, dtype=t.dtype.torch)

    elif t.op == "synth:t2d":

        def produce() -> Payload:
            import torch

            t2d = t2d_from_d2t(loaded.read_values("d2t"), t.shape[0])
            return torch.frombuffer(t2d, dtype=torch.bool) if t2d else torch.zeros(0, dtype=torch.bool)

    elif t.op == "synth:lm_head":

        def produce() -> Payload:
            up, down = loaded.read("lm_head.up.weight"), loaded.read("lm_head.down.weight")
            return _cast(up.float() @ down.float(), t)

    else:  # pragma: no cover - plan and producer are written together
        raise AssertionError(t.op)
    return produce


def _cast(values, t: OutputTensor):
    """``values`` in ``t``'s dtype; refused (UsageError) where finite values would become inf there (float16 holds at
    most
    65504). Raised while the output is still a temporary directory, so nothing is left at OUT."""
    import torch

    cast = values.to(t.dtype.torch)
    if cast.is_floating_point() and not bool(torch.isfinite(cast).all()):
        overflowed = torch.isinf(cast) & torch.isfinite(values)
        count = int(overflowed.sum())
        if count:
            largest = float(values[overflowed].abs().max())
            name = dtypes.name(t.dtype)
            raise UsageError(
                f"`dtype` {name}: tensor {t.source or t.name} holds {count} value{'s' * (count != 1)} up to {largest:g}"
                f" in magnitude, beyond {name}'s range (at most {torch.finfo(cast.dtype).max:g}), which would become"
                " inf; nothing written (keep the source's dtype, or use bfloat16)"
            )
    return cast


def execute(plan: ConversionPlan, out: str | Path, *, progress: Callable[[int], None] | None = None) -> list[str]:
    """Write the planned conversion atomically into ``out``; return the files written."""
    if errors(plan.findings):
        raise ValidationFailed(
            refusal("the converted drafter would not validate", errors(plan.findings)), plan.findings
        )
    from .. import __version__

    options = plan.options or ConvertOptions(to=plan.dialect.name)
    if any(t.op != "copy" or t.dtype != t.dtype_in for t in plan.tensors):  # torch makes these: its threads settled
        from ..target import threads

        threads.settle()
    if plan.dialect.single_file:
        return _execute_file(plan, Path(out), options, progress)
    ckpt = plan.loaded.checkpoint
    tensor_plans = [
        TensorPlan(t.name, t.dtype, t.shape, _producer(t, plan), ckpt.byte_range(t.source) if t.op == "copy" else None)
        for t in plan.tensors
    ]
    with atomic_directory(
        Path(out), force=options.force, protect=[plan.loaded.checkpoint.location], replaceable=foreign_entries
    ) as tmp:
        files = write_checkpoint_tensors(
            tmp,
            tensor_plans,
            max_shard_bytes=options.max_shard_bytes,
            progress=progress,
            metadata={WEIGHTS_MARK: __version__},
        )
        (tmp / "config.json").write_text(jsonfile.dumps(plan.config))
        files.append("config.json")
    return files


def _execute_file(plan: ConversionPlan, out: Path, options: ConvertOptions, progress) -> list[str]:
    """A single-file dialect (GGUF) writes the one file itself, from the plan's tensors in order."""
    assert plan.target is not None  # plan_conversion refuses a single-file output without one
    tensors = [(t.name, t.dtype, t.shape, _producer(t, plan)) for t in plan.tensors]
    plan.dialect.write_file(
        out,
        plan.drafter,
        plan.config,
        plan.target,
        tensors,
        force=options.force,
        protect=[plan.loaded.checkpoint.location],
        progress=progress,
    )
    return [out.name]


def convert(source: str | Path, out: str | Path, options: ConvertOptions) -> ConversionPlan:
    """Plan and write in one call (the library entry point)."""
    plan = plan_conversion(source, out, options)
    try:
        execute(plan, out)
    finally:
        plan.loaded.close()
    return plan


__all__ = [
    "ConversionPlan",
    "ConvertOptions",
    "OutputTensor",
    "check_output",
    "convert",
    "execute",
    "plan_conversion",
    "plan_loaded",
]
