"""A loopback fake of the Hugging Face Hub's write API, for driving the REAL huggingface_hub client in tests.

Stdlib only (``ThreadingHTTPServer`` on 127.0.0.1, random port). It covers what ``eaglekit.hub.publish`` makes the
client send on huggingface_hub 1.33 and 2.x with Xet disabled: whoami, repo create/info/refs/tree, branch create,
validate-yaml, preupload, the LFS batch/upload/verify protocol and the NDJSON commit (``parentCommit`` checked:
412 when the branch moved; ``create_pr`` opens ``refs/pr/N``). A request to anything else answers 404 and is
recorded in ``state.unrouted``; the fixture fails the test on it, so a client that starts calling something new
is noticed rather than silently mis-served.

The ``fake_hub`` fixture is registered for every test by tests/conftest.py::

    def test_push(fake_hub):
        publish("tester/d", files, commit_message="m")  # endpoint and token come from HF_ENDPOINT / HF_TOKEN
        assert fake_hub.state.commits_posted() == 1

or, for a differently named fixture, ``with serve(monkeypatch, tmp_path) as hub: yield hub``.

Downloads behave like the real Hub's: ``HEAD``/``GET`` on ``/{repo}/resolve/{rev}/{path}`` with ``Range`` (206 +
``Content-Range``, 416 past the end), ``X-Repo-Commit``, ``ETag`` (``X-Linked-Etag``/``X-Linked-Size`` for LFS
files, answered directly rather than by a CDN redirect), ``X-Error-Code`` on 404s (RepoNotFound,
RevisionNotFound, EntryNotFound), and model info whose ``siblings`` carry sizes and LFS data with ``?blobs=true``.
Reads need no token for public repos; a private repo is 401 without a token, and one ``seed``ed private is someone
else's: 404 RepoNotFound to the test's token too (as the real Hub hides it); ``gated`` repos answer 403 GatedRepo. File
contents may be ``bytes`` or a ``Path`` served from disk (``state.seed`` a sparse 1 GB shard cheaply); ``state.served``
counts the body bytes sent per ``(repo_id, path)``; ``state.short_ranges`` makes ranged answers short.

State: ``state.repos[repo_id]`` -> ``Repo`` (refs: branch name or ``refs/pr/N`` -> commit oid; commits: oid ->
``Commit`` with parent, files {path: bytes}, lfs paths, message); ``state.blobs`` (LFS objects by sha256);
``state.log`` (every request, in order). Test controls: ``state.fail(...)`` injects an error response,
``state.on(...)`` runs an action when a request arrives (e.g. ``state.advance_branch`` to simulate a concurrent
push), ``state.add_tag``.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

TOKEN = "hf_SECRETtoken123"
USER = "tester"
# What the fake stores as LFS (the real Hub decides from .gitattributes, size and content; extensions suffice here).
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx")
_OID_COUNTER = itertools.count(1)


@dataclass
class Commit:
    oid: str
    parent: str | None
    files: dict[str, bytes | Path]  # path -> content (LFS files by their uploaded bytes), or a file served from disk
    lfs: frozenset[str]  # which of ``files`` are stored as LFS objects
    message: str
    description: str = ""


@dataclass
class Repo:
    repo_id: str
    private: bool
    refs: dict[str, str] = field(default_factory=dict)  # branch name or "refs/pr/N" -> commit oid
    tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    prs: int = 0
    gated: bool = False  # reads answer 403 GatedRepo
    hidden: bool = False  # private and not visible to the test's token (someone else's): 404 RepoNotFound


@dataclass
class Fault:
    method: str  # "*" for any
    path: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: Any
    times: int


class Request(NamedTuple):
    method: str
    path: str  # unquoted
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names


class HubState:
    """Everything the fake knows; the test reads and steers it. All access happens under ``lock``."""

    def __init__(self, token: str = TOKEN):
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}  # sha256 -> content
        self.log: list[Request] = []
        self.unrouted: list[Request] = []  # requests no route answered (404)
        self.crashes: list[str] = []  # requests the fake itself failed on (500)
        self.faults: list[Fault] = []
        self.hooks: list[tuple[str, re.Pattern[str], Callable[[], None]]] = []
        self.lock = threading.RLock()  # hooks run under it and may call back into the state
        self.served: Counter[tuple[str, str]] = Counter()  # (repo_id, path) -> body bytes sent by resolve
        self.short_ranges: dict[tuple[str, str], int] = {}  # (repo_id, path) -> at most this many bytes per range

    # -- controls for tests -------------------------------------------------------------------------------------

    def fail(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        error_code: str | None = None,
        times: int = 1,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` ("*": any) and ``path_regex`` (searched in the
        unquoted path) with ``status``, an ``X-Error-Code`` header when given, and a JSON ``body``."""
        all_headers = {"X-Error-Code": error_code} if error_code else {}
        all_headers.update(headers or {})
        self.faults.append(
            Fault(
                method,
                re.compile(path_regex),
                status,
                all_headers,
                body if body is not None else {"error": f"injected {status}"},
                times,
            )
        )

    def on(self, method: str, path_regex: str, action: Callable[[], None]) -> None:
        """Run ``action`` once, when the first request matching ``method`` and ``path_regex`` arrives (before it
        is answered)."""
        self.hooks.append((method, re.compile(path_regex), action))

    def advance_branch(self, repo_id: str, ref: str = "main", files: dict[str, bytes] | None = None) -> str:
        """Another pusher's commit lands on ``ref`` (default content: an ``other.txt``). Returns its oid."""
        with self.lock:
            repo = self.repos[repo_id]
            parent = repo.refs[ref]
            content = dict(repo.commits[parent].files)
            content.update(files if files is not None else {"other.txt": b"someone else"})
            return self._commit(repo, ref, parent, content, repo.commits[parent].lfs, "concurrent push")

    def add_tag(self, repo_id: str, tag: str, ref: str = "main") -> None:
        with self.lock:
            repo = self.repos[repo_id]
            repo.tags[tag] = repo.refs[ref]

    def seed(
        self,
        repo_id: str,
        files: dict[str, bytes | Path],
        *,
        private: bool = False,
        gated: bool = False,
        ref: str = "main",
    ) -> str:
        """A repo holding ``files`` (bytes, or paths served from disk) in one commit on ``ref``; returns its oid.
        LFS status follows ``LFS_SUFFIXES``, as for pushed files. A file served from disk is hashed now, not when
        a request first asks for its model info: hashing a 1.4 GB sparse shard on a busy machine outlasted the
        client's read timeout, which eaglekit does not retry."""
        for content in files.values():
            if isinstance(content, Path):
                sha256_of(content)
        with self.lock:
            repo = self.repos.get(repo_id) or self.create_repo(repo_id, private)
            repo.private, repo.gated, repo.hidden = private, gated, private
            parent = repo.refs.get(ref)
            content = dict(repo.commits[parent].files) if parent else {}
            content.update(files)
            lfs = frozenset(p for p in content if p.endswith(LFS_SUFFIXES))
            return self._commit(repo, ref, parent, content, lfs, "seed")

    def bytes_served(self, repo_id: str, path: str | None = None) -> int:
        with self.lock:
            return sum(n for (r, p), n in self.served.items() if r == repo_id and (path is None or p == path))

    # -- queries for tests --------------------------------------------------------------------------------------

    def files(self, repo_id: str, ref: str = "main") -> dict[str, bytes]:
        with self.lock:
            repo = self.repos[repo_id]
            return dict(repo.commits[repo.refs[ref]].files)

    def head(self, repo_id: str, ref: str = "main") -> str:
        with self.lock:
            return self.repos[repo_id].refs[ref]

    def commit(self, repo_id: str, ref_or_oid: str = "main") -> Commit:
        with self.lock:
            repo = self.repos[repo_id]
            return repo.commits[repo.refs.get(ref_or_oid, ref_or_oid)]

    def requests(self, method: str | None = None, path_regex: str | None = None) -> list[Request]:
        with self.lock:
            return [
                r
                for r in self.log
                if (method is None or r.method == method) and (path_regex is None or re.search(path_regex, r.path))
            ]

    def commits_posted(self) -> int:
        """How many commit POSTs the client sent (whatever the answer)."""
        return len(self.requests("POST", r"^/api/models/[^/]+/[^/]+/commit/"))

    # -- model --------------------------------------------------------------------------------------------------

    def create_repo(self, repo_id: str, private: bool = False) -> Repo:
        """A new repo, with the initial ``.gitattributes`` commit on main as on the real Hub."""
        with self.lock:
            repo = Repo(repo_id, private)
            self.repos[repo_id] = repo
            gitattributes = (
                b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
            )
            self._commit(repo, "main", None, {".gitattributes": gitattributes}, frozenset(), "initial commit")
            return repo

    def _commit(
        self,
        repo: Repo,
        ref: str,
        parent: str | None,
        files: dict[str, bytes],
        lfs: frozenset[str],
        message: str,
        description: str = "",
    ) -> str:
        oid = hashlib.sha1(f"{repo.repo_id}:{next(_OID_COUNTER)}".encode()).hexdigest()
        repo.commits[oid] = Commit(oid, parent, files, frozenset(p for p in lfs if p in files), message, description)
        repo.refs[ref] = oid
        return oid


def git_blob_sha1(content: bytes | Path) -> str:
    if isinstance(content, Path):
        content = content.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


_SHA256_CACHE: dict[tuple[str, int, int], str] = {}


def size_of(content: bytes | Path) -> int:
    return content.stat().st_size if isinstance(content, Path) else len(content)


def sha256_of(content: bytes | Path) -> str:
    if not isinstance(content, Path):
        return hashlib.sha256(content).hexdigest()
    stat = content.stat()
    key = (str(content), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA256_CACHE:
        digest = hashlib.sha256()
        with open(content, "rb") as f:
            while block := f.read(8 * 2**20):
                digest.update(block)
        _SHA256_CACHE[key] = digest.hexdigest()
    return _SHA256_CACHE[key]


def read_range(content: bytes | Path, start: int, end: int) -> Iterator[bytes]:
    """Bytes [start, end) of a file's content, in pieces (a disk file is never read whole)."""
    if not isinstance(content, Path):
        yield content[start:end]
        return
    with open(content, "rb") as f:
        f.seek(start)
        while start < end and (block := f.read(min(2**20, end - start))):
            start += len(block)
            yield block


def lfs_pointer(content: bytes | Path) -> bytes:
    spec = "https://git-lfs.github.com/spec/v1"
    return f"version {spec}\noid sha256:{sha256_of(content)}\nsize {size_of(content)}\n".encode()


class _Answer(Exception):
    """Raised by route code to answer at once (keeps the routes flat)."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status, self.body, self.headers = status, body if body is not None else {}, headers or {}


class _Stream(Exception):
    """Raised by the resolve route: answer with (part of) a file's bytes, sent after the state lock is released."""

    def __init__(
        self, status: int, headers: dict[str, str], key: tuple[str, str], content: bytes | Path, start: int, end: int
    ):
        super().__init__(status)
        self.status, self.headers, self.key, self.content, self.start, self.end = (
            status,
            headers,
            key,
            content,
            start,
            end,
        )


_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def _not_found(what: str, code: str) -> _Answer:
    return _Answer(404, {"error": f"{what} not found"}, {"X-Error-Code": code, "X-Error-Message": f"{what} not found"})


def _handler(state: HubState, base_url: str) -> type[BaseHTTPRequestHandler]:
    request_ids = itertools.count(1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client expects; every answer has a Content-Length
        # Headers and body go out in separate writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms a request.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def do_HEAD(self) -> None:
            self._dispatch("HEAD")

        # -- plumbing -----------------------------------------------------------------------------------------

        def _send(self, status: int, body: Any, headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Request-Id", f"fake-{next(request_ids)}")
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(chunks)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            # Route on segments unquoted one by one: revisions arrive quoted ("refs%2Fpr%2F1" is ONE segment).
            segments = [unquote(s) for s in url.path.split("/")[1:]]
            headers = {k.lower(): v for k, v in self.headers.items()}
            request = Request(method, unquote(url.path), parse_qs(url.query), headers)
            body = self._read_body()
            try:
                self._locked_dispatch(method, request, segments, body)
            except _Stream as stream:
                self._send_stream(stream)

        def _send_stream(self, stream: _Stream) -> None:
            self.send_response(stream.status)
            self.send_header("Content-Length", str(stream.end - stream.start))
            self.send_header("X-Request-Id", f"fake-{next(request_ids)}")
            for key, value in stream.headers.items():
                self.send_header(key, value)
            self.end_headers()
            sent = 0
            try:
                if self.command != "HEAD":
                    for block in read_range(stream.content, stream.start, stream.end):
                        self.wfile.write(block)
                        sent += len(block)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
                self.close_connection = True
            finally:
                with state.lock:
                    state.served[stream.key] += sent

        def _locked_dispatch(self, method: str, request: Request, segments: list[str], body: bytes) -> None:
            with state.lock:
                state.log.append(request)
                for hook in list(state.hooks):
                    if hook[0] == method and hook[1].search(request.path):
                        state.hooks.remove(hook)
                        hook[2]()
                for fault in state.faults:
                    if fault.times > 0 and fault.method in ("*", method) and fault.path.search(request.path):
                        fault.times -= 1
                        return self._send(fault.status, fault.body, fault.headers)
                try:
                    self._route(request, segments, body)
                except _Stream:
                    raise
                except _Answer as answer:
                    return self._send(answer.status, answer.body, answer.headers)
                except Exception as exc:  # a bug in the fake, or a request it cannot parse: fail loudly
                    state.crashes.append(f"{method} {request.path}: {exc!r}")
                    return self._send(500, {"error": f"fake hub crashed: {exc!r}"}, {})
                state.unrouted.append(request)
                self._send(404, {"error": f"the fake hub has no route for {method} {request.path}"}, {})

        def _authorize(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {state.token}":
                message = "Invalid credentials in Authorization header"
                raise _Answer(401, {"error": message}, {"X-Error-Message": message})

        def _read_access(self, repo_id: str) -> Repo:
            """Who may read: anyone for a public repo; a private one is 401 without a token and, when ``seed``ed
            private (someone else's), hidden (404) from the test's token too; a gated one is 403 GatedRepo."""
            auth = self.headers.get("Authorization")
            if auth is not None and auth != f"Bearer {state.token}":
                message = "Invalid credentials in Authorization header"
                raise _Answer(401, {"error": message}, {"X-Error-Message": message})
            repo = state.repos.get(repo_id)
            if repo is None:
                raise _not_found("Repository", "RepoNotFound")
            if repo.private and auth is None:
                raise _Answer(
                    401,
                    {"error": "Repository not found"},
                    {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Invalid username or password."},
                )
            if repo.private and repo.hidden:
                raise _not_found("Repository", "RepoNotFound")
            if repo.gated:
                message = (
                    f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to"
                    " access it."
                )
                raise _Answer(403, {"error": message}, {"X-Error-Code": "GatedRepo", "X-Error-Message": message})
            return repo

        def _resolve(self, repo_id: str, rev: str, path: str, request: Request) -> None:
            repo = self._read_access(repo_id)
            oid = repo.refs.get(rev) or repo.tags.get(rev) or (rev if rev in repo.commits else None)
            if oid is None:
                raise _not_found("Revision", "RevisionNotFound")
            commit = repo.commits[oid]
            if path not in commit.files:
                raise _Answer(
                    404,
                    {"error": "Entry not found"},
                    {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found", "X-Repo-Commit": oid},
                )
            content = commit.files[path]
            size = size_of(content)
            headers = {"X-Repo-Commit": oid, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
            if path in commit.lfs:  # the real Hub redirects to a CDN; answering directly keeps the same headers
                headers["ETag"] = f'"{git_blob_sha1(lfs_pointer(content))}"'
                headers["X-Linked-Etag"] = f'"{sha256_of(content)}"'
                headers["X-Linked-Size"] = str(size)
            else:
                headers["ETag"] = f'"{git_blob_sha1(content)}"'
            start, end, status = 0, size, 200
            spec = request.headers.get("range")
            if spec is not None:
                match = _RANGE.match(spec.strip())
                if match is None or match.groups() == ("", ""):
                    raise _Answer(400, {"error": f"bad Range {spec!r}"})
                first, last = match.groups()
                if first == "":
                    start, end = max(0, size - int(last)), size
                else:
                    start, end = int(first), min(size, int(last) + 1) if last else size
                if start >= size or start >= end:
                    raise _Answer(
                        416, {"error": "Requested Range Not Satisfiable"}, {"Content-Range": f"bytes */{size}"}
                    )
                short = state.short_ranges.get((repo_id, path))
                if short is not None:
                    end = min(end, start + short)
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
            raise _Stream(status, headers, (repo_id, path), content, start, end)

        # -- routes (raise _Answer; returning means "no such route") -------------------------------------------

        def _route(self, request: Request, seg: list[str], body: bytes) -> None:
            method = request.method
            if seg == ["api", "whoami-v2"] and method == "GET":
                self._authorize()
                auth = {"type": "access_token", "accessToken": {"role": "write"}}
                raise _Answer(200, {"type": "user", "name": USER, "orgs": [], "auth": auth})
            if len(seg) == 2 and seg[0] == "lfs-upload" and method == "PUT":  # a presigned URL: no auth
                return self._lfs_put(seg[1], body)
            if method in ("GET", "HEAD") and len(seg) >= 5 and seg[2] == "resolve":
                return self._resolve(f"{seg[0]}/{seg[1]}", seg[3], "/".join(seg[4:]), request)
            if (
                method == "GET"
                and len(seg) >= 4
                and seg[:2] == ["api", "models"]
                and (len(seg) == 4 or seg[4] in ("revision", "tree"))
            ):
                self._read_access(f"{seg[2]}/{seg[3]}")  # reads: anonymous for public repos, as on the real Hub
                return self._model_api(method, f"{seg[2]}/{seg[3]}", seg[4:], request.query, body)
            self._authorize()
            if seg == ["api", "repos", "create"] and method == "POST":
                return self._create_repo(json.loads(body or b"{}"))
            if seg == ["api", "validate-yaml"] and method == "POST":
                raise _Answer(200, {"errors": [], "warnings": []})
            if len(seg) >= 4 and seg[:2] == ["api", "models"]:
                return self._model_api(method, f"{seg[2]}/{seg[3]}", seg[4:], request.query, body)
            if (
                len(seg) == 6
                and seg[1].endswith(".git")
                and seg[2:] == ["info", "lfs", "objects", "batch"]
                and method == "POST"
            ):
                return self._lfs_batch(f"{seg[0]}/{seg[1][: -len('.git')]}", json.loads(body))
            if len(seg) == 2 and seg[0] == "lfs-verify" and method == "POST":
                if seg[1] not in state.blobs:
                    raise _Answer(404, {"error": "object not uploaded"})
                raise _Answer(200, {})

        def _create_repo(self, payload: dict[str, Any]) -> None:
            repo_id = f"{payload.get('organization') or USER}/{payload['name']}"
            if repo_id in state.repos:
                # huggingface_hub reads "url" from a 409 when exist_ok=True.
                raise _Answer(409, {"error": "You already created this model repo", "url": f"{base_url}/{repo_id}"})
            private = payload.get("visibility") == "private" or bool(payload.get("private"))
            state.create_repo(repo_id, private)
            raise _Answer(200, {"url": f"{base_url}/{repo_id}", "name": repo_id})

        def _model_api(
            self, method: str, repo_id: str, rest: list[str], query: dict[str, list[str]], body: bytes
        ) -> None:
            repo = state.repos.get(repo_id)
            if repo is None:
                raise _not_found("Repository", "RepoNotFound")

            def resolve(rev: str) -> str:
                oid = repo.refs.get(rev) or repo.tags.get(rev) or (rev if rev in repo.commits else None)
                if oid is None:
                    raise _not_found("Revision", "RevisionNotFound")
                return oid

            if method == "GET" and (rest == [] or rest[:1] == ["revision"]):
                oid = resolve("/".join(rest[1:]) if rest else "main")
                commit = repo.commits[oid]
                blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
                siblings = []
                for name in sorted(commit.files):
                    sibling: dict[str, Any] = {"rfilename": name}
                    if blobs:  # sizes and LFS data, as the real Hub adds with ?blobs=true
                        content = commit.files[name]
                        sibling["size"] = size_of(content)
                        if name in commit.lfs:
                            pointer = lfs_pointer(content)
                            sibling["blobId"] = git_blob_sha1(pointer)
                            sibling["lfs"] = {
                                "sha256": sha256_of(content),
                                "size": size_of(content),
                                "pointerSize": len(pointer),
                            }
                        else:
                            sibling["blobId"] = git_blob_sha1(content)
                    siblings.append(sibling)
                raise _Answer(
                    200,
                    {
                        "id": repo_id,
                        "modelId": repo_id,
                        "sha": oid,
                        "private": repo.private,
                        "gated": False,
                        "disabled": False,
                        "tags": [],
                        "siblings": siblings,
                    },
                )
            if method == "GET" and rest == ["refs"]:

                def ref(name: str, full: str, oid: str) -> dict[str, str]:
                    return {"name": name, "ref": full, "targetCommit": oid}

                raise _Answer(
                    200,
                    {
                        "branches": [
                            ref(r, f"refs/heads/{r}", o) for r, o in repo.refs.items() if not r.startswith("refs/pr/")
                        ],
                        "tags": [ref(t, f"refs/tags/{t}", o) for t, o in repo.tags.items()],
                        "converts": [],
                        "pullRequests": [
                            ref(r.rsplit("/", 1)[1], r, o) for r, o in repo.refs.items() if r.startswith("refs/pr/")
                        ],
                    },
                )
            if method == "GET" and len(rest) >= 2 and rest[0] == "tree":
                commit = repo.commits[resolve(rest[1])]
                prefix = "/".join(rest[2:])
                raise _Answer(
                    200, self._tree(commit, prefix, query.get("recursive", ["false"])[0].lower() in ("1", "true"))
                )
            if method == "POST" and len(rest) >= 2 and rest[0] == "branch":
                branch = "/".join(rest[1:])
                if branch in repo.refs:
                    raise _Answer(409, {"error": "Reference already exists"})
                start = json.loads(body or b"{}").get("startingPoint") or "main"
                repo.refs[branch] = resolve(start)
                raise _Answer(200, {})
            if method == "POST" and len(rest) >= 2 and rest[0] == "preupload":
                return self._preupload(repo, "/".join(rest[1:]), json.loads(body))
            if method == "POST" and len(rest) >= 2 and rest[0] == "commit":
                return self._commit(repo, "/".join(rest[1:]), query, body)

        @staticmethod
        def _tree(commit: Commit, prefix: str, recursive: bool) -> list[dict[str, Any]]:
            entries: dict[str, dict[str, Any]] = {}
            for path, content in sorted(commit.files.items()):
                if prefix and not path.startswith(prefix + "/"):
                    continue
                relative = path[len(prefix) + 1 :] if prefix else path
                if not recursive and "/" in relative:
                    folder = f"{prefix}/{relative.split('/')[0]}" if prefix else relative.split("/")[0]
                    entries[folder] = {"type": "directory", "path": folder, "oid": "0" * 40, "size": 0}
                    continue
                entry: dict[str, Any] = {"type": "file", "path": path, "size": size_of(content)}
                if path in commit.lfs:
                    pointer = lfs_pointer(content)
                    entry["oid"] = git_blob_sha1(pointer)  # a git blob id: the pointer's, as on the real Hub
                    entry["lfs"] = {"oid": sha256_of(content), "size": size_of(content), "pointerSize": len(pointer)}
                else:
                    entry["oid"] = git_blob_sha1(content)
                entries[path] = entry
            return list(entries.values())

        def _preupload(self, repo: Repo, rev: str, payload: dict[str, Any]) -> None:
            head = repo.commits.get(repo.refs.get(rev, ""))
            answers = []
            for item in payload["files"]:
                path = item["path"]
                lfs = path.endswith(LFS_SUFFIXES)
                oid = None
                if head is not None and path in head.files:  # the client skips files whose oid matches
                    content = head.files[path]
                    oid = sha256_of(content) if path in head.lfs else git_blob_sha1(content)
                answers.append(
                    {"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
                )
            raise _Answer(200, {"files": answers, "commitOid": repo.refs.get(rev)})

        def _lfs_batch(self, repo_id: str, payload: dict[str, Any]) -> None:
            if repo_id not in state.repos:
                raise _not_found("Repository", "RepoNotFound")
            objects = []
            for obj in payload["objects"]:
                entry: dict[str, Any] = {"oid": obj["oid"], "size": obj["size"]}
                if obj["oid"] not in state.blobs:  # no "actions": already stored, the client skips the upload
                    entry["actions"] = {
                        "upload": {"href": f"{base_url}/lfs-upload/{obj['oid']}"},
                        "verify": {"href": f"{base_url}/lfs-verify/{obj['oid']}"},
                    }
                objects.append(entry)
            raise _Answer(200, {"transfer": "basic", "objects": objects})

        @staticmethod
        def _lfs_put(oid: str, body: bytes) -> None:
            if hashlib.sha256(body).hexdigest() != oid:
                raise _Answer(400, {"error": "sha256 mismatch"})
            state.blobs[oid] = body
            raise _Answer(200, {})

        def _commit(self, repo: Repo, rev: str, query: dict[str, list[str]], body: bytes) -> None:
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            header = next(line["value"] for line in lines if line["key"] == "header")
            create_pr = query.get("create_pr", ["0"])[0] in ("1", "true")
            if rev not in repo.refs:
                raise _not_found("Revision", "RevisionNotFound")
            head = repo.refs[rev]
            parent = header.get("parentCommit")
            if parent and parent != head:
                raise _Answer(412, {"error": "A commit has happened since. Please refresh and try again."})
            files = dict(repo.commits[head].files)
            lfs = set(repo.commits[head].lfs)
            for line in lines:
                key, value = line["key"], line["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                    lfs.discard(value["path"])
                elif key == "lfsFile":
                    if value["oid"] not in state.blobs:
                        raise _Answer(422, {"error": f"LFS object {value['oid']} was never uploaded"})
                    files[value["path"]] = state.blobs[value["oid"]]
                    lfs.add(value["path"])
                elif key == "deletedFile":
                    if value["path"] not in files:
                        raise _not_found("A file with this name doesn't exist: entry", "EntryNotFound")
                    del files[value["path"]]
                elif key != "header":
                    raise _Answer(400, {"error": f"the fake hub does not implement {key!r} commit lines"})
            summary, description = header.get("summary", ""), header.get("description", "")
            if create_pr:
                repo.prs += 1
                ref = f"refs/pr/{repo.prs}"
                oid = state._commit(repo, ref, head, files, frozenset(lfs), summary, description)
                raise _Answer(
                    200,
                    {
                        "commitUrl": f"{base_url}/{repo.repo_id}/commit/{oid}",
                        "commitOid": oid,
                        "pullRequestUrl": f"{base_url}/{repo.repo_id}/discussions/{repo.prs}",
                    },
                )
            oid = state._commit(repo, rev, head, files, frozenset(lfs), summary, description)
            raise _Answer(
                200, {"commitUrl": f"{base_url}/{repo.repo_id}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}
            )

    return Handler


class _Server(ThreadingHTTPServer):
    """socketserver prints a traceback to stderr when handling a request raises, and in-process that print lands in the
    stderr of the CLI under test (CliRunner captures it: a flaky failure in CI). A client that hung up (it gave up after
    its retries, or dropped a keep-alive connection) is not the fake's fault: ignored. Anything else is a crash of the
    fake, recorded and checked when ``serve`` exits."""

    crashes: list[str]

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError):
            self.crashes.append(f"request from {client_address}: {exc!r}")


class FakeHub:
    """The server: ``url`` to point the client at, ``state`` to steer and inspect, ``close()`` when done."""

    def __init__(self, token: str = TOKEN):
        self.state = HubState(token)
        self.sleeps: list[float] = []  # backoff waits the client asked for (recorded, not slept) under serve()
        self.server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
        self.server.crashes = self.state.crashes
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.server.RequestHandlerClass = _handler(self.state, self.url)
        # A short poll interval: shutdown() waits up to one interval.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    @property
    def token(self) -> str:
        return self.state.token

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _NoSleepTime:
    """Stands in for the ``time`` module inside huggingface_hub's HTTP backoff: records sleeps, does not wait."""

    def __init__(self, sleeps: list[float]):
        self._sleeps = sleeps

    def sleep(self, seconds: float) -> None:
        self._sleeps.append(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextmanager
def serve(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, token: str = TOKEN, check_routes: bool = True
) -> Iterator[FakeHub]:
    """Start a fake hub and point the real client at it for the duration.

    Sets ``HF_ENDPOINT`` (read at call time by eaglekit.hub) and ``HF_TOKEN``; disables Xet (not emulable) and
    offline mode (it blocks loopback too); moves the token file into ``tmp_path`` (huggingface_hub froze its path
    at import, so ``HF_HOME`` alone would not keep a developer's stored token out); makes backoff sleeps instant.
    With ``check_routes``, fails on exit if the client sent a request the fake does not implement or crashed on.
    """
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    hub = FakeHub(token)
    home = tmp_path / "hf-home"
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    # Downloads go to a cache inside tmp_path, never the developer's (the client froze these paths at import too).
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HUGGINGFACE_HUB_CACHE", str(home / "hub"), raising=False)
    monkeypatch.setattr(constants, "HF_XET_CACHE", str(home / "xet"), raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", token)
    for name in (
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_OIDC_RESOURCE",
        "HF_OIDC_ID_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_http, "time", _NoSleepTime(hub.sleeps))
    try:
        yield hub
    finally:
        hub.close()
    if check_routes:
        assert not hub.state.unrouted, f"the client sent requests the fake hub does not implement: {hub.state.unrouted}"
        assert not hub.state.crashes, f"the fake hub failed on: {hub.state.crashes}"


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    """A running fake hub the real client talks to (see ``serve``); token ``fakehub.TOKEN`` in HF_TOKEN."""
    with serve(monkeypatch, tmp_path) as hub:
        yield hub


@contextmanager
def silent_server() -> Iterator[tuple[str, list]]:
    """A loopback server that accepts connections and never answers (reads nothing, writes nothing): its URL and the
    connections it holds, for clients that must not wait on it for ever."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", held
    finally:
        server.close()
