"""Turning what a user typed (a directory, a file, or a Hub repo id) into a local directory.

``locate`` takes a directory or a Hub id already in the local Hugging Face cache. ``open_source`` is the
Hub-native front door the commands use: a local path that exists wins; otherwise ``org/name[@revision]`` is
read from the Hub, either as a header-only stub (``mode="headers"``, see ``io.remote``: inspect and validate)
or as a snapshot downloaded into the cache (``mode="download"``: convert, verify, push, ``--download``).
Offline (HF_HUB_OFFLINE=1) a cached snapshot is used. The ``Located`` says which (``origin``).
The returned ``roots`` are the directories a checkpoint's files may resolve into; a symlink that leaves them
is refused (a Hub cache snapshot links into the repo's own ``blobs/`` folder, which is allowed).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, HubError, UsageError
from .hub_ids import looks_like_repo_id

@dataclass(frozen=True)
class Located:
    """A drafter source resolved to a local directory: a path, a Hub cache snapshot, or a header-only stub of a Hub repo."""

    directory: Path
    roots: tuple[Path, ...]
    hub_id: str | None = None
    label: str = ""  # how the user named it ("org/name@rev"); str() gives it, so messages read as typed
    remote: bool = False  # a header-only stub of a Hub repo: tensor values cannot be read from it
    origin: dict[str, Any] = field(default_factory=dict, compare=False)  # see ``open_source``

    def __str__(self) -> str:
        return self.label or str(self.directory)

    def __fspath__(self) -> str:  # Path(located) is the directory
        return str(self.directory)


def locate(source: "str | Path | Located", what: str = "checkpoint", *, fetch: "Callable[[str], str] | None" = None) -> Located:
    """A local directory, or a Hub id already in the local cache. ``fetch``: the command that would fetch a Hub id
    missing from the cache (default ``hf download REPO``; a caller that needs only the config asks for less)."""
    if isinstance(source, Located):
        return source
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
        hint = fetch(text) if fetch else f"hf download {text}"
        raise CheckpointError(f"{text}: no such directory, and not a Hub repo in the local cache (eaglekit does not download; fetch it first with `{hint}`)")
    raise CheckpointError(f"{source}: no such {what} directory")


def _roots_for(real: Path) -> tuple[Path, ...]:
    # <cache>/models--org--name/snapshots/<rev>/ links into <cache>/models--org--name/blobs/
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return (real, real.parent.parent / "blobs")
    return (real,)


def _from_hub_cache(repo_id: str, revision: str | None = None) -> Path | None:
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
        raise CheckpointError(f"{what}: refers to {named}, which is no file name (a NUL byte, or a part longer than 255 bytes)")
    candidate = located.directory / relative
    try:
        real = candidate.resolve()
    except (RuntimeError, OSError, ValueError):  # Python 3.11 raises RuntimeError for a symlink loop
        raise CheckpointError(f"{what}: {named} is a symlink loop or cannot be resolved") from None
    if not any(real == root or root in real.parents for root in located.roots):
        raise CheckpointError(f"{what}: {relative!r} is a symlink that points outside the checkpoint ({real})")
    return real


# What a download fetches: the files a checkpoint is read from (the reader's layouts), its card and the verify report.
DOWNLOAD_PATTERNS = ("config.json", "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json",
                     "README.md", "eaglekit-verify.json", "generation_config.json")


def split_revision(text: str, revision: str | None) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``); ``--revision`` must agree with an ``@rev``."""
    name, at, rev = text.partition("@")
    if not at:
        return text, revision
    if not rev:
        raise UsageError(f"{text}: nothing after '@' (expected org/name@revision)")
    if revision and revision != rev:
        raise UsageError(f"{text}: --revision {revision} contradicts the @{rev} in the id")
    return name, rev


def refuse_missing(source: "str | Path", what: str = "checkpoint", revision: str | None = None) -> None:
    """Raise what ``open_source`` says of ``source`` when it is neither an existing path nor a possible Hub id: callers
    about to do slow work first (import torch, load a target) ask before it."""
    path = Path(str(source)).expanduser()
    if not path.exists() and not looks_like_repo_id(split_revision(str(source), revision)[0]):
        raise CheckpointError(f"{source}: no such {what} directory")


@contextmanager
def open_source(
    source: "str | Path | Located",
    *,
    revision: str | None = None,
    mode: str = "headers",
    what: str = "checkpoint",
    allow_patterns: Sequence[str] = DOWNLOAD_PATTERNS,
    endpoint: str | None = None,
    token: str | None = None,
) -> Iterator[Located]:
    """A drafter argument as a ``Located``, for the duration (a header-only stub is deleted afterwards).

    ``origin``: ``{"kind": "local"}``, ``{"kind": "hub", "repo_id", "revision", "commit", "downloaded",
    "bytes_read", "requests"}`` (``bytes_read``: file bytes fetched for the headers-only read), or
    ``{"kind": "hub-cache", ...}`` offline."""
    if isinstance(source, Located):
        yield source
        return
    text = str(source)
    path = Path(text).expanduser()
    if path.exists():
        if revision:
            raise UsageError(f"--revision {revision}: {text} is a local path, not a Hub id")
        located = locate(path, what)
        yield Located(located.directory, located.roots, label=text, origin={"kind": "local", "path": text})
        return
    repo_id, rev = split_revision(text, revision)
    refuse_missing(text, what, revision)
    from .. import hub

    if hub.offline():
        directory = _from_hub_cache(repo_id, rev)
        if directory is None:
            raise CheckpointError(
                f"{text}: no such directory, and not a Hub repo in the local cache "
                f"(offline: HF_HUB_OFFLINE=1; fetch it first with `hf download {repo_id}{f' --revision {rev}' if rev else ''}`)"
            )
        origin = {"kind": "hub-cache", "repo_id": repo_id, "revision": rev or "main", "commit": directory.name, "downloaded": True}
        yield Located(directory, _roots_for(directory.resolve()), hub_id=repo_id, label=text, origin=origin)
        return
    # `models/drafter` where models/ is a folder here: most likely a mistyped path, so the Hub is asked once, not retried
    namespace = Path(repo_id.split("/")[0])
    looks_local = namespace.is_dir()
    try:
        if mode == "download":
            directory, commit = hub.download(repo_id, rev, allow_patterns=allow_patterns, endpoint=endpoint, token=token)
        else:
            remote = hub.open_remote(repo_id, rev, endpoint=endpoint, token=token, retry=not looks_local)
    except HubError as exc:  # it was no local path either: say both
        here = f" ({namespace}/ is a folder here, without {repo_id.split('/')[1]})" if looks_local else ""
        raise type(exc)(f"{text}: no such local directory{here}, and as a Hub repo id: {exc}") from None
    if mode == "download":
        origin = {"kind": "hub", "repo_id": repo_id, "revision": rev or "main", "commit": commit, "downloaded": True}
        yield Located(directory, _roots_for(directory.resolve()), hub_id=repo_id, label=text, origin=origin)
        return
    from .remote import fetch_headers

    stub = Path(tempfile.mkdtemp(prefix="eaglekit-remote-"))
    try:
        fetch_headers(remote, stub, text)
        origin = {"kind": "hub", "repo_id": repo_id, "revision": remote.revision, "commit": remote.commit, "downloaded": False,
                  "bytes_read": remote.bytes_read, "requests": remote.requests}
        yield Located(stub, (stub.resolve(),), hub_id=repo_id, label=text, remote=True, origin=origin)
    finally:
        shutil.rmtree(stub, ignore_errors=True)


def origin_note(o: dict | None) -> str | None:
    """One line for stderr saying which source was used, for a Hub id (None for a local path)."""
    if not o or o.get("kind") == "local":
        return None
    if o["kind"] == "hub-cache":
        return f"note: {o['repo_id']}@{o['revision']}: read from the local Hub cache (offline), commit {o['commit'][:12]}"
    if o.get("downloaded"):
        return f"note: {o['repo_id']}@{o['revision']}: downloaded through the Hub cache, commit {o['commit'][:12]}"
    return (f"note: {o['repo_id']}@{o['revision']}: read from the Hub (commit {o['commit'][:12]}), headers only: "
            f"{o['bytes_read']:,} bytes in {o['requests']} requests")
