"""eaglekit.hub against the REAL huggingface_hub client talking to a loopback fake Hub (tests/fakehub.py, Xet off).

No network beyond 127.0.0.1; every test asserts on what the fake Hub ended up holding and on the requests the
client sent, not on mocks of the client.
"""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import pytest

from eaglekit.errors import HubError, UsageError
from eaglekit.hub import (
    DEFAULT_ENDPOINT,
    PublishResult,
    UploadFile,
    is_weight_file,
    publish,
    resolve_endpoint,
    resolve_token,
)

from fakehub import TOKEN, FakeHub

REPO = "tester/drafter"
CARD = b"---\nlicense: apache-2.0\ntags:\n- eagle3\n---\n# drafter\n"


def drafter_files(version: int = 1, tmp: Path | None = None) -> list[UploadFile]:
    """A drafter's files; the weights come from disk when ``tmp`` is given (the path the CLI uses)."""
    weights = b"W" * 1000 + bytes([version])
    if tmp is not None:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "model.safetensors").write_bytes(weights)
        weight_file = UploadFile("model.safetensors", local_path=tmp / "model.safetensors")
    else:
        weight_file = UploadFile("model.safetensors", data=weights)
    return [
        UploadFile("README.md", data=CARD),
        UploadFile(
            "config.json", data=json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "v": version}).encode()
        ),
        weight_file,
    ]


def push(files: list[UploadFile] | None = None, repo: str = REPO, **kwargs) -> PublishResult:
    kwargs.setdefault("commit_message", "Upload drafter")
    return publish(repo, files if files is not None else drafter_files(), **kwargs)


def refused(fragment: str, *, files: list[UploadFile] | None = None, secret: str = TOKEN, **kwargs) -> HubError:
    """publish must fail with a one-line HubError containing ``fragment`` and never the token."""
    with pytest.raises(HubError) as info:
        push(files, **kwargs)
    message = str(info.value)
    assert fragment in message, message
    assert secret not in message and secret not in repr(info.value.args)
    assert "\n" not in message
    # No chained client error (with URLs and server text) rides along into tracebacks: raised "from None".
    assert info.value.__cause__ is None and (info.value.__context__ is None or info.value.__suppress_context__)
    return info.value


def content(files: list[UploadFile]) -> dict[str, bytes]:
    return {f.path_in_repo: f.data if f.data is not None else f.local_path.read_bytes() for f in files}


# ---------------------------------------------------------------------------------------------------------------
# Publishing
# ---------------------------------------------------------------------------------------------------------------


def test_new_repo_gets_one_commit_with_every_file(fake_hub: FakeHub, tmp_path):
    state = fake_hub.state
    files = drafter_files(1, tmp_path / "d")
    result = push(files, commit_description="made by a test")

    assert result.created_repo and not result.created_branch and not result.unchanged
    assert result.revision == "main" and result.pr_url is None and result.deleted == []
    assert result.commit_oid == state.head(REPO)
    assert result.commit_url == f"{fake_hub.url}/{REPO}/commit/{result.commit_oid}"
    assert state.commits_posted() == 1  # one create_commit, all files in it
    assert state.files(REPO) == {".gitattributes": state.files(REPO)[".gitattributes"], **content(files)}
    commit = state.commit(REPO)
    assert commit.message == "Upload drafter" and commit.description == "made by a test"
    assert commit.parent is not None and state.commit(REPO, commit.parent).message == "initial commit"
    assert commit.lfs == {"model.safetensors"}  # the weights went through the LFS batch + PUT path
    assert hashlib.sha256(content(files)["model.safetensors"]).hexdigest() in state.blobs
    assert state.log[0].path == "/api/whoami-v2"  # the token is checked before anything else
    assert all(r.headers.get("user-agent", "").startswith("eaglekit/") for r in state.requests(path_regex="^/api/"))
    assert not state.repos[REPO].private


def test_a_push_reads_each_file_to_hash_it_once(fake_hub: FakeHub, tmp_path, monkeypatch):
    """eaglekit hashes each file for its plan; the client is handed that hash instead of reading the file again."""
    from huggingface_hub import lfs

    def refuse(fileobj, *args, **kwargs):
        raise AssertionError("huggingface_hub hashed a file eaglekit had hashed already")

    monkeypatch.setattr(lfs, "sha_fileobj", refuse)
    files = drafter_files(1, tmp_path / "d")
    push(files)
    assert fake_hub.state.files(REPO)["model.safetensors"] == content(files)["model.safetensors"]
    assert hashlib.sha256(content(files)["model.safetensors"]).hexdigest() in fake_hub.state.blobs


def test_private_repo_in_an_organisation(fake_hub: FakeHub):
    result = push(repo="some-org/drafter", private=True)
    assert result.created_repo
    assert fake_hub.state.repos["some-org/drafter"].private


def test_private_is_refused_for_an_existing_public_repo(fake_hub: FakeHub):
    """--private to a repo that exists and is public published it publicly, and push said "private"."""
    push()
    commits = fake_hub.state.commits_posted()
    with pytest.raises(
        UsageError, match="exists and is public; `private` only makes a repository that push creates private"
    ):
        push(drafter_files(2), private=True)
    assert fake_hub.state.commits_posted() == commits and not fake_hub.state.repos[REPO].private
    fake_hub.state.repos[REPO].private = True
    assert not push(drafter_files(2), private=True).unchanged  # private already: pushed


def test_a_push_to_an_endpoint_that_never_answers_ends(monkeypatch, tmp_path):
    """A server that accepts connections and never answers held a push for ever (whoami, and every request after it,
    is sent without a timeout); a push's requests now wait PUBLISH_WAIT_FACTOR x HF_HUB_DOWNLOAD_TIMEOUT at most."""
    from huggingface_hub import constants

    import eaglekit.hub as hub

    from fakehub import silent_server

    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 0.2)
    with silent_server() as (url, held):
        with pytest.raises(HubError, match="Timeout"):
            publish(REPO, drafter_files(), commit_message="m", endpoint=url, token=TOKEN)
    assert held and hub.PUBLISH_WAIT_FACTOR * 0.2 < 10


def test_existing_repo_keeps_its_other_files(fake_hub: FakeHub):
    state = fake_hub.state
    state.create_repo(REPO)
    state.advance_branch(REPO, files={"notes.md": b"by hand", "README.md": b"old card"})
    result = push()
    assert not result.created_repo and not result.unchanged
    files = state.files(REPO)
    assert files["notes.md"] == b"by hand" and files["README.md"] == CARD
    assert state.requests("POST", "^/api/repos/create$") == []  # an existing repo is not "created" again


def test_republishing_identical_files_makes_no_commit(fake_hub: FakeHub, tmp_path):
    state = fake_hub.state
    first = push(drafter_files(1, tmp_path / "a"))
    log_size = len(state.log)
    again = push(drafter_files(1, tmp_path / "b"))  # same bytes, other local paths
    assert again.unchanged and again.commit_oid == first.commit_oid == state.head(REPO)
    assert again.commit_url == first.commit_url and again.deleted == [] and not again.created_repo
    assert state.commits_posted() == 1
    second_push = state.log[log_size:]
    assert not [r for r in second_push if "/preupload/" in r.path or "lfs" in r.path]  # nothing re-uploaded

    as_pr = push(drafter_files(1), create_pr=True)  # nothing to propose either
    assert as_pr.unchanged and as_pr.pr_url is None and "refs/pr/1" not in state.repos[REPO].refs
    assert state.commits_posted() == 1


def test_one_changed_file_is_a_new_commit(fake_hub: FakeHub):
    state = fake_hub.state
    first = push(drafter_files(1))
    files = drafter_files(1)
    files[1] = UploadFile("config.json", data=b'{"changed": true}')
    second = push(files)
    assert not second.unchanged and second.commit_oid == state.head(REPO) != first.commit_oid
    assert state.commit(REPO).parent == first.commit_oid
    assert state.files(REPO)["config.json"] == b'{"changed": true}'
    assert state.commits_posted() == 2


def test_new_branch_from_main(fake_hub: FakeHub):
    state = fake_hub.state
    main = push(drafter_files(1)).commit_oid
    result = push(drafter_files(2), revision="v2")
    assert result.created_branch and result.revision == "v2"
    assert state.head(REPO) == main  # main untouched
    assert state.head(REPO, "v2") == result.commit_oid and state.commit(REPO, "v2").parent == main
    assert state.files(REPO, "v2")["config.json"] == content(drafter_files(2))["config.json"]

    again = push(drafter_files(3), revision="refs/heads/v2")  # an existing branch, spelled in full
    assert not again.created_branch and again.revision == "v2" and state.commit(REPO, "v2").parent == result.commit_oid
    assert state.commits_posted() == 3


def test_pull_request_against_main(fake_hub: FakeHub):
    state = fake_hub.state
    main = push(drafter_files(1)).commit_oid
    result = push(drafter_files(2), create_pr=True, commit_message="Proposed drafter")
    assert result.pr_num == 1 and result.pr_url == f"{fake_hub.url}/{REPO}/discussions/1"
    assert result.revision == "refs/pr/1" and result.commit_oid == state.head(REPO, "refs/pr/1")
    assert state.head(REPO) == main and state.commit(REPO, "refs/pr/1").parent == main
    assert state.files(REPO, "refs/pr/1")["model.safetensors"] == content(drafter_files(2))["model.safetensors"]

    follow_up = push(drafter_files(3), revision="refs/pr/1")  # more commits onto the open pull request
    assert follow_up.revision == "refs/pr/1" and follow_up.pr_url is None
    assert state.commit(REPO, "refs/pr/1").parent == result.commit_oid and state.head(REPO) == main


def test_stale_shards_are_deleted_in_the_same_commit(fake_hub: FakeHub):
    state = fake_hub.state
    shards = {
        "model-00001-of-00002.safetensors": b"S1" * 50,
        "model-00002-of-00002.safetensors": b"S2" * 50,
        "model.safetensors.index.json": b'{"weight_map": {}}',
        "pytorch_model.bin": b"old torch weights",
    }
    unrelated = {"training_args.bin": b"not weights", "notes.md": b"keep me", "extra/model.safetensors": b"nested"}
    state.create_repo(REPO)
    state.advance_branch(REPO, files={**shards, **unrelated})
    before = state.head(REPO)

    result = push(drafter_files(1))
    assert result.deleted == sorted(shards)
    assert state.commits_posted() == 1 and state.commit(REPO).parent == before  # adds and deletes: one commit
    after = state.files(REPO)
    assert not set(shards) & set(after)
    assert {".gitattributes", *unrelated, "README.md", "config.json", "model.safetensors"} == set(after)

    state.advance_branch(REPO, files={"model-00001-of-00003.safetensors": b"x"})
    kept = push(drafter_files(1), delete_stale=False)
    assert kept.unchanged and kept.deleted == []  # nothing to add, nothing deleted: no commit
    assert "model-00001-of-00003.safetensors" in state.files(REPO)


@pytest.mark.parametrize(
    "path, weight",
    [
        ("model.safetensors", True),
        ("model-00001-of-00002.safetensors", True),
        ("model.safetensors.index.json", True),
        ("pytorch_model.bin", True),
        ("pytorch_model-00001-of-00003.bin", True),
        ("pytorch_model.bin.index.json", True),
        ("training_args.bin", False),
        ("optimizer.bin", False),
        ("config.json", False),
        (".gitattributes", False),
        ("README.md", False),
        ("sub/model.safetensors", False),
    ],
)
def test_which_files_count_as_replaceable_weights(path, weight):
    assert is_weight_file(path) is weight


def test_concurrent_push_is_refused_not_clobbered(fake_hub: FakeHub):
    state = fake_hub.state
    push(drafter_files(1))
    # The other pusher lands between our head read and our commit (the client's preupload comes in between).
    state.on("POST", r"/preupload/", lambda: state.advance_branch(REPO, files={"config.json": b'{"theirs": 1}'}))
    refused("moved while pushing (412)", files=drafter_files(2))
    assert state.files(REPO)["config.json"] == b'{"theirs": 1}'  # their commit stands
    assert state.commit(REPO).message == "concurrent push"
    assert state.files(REPO)["model.safetensors"] == content(drafter_files(1))["model.safetensors"]  # not ours
    assert state.commits_posted() == 2  # ours was sent and refused

    theirs = state.head(REPO)
    retry = push(drafter_files(2))  # running it again (a deliberate new push) builds on their commit
    assert retry.commit_oid == state.head(REPO) and state.commit(REPO).parent == theirs


# ---------------------------------------------------------------------------------------------------------------
# Failures: one clear line, no token, nothing changed remotely
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, status, code, times, fragment",
    [
        ("GET", r"^/api/whoami-v2$", 401, None, 1, "authentication failed (401)"),
        ("POST", r"/commit/", 401, None, 1, "check `token` / HF_TOKEN"),
        ("GET", r"/refs$", 403, "GatedRepo", 1, "access is gated (403 GatedRepo)"),
        ("POST", r"/commit/", 403, None, 1, "forbidden (403) while uploading and committing"),
        (
            "POST",
            r"/preupload/",
            404,
            "RepoNotFound",
            1,
            "repository not found, or not visible to this token (404 RepoNotFound)",
        ),
        ("POST", r"/commit/", 404, "RevisionNotFound", 1, "revision 'main' not found (404 RevisionNotFound)"),
        ("POST", r"/preupload/", 429, None, 99, "rate limited by the Hub (429)"),
        ("POST", r"/preupload/", 500, None, 99, "Hub server error (500) while uploading and committing"),
        ("POST", r"/commit/", 502, None, 1, "Hub server error (502)"),  # the commit POST is never retried
        ("POST", r"\.git/info/lfs/objects/batch$", 503, None, 99, "Hub server error (503)"),
        ("PUT", r"^/lfs-upload/", 503, None, 99, "Hub server error (503)"),
        ("GET", r"/tree/", 418, None, 1, "Hub request failed (418) while listing the files already there"),
    ],
)
def test_hub_failures_are_clear_and_change_nothing(fake_hub: FakeHub, method, path, status, code, times, fragment):
    state = fake_hub.state
    push(drafter_files(1))
    head, files = state.head(REPO), state.files(REPO)
    state.fail(method, path, status, error_code=code, times=times)
    error = refused(fragment, files=drafter_files(2))
    if status >= 500:
        assert "(request id fake-" in str(error)  # from the response's X-Request-Id, for a support ticket
    assert state.head(REPO) == head and state.files(REPO) == files
    assert list(state.repos[REPO].refs) == ["main"]


def test_retries_back_off_then_give_up(fake_hub: FakeHub):
    state = fake_hub.state
    push(drafter_files(1))
    state.fail("POST", r"/preupload/", 503, times=99)
    refused("server error (503)", files=drafter_files(2))
    assert len(state.requests("POST", "/preupload/")) == 1 + 1 + 5  # first push, then 1 try + 5 retries
    assert fake_hub.sleeps == [1, 2, 4, 8, 8]  # the client's backoff, recorded rather than slept


def test_transient_server_errors_are_retried_by_the_client(fake_hub: FakeHub):
    state = fake_hub.state
    state.fail("POST", r"/preupload/", 503, times=2)
    state.fail("PUT", r"^/lfs-upload/", 500, times=1)
    result = push()
    assert not result.unchanged and state.commits_posted() == 1 and fake_hub.sleeps == [1, 2, 1]
    assert state.files(REPO)["model.safetensors"] == content(drafter_files())["model.safetensors"]


def test_bad_token_is_refused_before_anything_is_created(fake_hub: FakeHub):
    refused("authentication failed (401)", token="hf_WRONGtoken999", secret="hf_WRONGtoken999")
    assert [r.path for r in fake_hub.state.log] == ["/api/whoami-v2"]
    assert REPO not in fake_hub.state.repos


def test_token_and_endpoint_from_the_environment_at_call_time(fake_hub: FakeHub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_OTHERtoken456")
    refused("authentication failed", secret="hf_OTHERtoken456")  # HF_TOKEN is read now, not at import
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # explicit arguments win over the environment
    assert push(endpoint=fake_hub.url, token=TOKEN).created_repo


def test_no_token_at_all(fake_hub: FakeHub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    refused("no Hub token")
    assert fake_hub.state.log == []


def test_offline_mode_is_refused_before_any_request(fake_hub: FakeHub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    refused("offline mode is on (HF_HUB_OFFLINE=1)")
    assert fake_hub.state.log == []


def test_unreachable_endpoint(fake_hub: FakeHub):
    with socket.socket() as s:  # a port nothing listens on: connection refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    refused(f"cannot reach the Hub at {endpoint} while checking the token (ConnectError)", endpoint=endpoint)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"create_pr": True, "revision": "v2"}, "create_pr opens a pull request against main"),
        ({"revision": "0123456789abcdef0123456789abcdef01234567"}, "is a commit id"),
        ({"repo": "drafter"}, "namespace/name"),
        ({"repo": "tester/bad name"}, "not a valid repository id"),
        ({"commit_message": " "}, "commit message is required"),
        ({"files": []}, "file list is empty"),
        ({"files": [UploadFile("a.json", data=b"1"), UploadFile("a.json", data=b"2")]}, "uploaded twice: a.json"),
        ({"endpoint": "huggingface.co"}, "not a Hub endpoint URL"),
    ],
)
def test_contradictory_arguments_are_refused_before_any_request(fake_hub: FakeHub, kwargs, fragment):
    with pytest.raises(UsageError, match=fragment):
        push(**kwargs)
    assert fake_hub.state.log == []


def test_tags_and_unknown_pull_requests_are_not_branches(fake_hub: FakeHub):
    state = fake_hub.state
    push(drafter_files(1))
    state.add_tag(REPO, "v1.0")
    refused("'v1.0' is a tag, not a branch", files=drafter_files(2), revision="v1.0")
    refused("pull request refs/pr/7 not found", files=drafter_files(2), revision="refs/pr/7")
    assert list(state.repos[REPO].refs) == ["main"] and state.commits_posted() == 1


def test_progress_bars_are_restored_after_a_quiet_publish(fake_hub: FakeHub):
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    enable_progress_bars()
    try:
        push(progress=False)
        assert not are_progress_bars_disabled()
        disable_progress_bars()  # a caller's own choice survives too
        push(drafter_files(2), progress=False)
        assert are_progress_bars_disabled()
    finally:
        enable_progress_bars()


def test_the_fixture_isolates_the_client(fake_hub: FakeHub):
    from huggingface_hub import constants, get_token

    assert constants.HF_HUB_DISABLE_XET and not constants.HF_HUB_OFFLINE
    assert get_token() == TOKEN and resolve_token(None) == TOKEN
    assert resolve_endpoint(None) == fake_hub.url


# ---------------------------------------------------------------------------------------------------------------
# Local pieces (no Hub)
# ---------------------------------------------------------------------------------------------------------------


def test_upload_file_sizes_and_hashes_stream_from_disk(tmp_path):
    blob = bytes(range(256)) * (40 * 1024 + 3)  # ~10 MiB: more than one read chunk
    (tmp_path / "w.safetensors").write_bytes(blob)
    on_disk = UploadFile("w.safetensors", local_path=tmp_path / "w.safetensors")
    in_memory = UploadFile("w.safetensors", data=blob)
    for f in (on_disk, in_memory):
        assert f.size == len(blob)
        assert f.sha256 == hashlib.sha256(blob).hexdigest()
        assert f.git_sha1 == hashlib.sha1(b"blob %d\0" % len(blob) + blob).hexdigest()
    assert UploadFile("hello.txt", data=b"Hello, World!").git_sha1 == "b45ef6fec89518d314f546fd6c3025367b721684"
    assert UploadFile("a/b.json", local_path=str(tmp_path / "w.safetensors")).local_path == tmp_path / "w.safetensors"


@pytest.mark.parametrize("path", ["", "/abs.json", "../up.json", "a/../b.json", "dir/", "a//b"])
def test_upload_file_paths_must_stay_inside_the_repo(path):
    with pytest.raises(ValueError):
        UploadFile(path, data=b"x")


def test_upload_file_needs_exactly_one_source(tmp_path):
    with pytest.raises(ValueError):
        UploadFile("x.json")
    with pytest.raises(ValueError):
        UploadFile("x.json", local_path=tmp_path / "x.json", data=b"x")


def test_resolve_endpoint_and_token(monkeypatch):
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert resolve_endpoint(None) == DEFAULT_ENDPOINT
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.org/")
    assert resolve_endpoint(None) == "https://hub.example.org"
    assert resolve_endpoint("http://127.0.0.1:1234") == "http://127.0.0.1:1234"
    assert resolve_token(" hf_explicit ") == "hf_explicit"
    monkeypatch.setenv("HF_TOKEN", "hf_fromenv")
    assert resolve_token(None) == "hf_fromenv"


def test_hub_module_imports_neither_torch_nor_the_rest_of_eaglekit():
    import subprocess
    import sys

    light = (
        "eaglekit.hub",
        "eaglekit.hub.endpoint",
        "eaglekit.hub.failures",
        "eaglekit.hub.publishing",
        "eaglekit.hub.reading",
        "eaglekit.hub.session",
        "eaglekit.errors",
        "eaglekit.upload",
        "eaglekit.io",
        "eaglekit.io.hub_ids",
        "eaglekit.io.jsonfile",
        "eaglekit.io.locate",
        "eaglekit.io.digests",
        "eaglekit.io.cache_home",
    )
    code = (
        "import sys, eaglekit.hub; "
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.') or m == 'huggingface_hub' "
        f"or (m.startswith('eaglekit.') and m not in {light!r})); print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    assert out.strip() == "[]"
