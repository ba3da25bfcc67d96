"""What a checkpoint is, from headers alone: the data behind ``eaglekit inspect``."""

from __future__ import annotations

from collections import Counter

from . import dialects
from .dialects.base import LoadedDrafter, Reading
from .findings import Finding
from .io import dtypes
from .model.drafter import Drafter, window_dict


def hints(loaded: LoadedDrafter) -> list[Finding]:
    """What inspect can tell from the names alone and validate would report at length."""
    d = loaded.drafter
    out = []
    if d.flags.fc_norm:
        missing = [f"fc_norm.{i}.weight" for i in range(d.num_aux) if f"fc_norm.{i}.weight" not in loaded.names]
        if missing:
            out.append(
                Finding(
                    "tensor.missing",
                    "warning",
                    f"fc_norm is true but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: engines"
                    " run with unit weights in their place, without a word (see `eaglekit validate`)",
                    missing[0],
                )
            )
    return out


def aux_layers(loaded: LoadedDrafter) -> dict:
    """The aux layer ids as recorded and read. An ambiguous checkpoint has no one reading: ``convention`` and
    ``input_ids`` are null and ``readings`` holds every reading; otherwise ``readings`` holds the one taken."""
    d, ambiguity = loaded.drafter, loaded.ambiguity
    ids_in = d.aux.as_input()
    if ambiguity is not None:
        readings = [r.to_dict() for r in ambiguity.readings]
    elif d.aux.ids is not None:
        readings = [Reading(loaded.dialect, d.aux.convention, d.aux.ids, "the reading taken").to_dict()]
    else:
        readings = []
    return {
        "ids": list(d.aux.ids) if d.aux.ids is not None else None,
        "convention": d.aux.convention if d.aux.ids is not None and ambiguity is None else None,
        "input_ids": list(ids_in) if ids_in is not None and ambiguity is None else None,
        "readings": readings,
        "num_aux": d.num_aux,
    }


def describe(loaded: LoadedDrafter) -> dict:
    """The inspect report of ``loaded``: the checkpoint's files and dialect, the drafter's shape and how it is read,
    its tensors and provenance, the findings (schemas/inspect.schema.json)."""
    tensors = _tensor_rows(loaded)
    findings = [n.to_dict() for n in loaded.notes + hints(loaded)]  # under "findings", as validate's are
    return {
        **_checkpoint_part(loaded),
        **_drafter_part(loaded.drafter),
        "aux_layers": aux_layers(loaded),
        **_reading_part(loaded.drafter),
        **_contents_part(loaded, tensors),
        "ambiguous": loaded.ambiguity is not None,
        "ambiguity": loaded.ambiguity.to_dict() if loaded.ambiguity else None,
        "unknown_tensors": loaded.unknown,
        "findings": findings,
        "notes": findings,  # the same list, under the key inspect used before; dropped at schema version 3
        "tensors": tensors,
    }


def _tensor_rows(loaded: LoadedDrafter) -> list[dict]:
    """One row per stored tensor: its name, the canonical name it maps to, shape, dtype, file and size."""
    to_canonical = {s: c for c, s in loaded.names.items()}
    return [
        {
            "name": info.name,
            "canonical": to_canonical.get(info.name),
            "shape": list(info.shape),
            "dtype": dtypes.name(info.dtype),
            "file": info.file,
            "nbytes": info.nbytes,
        }
        for info in loaded.checkpoint.tensors.values()
    ]


def _checkpoint_part(loaded: LoadedDrafter) -> dict:
    """The files, and the dialect they were read as (detected with its evidence, or given) beside the candidates."""
    ckpt = loaded.checkpoint
    return {
        "source": ckpt.label,
        "directory": str(ckpt.directory),
        "format": ckpt.format,
        "files": ckpt.files,
        "index": ckpt.index_file,
        "sharded": len(ckpt.files) > 1,
        "dialect": (
            loaded.detection.to_dict()
            if loaded.detection
            else {"dialect": loaded.dialect, "score": None, "evidence": ["given with `source_dialect`"]}
        ),
        "candidates": [det.to_dict() for det in dialects.detect(ckpt) if det.score > 0],
    }


def _drafter_part(d: Drafter) -> dict:
    """The drafter's shape: EAGLE version, attention, dimensions, vocab and what it ships."""
    return {
        "eagle_version": d.eagle_version,
        "attention": d.attention,
        "dimensions": {
            "hidden_size": d.hidden_size,
            "target_hidden_size": d.target_hidden_size,
            "num_layers": d.num_layers,
            "num_heads": d.num_heads,
            "num_kv_heads": d.num_kv_heads,
            "head_dim": d.head_dim,
            "intermediate_size": d.intermediate_size,
            "mla": d.mla.__dict__ if d.mla else None,
        },
        "vocab": {
            "vocab_size": d.vocab_size,
            "draft_vocab_size": d.draft_vocab_size,
            "d2t": d.has_d2t,
            "t2d": d.has_t2d,
            "embed_tokens": d.ships_embed,
            "lm_head": "factorised" if d.low_rank_lm_head else d.ships_lm_head,
        },
    }


def _reading_part(d: Drafter) -> dict:
    """How the drafter runs: flags, the norm_output reading, window, P-EAGLE, rope, norm eps, verifier, dtype."""
    return {
        "flags": d.flags.__dict__,
        "norm_output_semantics": (
            {"reading": d.norm_output_semantics, "certain": d.norm_output_certain} if d.norm_output_semantics else None
        ),
        "window": window_dict(d),
        "parallel": (
            {
                "mask_token_id": d.parallel.mask_token_id,
                "mask_token_key": d.parallel.mask_token_key,
                "depth": d.parallel_depth,
            }
            if d.parallel is not None
            else None
        ),
        "rope": {"theta": d.rope.theta, "scaling": d.rope.scaling, "partial_rotary_factor": d.partial_rotary_factor},
        "rms_norm_eps": d.rms_norm_eps,
        "verifier": d.verifier,
        "dtype": d.dtype,
    }


def _contents_part(loaded: LoadedDrafter, tensors: list[dict]) -> dict:
    """What the files hold: dtypes, counts and sizes, and the provenance they record."""
    ckpt, p = loaded.checkpoint, loaded.drafter.provenance
    return {
        "dtypes": dict(Counter(t["dtype"] for t in tensors)),
        "num_tensors": len(tensors),
        "num_parameters": sum(info.numel for info in ckpt.tensors.values()),
        "total_bytes": ckpt.total_bytes,
        "provenance": {
            "source_dialect": p.source_dialect,
            "framework": p.framework,
            "eaglekit_version": p.eaglekit_version,
            "converted_from": p.converted_from,
            "source_repo": p.source_repo,
            "source_commit": p.source_commit,
            "notes": list(p.notes),
        },
    }
