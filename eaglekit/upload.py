"""One file of a push: read from disk or generated in memory, with its size and digests. Local only: building a
push's file list (``push --dry-run``) imports neither the Hub client nor ``eaglekit.hub``."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from .io.digests import file_sha256

_CHUNK = 8 * 2**20  # bytes read at a time when hashing local files

HUB_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{8,}")  # anything like a Hub token, whoever's: scrubbed from every message
# what a push looks for in its text files before publishing them (a note, a config key, a report): what it is, how to
# find it. A Hub token is hf_ and 34 letters and digits; shorter runs are words (hf_transfer, hf_tokenizer), not refused
SECRETS = (
    ("a Hub token (hf_...)", re.compile(rb"\bhf_[A-Za-z0-9]{30,}\b")),
    ("a password in a URL (user:password@host)", re.compile(rb"[a-z][a-z0-9+.-]*://[^/\s:@\"'<>]+:[^/\s@\"'<>]+@")),
)
TEXT_SUFFIXES = (".json", ".md", ".txt", ".yaml", ".yml", ".jinja", ".py", ".toml", ".cfg", ".ini", ".csv")
MAX_SCANNED_BYTES = 64 * 2**20  # a text file of a drafter is a few KB; larger ones are not read through


@dataclass
class UploadFile:
    """One file of a push, read from disk (``local_path``) or generated in memory (``data``): exactly one of them.

    Files are assumed not to change while a push runs: ``sha256`` and ``git_sha1`` are computed once.
    """

    path_in_repo: str
    local_path: Path | None = None
    data: bytes | None = None

    def __post_init__(self) -> None:
        if (self.local_path is None) == (self.data is None):
            raise ValueError(f"{self.path_in_repo}: give exactly one of local_path and data")
        if self.local_path is not None:
            self.local_path = Path(self.local_path)
        path = self.path_in_repo.replace("\\", "/")  # a Windows relative path
        if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
            raise ValueError(f"{self.path_in_repo!r}: not a relative file path inside a repository")
        self.path_in_repo = path

    @property
    def size(self) -> int:
        """Size in bytes."""
        if self.data is not None:
            return len(self.data)
        assert self.local_path is not None
        return self.local_path.stat().st_size

    def _chunks(self) -> Iterator[bytes]:
        if self.data is not None:
            yield self.data
            return
        assert self.local_path is not None
        with open(self.local_path, "rb") as f:
            while block := f.read(_CHUNK):
                yield block

    def secret(self, literals: tuple[str, ...] = ()) -> str | None:
        """What this file holds that looks like a secret (``SECRETS``, or one of ``literals``: the token this push was
        given), described, or None; a text file (``TEXT_SUFFIXES``) up to ``MAX_SCANNED_BYTES`` is read, no other."""
        if not self.path_in_repo.lower().endswith(TEXT_SUFFIXES) or self.size > MAX_SCANNED_BYTES:
            return None
        content = b"".join(self._chunks())
        for literal in literals:
            if literal and len(literal) >= 8 and literal.encode() in content:
                return "the Hub token this push was given"
        return next((what for what, pattern in SECRETS if pattern.search(content)), None)

    @cached_property
    def sha256(self) -> str:
        """Hex sha256 of the content (what the Hub stores as an LFS/Xet file's oid). A file is streamed, never all in
        RAM, and its digest remembered across runs while it stays the same file (``io.digests``)."""
        if self.local_path is not None:
            return file_sha256(self.local_path)
        return hashlib.sha256(self.data).hexdigest()

    @cached_property
    def git_sha1(self) -> str:
        """Git blob id of the content (what the Hub reports as the oid of a regular, non-LFS file)."""
        digest = hashlib.sha1(b"blob %d\0" % self.size)
        for block in self._chunks():
            digest.update(block)
        return digest.hexdigest()

    def operation(self) -> Any:
        """A fresh ``CommitOperationAdd`` (the client mutates these and refuses to reuse a committed one), given the
        sha256 eaglekit computed (the plan lists it; an unchanged file is recognised by it), so that the client does
        not read a file of several GB once more to hash it again (``UploadInfo.sha256`` is settable for that)."""
        from huggingface_hub import CommitOperationAdd

        source = self.data if self.data is not None else str(self.local_path)
        operation = CommitOperationAdd(path_in_repo=self.path_in_repo, path_or_fileobj=source)
        if self.local_path is not None:
            operation.upload_info.sha256 = bytes.fromhex(self.sha256)
        return operation
