"""Reading a checkpoint directory: layout discovery, index hygiene, header-only listing, one-tensor reads.

Layouts (first match wins, as transformers does): sharded safetensors (``model.safetensors.index.json``),
``model.safetensors``, sharded ``.bin`` (``pytorch_model.bin.index.json``), ``pytorch_model.bin``; failing
those, a directory holding exactly one ``*.safetensors`` file (TorchSpec and ModelOpt exports).

Listing reads safetensors headers only, and imports no torch: dtypes are ``dtypes.DType`` values. ``read(name)``
returns one tensor (and imports torch); ``read_values(name)`` returns an integer or bool tensor's elements as Python
ints without torch (the small vocab maps that validate checks). Safetensors are read with ``pread`` so memory holds
that tensor and nothing else. ``.bin`` files load with ``torch.load(weights_only=True, mmap=True)``: a pickle that
would run code is refused, and runs nothing.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError
from . import dtypes, jsonfile
from .locate import Located, locate, resolve_inside
from .safetensors_header import SafetensorsHeader, read_header

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"
CONFIG = "config.json"

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of a checkpoint as its header describes it (no data read): name, dtype, shape and the file holding
    it."""

    name: str
    dtype: dtypes.DType  # (a torch dtype only for a .bin tensor of a dtype safetensors cannot hold)
    shape: tuple[int, ...]
    file: str  # file name relative to the checkpoint directory

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * dtypes.itemsize(self.dtype)


@dataclass(frozen=True)
class ByteRange:
    """Where a tensor's raw bytes lie in a safetensors file (lets a copy skip materialising the tensor)."""

    path: Path
    offset: int
    length: int


class Checkpoint:
    """An opened checkpoint directory. Use as a context manager, or call ``close()``."""

    def __init__(self, located: Located, label: str):
        self.located = located
        self.label = label  # how the user named it; used in every message
        self.config: dict | None = None
        self.format: str = ""  # "safetensors" | "bin"
        self.index_file: str | None = None
        self.files: list[str] = []
        self.tensors: dict[str, TensorInfo] = {}
        self.file_metadata: dict[str, dict[str, str]] = {}
        self._headers: dict[str, SafetensorsHeader] = {}
        self._open_name: str | None = None
        self._open_handle = None

    # -- opening -------------------------------------------------------------------------------------

    @classmethod
    def open(cls, source: str | Path) -> Checkpoint:
        located = locate(source)
        if located.file is not None:  # one GGUF file: io.checkpoints.open_checkpoint opens either
            raise CheckpointError(f"{source}: a single file, not a checkpoint directory")
        ckpt = cls(located, str(source))
        ckpt._discover()
        return ckpt

    @classmethod
    def planned(cls, label: str, config: dict, tensors: dict[str, tuple[Any, tuple[int, ...]]]) -> Checkpoint:
        """A checkpoint not yet written (``convert``'s plan): its config and its tensors' dtypes and shapes, as headers
        would say them; like a Hub repo read by headers, its tensor values cannot be read."""
        ckpt = cls(Located(Path(label), (), label=label, remote=True), label)
        ckpt.config, ckpt.format, ckpt.files = config, "safetensors", ["model.safetensors"]
        ckpt.tensors = {
            n: TensorInfo(n, dtype, tuple(shape), "model.safetensors") for n, (dtype, shape) in tensors.items()
        }
        return ckpt

    @property
    def directory(self) -> Path:
        return self.located.directory

    @property
    def location(self) -> Path:
        """What the checkpoint is on disk: its directory, or its one file (a GGUF drafter)."""
        return self.directory / self.located.file if self.located.file else self.directory

    def _where(self, relative: str) -> str:
        return f"{self.label}/{relative}" if not self.label.endswith("/") else f"{self.label}{relative}"

    def _resolve(self, relative: str, what: str) -> Path:
        return resolve_inside(self.located, relative, what)

    def _discover(self) -> None:
        d = self.directory
        if (d / CONFIG).exists():
            self.config = jsonfile.load_object(self._resolve(CONFIG, self._where(CONFIG)), self._where(CONFIG))
        if (d / SAFETENSORS_INDEX).exists():
            self.format, self.index_file = "safetensors", SAFETENSORS_INDEX
            self._load_index(SAFETENSORS_INDEX, self._list_safetensors)
        elif (d / SAFETENSORS_SINGLE).exists():
            self.format = "safetensors"
            self._load_single(SAFETENSORS_SINGLE, self._list_safetensors)
        elif (d / BIN_INDEX).exists():
            self.format, self.index_file = "bin", BIN_INDEX
            self._load_index(BIN_INDEX, self._list_bin)
        elif (d / BIN_SINGLE).exists():
            self.format = "bin"
            self._load_single(BIN_SINGLE, self._list_bin)
        else:
            candidates = sorted(p.name for p in d.glob("*.safetensors") if not p.name.startswith("adapter_"))
            if len(candidates) == 1:
                self.format = "safetensors"
                self._load_single(candidates[0], self._list_safetensors)
            elif candidates:
                raise CheckpointError(
                    f"{self.label}: {len(candidates)} .safetensors files ({', '.join(candidates[:4])}) "
                    f"but no {SAFETENSORS_INDEX} saying which tensor is where"
                )
            else:
                raise CheckpointError(
                    f"{self.label}: no tensor files (expected {SAFETENSORS_SINGLE}, {SAFETENSORS_INDEX}, "
                    f"{BIN_SINGLE} or {BIN_INDEX})"
                )

    def _load_single(self, name: str, lister) -> None:
        self.files = [name]
        for info in lister(name):
            self.tensors[info.name] = info

    def _load_index(self, index_name: str, lister) -> None:
        where = self._where(index_name)
        index = jsonfile.load_object(self._resolve(index_name, where), where)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f"{where}: 'weight_map' must map tensor names to file names")
        if not weight_map:
            raise CheckpointError(f"{where}: 'weight_map' is empty")
        self.files = list(dict.fromkeys(weight_map.values()))
        found: dict[str, TensorInfo] = {}
        for file in self.files:
            first = next(n for n, f in weight_map.items() if f == file)
            if not self._resolve(file, f"{where}: tensor {first!r}").exists():
                raise CheckpointError(f"{where}: tensor {first!r} points at missing shard {file!r}")
            for info in lister(file):
                if info.name in found:
                    raise CheckpointError(
                        f"{self.label}: tensor {info.name!r} is stored twice, in {found[info.name].file!r} and {file!r}"
                    )
                found[info.name] = info
        for name, file in weight_map.items():
            info = found.get(name)
            if info is None:
                raise CheckpointError(f"{where}: tensor {name!r} is indexed in {file!r}, which does not contain it")
            if info.file != file:
                raise CheckpointError(f"{where}: tensor {name!r} is indexed in {file!r} but stored in {info.file!r}")
        for name, info in found.items():
            if name not in weight_map:
                raise CheckpointError(f"{self._where(info.file)}: tensor {name!r} is not listed in {index_name}")
        # keep the index's order, which is the order writers produced
        self.tensors = {name: found[name] for name in weight_map}

    def _list_safetensors(self, file: str) -> list[TensorInfo]:
        where = self._where(file)
        path = self._resolve(file, where)
        header = read_header(path, where)
        self._headers[file] = header
        self.file_metadata[file] = header.metadata
        return [TensorInfo(name, e.dtype, e.shape, file) for name, e in header.entries.items()]

    def _list_bin(self, file: str) -> list[TensorInfo]:
        state = self._load_bin(file)
        return [TensorInfo(name, _dtype_of(t.dtype), tuple(t.shape), file) for name, t in state.items()]

    def _load_bin(self, file: str) -> dict[str, torch.Tensor]:
        import pickle

        import torch

        from .tensorfile import require_dense, torch_load, unpickle_refusal

        where = self._where(file)
        path = self._resolve(file, where)
        if path.stat().st_size == 0:
            raise CheckpointError(f"{where}: file is empty (0 bytes)")
        try:
            try:
                state = torch_load(path, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                # legacy (pre-zip) torch.save format cannot be memory-mapped; still weights-only
                state = torch_load(path)
        except pickle.UnpicklingError as exc:
            raise unpickle_refusal(where, exc) from None
        except (RuntimeError, EOFError, ValueError, OSError, KeyError, AttributeError, TypeError) as exc:
            raise CheckpointError(
                f"{where}: not a readable torch checkpoint ({type(exc).__name__}: {str(exc)[:200]})"
            ) from None
        if not isinstance(state, dict):
            raise CheckpointError(f"{where}: expected a mapping of tensor names to tensors, got {type(state).__name__}")
        for name, value in state.items():
            if not isinstance(name, str) or not isinstance(value, torch.Tensor):
                raise CheckpointError(
                    f"{where}: entry {name!r} is a {type(value).__name__}; expected a flat mapping of names to tensors"
                )
            require_dense(value, f"{where}: tensor {name!r}")
        return state

    # -- reading -------------------------------------------------------------------------------------

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise CheckpointError(f"{self.label}: no tensor named {name!r}") from None

    def byte_range(self, name: str) -> ByteRange | None:
        """The raw bytes of a safetensors tensor (None for .bin, whose tensors live inside a pickle archive)."""
        self._refuse_remote()
        info = self.info(name)
        header = self._headers.get(info.file)
        if header is None:
            return None
        entry = header.entries[name]
        path = self._resolve(info.file, self._where(info.file))
        return ByteRange(path, header.data_start + entry.begin, entry.end - entry.begin)

    def read(self, name: str) -> torch.Tensor:
        """One tensor, exactly as stored (dtype and bytes). Imports torch."""
        import torch

        info = self.info(name)
        handle = self._handle(info.file)
        if self.format == "bin":
            tensor = handle[name]
        else:
            buffer = self._read_safetensors(info, handle)
            dtype = info.dtype.torch
            if not buffer:
                tensor = torch.empty(info.shape, dtype=dtype)
            else:
                tensor = torch.frombuffer(buffer, dtype=torch.uint8).view(dtype).reshape(info.shape)
        if tensor.dtype != info.dtype or tuple(tensor.shape) != info.shape:
            raise CheckpointError(
                f"{self._where(info.file)}: tensor {name!r} read back differently than its header says"
            )
        return tensor

    def read_values(self, name: str) -> array:
        """An integer or bool tensor's elements, flat, as Python ints (``dtypes.values``): what the vocab-map checks
        read. Safetensors are read as raw bytes, without torch."""
        info = self.info(name)
        if self.format == "bin":  # torch loaded the pickle already
            import torch

            raw = self.read(name).reshape(-1).view(torch.uint8).numpy().tobytes()
        else:
            raw = self._read_safetensors(info, self._handle(info.file))
        return dtypes.values(raw, info.dtype)

    def _read_safetensors(self, info: TensorInfo, handle) -> bytearray:
        """A safetensors tensor's raw bytes."""
        entry = self._headers[info.file].entries[info.name]
        nbytes = entry.end - entry.begin
        buffer = bytearray(nbytes)
        if nbytes == 0:
            return buffer
        handle.seek(self._headers[info.file].data_start + entry.begin)
        got = _read_into(handle, buffer)
        if got != nbytes:
            raise CheckpointError(
                f"{self._where(info.file)}: tensor {info.name!r} is truncated ({got} of {nbytes} bytes)"
            )
        return buffer

    def read_chunks(self, name: str, max_bytes: int = 64 * 2**20):
        """A tensor's elements as flat pieces of at most ``max_bytes``, read one after another (memory: one piece)."""
        import torch

        info = self.info(name)
        itemsize = dtypes.itemsize(info.dtype)
        per_piece = max(1, max_bytes // itemsize)
        handle = self._handle(info.file)
        if self.format == "bin":  # memory-mapped: slicing reads only what is touched
            flat = handle[name].reshape(-1)
            for start in range(0, flat.numel(), per_piece):
                yield flat[start : start + per_piece]
            return
        entry = self._headers[info.file].entries[name]
        base = self._headers[info.file].data_start + entry.begin
        for start in range(0, info.numel, per_piece):
            count = min(per_piece, info.numel - start)
            buffer = bytearray(count * itemsize)
            handle.seek(base + start * itemsize)
            if _read_into(handle, buffer) != len(buffer):
                raise CheckpointError(f"{self._where(info.file)}: tensor {name!r} is truncated")
            yield torch.frombuffer(buffer, dtype=torch.uint8).view(info.dtype.torch)

    def _handle(self, file: str):
        self._refuse_remote()
        if self._open_name != file:
            self._close_handle()
            if self.format == "bin":
                self._open_handle = self._load_bin(file)
            else:
                self._open_handle = open(self._resolve(file, self._where(file)), "rb", buffering=0)
            self._open_name = file
        return self._open_handle

    def _refuse_remote(self) -> None:
        if self.located.remote:  # a header-only stub of a Hub repo (io.remote): its data area is a hole
            raise CheckpointError(f"{self.label}: tensor values are not read remotely (headers only); pass `download`")

    def _close_handle(self) -> None:
        if hasattr(self._open_handle, "close"):
            self._open_handle.close()
        self._open_handle, self._open_name = None, None

    # -- summary -------------------------------------------------------------------------------------

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def close(self) -> None:
        self._close_handle()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _dtype_of(torch_dtype: Any):
    """A .bin tensor's dtype as a DType; one safetensors cannot hold stays torch's (listed, refused only when
    written)."""
    try:
        return dtypes.of(torch_dtype)
    except Exception:
        return torch_dtype


def _read_into(handle, buffer: bytearray) -> int:
    """Fill ``buffer`` from an unbuffered file, however many reads it takes: one read(2) returns at most
    0x7ffff000 bytes on Linux, so a tensor over 2 GiB (a Kimi-sized embedding) arrives in pieces. Returns the
    bytes read; fewer than asked only at end of file."""
    view = memoryview(buffer)
    done = 0
    while done < len(view):
        got = handle.readinto(view[done:])
        if not got:
            break
        done += got
    return done
