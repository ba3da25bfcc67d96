"""Turning what a user typed (a directory, a file, or a Hub repo id) into a local directory.

eaglekit never downloads weights while reading: a Hub id must already be in the local Hugging Face cache.
The returned ``roots`` are the directories a checkpoint's files may resolve into; a symlink that leaves them
is refused (a Hub cache snapshot links into the repo's own ``blobs/`` folder, which is allowed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")


@dataclass(frozen=True)
class Located:
    directory: Path
    roots: tuple[Path, ...]
    hub_id: str | None = None


def looks_like_repo_id(text: str) -> bool:
    return bool(_REPO_ID.match(text)) and ".." not in text


def locate(source: str | Path, what: str = "checkpoint") -> Located:
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            if path.suffix == ".gguf":
                raise CheckpointError(f"{source}: a GGUF file is a target model, not a drafter checkpoint (did you mean --target?)")
            hint = f" (give its directory: {path.parent})" if path.name == "config.json" or path.suffix in (".safetensors", ".bin", ".json") else ""
            raise CheckpointError(f"{source}: expected a {what} directory, got a file{hint}")
        real = path.resolve()
        return Located(path, _roots_for(real))
    text = str(source)
    if looks_like_repo_id(text):
        directory = _from_hub_cache(text)
        if directory is not None:
            real = directory.resolve()
            return Located(directory, _roots_for(real), hub_id=text)
        raise CheckpointError(
            f"{text}: no such directory, and not a Hub repo in the local cache "
            f"(eaglekit does not download; fetch it first with `hf download {text}`)"
        )
    raise CheckpointError(f"{source}: no such {what} directory")


def _roots_for(real: Path) -> tuple[Path, ...]:
    # <cache>/models--org--name/snapshots/<rev>/ links into <cache>/models--org--name/blobs/
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return (real, real.parent.parent / "blobs")
    return (real,)


def _from_hub_cache(repo_id: str) -> Path | None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        return None


def resolve_inside(located: Located, relative: str, what: str) -> Path:
    """The real path of ``relative`` inside a located checkpoint, refusing escapes (``..``, absolute, symlinks)."""
    if not relative or relative.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", relative):
        raise CheckpointError(f"{what}: refers to {relative!r}, which is not a relative file name")
    if any(part == ".." for part in re.split(r"[/\\]", relative)):
        raise CheckpointError(f"{what}: refers to {relative!r}, which leaves the checkpoint directory")
    candidate = located.directory / relative
    real = candidate.resolve()
    if not any(real == root or root in real.parents for root in located.roots):
        raise CheckpointError(f"{what}: {relative!r} is a symlink that points outside the checkpoint ({real})")
    return real
