"""Single tensor files outside a checkpoint directory (precomputed hidden states, a GGUF target saved for vLLM):
named tensors of one safetensors file, a torch file loaded weights-only, one safetensors file written whole."""

from __future__ import annotations

import gzip
import io
import pickle
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..errors import CheckpointError
from .safetensors_header import read_header


def unpickle_refusal(where: str, exc: Exception) -> CheckpointError:
    """The one-line refusal of a file torch's weights-only loader would not read, in eaglekit's words (torch's own
    message advises turning the guard off): a pickle asking for more than plain tensors (it could run code), or bytes
    its loader does not read at all (a truncated or corrupt file, or a pickle of another protocol: which, it cannot
    tell).
    """
    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    if found is None and re.search(r"Unsupported operand|invalid load key|pickle data was truncated", str(exc)):
        return CheckpointError(
            f"{where}: refused to unpickle: torch's weights-only loader does not read its bytes (corrupt, truncated, "
            "or a pickle torch.save did not write); eaglekit loads a pickle no other way"
        )
    asked = (
        f"it asks for {found.group(1)}" if found else "it asks for an object torch's weights-only loader does not allow"
    )
    return CheckpointError(
        f"{where}: refused to unpickle: {asked}, more than plain tensors; loading it could run code, so eaglekit never"
        " does"
    )


def require_dense(tensor: torch.Tensor, where: str) -> None:
    """Refuse a sparse tensor (a pickled file may hold one): it has no dense rows to copy, check, cast or index; and a
    tensor on the meta device, which has a shape and no data (saved before its weights were materialised)."""
    if tensor.device.type == "meta":
        raise CheckpointError(
            f"{where} holds no data (a meta-device tensor, saved before its weights were materialised)"
        )
    if tensor.layout != torch.strided:
        raise CheckpointError(
            f"{where} is stored in the {str(tensor.layout).removeprefix('torch.')} layout; expected a dense tensor "
            "(save it after .to_dense())"
        )


def read_safetensors(path: Path, names: Iterable[str]) -> dict[str, torch.Tensor]:
    """The named tensors of one safetensors file, as stored; its header is validated before the library maps it."""
    read_header(path)
    with safe_open(str(path), framework="pt") as f:
        return {name: f.get_tensor(name) for name in names}


def torch_load(source, *, mmap: bool = False) -> object:
    """``torch.load`` on the CPU, weights only, without torch's warning that a pickle's protocol is not 2 (printed
    over eaglekit's own one-line refusal of such a file, and over a file it reads: nothing a user can act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)  # torch's notes on a file's protocol or storage types
        return torch.load(source, map_location="cpu", weights_only=True, **({"mmap": True} if mmap else {}))


def load_torch(path: Path) -> object:
    """A ``torch.save`` file (gzipped where the name ends in ``.gz``) loaded with ``weights_only=True``: a pickle
    that asks for more than plain tensors is refused and runs nothing."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return torch_load(io.BytesIO(f.read()))
        return torch_load(path, mmap=True)
    except pickle.UnpicklingError as exc:
        raise unpickle_refusal(str(path), exc) from None
    except (RuntimeError, OSError, EOFError) as exc:
        raise CheckpointError(f"{path}: not a readable torch file ({type(exc).__name__})") from None


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """One safetensors file holding ``tensors`` (contiguous) and ``metadata``."""
    save_file(tensors, str(path), metadata=metadata)
