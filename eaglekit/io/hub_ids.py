"""Hub repository ids and branch names: what the Hub and git accept, checked without importing huggingface_hub.
Everything that reads or publishes a Hub id asks here (``io.locate`` for a drafter argument, ``hub`` and ``push``
for a destination, the card for a base model)."""

from __future__ import annotations

import re

from ..errors import UsageError

# The Hub's repo-id rules, as huggingface_hub 2.x states and checks them (utils/_validators.py, validate_repo_id):
# "name" or
# "namespace/name"; each part 1-96 of [A-Za-z0-9_.-], starting and ending with a letter, digit or "_"; no "--" or "..";
# not ending ".git". Kept here so checking an id needs no huggingface_hub import (its errors module pulls in the HTTP
# client: ~0.15 s of `push --dry-run`); tests/test_properties.py holds it equal to huggingface_hub's own validator.
_HUB_REPO_ID = re.compile(r"(\b[\w\-.]{1,96}\b/)?\b[\w\-.]{1,96}\b", re.ASCII)


def repo_id_problem(repo_id: str) -> str | None:
    """Why ``repo_id`` is not a valid Hub repo id (huggingface_hub's rules, see ``_HUB_REPO_ID``), or None."""
    if repo_id.count("/") > 1:
        return "it must be 'name' or 'namespace/name'"
    if not _HUB_REPO_ID.fullmatch(repo_id):
        return (
            "use letters, digits, '-', '_' or '.', at most 96 in each part, neither starting nor ending with '-' or '.'"
        )
    if "--" in repo_id or ".." in repo_id:
        return "it cannot contain '--' or '..'"
    if repo_id.endswith(".git"):
        return "it cannot end with '.git'"
    return None


DEFAULT_BRANCH = "main"  # huggingface_hub sends PRs and revision-less commits to "main" too
COMMIT_OID = re.compile(r"[0-9a-f]{40}")


def branch_for(revision: str | None, create_pr: bool = False) -> str | None:
    """The branch a publish commits to (None: the default one), ``refs/heads/`` dropped; a commit id, or a branch
    with ``create_pr`` (a PR goes against the default branch), is a UsageError. ``push --dry-run`` asks it too, so that
    a dry run refuses what the push would."""
    if revision is not None and revision.startswith("refs/heads/"):
        revision = revision[len("refs/heads/") :]
    if create_pr and revision not in (None, DEFAULT_BRANCH):
        raise UsageError(f"create_pr opens a pull request against {DEFAULT_BRANCH}: drop revision {revision!r}")
    if revision is not None and COMMIT_OID.fullmatch(revision):
        raise UsageError(f"revision {revision!r} is a commit id: commits go to a branch")
    problem = branch_name_problem(revision) if revision is not None else None
    if problem:
        raise UsageError(f"revision {revision!r} is not a branch name git allows: {problem}")
    return revision


def branch_name_problem(name: str) -> str | None:
    """What makes ``name`` a branch name git refuses (``git check-ref-format``'s rules, which the Hub's git applies),
    or None."""
    if not name or name == "@":
        return "it is empty" if not name else "'@' alone is not a name"
    bad = sorted({c for c in name if ord(c) < 32 or ord(c) == 127 or c in " ~^:?*[\\"})
    if bad:
        return f"it holds {', '.join(repr(c) for c in bad)}"
    if ".." in name or "@{" in name or "//" in name:
        return f"it holds {'..' if '..' in name else '@{' if '@{' in name else '//'}"
    if name.startswith("/") or name.endswith(("/", ".")):
        return "it starts with '/' or ends with '/' or '.'"
    if any(part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
        return "a part of it starts with '.' or ends with '.lock'"
    return None


def check_repo_id(repo_id: str) -> None:
    """A repo id to publish to or read from: the Hub's rules (``repo_id_problem``), with a namespace."""
    problem = repo_id_problem(repo_id)
    if problem:
        raise UsageError(f"{repo_id!r} is not a valid repository id: {problem}")
    if repo_id.count("/") != 1:
        raise UsageError(f"{repo_id!r}: give the repository as namespace/name (e.g. your-user/my-drafter)")


def looks_like_repo_id(text: str) -> bool:
    """``namespace/name`` by the Hub's rules: how a drafter or target argument that is no local path is read."""
    return text.count("/") == 1 and repo_id_problem(text) is None
