"""The only module in eaglekit that talks to the Hugging Face Hub.

One publish is one ``HfApi.create_commit`` (never ``upload_folder``, which may split a push into several commits
when ``hf_xet`` is installed), made with ``parent_commit`` so that a concurrent push to the same branch is refused
by the Hub rather than clobbered, and with stale weight shards and reports deleted in that same commit.

The endpoint and token are explicit arguments that default to ``HF_ENDPOINT`` / ``huggingface_hub.get_token()``
*at call time*: huggingface_hub itself freezes ``HF_ENDPOINT`` into ``constants.ENDPOINT`` at import. Every
failure becomes a one-line :class:`~eaglekit.errors.HubError` whose message never contains the token.

Nothing here imports torch or other eaglekit modules (only ``eaglekit.errors``, ``upload``, ``io.locate`` and the
version), and huggingface_hub is imported lazily, so computing an upload plan (sizes, sha256) needs no Hub client at
all.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from . import __version__
from .errors import HubError, HubReadError, HubUnavailableError, UsageError
from .io.hub_ids import COMMIT_OID, DEFAULT_BRANCH, branch_for, check_repo_id
from .io.jsonfile import MAX_JSON_BYTES
from .upload import HUB_TOKEN, UploadFile

__all__ = [
    "DEFAULT_BRANCH",
    "DEFAULT_ENDPOINT",
    "PublishResult",
    "RemoteRepo",
    "download",
    "open_remote",
    "read_bytes",
    "UploadFile",
    "is_stale_with_the_weights",
    "is_weight_file",
    "publish",
    "resolve_endpoint",
    "resolve_token",
]

DEFAULT_ENDPOINT = "https://huggingface.co"

# Weight files that a new upload *replaces* (deleted when absent from it). Top level only, and `.bin` only under
# the names transformers and the EAGLE repos give weights: `training_args.bin`, `optimizer.bin` and friends are
# not weights and must survive a push.
_WEIGHT_FILE = re.compile(
    r"[^/]+\.safetensors" r"|(?:pytorch_model|model)(?:-\d+-of-\d+)?\.bin" r"|[^/]+\.(?:safetensors|bin)\.index\.json"
)


def is_weight_file(path_in_repo: str) -> bool:
    """True for top-level weight shards and their indexes."""
    return _WEIGHT_FILE.fullmatch(path_in_repo) is not None


# eaglekit's own figures about the drafter a repo holds: stale once other weights replace it (a card built later from
# the repo would quote the old drafter's acceptance length)
DRAFTER_REPORTS = ("eaglekit-verify.json", "drift/")


def is_stale_with_the_weights(path_in_repo: str) -> bool:
    """True for the files ``publish(delete_stale=True)`` may delete: weight shards and their indexes, the verify
    report and the drift report's files (``DRAFTER_REPORTS``)."""
    return is_weight_file(path_in_repo) or any(
        path_in_repo == r or (r.endswith("/") and path_in_repo.startswith(r)) for r in DRAFTER_REPORTS
    )


@dataclass
class PublishResult:
    """What a publish did. ``unchanged``: the target already held these exact files, so no commit was made."""

    repo_id: str
    revision: str  # the branch committed to, or "refs/pr/N" for a new pull request
    commit_url: str | None
    commit_oid: str | None
    pr_url: str | None = None
    pr_num: int | None = None
    created_repo: bool = False
    created_branch: bool = False
    deleted: list[str] = field(default_factory=list)
    unchanged: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------------------------
# Endpoint and token
# ---------------------------------------------------------------------------------------------------------------


def resolve_endpoint(endpoint: str | None = None) -> str:
    """The explicit endpoint, else ``HF_ENDPOINT`` read now, else https://huggingface.co (no trailing slash)."""
    value = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).strip().rstrip("/")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{_display(value)}: not a Hub endpoint URL (expected http(s)://host)")
    return value


def resolve_token(token: str | None = None) -> str | None:
    """The explicit token, else whatever ``huggingface_hub.get_token()`` finds now (HF_TOKEN, ``hf auth login``...)."""
    if token:
        token = token.strip()
        if not token.isascii():  # an HTTP header cannot carry it: the client failed with UnicodeEncodeError
            raise UsageError("--token: a Hub token is ASCII (hf_...); this one is not (a pasted quote or space?)")
        return token
    from huggingface_hub import get_token

    try:
        return get_token()
    except Exception as exc:  # e.g. OIDCError when HF_OIDC_RESOURCE is set but no id token can be had
        raise HubUnavailableError(
            f"cannot obtain a Hub token ({type(exc).__name__}): pass --token or set HF_TOKEN"
        ) from None


def _display(endpoint: str) -> str:
    """The endpoint without any user:password@ part, for messages."""
    parts = urlsplit(endpoint)
    if "@" not in parts.netloc:
        return endpoint
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def offline() -> bool:
    """HF_HUB_OFFLINE as set now (huggingface_hub froze it at import) or as the client holds it: the test its request
    hook applies (it refuses every request, loopback included). Every read and publish asks this one."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE"):
        return True
    is_offline = getattr(constants, "is_offline_mode", None)
    return bool(is_offline() if callable(is_offline) else constants.HF_HUB_OFFLINE)


# ---------------------------------------------------------------------------------------------------------------
# Error mapping
# ---------------------------------------------------------------------------------------------------------------

_READ_RETRIES = 5  # huggingface_hub's http_backoff default
_CHECKING_TOKEN = "checking the token"
_COMMITTING = "uploading and committing"


@dataclass
class _Context:
    """What a failure message needs: where we were and what must never be printed."""

    repo_id: str
    endpoint: str
    token: str | None
    revision: str = DEFAULT_BRANCH
    stage: str = "starting"
    reading: bool = False  # a read (inspect, validate, download): failures are "could not run" (exit 2)
    retries: int = _READ_RETRIES  # how often a read was retried with backoff before its failure was said
    created: list[str] = field(
        default_factory=list
    )  # what this push made before it failed (a repo, a branch): said, and left

    def scrub(self, text: object) -> str:
        text = " ".join(str(text).split())
        if self.token:
            text = text.replace(self.token, "***")
        return HUB_TOKEN.sub("***", text)

    def error(self, message: str, *, unavailable: bool = False) -> HubError:
        """A read's failure (exit 2); a publish the Hub could not be asked for (``unavailable``: exit 2) or refused
        (exit 1)."""
        kind = HubReadError if self.reading else HubUnavailableError if unavailable else HubError
        return kind(self.scrub(message))


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _header(exc: BaseException, name: str) -> str | None:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        return headers.get(name) if headers is not None else None
    except Exception:
        return None


def _describe_http(exc: BaseException, ctx: _Context) -> str:
    from huggingface_hub import errors as hub_errors

    status = _status(exc)
    code = _header(exc, "X-Error-Code")
    request_id = getattr(exc, "request_id", None) or _header(exc, "X-Request-Id")
    rid = f" (request id {request_id})" if request_id else ""
    where = f"while {ctx.stage}"
    repo = ctx.repo_id
    if ctx.reading:
        described = _describe_read(exc, ctx, status, code, where, rid)
        if described is not None:
            return described
    if isinstance(exc, hub_errors.GatedRepoError) or code == "GatedRepo":
        return (
            f"{repo}: access is gated ({status} GatedRepo) {where}: request access on the Hub, or use a token that"
            " has it"
        )
    if isinstance(exc, hub_errors.RevisionNotFoundError) or code == "RevisionNotFound":
        return f"{repo}: revision {ctx.revision!r} not found ({status} RevisionNotFound) {where}"
    if status == 401:
        # The client turns a 401 on a repo URL into RepositoryNotFoundError; the status is what matters here.
        if ctx.stage == _CHECKING_TOKEN:
            return f"authentication failed (401): {_display(ctx.endpoint)} rejected the token; check --token / HF_TOKEN"
        return (
            f"authentication failed (401) {where}: the token was rejected, or cannot see {repo}; "
            "check --token / HF_TOKEN"
        )
    if isinstance(exc, hub_errors.RepositoryNotFoundError) or code == "RepoNotFound":
        return f"{repo}: repository not found, or not visible to this token ({status} RepoNotFound) {where}"
    if status == 403:
        return f"{repo}: forbidden (403) {where}: this token may not write to {repo} (it needs write access){rid}"
    if status == 404:
        return f"{repo}: not found (404) {where}{rid}"
    if status in (409, 412) and ctx.stage == _COMMITTING:
        return (
            f"{repo}: {ctx.revision} moved while pushing ({status}): another push landed first and nothing was "
            "committed; run the push again"
        )
    if status == 429:
        return f"{repo}: rate limited by the Hub (429) {where}: retry later{rid}"
    if status is not None and status >= 500:
        return f"{_display(ctx.endpoint)}: Hub server error ({status}) {where}: retry later{rid}"
    detail = getattr(exc, "server_message", None) or _header(exc, "X-Error-Message") or ""
    detail = f": {ctx.scrub(detail)[:200]}" if detail else ""
    return f"{repo}: Hub request failed ({status}) {where}{detail}{rid}"


def _describe_read(
    exc: BaseException, ctx: _Context, status: int | None, code: str | None, where: str, rid: str
) -> str | None:
    from huggingface_hub import errors as hub_errors

    repo = ctx.repo_id
    hint = "set HF_TOKEN (or run `hf auth login`) to a token that can read it"
    if isinstance(exc, hub_errors.GatedRepoError) or code == "GatedRepo":
        return f"{repo}: access is gated ({status} GatedRepo) {where}: request access on its Hub page, then {hint}"
    if status == 401:
        return f"{repo}: private or missing, and the Hub wants a token (401) {where}: if it is private, {hint}"
    if isinstance(exc, hub_errors.RevisionNotFoundError) or code == "RevisionNotFound":
        return f"{repo}: revision {ctx.revision!r} not found ({status} RevisionNotFound) {where}"
    if isinstance(exc, hub_errors.EntryNotFoundError) or code == "EntryNotFound":
        return f"{repo}: file not found at revision {ctx.revision!r} ({status} EntryNotFound) {where}"
    if isinstance(exc, hub_errors.RepositoryNotFoundError) or code == "RepoNotFound":
        return (
            f"{repo}: repository not found, or private and not visible to this token ({status} RepoNotFound) {where};"
            f" if it is private, {hint}"
        )
    if status == 403:
        return f"{repo}: forbidden (403) {where}: this token may not read it; {hint}"
    retried = f", still after {ctx.retries} retries with backoff" if ctx.retries else ""
    if status == 429:
        return f"{repo}: rate limited by the Hub (429) {where}{retried}: retry later{rid}"
    if status is not None and status >= 500:
        return f"{_display(ctx.endpoint)}: Hub server error ({status}) {where}{retried}: retry later{rid}"
    return None


def _translate(exc: BaseException, ctx: _Context) -> BaseException | None:
    """The eaglekit error for a failure raised by huggingface_hub or its transport, None when it is not one."""
    from huggingface_hub import errors as hub_errors
    from huggingface_hub.utils import HFValidationError
    from huggingface_hub.utils import httpx as transport  # httpx on 1.x, httpx2 on 2.x

    if isinstance(exc, (HubError, UsageError)):
        return exc
    if isinstance(exc, hub_errors.OfflineModeIsEnabled):
        if ctx.reading:
            return ctx.error(f"{ctx.repo_id}: offline mode is on (HF_HUB_OFFLINE=1) and it is not in the local cache")
        return ctx.error(
            "offline mode is on (HF_HUB_OFFLINE=1): publishing needs the Hub; unset HF_HUB_OFFLINE", unavailable=True
        )
    if isinstance(exc, hub_errors.LocalEntryNotFoundError) and ctx.reading:
        # snapshot_download falls back to the cache when the Hub cannot be asked; the cause says why it could not
        cause = exc.__cause__ or exc.__context__
        translated = _translate(cause, ctx) if cause is not None and cause is not exc else None
        if translated is not None:
            return translated
        return ctx.error(
            f"{ctx.repo_id}: cannot reach the Hub and it is not in the local cache ({' '.join(str(exc).split())[:200]})"
        )
    if isinstance(exc, hub_errors.LocalTokenNotFoundError):
        return ctx.error("no Hub token: pass --token, set HF_TOKEN, or run `hf auth login`", unavailable=True)
    if isinstance(exc, hub_errors.HfHubHTTPError):  # rate limited or failing: not asked; any other answer: refused
        status = _status(exc)
        return ctx.error(_describe_http(exc, ctx), unavailable=status is not None and (status == 429 or status >= 500))
    if isinstance(exc, transport.TransportError):  # refused, DNS, TLS, timeouts
        advice = (
            "check the network or HF_ENDPOINT; without a network, HF_HUB_OFFLINE=1 reads what the local Hub cache holds"
            if ctx.reading
            else "check the network, --endpoint / HF_ENDPOINT"
        )
        return ctx.error(
            f"cannot reach the Hub at {_display(ctx.endpoint)} while {ctx.stage} ({type(exc).__name__}): {advice}",
            unavailable=True,
        )
    if isinstance(exc, HFValidationError):
        return UsageError(ctx.scrub(f"{ctx.repo_id}: {exc}"))
    # LFS uploads run in worker threads and come back as RuntimeError("Error while uploading 'x' to the Hub.")
    # chained to the HTTP or transport error: report the cause.
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc:
        translated = _translate(cause, ctx)
        if translated is not None:
            return translated
    if ctx.stage == _COMMITTING and (
        isinstance(exc, RuntimeError) or (isinstance(exc, ValueError) and str(exc).startswith("LFS batch"))
    ):
        return ctx.error(f"{ctx.repo_id}: upload failed while {ctx.stage}: {ctx.scrub(exc)[:300]}")
    return None


# huggingface_hub's backoff logs every retry as warnings on stderr ("'...' thrown while requesting GET ...", "Retrying
# in 1s [Retry 1/5]."): 11 lines before eaglekit's own one-line error when the host could not be reached. While an
# eaglekit Hub operation runs they are dropped (each outcome is said once, in eaglekit's line); HF_HUB_VERBOSITY (info,
# debug) keeps them. A count, not a flag: threads (a survey's validations) run operations side by side.
_quiet = {"depth": 0}
_quiet_lock = threading.Lock()


class _RetryNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _quiet["depth"] == 0


@contextmanager
def _quiet_retries() -> Iterator[None]:
    if os.environ.get("HF_HUB_VERBOSITY", "").strip():
        yield
        return
    backoff = logging.getLogger("huggingface_hub.utils._http")
    with _quiet_lock:
        if not any(isinstance(f, _RetryNoise) for f in backoff.filters):
            backoff.addFilter(_RetryNoise())
        _quiet["depth"] += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet["depth"] -= 1


@contextmanager
def _hub_errors(ctx: _Context) -> Iterator[None]:
    """Turn Hub failures into one clean HubError line. ``from None``: the chained exception would carry URLs and
    server text into tracebacks, and the message already says what matters. Anything else propagates as is.
    huggingface_hub's retry warnings stay off stderr meanwhile (``_quiet_retries``)."""
    try:
        with _quiet_retries():
            yield
    except Exception as exc:
        translated = _translate(exc, ctx)
        if translated is None or translated is exc:
            raise
        if ctx.created:  # nothing of the push's files is there, but what it created stays: say so, delete nothing
            translated = type(translated)(
                f"{translated} (before failing, this push created {' and '.join(ctx.created)}, "
                "which stays, holding none of its files)"
            )
        raise translated from None


# ---------------------------------------------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------------------------------------------


@contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Disable huggingface_hub's bars for the duration when asked to, restoring the previous global state."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    if not enabled and not was_disabled:
        disable_progress_bars()
    try:
        yield
    finally:
        if not enabled and not was_disabled:
            enable_progress_bars()


def _same_content(local: UploadFile, remote: Any) -> bool:
    """Whether ``remote`` (a RepoFile from list_repo_tree) already holds exactly ``local``'s bytes."""
    lfs = getattr(remote, "lfs", None)
    remote_size = lfs.size if lfs is not None else remote.size
    if remote_size != local.size:
        return False
    if lfs is not None:
        return lfs.sha256 == local.sha256
    return remote.blob_id == local.git_sha1


def publish(
    repo_id: str,
    files: Sequence[UploadFile],
    *,
    commit_message: str,
    endpoint: str | None = None,
    token: str | None = None,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_description: str | None = None,
    delete_stale: bool = True,
    progress: bool | None = None,
) -> PublishResult:
    """Publish ``files`` to ``repo_id`` in exactly one commit (or none, when nothing changed).

    - ``revision``: the branch to commit to (default ``main``); created from the default branch when it does not
      exist. ``refs/pr/N`` pushes onto an open pull request. ``create_pr=True`` opens a pull request against the
      default branch instead (``revision`` must then be None or ``main``).
    - ``private`` applies only when the repository is created here; an existing repo keeps its visibility.
    - ``delete_stale``: delete, in the same commit, the top-level weight shards and indexes (see
      :func:`is_stale_with_the_weights`: with the verify and drift reports) present at the target but absent from
      ``files``. Other files are never deleted.
    - ``progress``: show huggingface_hub's upload bars (default: only when stderr is a terminal).

    The head of the target is read first and passed as ``parent_commit``: if another push lands in between, the
    Hub refuses the commit and this raises :class:`HubError` ("moved while pushing") without having changed
    anything. Raises :class:`UsageError` for contradictory arguments, :class:`HubError` for everything else.
    """
    files, target = _checked_request(repo_id, files, commit_message, revision, create_pr)
    endpoint, token = _publish_credentials(endpoint, token)

    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token, library_name="eaglekit", library_version=__version__)
    ctx = _Context(repo_id=repo_id, endpoint=endpoint, token=token, revision=target)
    show_bars = sys.stderr.isatty() if progress is None else progress

    with _progress_bars(show_bars), _hub_errors(ctx), _bounded_waits(PUBLISH_WAIT_FACTOR * _request_timeout()):
        # Fail fast on a bad token, before hashing and uploading gigabytes.
        ctx.stage = _CHECKING_TOKEN
        api.whoami()
        refs, created_repo = _repo_refs(api, ctx, private)
        if private and not created_repo:  # create_repo(private=True) of an existing repo changes nothing
            _refuse_public_repo(api, ctx)
        parent, created_branch = _parent_commit(api, ctx, refs)
        remote = _files_at(api, ctx, parent)
        deleted = _stale_paths(remote, files) if delete_stale else []
        if parent is not None and not deleted and _holds_all(remote, files):
            # Nothing would change: no commit. (The client would also skip it, but only after a preupload and an
            # LFS batch round trip, and would then report whatever the branch head is by that time.)
            return PublishResult(
                repo_id=repo_id,
                revision=target,
                commit_url=f"{endpoint}/{repo_id}/commit/{parent}",
                commit_oid=parent,
                created_repo=created_repo,
                created_branch=created_branch,
                unchanged=True,
            )
        info = _commit(api, ctx, files, deleted, parent, commit_message, commit_description, create_pr)

    # Should the client's own no-op filter still skip the commit (every file matching the head at upload time), it
    # returns that head's info and opens no pull request: unchanged, when that head is the one we built on.
    unchanged = info.pr_url is None and info.oid == parent
    return PublishResult(
        repo_id=repo_id,
        revision=info.pr_revision or target,
        commit_url=info.commit_url,
        commit_oid=info.oid,
        pr_url=info.pr_url,
        pr_num=info.pr_num,
        created_repo=created_repo,
        created_branch=created_branch,
        deleted=[] if unchanged else deleted,
        unchanged=unchanged,
    )


def _checked_request(
    repo_id: str, files: Sequence[UploadFile], commit_message: str, revision: str | None, create_pr: bool
) -> tuple[list[UploadFile], str]:
    """Refuse a publish no Hub could carry out (a bad id, no files, a path twice, no message, a bad branch): the files
    as a list and the branch committed to."""
    check_repo_id(repo_id)
    files = list(files)
    if not files:
        raise UsageError("nothing to publish: the file list is empty")
    paths = [f.path_in_repo for f in files]
    if len(set(paths)) != len(paths):
        duplicated = sorted({p for p in paths if paths.count(p) > 1})
        raise UsageError(f"the same path is uploaded twice: {', '.join(duplicated)}")
    if not commit_message or not commit_message.strip():
        raise UsageError("a commit message is required")
    revision = branch_for(revision, create_pr)
    return files, revision or DEFAULT_BRANCH


def _publish_credentials(endpoint: str | None, token: str | None) -> tuple[str, str]:
    """The endpoint and the token a publish needs, refused before any request when offline or without a token."""
    endpoint = resolve_endpoint(endpoint)
    # Refuse before anything else: the client would refuse each request anyway, with a less helpful message.
    if offline():
        raise HubUnavailableError(
            "offline mode is on (HF_HUB_OFFLINE=1): publishing needs the Hub; unset HF_HUB_OFFLINE"
        )
    token = resolve_token(token)
    if not token:
        raise HubUnavailableError("no Hub token: pass --token, set HF_TOKEN, or run `hf auth login`")
    return endpoint, token


def _repo_refs(api: Any, ctx: _Context, private: bool) -> tuple[Any, bool]:
    """The repository's branches and pull requests, creating the repository (``private`` as asked) when the Hub says
    it does not exist; whether it was created."""
    from huggingface_hub import errors as hub_errors

    repo_id = ctx.repo_id
    ctx.stage = "reading the repository's branches"
    try:
        return api.list_repo_refs(repo_id, include_pull_requests=True), False
    except hub_errors.RepositoryNotFoundError as exc:
        if isinstance(exc, hub_errors.GatedRepoError) or _status(exc) != 404:
            raise  # gated, or a 401 "not visible": creating it would not help
        ctx.stage = "creating the repository"
        api.create_repo(repo_id, private=private, exist_ok=True)
        ctx.created.append(f"the repository {repo_id}")
        ctx.stage = "reading the repository's branches"
        return api.list_repo_refs(repo_id, include_pull_requests=True), True


def _refuse_public_repo(api: Any, ctx: _Context) -> None:
    """Refuse a private push to an existing public repository: it would stay public."""
    repo_id = ctx.repo_id
    ctx.stage = "reading the repository's visibility"
    if not api.repo_info(repo_id).private:
        raise UsageError(
            f"{repo_id}: exists and is public; --private only makes a repository that push creates private, "
            "so nothing was pushed (make it private on the Hub first, or leave out --private)"
        )


def _parent_commit(api: Any, ctx: _Context, refs: Any) -> tuple[str | None, bool]:
    """The head of the branch or pull request committed to (None in an empty repository), creating a missing branch
    from the default branch; whether it was created."""
    repo_id, target = ctx.repo_id, ctx.revision
    heads = {b.name: b.target_commit for b in refs.branches}
    heads.update({p.ref: p.target_commit for p in refs.pull_requests or []})
    created_branch = False
    if target not in heads:
        if target.startswith("refs/pr/"):
            raise ctx.error(f"{repo_id}: pull request {target} not found: open one with create_pr")
        if target in {t.name for t in refs.tags}:
            raise ctx.error(f"{repo_id}: {target!r} is a tag, not a branch: commits go to a branch")
        if target != DEFAULT_BRANCH:  # a missing default branch means an empty repository: commit onto it
            ctx.stage = f"creating branch {target}"
            api.create_branch(repo_id, branch=target, exist_ok=True)  # from the default branch
            created_branch = True
            ctx.created.append(f"the branch {target} (at the default branch's head)")
            ctx.stage = "reading the repository's branches"
            heads = {b.name: b.target_commit for b in api.list_repo_refs(repo_id).branches}
    return heads.get(target), created_branch


def _files_at(api: Any, ctx: _Context, parent: str | None) -> dict[str, Any]:
    """The files at exactly the commit the push builds on (by oid, so the listing cannot race with the head read)."""
    from huggingface_hub.hf_api import RepoFile

    ctx.stage = "listing the files already there"
    remote: dict[str, Any] = {}
    if parent is not None:
        for entry in api.list_repo_tree(ctx.repo_id, recursive=True, revision=parent):
            if isinstance(entry, RepoFile):
                remote[entry.path] = entry
    return remote


def _stale_paths(remote: dict[str, Any], files: list[UploadFile]) -> list[str]:
    """The weight files and reports at the target that ``files`` replace (``is_stale_with_the_weights``), sorted."""
    new_paths = {f.path_in_repo for f in files}
    return sorted(p for p in remote if p not in new_paths and is_stale_with_the_weights(p))


def _holds_all(remote: dict[str, Any], files: list[UploadFile]) -> bool:
    """Whether the target already holds every one of ``files``, byte for byte."""
    return all(f.path_in_repo in remote and _same_content(f, remote[f.path_in_repo]) for f in files)


def _commit(
    api: Any,
    ctx: _Context,
    files: list[UploadFile],
    deleted: list[str],
    parent: str | None,
    commit_message: str,
    commit_description: str | None,
    create_pr: bool,
) -> Any:
    """The one commit: every file uploaded and every stale one deleted, on ``parent`` (or a new pull request)."""
    from huggingface_hub import CommitOperationDelete

    ctx.stage = _COMMITTING
    operations = [f.operation() for f in files] + [CommitOperationDelete(path_in_repo=p) for p in deleted]
    return api.create_commit(
        ctx.repo_id,
        operations,
        commit_message=commit_message,
        commit_description=commit_description,
        revision=None if create_pr else ctx.revision,
        create_pr=create_pr,
        parent_commit=parent,
    )


# ---------------------------------------------------------------------------------------------------------------
# Reading: what inspect and validate fetch (configs and safetensors headers, by byte range) and what convert,
# verify and push download (through the huggingface_hub cache)
# ---------------------------------------------------------------------------------------------------------------

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


def _request_timeout() -> float:
    """Seconds eaglekit's own Hub requests wait for a connection or the next bytes: huggingface_hub's download timeout
    (``HF_HUB_DOWNLOAD_TIMEOUT``, 10 s unless set). Its client sets none, so a server that accepts and never answers
    held inspect and convert forever."""
    from huggingface_hub import constants

    return float(getattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 10) or 10)


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


# A push's requests may wait this many times a read's limit (``_request_timeout``) for a connection or the next bytes:
# a commit of many files is answered once the Hub has checked them all
PUBLISH_WAIT_FACTOR = 6


@contextmanager
def _bounded_waits(seconds: float | None = None) -> Iterator[None]:
    """While inside, a request huggingface_hub's client sends without a timeout waits ``seconds`` (default
    ``_request_timeout()``) for a connection and for each next bytes, then fails (and is retried as its caller retries
    a timeout). A push (``publish``) waits ``PUBLISH_WAIT_FACTOR`` times as long: a server that accepts and never
    answered held it for ever (``whoami`` and the rest have no timeout either).

    ``snapshot_download`` asks for the repo's info and file tree with ``timeout=None`` (huggingface_hub 2.4's
    ``HfApi.repo_info`` and ``list_repo_tree``, read in its source), so a server that accepts and never answers held
    ``convert ORG/NAME`` forever. A request event hook on its shared client (httpx's public hooks: the timeout rides in
    the request's ``timeout`` extension) fills in the missing limits, and is removed on leaving. A download in progress
    is not cut short: the read limit is between bytes, not for the whole file."""
    from huggingface_hub import get_session

    seconds = seconds or _request_timeout()

    def bound(request) -> None:
        limits = dict(request.extensions.get("timeout") or {})
        if limits.get("connect") is None or limits.get("read") is None:
            limits["connect"] = limits.get("connect") or seconds
            limits["read"] = limits.get("read") or seconds
            request.extensions = {**request.extensions, "timeout": limits}

    hooks = get_session().event_hooks["request"]  # the client's own list
    hooks.append(bound)
    try:
        yield
    finally:
        hooks.remove(bound)


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
