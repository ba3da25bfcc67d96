"""The only package in eaglekit that talks to the Hugging Face Hub.

One publish is one ``HfApi.create_commit`` (never ``upload_folder``, which may split a push into several commits
when ``hf_xet`` is installed), made with ``parent_commit`` so that a concurrent push to the same branch is refused
by the Hub rather than clobbered, and with stale weight shards and reports deleted in that same commit.

The endpoint and token are explicit arguments that default to ``HF_ENDPOINT`` / ``huggingface_hub.get_token()``
*at call time*: huggingface_hub itself freezes ``HF_ENDPOINT`` into ``constants.ENDPOINT`` at import. Every
failure becomes a one-line :class:`~eaglekit.errors.HubError` whose message never contains the token.

Its parts: ``endpoint`` (the endpoint, the token, offline mode), ``failures`` (every Hub failure as one eaglekit
error line), ``session`` (the client's waits and progress bars while an operation runs), ``publishing`` (``publish``)
and ``reading`` (``open_remote``, ``read_bytes``, ``download``). Callers import from ``eaglekit.hub`` itself.

Nothing here imports torch or other eaglekit modules (only ``eaglekit.errors``, ``upload``, ``io.locate`` and the
version), and huggingface_hub is imported lazily, so computing an upload plan (sizes, sha256) needs no Hub client at
all.
"""

from __future__ import annotations

from ..io.hub_ids import DEFAULT_BRANCH
from ..upload import UploadFile
from .endpoint import DEFAULT_ENDPOINT, offline, resolve_endpoint, resolve_token
from .publishing import DRAFTER_REPORTS, PublishResult, is_stale_with_the_weights, is_weight_file, publish
from .reading import RemoteRepo, download, open_remote, read_bytes
from .session import PUBLISH_WAIT_FACTOR

__all__ = [
    "DEFAULT_BRANCH",
    "DEFAULT_ENDPOINT",
    "DRAFTER_REPORTS",
    "PUBLISH_WAIT_FACTOR",
    "PublishResult",
    "RemoteRepo",
    "download",
    "offline",
    "open_remote",
    "read_bytes",
    "UploadFile",
    "is_stale_with_the_weights",
    "is_weight_file",
    "publish",
    "resolve_endpoint",
    "resolve_token",
]
