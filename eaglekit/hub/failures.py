"""Error mapping: every failure of huggingface_hub or its transport becomes one clean eaglekit error line, the token
scrubbed from it; huggingface_hub's retry warnings stay off stderr meanwhile."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import HubError, HubReadError, HubUnavailableError, UsageError
from ..io.hub_ids import DEFAULT_BRANCH
from ..upload import HUB_TOKEN
from .endpoint import _display

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
            return f"authentication failed (401): {_display(ctx.endpoint)} rejected the token; check `token` / HF_TOKEN"
        return (
            f"authentication failed (401) {where}: the token was rejected, or cannot see {repo}; "
            "check `token` / HF_TOKEN"
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
        return ctx.error("no Hub token: pass `token`, set HF_TOKEN, or run `hf auth login`", unavailable=True)
    if isinstance(exc, hub_errors.HfHubHTTPError):  # rate limited or failing: not asked; any other answer: refused
        status = _status(exc)
        return ctx.error(_describe_http(exc, ctx), unavailable=status is not None and (status == 429 or status >= 500))
    if isinstance(exc, transport.TransportError):  # refused, DNS, TLS, timeouts
        advice = (
            "check the network or HF_ENDPOINT; without a network, HF_HUB_OFFLINE=1 reads what the local Hub cache holds"
            if ctx.reading
            else "check the network, `endpoint` / HF_ENDPOINT"
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
