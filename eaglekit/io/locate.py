"""Turning a local path, or a Hub id already in the local Hugging Face cache, into a local directory (``locate``),
and the paths inside it a checkpoint may name (``resolve_inside``). The returned ``roots`` are the directories a
checkpoint's files may resolve into; a symlink that leaves them is refused (a Hub cache snapshot links into the
repo's own ``blobs/`` folder, which is allowed). ``io.sources`` is the front door the commands use, which also reads
Hub ids from the Hub.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from .hub_ids import looks_like_repo_id


@dataclass(frozen=True)
class Located:
    """A drafter source resolved to a local directory: a path, a Hub cache snapshot, or a header-only stub of a Hub
    repo."""

    directory: Path
    roots: tuple[Path, ...]
    hub_id: str | None = None
    label: str = ""  # how the user named it ("org/name@rev"); str() gives it, so messages read as typed
    remote: bool = False  # a header-only stub of a Hub repo: tensor values cannot be read from it
    origin: dict[str, Any] = field(default_factory=dict, compare=False)  # see ``io.sources.open_source``
    file: str | None = None  # a single-file checkpoint (a GGUF drafter): its name in ``directory``

    def __str__(self) -> str:
        return self.label or str(self.directory)

    def __fspath__(self) -> str:  # Path(located) is the directory (or the one file of a single-file checkpoint)
        return str(self.directory / self.file) if self.file else str(self.directory)


def locate(
    source: str | Path | Located, what: str = "checkpoint", *, fetch: Callable[[str], str] | None = None
) -> Located:
    """A local directory, or a Hub id already in the local cache. ``fetch``: the command that would fetch a Hub id
    missing from the cache (default ``hf download REPO``; a caller that needs only the config asks for less)."""
    if isinstance(source, Located):
        return source
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            if path.suffix == ".gguf" or _gguf_magic(path):  # llama.cpp's one-file format: the dialect tells its kind
                real = path.parent.resolve()
                return Located(path.parent, roots_for(real), label=str(source), file=path.name)
            hint = (
                f" (give its directory: {path.parent})"
                if path.name == "config.json" or path.suffix in (".safetensors", ".bin", ".json")
                else ""
            )
            raise CheckpointError(f"{source}: expected a {what} directory, got a file{hint}")
        real = path.resolve()
        return Located(path, roots_for(real))
    text = str(source)
    if looks_like_repo_id(text):
        directory = from_hub_cache(text)
        if directory is not None:
            real = directory.resolve()
            return Located(directory, roots_for(real), hub_id=text)
        hint = fetch(text) if fetch else f"hf download {text}"
        raise CheckpointError(
            f"{text}: no such directory, and not a Hub repo in the local cache (eaglekit does not download; fetch it"
            f" first with `{hint}`)"
        )
    raise CheckpointError(f"{source}: no such {what} directory")


def _gguf_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def roots_for(real: Path) -> tuple[Path, ...]:
    # <cache>/models--org--name/snapshots/<rev>/ links into <cache>/models--org--name/blobs/
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return (real, real.parent.parent / "blobs")
    return (real,)


def from_hub_cache(repo_id: str, revision: str | None = None) -> Path | None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except LocalEntryNotFoundError as exc:
        # huggingface_hub 2.x: a snapshot fetched with a file filter (eaglekit's own download, `hf download REPO FILES`)
        # lacks some of the repo's files (.gitattributes at least) and is refused as incomplete; its directory holds
        # what was fetched, and the reader says what is missing that it needs
        partial = getattr(exc, "snapshot_path", None)
        return Path(partial) if partial and Path(partial).is_dir() else None
    except (FileNotFoundError, OSError, ValueError):
        return None


NAME_MAX_BYTES = 255  # the longest name (one part of a path) the file systems eaglekit runs on hold


def overlong_part(parts) -> str | None:
    """The first of ``parts`` (a path's names) longer than any file system holds, or None."""
    return next((part for part in parts if len(os.fsencode(part)) > NAME_MAX_BYTES), None)


def resolve_inside(located: Located, relative: str, what: str) -> Path:
    """The real path of ``relative`` inside a located checkpoint, refusing escapes (``..``, absolute, symlinks) and
    what no file system names (a NUL byte, a part longer than 255 bytes: the system's errors, not the checkpoint's)."""
    named = repr(relative) if len(relative) <= 80 else repr(relative[:77]) + "..."
    if not relative or relative.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", relative):
        raise CheckpointError(f"{what}: refers to {named}, which is not a relative file name")
    parts = re.split(r"[/\\]", relative)
    if any(part == ".." for part in parts):
        raise CheckpointError(f"{what}: refers to {named}, which leaves the checkpoint directory")
    if "\x00" in relative or overlong_part(parts) is not None:
        raise CheckpointError(
            f"{what}: refers to {named}, which is no file name (a NUL byte, or a part longer than 255 bytes)"
        )
    candidate = located.directory / relative
    try:
        real = candidate.resolve()
    except (RuntimeError, OSError, ValueError):  # Python 3.11 raises RuntimeError for a symlink loop
        raise CheckpointError(f"{what}: {named} is a symlink loop or cannot be resolved") from None
    if not any(real == root or root in real.parents for root in located.roots):
        raise CheckpointError(f"{what}: {relative!r} is a symlink that points outside the checkpoint ({real})")
    return real
