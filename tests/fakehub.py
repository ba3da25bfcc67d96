"""A loopback fake of the Hugging Face Hub's write API, enough for the real huggingface_hub client to create repos,
branches and PRs, upload (LFS and regular) files and commit. Stdlib only; Xet must be disabled in the client.

State: repos -> refs (branches and refs/pr/N) -> commits (oid, parent, files). Faults can be injected per request
(``state.fail``), and a concurrent push simulated (``state.on`` a path: advance a branch when it is requested).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Commit:
    oid: str
    parent: str | None
    files: dict[str, bytes]  # path -> content (LFS files by their uploaded bytes)
    message: str


@dataclass
class Repo:
    repo_id: str
    private: bool
    refs: dict[str, str] = field(default_factory=dict)  # ref name -> commit oid
    commits: dict[str, Commit] = field(default_factory=dict)
    prs: int = 0


@dataclass
class Fault:
    method: str
    path: re.Pattern
    status: int
    headers: dict
    body: dict
    times: int


class HubState:
    def __init__(self, token: str):
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}  # sha256 -> content
        self.log: list[tuple[str, str]] = []  # (method, path)
        self.faults: list[Fault] = []
        self.hooks: list[tuple[str, re.Pattern, Callable[[], None]]] = []
        self.lock = threading.Lock()

    # -- helpers for tests -----------------------------------------------------------------------------------

    def fail(self, method: str, path_regex: str, status: int, *, error_code: str | None = None, times: int = 1, body: dict | None = None) -> None:
        headers = {"X-Error-Code": error_code} if error_code else {}
        self.faults.append(Fault(method, re.compile(path_regex), status, headers, body or {"error": f"injected {status}"}, times))

    def on(self, method: str, path_regex: str, action: Callable[[], None]) -> None:
        self.hooks.append((method, re.compile(path_regex), action))

    def files(self, repo_id: str, ref: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return dict(repo.commits[repo.refs[ref]].files)

    def commits_posted(self) -> int:
        return sum(1 for m, p in self.log if m == "POST" and "/commit/" in p)

    def head(self, repo_id: str, ref: str = "main") -> str:
        return self.repos[repo_id].refs[ref]

    def advance_branch(self, repo_id: str, ref: str = "main", files: dict[str, bytes] | None = None) -> str:
        """Another pusher's commit lands on ``ref``."""
        repo = self.repos[repo_id]
        parent = repo.refs[ref]
        content = dict(repo.commits[parent].files)
        content.update(files or {"other.txt": b"someone else"})
        return self._commit(repo, ref, parent, content, "concurrent push")

    # -- model ----------------------------------------------------------------------------------------------

    def _commit(self, repo: Repo, ref: str, parent: str | None, files: dict[str, bytes], message: str) -> str:
        oid = hashlib.sha1(uuid.uuid4().bytes).hexdigest()
        repo.commits[oid] = Commit(oid, parent, files, message)
        repo.refs[ref] = oid
        return oid

    def create_repo(self, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_id, private)
        self.repos[repo_id] = repo
        self._commit(repo, "main", None, {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}, "initial commit")
        return repo


def _handler(state: HubState, base_url: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        # -- plumbing ---------------------------------------------------------------------------------------

        def _send(self, status: int, body=None, headers: dict | None = None, raw: bytes | None = None):
            data = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _authorized(self) -> bool:
            return self.headers.get("Authorization") == f"Bearer {state.token}"

        def _dispatch(self, method: str):
            url = urlparse(self.path)
            path = unquote(url.path)
            query = parse_qs(url.query)
            body = self._body() if method in ("POST", "PUT") else b""
            with state.lock:
                state.log.append((method, path))
                for hook_method, pattern, action in list(state.hooks):
                    if hook_method == method and pattern.search(path):
                        state.hooks.remove((hook_method, pattern, action))
                        action()
                for fault in state.faults:
                    if fault.method == method and fault.path.search(path) and fault.times > 0:
                        fault.times -= 1
                        return self._send(fault.status, fault.body, fault.headers)
                try:
                    return self._route(method, path, query, body)
                except KeyError as exc:
                    return self._send(404, {"error": f"not found: {exc}"}, {"X-Error-Code": "RepoNotFound"})

        def do_GET(self):
            self._dispatch("GET")

        def do_POST(self):
            self._dispatch("POST")

        def do_PUT(self):
            self._dispatch("PUT")

        def do_HEAD(self):
            self._dispatch("HEAD")

        # -- routes -----------------------------------------------------------------------------------------

        def _route(self, method: str, path: str, query: dict, body: bytes):
            if path == "/api/whoami-v2":
                if not self._authorized():
                    return self._send(401, {"error": "Invalid credentials in Authorization header"})
                return self._send(200, {"type": "user", "name": "tester", "orgs": [], "auth": {"accessToken": {"role": "write"}}})
            if not self._authorized() and method != "PUT":
                return self._send(401, {"error": "Invalid credentials"})
            if path == "/api/repos/create" and method == "POST":
                payload = json.loads(body or b"{}")
                repo_id = f"{payload.get('organization') or 'tester'}/{payload['name']}"
                if repo_id in state.repos:
                    return self._send(409, {"error": "You already created this model repo", "url": f"{base_url}/{repo_id}"})
                state.create_repo(repo_id, bool(payload.get("private")))
                return self._send(200, {"url": f"{base_url}/{repo_id}", "name": repo_id})
            if path == "/api/validate-yaml":
                return self._send(200, {"errors": [], "warnings": []})
            m = re.match(r"^/api/models/([^/]+/[^/]+)(/.*)?$", path)
            if m:
                return self._model_api(method, m.group(1), m.group(2) or "", query, body)
            m = re.match(r"^/([^/]+/[^/]+)\.git/info/lfs/objects/batch$", path)
            if m and method == "POST":
                payload = json.loads(body)
                objects = []
                for obj in payload["objects"]:
                    entry = {"oid": obj["oid"], "size": obj["size"]}
                    if obj["oid"] not in state.blobs:
                        entry["actions"] = {"upload": {"href": f"{base_url}/lfs-upload/{obj['oid']}"}}
                    objects.append(entry)
                return self._send(200, {"transfer": "basic", "objects": objects})
            m = re.match(r"^/lfs-upload/([0-9a-f]{64})$", path)
            if m and method == "PUT":
                if hashlib.sha256(body).hexdigest() != m.group(1):
                    return self._send(400, {"error": "sha256 mismatch"})
                state.blobs[m.group(1)] = body
                return self._send(200, {})
            return self._send(404, {"error": f"fake hub has no route for {method} {path}"})

        def _model_api(self, method: str, repo_id: str, rest: str, query: dict, body: bytes):
            repo = state.repos.get(repo_id)
            if repo is None:
                return self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            if method == "GET" and (rest == "" or rest.startswith("/revision/")):
                rev = rest[len("/revision/") :] if rest else "main"
                if rev not in repo.refs and rev not in repo.commits:
                    return self._send(404, {"error": "Revision not found"}, {"X-Error-Code": "RevisionNotFound"})
                oid = repo.refs.get(rev, rev)
                files = repo.commits[oid].files
                return self._send(200, {"id": repo_id, "modelId": repo_id, "sha": oid, "private": repo.private,
                                        "siblings": [{"rfilename": f} for f in sorted(files)]})
            if method == "GET" and rest == "/refs":
                branches = [{"name": r, "ref": f"refs/heads/{r}", "targetCommit": o} for r, o in repo.refs.items() if not r.startswith("refs/pr/")]
                prs = [{"name": r, "ref": r, "targetCommit": o} for r, o in repo.refs.items() if r.startswith("refs/pr/")]
                return self._send(200, {"branches": branches, "tags": [], "converts": [], "pullRequests": prs})
            m = re.match(r"^/tree/(.+?)(/.*)?$", rest)
            if method == "GET" and m:
                rev = m.group(1)
                if rev not in repo.refs:
                    return self._send(404, {"error": "Revision not found"}, {"X-Error-Code": "RevisionNotFound"})
                files = repo.commits[repo.refs[rev]].files
                return self._send(200, [{"type": "file", "path": p, "size": len(c), "oid": hashlib.sha1(c).hexdigest()} for p, c in sorted(files.items())])
            m = re.match(r"^/branch/(.+)$", rest)
            if method == "POST" and m:
                branch = m.group(1)
                if branch in repo.refs:
                    return self._send(409, {"error": "Reference already exists"})
                payload = json.loads(body or b"{}")
                start = payload.get("startingPoint") or "main"
                repo.refs[branch] = repo.refs.get(start, start)
                return self._send(200, {})
            m = re.match(r"^/preupload/(.+)$", rest)
            if method == "POST" and m:
                payload = json.loads(body)
                rev = m.group(1)
                current = repo.commits[repo.refs[rev]].files if rev in repo.refs else {}
                out = []
                for f in payload["files"]:
                    lfs = f["path"].endswith((".safetensors", ".bin"))
                    remote = current.get(f["path"])
                    oid = (hashlib.sha256(remote).hexdigest() if lfs else _git_blob_sha(remote)) if remote is not None else None
                    out.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
                return self._send(200, {"files": out, "commitOid": repo.refs.get(rev)})
            m = re.match(r"^/commit/(.+)$", rest)
            if method == "POST" and m:
                return self._commit(repo, m.group(1), query, body)
            return self._send(404, {"error": f"fake hub has no route for {method} /api/models/{repo_id}{rest}"})

        def _commit(self, repo: Repo, rev: str, query: dict, body: bytes):
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            header = next(x["value"] for x in lines if x["key"] == "header")
            create_pr = query.get("create_pr", ["0"])[0] in ("1", "true")
            if rev not in repo.refs:
                return self._send(404, {"error": "Revision not found"}, {"X-Error-Code": "RevisionNotFound"})
            head = repo.refs[rev]
            parent = header.get("parentCommit")
            if parent and parent != head:
                return self._send(412, {"error": "A commit has happened since. Please refresh and try again."})
            files = dict(repo.commits[head].files)
            for line in lines:
                key, value = line["key"], line["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "lfsFile":
                    if value["oid"] not in state.blobs:
                        return self._send(422, {"error": f"LFS object {value['oid']} was never uploaded"})
                    files[value["path"]] = state.blobs[value["oid"]]
                elif key == "deletedFile":
                    files.pop(value["path"], None)
            if create_pr:
                repo.prs += 1
                ref = f"refs/pr/{repo.prs}"
                oid = state._commit(repo, ref, head, files, header.get("summary", ""))
                return self._send(200, {"commitUrl": f"{base_url}/{repo.repo_id}/commit/{oid}", "commitOid": oid,
                                        "pullRequestUrl": f"{base_url}/{repo.repo_id}/discussions/{repo.prs}"})
            oid = state._commit(repo, rev, head, files, header.get("summary", ""))
            return self._send(200, {"commitUrl": f"{base_url}/{repo.repo_id}/commit/{oid}", "commitOid": oid})

    return Handler


def _git_blob_sha(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class FakeHub:
    def __init__(self, token: str = "hf_SECRETtoken123"):
        self.state = HubState(token)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), None)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.server.RequestHandlerClass = _handler(self.state, self.url)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def token(self) -> str:
        return self.state.token

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
