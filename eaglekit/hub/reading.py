"""Reading: what inspect and validate fetch (configs and safetensors headers, by byte range) and what convert,
verify and push download (through the huggingface_hub cache)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..errors import HubReadError
from ..io.hub_ids import COMMIT_OID, DEFAULT_BRANCH, check_repo_id
from ..io.jsonfile import MAX_JSON_BYTES
from .endpoint import offline, resolve_endpoint, resolve_token
from .failures import _READ_RETRIES, _Context, _hub_errors
from .session import _bounded_waits, _progress_bars, _request_timeout

_RETRY_STATUSES = (429, 500, 502, 503, 504)
_READ_LIMIT = MAX_JSON_BYTES  # a whole-file read (config, index) larger than a JSON file may be is refused


@dataclass
class RemoteRepo:
    """One revision of a Hub model repo, pinned to its commit: every read after ``open_remote`` asks for that
    commit, so a branch that moves meanwhile cannot mix two revisions. ``bytes_read``: file bytes fetched so far."""

    repo_id: str
    revision: str
    commit: str
    files: dict[str, int | None]  # path -> size in bytes (None when the Hub did not say)
    endpoint: str
    token: str | None
    private: bool = False
    bytes_read: int = 0
    requests: int = 0

    def context(self, stage: str) -> _Context:
        return _Context(self.repo_id, self.endpoint, self.token, self.revision, stage, reading=True)


def _read_headers(token: str | None) -> dict[str, str]:
    from huggingface_hub.utils import build_hf_headers

    return build_hf_headers(token=token or False, library_name="eaglekit", library_version=__version__)


def _read_setup(
    repo_id: str, revision: str | None, endpoint: str | None, token: str | None
) -> tuple[str, str | None, str]:
    check_repo_id(repo_id)
    endpoint = resolve_endpoint(endpoint)
    if offline():
        raise HubReadError(f"{repo_id}: offline mode is on (HF_HUB_OFFLINE=1) and it is not in the local cache")
    return endpoint, resolve_token(token), revision or DEFAULT_BRANCH


def open_remote(
    repo_id: str,
    revision: str | None = None,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    retry: bool = True,
) -> RemoteRepo:
    """The repo's file list with sizes and the commit ``revision`` (branch, tag or commit; default main) points at:
    one model-info request, retried with backoff on 429 and 5xx and on a connection the Hub dropped (``retry``: asked
    once only). A Hub that cannot be reached (no network, a refused port, a name that does not resolve) or that does not
    answer within the timeout is said at once: huggingface_hub's backoff retried that 5 times over 25 s, which never
    helped a machine without a network."""
    from urllib.parse import quote

    from huggingface_hub.utils import hf_raise_for_status, http_backoff
    from huggingface_hub.utils import httpx as transport  # httpx on 1.x, httpx2 on 2.x

    endpoint, token, revision = _read_setup(repo_id, revision, endpoint, token)
    retries = _READ_RETRIES if retry else 0
    ctx = _Context(
        repo_id, endpoint, token, revision, "reading the repository's file list", reading=True, retries=retries
    )
    with _hub_errors(ctx):
        response = http_backoff(
            "GET",
            f"{endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}",
            headers=_read_headers(token),
            params={"blobs": "true"},
            max_retries=retries,
            retry_on_status_codes=_RETRY_STATUSES,
            retry_on_exceptions=(transport.RemoteProtocolError, transport.ReadError),
            timeout=_request_timeout(),
        )
        hf_raise_for_status(response)
        info = response.json()
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not COMMIT_OID.fullmatch(commit):
        raise ctx.error(f"{repo_id}: the Hub's answer names no commit for revision {revision!r}")
    files: dict[str, int | None] = {}
    for sibling in info.get("siblings") or []:
        if isinstance(sibling, dict) and isinstance(sibling.get("rfilename"), str):
            lfs = sibling.get("lfs") if isinstance(sibling.get("lfs"), dict) else {}
            size = lfs.get("size", sibling.get("size"))
            files[sibling["rfilename"]] = size if isinstance(size, int) and size >= 0 else None
    return RemoteRepo(repo_id, revision, commit, files, endpoint, token, bool(info.get("private")))


def read_bytes(remote: RemoteRepo, path: str, start: int = 0, length: int | None = None) -> bytes:
    """Bytes ``[start, start + length)`` of ``path`` at the pinned commit, by one ranged GET (``length`` None: the
    whole file, at most 64 MB). A server that ignores the range, or answers fewer bytes than asked, is refused:
    nothing past the asked-for bytes is ever read."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

    url = hf_hub_url(remote.repo_id, path, revision=remote.commit, endpoint=remote.endpoint)
    headers = _read_headers(remote.token)
    headers["Accept-Encoding"] = "identity"
    limit = _READ_LIMIT if length is None else length
    if length is not None:
        if length <= 0:
            return b""
        headers["Range"] = f"bytes={start}-{start + length - 1}"
    ctx = remote.context(f"reading {path}")
    where = f"{remote.repo_id}/{path}"
    with _hub_errors(ctx):
        with http_stream_backoff(
            "GET",
            url,
            headers=headers,
            retry_on_status_codes=_RETRY_STATUSES,
            follow_redirects=True,
            timeout=_request_timeout(),
        ) as response:
            if response.status_code >= 400:
                response.read()
            hf_raise_for_status(response)
            if length is not None and response.status_code != 206:
                raise HubReadError(
                    f"{where}: the server ignored the byte range ({response.status_code} instead of 206); "
                    "eaglekit does not download a whole shard to read its header"
                )
            chunks, got = [], 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                got += len(chunk)
                if got > limit:
                    break
    data = b"".join(chunks)
    remote.bytes_read += min(len(data), limit)
    remote.requests += 1
    if length is None and len(data) > limit:
        raise HubReadError(f"{where}: larger than {limit} bytes, too large for a config or index file")
    if length is not None and len(data) != length:
        raise HubReadError(
            f"{where}: the server answered {len(data)} of the {length} bytes asked for (bytes"
            f" {start}-{start + length - 1}): a short ranged answer; retry later"
        )
    return data


def download(
    repo_id: str,
    revision: str | None = None,
    *,
    allow_patterns: Sequence[str] | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    progress: bool | None = None,
) -> tuple[Path, str]:
    """``snapshot_download`` into the huggingface_hub cache (resumable; HF_TOKEN, HF_HUB_OFFLINE, HF_ENDPOINT
    honoured): the snapshot directory and its commit. Offline, a cached snapshot is used as is.

    Online, the commit ``revision`` points at is asked first (``open_remote``: one request, its failures said as every
    read's are): ``snapshot_download`` falls back in silence to a snapshot it cached earlier when the Hub fails (a 5xx,
    a 403, an unreachable endpoint), which gave a branch's old weights for its new head. A snapshot of another commit
    than the one asked is refused."""
    from huggingface_hub import snapshot_download

    check_repo_id(repo_id)
    endpoint = resolve_endpoint(endpoint)
    is_offline = offline()
    token = None if is_offline else resolve_token(token)
    revision = revision or DEFAULT_BRANCH
    expected = None if is_offline else open_remote(repo_id, revision, endpoint=endpoint, token=token).commit
    ctx = _Context(repo_id, endpoint, token, revision, "downloading", reading=True)
    show_bars = sys.stderr.isatty() if progress is None else progress
    with _progress_bars(show_bars), _hub_errors(ctx), _bounded_waits():
        directory = Path(
            snapshot_download(
                repo_id,
                revision=revision,
                allow_patterns=list(allow_patterns) if allow_patterns else None,
                endpoint=endpoint,
                token=token or False,
                local_files_only=is_offline,
                library_name="eaglekit",
                library_version=__version__,
            )
        )
    if expected is not None and directory.name != expected:
        raise HubReadError(
            f"{repo_id}@{revision}: the Hub names commit {expected[:12]}, but the download gave the cached commit "
            f"{directory.name[:12]} (the Hub failed meanwhile, or the branch moved): retry"
        )
    return directory, directory.name
