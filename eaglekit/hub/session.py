"""How huggingface_hub's client behaves while one eaglekit operation runs: its requests' waits bounded, its progress
bars on or off."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def _request_timeout() -> float:
    """Seconds eaglekit's own Hub requests wait for a connection or the next bytes: huggingface_hub's download timeout
    (``HF_HUB_DOWNLOAD_TIMEOUT``, 10 s unless set). Its client sets none, so a server that accepts and never answers
    held inspect and convert forever."""
    from huggingface_hub import constants

    return float(getattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 10) or 10)


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
