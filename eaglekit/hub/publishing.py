"""Publishing: ``publish`` puts a drafter's files on the Hub in one commit, deleting the weights and reports they
replace in that same commit."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import __version__
from ..errors import HubUnavailableError, UsageError
from ..io.hub_ids import DEFAULT_BRANCH, branch_for, check_repo_id
from ..upload import UploadFile
from .endpoint import offline, resolve_endpoint, resolve_token
from .failures import _CHECKING_TOKEN, _COMMITTING, _Context, _hub_errors, _status
from .session import PUBLISH_WAIT_FACTOR, _bounded_waits, _progress_bars, _request_timeout

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
        raise HubUnavailableError("no Hub token: pass `token`, set HF_TOKEN, or run `hf auth login`")
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
            f"{repo_id}: exists and is public; `private` only makes a repository that push creates private, "
            "so nothing was pushed (make it private on the Hub first, or leave out `private`)"
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
