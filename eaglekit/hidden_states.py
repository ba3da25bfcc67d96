"""Precomputed target hidden states for ``verify --hidden-states``, so a drafter for a target that only a
multi-GPU engine can run is verified on one machine.

Two layouts, one safetensors file per sequence in a directory (or one file):

- eaglekit's own: ``input_ids`` [S] int64 and ``aux_hidden_states`` [S, n*T], the target's states at the
  drafter's aux layers (input-of-layer ids, ascending) concatenated; metadata ``aux_layer_ids`` ("2,30,58") and
  optionally ``prompt_len``;
- vllm-project/speculators' data generation (``hs_{i}.safetensors``): ``token_ids`` [S] int64 and
  ``hidden_states`` [S, layers, T], the aux layers in ascending order followed by the target's last layer
  (fp8 files with ``hidden_states_scales`` are dequantised).

Acceptance is measured against the tokens in the files: it equals a greedy vLLM run's only where those tokens
are the target's own greedy continuation (as EAGLE data generation usually regenerates them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from .errors import CheckpointError
from .io.safetensors_header import read_header


@dataclass
class StoredSequence:
    name: str
    tokens: torch.Tensor  # [S] int64
    aux: torch.Tensor  # [S, n*T]
    prompt_len: int
    aux_layer_ids: tuple[int, ...] | None  # as recorded in the file, when it says


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such file or directory of hidden states")
    files = sorted(path.glob("*.safetensors"), key=lambda p: (len(p.stem), p.stem))
    if not files:
        raise CheckpointError(f"{path}: no .safetensors files of hidden states")
    return files


def read_sequences(path: str | Path, *, num_aux: int, hidden: int, limit: int | None = None) -> list[StoredSequence]:
    out = []
    for file in _files(Path(path))[:limit] if limit else _files(Path(path)):
        header = read_header(file)  # validated before the library maps it
        names = set(header.entries)
        with safe_open(str(file), framework="pt") as f:
            if {"input_ids", "aux_hidden_states"} <= names:
                tokens, aux = f.get_tensor("input_ids"), f.get_tensor("aux_hidden_states")
                meta = header.metadata
                ids = tuple(int(i) for i in meta["aux_layer_ids"].split(",")) if meta.get("aux_layer_ids") else None
                prompt_len = int(meta.get("prompt_len", 1))
            elif {"token_ids", "hidden_states"} <= names:
                tokens, states = f.get_tensor("token_ids"), f.get_tensor("hidden_states")
                if "hidden_states_scales" in names:
                    states = states.float() * f.get_tensor("hidden_states_scales").float()
                if states.dim() != 3 or states.shape[1] not in (num_aux, num_aux + 1):
                    raise CheckpointError(
                        f"{file}: hidden_states {list(states.shape)} should be [S, {num_aux} or {num_aux + 1}, {hidden}] for a drafter fusing {num_aux} states"
                    )
                aux = states[:, :num_aux].flatten(1)
                ids, prompt_len = None, 1
            else:
                raise CheckpointError(f"{file}: expected input_ids + aux_hidden_states (eaglekit) or token_ids + hidden_states (speculators)")
        if tokens.dim() != 1 or tokens.dtype not in (torch.int64, torch.int32) or aux.shape != (tokens.shape[0], num_aux * hidden):
            raise CheckpointError(f"{file}: token ids {list(tokens.shape)} and aux states {list(aux.shape)} do not fit [S] and [S, {num_aux * hidden}]")
        if not 1 <= prompt_len < tokens.shape[0]:
            raise CheckpointError(f"{file}: prompt_len {prompt_len} outside 1..{tokens.shape[0] - 1}")
        out.append(StoredSequence(file.stem, tokens.to(torch.int64), aux, prompt_len, ids))
    return out


def write_sequence(path: Path, tokens: torch.Tensor, aux: torch.Tensor, aux_layer_ids: tuple[int, ...], prompt_len: int) -> None:
    """eaglekit's own layout (what a data-generation job can write for ``verify --hidden-states``)."""
    from safetensors.torch import save_file

    save_file(
        {"input_ids": tokens.to(torch.int64).contiguous(), "aux_hidden_states": aux.contiguous()},
        str(path),
        metadata={"format": "pt", "aux_layer_ids": ",".join(map(str, aux_layer_ids)), "prompt_len": str(prompt_len)},
    )
