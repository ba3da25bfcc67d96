"""Precomputed target hidden states for ``verify --hidden-states``, so a drafter for a target that only a
multi-GPU engine can run is verified on one machine.

Three layouts, one file per sequence in a directory (or one file):

- eaglekit's own: ``input_ids`` [S] int64 and ``aux_hidden_states`` [S, n*T], the target's states at the
  drafter's aux layers (input-of-layer ids, ascending) concatenated; metadata ``aux_layer_ids`` ("2,30,58") and
  optionally ``prompt_len``. ``eaglekit capture`` also records how verify judges the sequence as it would have judged
  its own run of the target: ``prompt_id``, ``category``, ``max_new_tokens`` (the continuation the trajectory
  counts), ``num_speculative_tokens`` (the longest chain its tokens judge), ``eos_position`` (where it stopped)
  and ``past_eos`` (the greedy tokens after the stop, "3,17"). A file holding more layers than a drafter fuses
  gives it those it fuses;
- vllm-project/speculators' data generation (``hs_{i}.safetensors``): ``token_ids`` [S] int64 and
  ``hidden_states`` [S, layers, T], the aux layers in ascending order followed by the target's last layer
  (fp8 files with ``hidden_states_scales`` are dequantised);
- SpecForge's ``scripts/prepare_hidden_states.py`` (``data_{i}.ckpt``, optionally gzipped): a plain torch dict
  with ``input_ids`` [S], ``loss_mask`` [S] and ``aux_hidden_state`` [1, S, n*T], right-padded with token 0 (the
  padding is trimmed; the prompt ends where ``loss_mask`` first turns on). Loaded with ``weights_only=True``.

Files are read through ``eaglekit.io.tensorfile``.

None of these record which target layers were captured except eaglekit's: for the others the drafter's ids
are assumed, and only the width is checked.

Acceptance is measured against the tokens in the files: it equals a greedy vLLM run's only where those tokens
are the target's own greedy continuation (as EAGLE data generation usually regenerates them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CheckpointError
from ..io.safetensors_header import read_header
from ..io.tensorfile import load_torch, read_safetensors, require_dense, write_safetensors


@dataclass
class StoredSequence:
    name: str
    tokens: torch.Tensor  # [S] int64
    aux: torch.Tensor  # [S, n*T]
    prompt_len: int
    aux_layer_ids: tuple[int, ...] | None  # as recorded in the file, when it says
    category: str = "stored"
    max_new: int | None = None  # the continuation the trajectory judges (None: all of it)
    eos: int | None = None  # where the continuation stopped at the target's stop token
    past_eos: torch.Tensor | None = None  # the target's greedy tokens after it
    max_k: int | None = None  # the longest chain the continuation judges (the K it was captured for)


SUFFIXES = (".safetensors", ".ckpt", ".ckpt.gz")


def _number(p: Path) -> tuple:
    digits = re.findall(r"\d+", p.name)
    return (int(digits[-1]) if digits else -1, p.name)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such file or directory of hidden states")
    files = sorted((p for p in path.rglob("*") if p.name.endswith(SUFFIXES)), key=_number)
    if not files:
        raise CheckpointError(f"{path}: no hidden-state files ({', '.join(SUFFIXES)})")
    return files


def _specforge(file: Path) -> tuple[torch.Tensor, torch.Tensor, int]:
    data = load_torch(file)
    if not isinstance(data, dict) or not {"input_ids", "aux_hidden_state"} <= set(data):
        raise CheckpointError(f"{file}: expected SpecForge's input_ids, loss_mask and aux_hidden_state")
    if not all(isinstance(data[k], torch.Tensor) for k in ("input_ids", "aux_hidden_state")):
        raise CheckpointError(f"{file}: input_ids and aux_hidden_state should be tensors")
    for key in ("input_ids", "aux_hidden_state", "loss_mask"):
        if isinstance(data.get(key), torch.Tensor):
            require_dense(data[key], f"{file}: {key}")
    tokens = data["input_ids"].reshape(-1)
    states = data["aux_hidden_state"]
    if states.dim() < 2 or states.shape[-2] != tokens.shape[0]:
        raise CheckpointError(
            f"{file}: aux_hidden_state {list(states.shape)} should hold one row per token of input_ids"
            f" ({tokens.shape[0]})"
        )
    aux = states.reshape(tokens.shape[0], -1)
    mask = data.get("loss_mask")
    if isinstance(mask, torch.Tensor) and mask.numel() != tokens.shape[0]:
        raise CheckpointError(
            f"{file}: loss_mask holds {mask.numel()} values for {tokens.shape[0]} input_ids; expected one per token"
        )
    mask = mask.reshape(-1) if isinstance(mask, torch.Tensor) else torch.ones_like(tokens)
    end = tokens.shape[0]
    while end > 1 and int(tokens[end - 1]) == 0 and int(mask[end - 1]) == 0:
        end -= 1  # right padding of the batch the file was cut from
    on = torch.nonzero(mask[:end]).flatten()
    if not on.numel():  # no position trained: nothing tells where the prompt ends
        raise CheckpointError(
            f"{file}: loss_mask is 0 at every token; expected 1 over the response (where the prompt ends)"
        )
    prompt_len = int(on[0]) if int(on[0]) > 0 else 1
    return tokens[:end], aux[:end], prompt_len


def read_sequences(path: str | Path, *, num_aux: int, hidden: int, limit: int | None = None) -> list[StoredSequence]:
    out = []
    for file in _files(Path(path))[:limit] if limit else _files(Path(path)):
        if not file.name.endswith(".safetensors"):
            tokens, aux, prompt_len = _specforge(file)
            ids = None
            _check(file, tokens, aux, prompt_len, num_aux, hidden)
            out.append(StoredSequence(file.name.split(".")[0], tokens.to(torch.int64), aux, prompt_len, ids))
            continue
        header = read_header(file)
        names = set(header.entries)
        if {"input_ids", "aux_hidden_states"} <= names:
            tensors = read_safetensors(file, ("input_ids", "aux_hidden_states"))
            tokens, aux = tensors["input_ids"], tensors["aux_hidden_states"]
            meta = header.metadata
            ids = _metadata_ints(file, meta, "aux_layer_ids") if meta.get("aux_layer_ids") else None
            prompt_len = _metadata_int(file, meta, "prompt_len", 1)
            judging = _judging(file, meta)
            name = judging.pop("name", file.stem)
            # a file of more layers than the drafter fuses: all kept (the file's order), prepare_stored picks its own
            wide = ids is not None and len(ids) > num_aux and aux.dim() == 2 and aux.shape[1] == len(ids) * hidden
            _check(file, tokens, aux[:, : num_aux * hidden] if wide else aux, prompt_len, num_aux, hidden)
            if wide and aux.is_floating_point() and not bool(torch.isfinite(aux).all()):
                raise CheckpointError(f"{file}: the aux hidden states hold non-finite values (NaN or inf)")
            out.append(StoredSequence(name, tokens.to(torch.int64), aux, prompt_len, ids, **judging))
            continue
        elif {"token_ids", "hidden_states"} <= names:
            scaled = "hidden_states_scales" in names
            tensors = read_safetensors(
                file, ("token_ids", "hidden_states") + (("hidden_states_scales",) if scaled else ())
            )
            tokens, states = tensors["token_ids"], tensors["hidden_states"]
            if scaled:
                states = states.float() * tensors["hidden_states_scales"].float()
            if states.dim() != 3 or states.shape[1] not in (num_aux, num_aux + 1):
                raise CheckpointError(
                    f"{file}: hidden_states {list(states.shape)} should be [S, {num_aux} or {num_aux + 1}, {hidden}]"
                    f" for a drafter fusing {num_aux} states"
                )
            aux = states[:, :num_aux].flatten(1)
            ids, prompt_len = None, 1
        else:
            raise CheckpointError(
                f"{file}: expected input_ids + aux_hidden_states (eaglekit) or token_ids + hidden_states (speculators)"
            )
        _check(file, tokens, aux, prompt_len, num_aux, hidden)
        out.append(StoredSequence(file.stem, tokens.to(torch.int64), aux, prompt_len, ids))
    return out


def _judging(file: Path, meta: dict[str, str]) -> dict:
    """What ``eaglekit capture`` records of how the sequence is judged (its prompt's id too), where the file says."""
    extra: dict = {}
    if meta.get("prompt_id"):
        extra["name"] = meta["prompt_id"]
    if meta.get("category"):
        extra["category"] = meta["category"]
    if "max_new_tokens" in meta:
        extra["max_new"] = _metadata_int(file, meta, "max_new_tokens", None)
    if "eos_position" in meta:
        extra["eos"] = _metadata_int(file, meta, "eos_position", None)
    if "num_speculative_tokens" in meta:
        extra["max_k"] = _metadata_int(file, meta, "num_speculative_tokens", None)
    if meta.get("past_eos"):
        extra["past_eos"] = torch.tensor(_metadata_ints(file, meta, "past_eos"), dtype=torch.int64)
    return extra


def _metadata_int(file: Path, meta: dict[str, str], key: str, default: int | None) -> int | None:
    if key not in meta:
        return default
    if "," in meta[key]:
        raise CheckpointError(f"{file}: metadata {key} {meta[key]!r} should be one whole number")
    return _metadata_ints(file, meta, key)[0]


def _metadata_ints(file: Path, meta: dict[str, str], key: str) -> tuple[int, ...]:
    """A header metadata value of comma-separated whole numbers (``"2,15,27"``, ``"12"``), or a one-line error."""
    try:
        return tuple(int(part) for part in meta[key].split(","))
    except ValueError:
        raise CheckpointError(
            f"{file}: metadata {key} {meta[key]!r} should be whole numbers separated by commas"
        ) from None


def _check(file: Path, tokens: torch.Tensor, aux: torch.Tensor, prompt_len: int, num_aux: int, hidden: int) -> None:
    if (
        tokens.dim() != 1
        or tokens.dtype not in (torch.int64, torch.int32)
        or tuple(aux.shape) != (tokens.shape[0], num_aux * hidden)
    ):
        raise CheckpointError(
            f"{file}: token ids {list(tokens.shape)} and aux states {list(aux.shape)} do not fit [S] and [S,"
            f" {num_aux * hidden}]"
        )
    if not 1 <= prompt_len < tokens.shape[0]:
        raise CheckpointError(f"{file}: prompt_len {prompt_len} outside 1..{tokens.shape[0] - 1}")
    if aux.is_floating_point() and not bool(torch.isfinite(aux).all()):  # one NaN made every draft miss, in silence
        raise CheckpointError(f"{file}: the aux hidden states hold non-finite values (NaN or inf)")


def write_sequence(
    path: Path,
    tokens: torch.Tensor,
    aux: torch.Tensor,
    aux_layer_ids: tuple[int, ...],
    prompt_len: int,
    judging: dict[str, str] | None = None,
) -> None:
    """eaglekit's own layout (what a data-generation job can write for ``verify --hidden-states``); ``judging``: the
    metadata ``eaglekit capture`` adds (prompt_id, category, max_new_tokens, num_speculative_tokens, eos_position,
    past_eos)."""
    write_safetensors(
        path,
        {"input_ids": tokens.to(torch.int64).contiguous(), "aux_hidden_states": aux.contiguous()},
        {
            "format": "pt",
            "aux_layer_ids": ",".join(map(str, aux_layer_ids)),
            "prompt_len": str(prompt_len),
            **(judging or {}),
        },
    )
