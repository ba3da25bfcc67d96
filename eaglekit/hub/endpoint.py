"""The Hub endpoint and token a call uses, as given or as the environment says at call time, and offline mode."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from ..errors import HubUnavailableError, UsageError

DEFAULT_ENDPOINT = "https://huggingface.co"


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
            raise UsageError("`token`: a Hub token is ASCII (hf_...); this one is not (a pasted quote or space?)")
        return token
    from huggingface_hub import get_token

    try:
        return get_token()
    except Exception as exc:  # e.g. OIDCError when HF_OIDC_RESOURCE is set but no id token can be had
        raise HubUnavailableError(
            f"cannot obtain a Hub token ({type(exc).__name__}): pass `token` or set HF_TOKEN"
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
