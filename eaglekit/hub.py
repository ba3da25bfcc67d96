"""The only module that talks to the Hugging Face Hub.

One push = one ``HfApi.create_commit`` (never ``upload_folder``, which may split into several commits), with
``parent_commit`` so that a concurrent push is refused rather than clobbered, and stale weight files deleted in
the same commit. The endpoint and token are explicit arguments, defaulting to ``HF_ENDPOINT`` / ``HF_TOKEN``
read at call time (huggingface_hub freezes ``HF_ENDPOINT`` at import). Every failure becomes a one-line
``HubError``; the token never appears in it.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from . import __version__
from .errors import HubError

DEFAULT_ENDPOINT = "https://huggingface.co"
WEIGHT_FILE = re.compile(r"(\.safetensors|\.bin|\.safetensors\.index\.json|\.bin\.index\.json)$")


@dataclass
class UploadFile:
    """One file of a push: from disk (``local_path``) or generated (``data``)."""

    path_in_repo: str
    local_path: Path | None = None
    data: bytes | None = None

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else Path(self.local_path).stat().st_size

    @cached_property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        if self.data is not None:
            digest.update(self.data)
        else:
            with open(self.local_path, "rb") as f:
                for block in iter(lambda: f.read(16 * 2**20), b""):
                    digest.update(block)
        return digest.hexdigest()

    def operation(self):
        from huggingface_hub import CommitOperationAdd

        return CommitOperationAdd(self.path_in_repo, self.data if self.data is not None else str(self.local_path))


@dataclass
class PublishResult:
    repo_id: str
    revision: str
    commit_url: str | None
    commit_oid: str | None
    pr_url: str | None = None
    pr_num: int | None = None
    created_repo: bool = False
    deleted: list[str] = field(default_factory=list)
    unchanged: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_endpoint(endpoint: str | None) -> str:
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def resolve_token(token: str | None) -> str | None:
    if token:
        return token
    from huggingface_hub import get_token

    return get_token()


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")


def _status(exc) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _clean(text: str, token: str | None) -> str:
    text = " ".join(str(text).split())
    if token:
        text = text.replace(token, "***")
    return re.sub(r"hf_[A-Za-z0-9]{8,}", "***", text)[:300]


@contextmanager
def _hub_errors(repo_id: str, endpoint: str, token: str | None):
    """Map every huggingface_hub / transport failure to one clean HubError line."""
    from huggingface_hub import errors as hub_errors

    try:
        yield
    except HubError:
        raise
    except hub_errors.OfflineModeIsEnabled:
        raise HubError("offline mode is on (HF_HUB_OFFLINE): eaglekit push needs the network") from None
    except hub_errors.GatedRepoError:
        raise HubError(f"{repo_id}: access is gated (403 GatedRepo): request access on the Hub or use another token") from None
    except hub_errors.RevisionNotFoundError:
        raise HubError(f"{repo_id}: revision not found (404 RevisionNotFound)") from None
    except hub_errors.RepositoryNotFoundError:
        raise HubError(f"{repo_id}: repository not found or not visible to this token (404 RepoNotFound)") from None
    except hub_errors.HfHubHTTPError as exc:
        status = _status(exc)
        request_id = getattr(exc, "request_id", None)
        rid = f", request id {request_id}" if request_id else ""
        if status == 401:
            raise HubError(f"{endpoint}: authentication failed (401): check --token / HF_TOKEN") from None
        if status == 403:
            raise HubError(f"{repo_id}: forbidden (403): this token may not write here{rid}") from None
        if status == 404:
            raise HubError(f"{repo_id}: not found (404){rid}") from None
        if status in (409, 412):
            raise HubError(f"{repo_id}: the branch moved while pushing ({status}): another push landed first; nothing was committed, run again") from None
        if status == 429:
            raise HubError(f"{repo_id}: rate limited by the Hub (429): retry later{rid}") from None
        if status is not None and status >= 500:
            raise HubError(f"{endpoint}: Hub server error ({status}){rid}: retry later") from None
        raise HubError(f"{repo_id}: Hub request failed ({status}): {_clean(exc, token)}") from None
    except (OSError, ConnectionError) as exc:
        raise HubError(f"{endpoint}: cannot reach the Hub ({type(exc).__name__}: {_clean(exc, token)})") from None
    except Exception as exc:
        if "httpx" in type(exc).__module__:  # transport errors (httpx in 1.x, httpx2 in 2.x)
            raise HubError(f"{endpoint}: cannot reach the Hub ({type(exc).__name__}: {_clean(exc, token)})") from None
        raise


def _stale(existing: list[str], new: set[str]) -> list[str]:
    """Weight shards and their indexes that the new upload replaces (never docs or other files)."""
    return sorted(f for f in existing if f not in new and WEIGHT_FILE.search(f))


def publish(
    repo_id: str,
    files: list[UploadFile],
    *,
    commit_message: str,
    endpoint: str | None = None,
    token: str | None = None,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_description: str | None = None,
    delete_stale: bool = True,
) -> PublishResult:
    from huggingface_hub import CommitOperationDelete, HfApi

    endpoint = resolve_endpoint(endpoint)
    if _offline():
        raise HubError("offline mode is on (HF_HUB_OFFLINE): eaglekit push needs the network")
    token = resolve_token(token)
    if not token:
        raise HubError("no Hub token: pass --token, set HF_TOKEN, or log in with `hf auth login`")
    if create_pr and revision not in (None, "main"):
        raise HubError("--create-pr opens a pull request against the default branch: drop --revision")
    api = HfApi(endpoint=endpoint, token=token, library_name="eaglekit", library_version=__version__)
    if not sys.stderr.isatty():  # upload bars would garble logs and the one-line error contract
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    with _hub_errors(repo_id, endpoint, token):
        api.whoami()
        existed = True
        try:
            api.repo_info(repo_id)
        except Exception as exc:  # only "does not exist" means create it; everything else is a real failure
            from huggingface_hub import errors as hub_errors

            if not isinstance(exc, hub_errors.RepositoryNotFoundError) or isinstance(exc, hub_errors.GatedRepoError):
                raise
            existed = False
        api.create_repo(repo_id, private=private, exist_ok=True)
        branch = "main" if create_pr else (revision or "main")
        refs = {b.name: b.target_commit for b in api.list_repo_refs(repo_id).branches}
        if branch not in refs:
            api.create_branch(repo_id, branch=branch, exist_ok=True)
            refs = {b.name: b.target_commit for b in api.list_repo_refs(repo_id).branches}
        parent = refs.get(branch)
        existing = api.list_repo_files(repo_id, revision=branch) if parent else []
        deleted = _stale(existing, {f.path_in_repo for f in files}) if delete_stale else []
        operations = [f.operation() for f in files] + [CommitOperationDelete(p) for p in deleted]
        info = api.create_commit(
            repo_id,
            operations,
            commit_message=commit_message,
            commit_description=commit_description,
            revision=None if create_pr else branch,
            create_pr=create_pr,
            parent_commit=parent,
        )
    unchanged = not create_pr and info.oid == parent
    return PublishResult(
        repo_id=repo_id,
        revision=info.pr_revision or branch,
        commit_url=info.commit_url,
        commit_oid=info.oid,
        pr_url=info.pr_url,
        pr_num=info.pr_num,
        created_repo=not existed,
        deleted=[] if unchanged else deleted,
        unchanged=unchanged,
    )
