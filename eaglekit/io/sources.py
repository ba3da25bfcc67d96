"""The front door the commands use for a drafter argument: a local path that exists wins; otherwise
``org/name[@revision]`` is read from the Hub, either as a header-only stub (``mode="headers"``, see ``io.remote``:
inspect and validate) or as a snapshot downloaded into the cache (``mode="download"``: convert, verify, push,
``--download``). Offline (HF_HUB_OFFLINE=1) a cached snapshot is used. The ``Located`` says which (``origin``).
``hub`` and ``io.remote`` are imported only when a Hub id is read, so a local path costs neither."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..errors import CheckpointError, HubError, UsageError
from .hub_ids import looks_like_repo_id
from .locate import Located, from_hub_cache, locate, roots_for

# What a download fetches: the files a checkpoint is read from (the reader's layouts), its card and the verify report.
DOWNLOAD_PATTERNS = (
    "config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model.bin.index.json",
    "README.md",
    "eaglekit-verify.json",
    "generation_config.json",
)


def split_revision(text: str, revision: str | None) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``); ``--revision`` must agree with an ``@rev``."""
    name, at, rev = text.partition("@")
    if not at:
        return text, revision
    if not rev:
        raise UsageError(f"{text}: nothing after '@' (expected org/name@revision)")
    if revision and revision != rev:
        raise UsageError(f"{text}: `revision` {revision} contradicts the @{rev} in the id")
    return name, rev


def refuse_missing(source: str | Path, what: str = "checkpoint", revision: str | None = None) -> None:
    """Raise what ``open_source`` says of ``source`` when it is neither an existing path nor a possible Hub id: callers
    about to do slow work first (import torch, load a target) ask before it."""
    path = Path(str(source)).expanduser()
    if not path.exists() and not looks_like_repo_id(split_revision(str(source), revision)[0]):
        raise CheckpointError(f"{source}: no such {what} directory")


@contextmanager
def open_source(
    source: str | Path | Located,
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
        yield _local(path, text, revision, what)
        return
    repo_id, rev = split_revision(text, revision)
    refuse_missing(text, what, revision)
    from .. import hub

    if hub.offline():
        yield _from_hub_cache(text, repo_id, rev)
        return
    reached = _reach_hub(text, repo_id, rev, mode, allow_patterns, endpoint, token)
    if mode == "download":
        directory, commit = reached
        origin = {"kind": "hub", "repo_id": repo_id, "revision": rev or "main", "commit": commit, "downloaded": True}
        yield Located(directory, roots_for(directory.resolve()), hub_id=repo_id, label=text, origin=origin)
        return
    with _header_stub(reached, text, repo_id) as located:
        yield located


def _local(path: Path, text: str, revision: str | None, what: str) -> Located:
    """A local path (which has no revision), located."""
    if revision:
        raise UsageError(f"`revision` {revision}: {text} is a local path, not a Hub id")
    located = locate(path, what)
    return Located(
        located.directory, located.roots, label=text, origin={"kind": "local", "path": text}, file=located.file
    )


def _from_hub_cache(text: str, repo_id: str, rev: str | None) -> Located:
    """Offline: the snapshot of ``repo_id`` in the local Hub cache, or an error saying how to fetch it."""
    directory = from_hub_cache(repo_id, rev)
    if directory is None:
        raise CheckpointError(
            f"{text}: no such directory, and not a Hub repo in the local cache (offline: HF_HUB_OFFLINE=1; fetch it"
            f" first with `hf download {repo_id}{f' --revision {rev}' if rev else ''}`)"
        )
    origin = {
        "kind": "hub-cache",
        "repo_id": repo_id,
        "revision": rev or "main",
        "commit": directory.name,
        "downloaded": True,
    }
    return Located(directory, roots_for(directory.resolve()), hub_id=repo_id, label=text, origin=origin)


def _reach_hub(
    text: str,
    repo_id: str,
    rev: str | None,
    mode: str,
    allow_patterns: Sequence[str],
    endpoint: str | None,
    token: str | None,
):
    """The Hub asked for ``repo_id``: a download, (directory, commit), or a remote repo to read headers from; an error
    that says the argument was no local path either."""
    from .. import hub

    # `models/drafter` where models/ is a folder here: most likely a mistyped path, so the Hub is asked once, not
    # retried
    namespace = Path(repo_id.split("/")[0])
    looks_local = namespace.is_dir()
    try:
        if mode == "download":
            return hub.download(repo_id, rev, allow_patterns=allow_patterns, endpoint=endpoint, token=token)
        return hub.open_remote(repo_id, rev, endpoint=endpoint, token=token, retry=not looks_local)
    except HubError as exc:  # it was no local path either: say both
        here = f" ({namespace}/ is a folder here, without {repo_id.split('/')[1]})" if looks_local else ""
        raise type(exc)(f"{text}: no such local directory{here}, and as a Hub repo id: {exc}") from None


@contextmanager
def _header_stub(remote, text: str, repo_id: str) -> Iterator[Located]:
    """A temporary directory holding the remote repo's config and safetensors headers, deleted afterwards."""
    from .remote import fetch_headers

    stub = Path(tempfile.mkdtemp(prefix="eaglekit-remote-"))
    try:
        fetch_headers(remote, stub, text)
        origin = {
            "kind": "hub",
            "repo_id": repo_id,
            "revision": remote.revision,
            "commit": remote.commit,
            "downloaded": False,
            "bytes_read": remote.bytes_read,
            "requests": remote.requests,
        }
        yield Located(stub, (stub.resolve(),), hub_id=repo_id, label=text, remote=True, origin=origin)
    finally:
        shutil.rmtree(stub, ignore_errors=True)


def origin_note(o: dict | None) -> str | None:
    """One line for stderr saying which source was used, for a Hub id (None for a local path)."""
    if not o or o.get("kind") == "local":
        return None
    if o["kind"] == "hub-cache":
        return (
            f"note: {o['repo_id']}@{o['revision']}: read from the local Hub cache (offline), commit {o['commit'][:12]}"
        )
    if o.get("downloaded"):
        return f"note: {o['repo_id']}@{o['revision']}: downloaded through the Hub cache, commit {o['commit'][:12]}"
    return (
        f"note: {o['repo_id']}@{o['revision']}: read from the Hub (commit {o['commit'][:12]}), headers only: "
        f"{o['bytes_read']:,} bytes in {o['requests']} requests"
    )
