"""Hub-native drafter arguments (issue 17): inspect/validate by header-only range reads, convert from a Hub id,
the survey, and every way a Hub read can fail, against the loopback fake Hub (tests/fakehub.py) and the REAL
huggingface_hub client (Xet off)."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest
import torch

from drafters import Dims, canonical_tensors, default_input_ids, llama_keys, write_eagle, write_vllm
from fakehub import FakeHub

DTYPE_CODES = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL"}


def on_disk(directory: Path) -> dict[str, Path]:
    return {p.relative_to(directory).as_posix(): p for p in sorted(directory.rglob("*")) if p.is_file()}


def seed(hub: FakeHub, repo_id: str, directory: Path, **kwargs) -> str:
    return hub.state.seed(repo_id, on_disk(directory), **kwargs)


def sparse_sharded_drafter(directory: Path, shards: int = 3) -> tuple[Path, int]:
    """A ~1.4 GB vLLM-dialect drafter in ``shards`` safetensors files whose data areas are holes (truncate): real
    headers, no disk cost. Returns the directory and the total header bytes (8-byte lengths included)."""
    d = Dims(
        H=2048,
        T=2048,
        V=262144,
        Vd=32768,
        I=8192,
        heads=16,
        kv_heads=4,
        head_dim=128,
        target_layers=32,
        dtype=torch.bfloat16,
    )
    with torch.device("meta"):
        tensors = canonical_tensors(d)
    directory.mkdir(parents=True)
    names = list(tensors)
    groups = [names[i::shards] for i in range(shards)]
    weight_map, header_bytes = {}, 0
    for i, group in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        header, offset = {}, 0
        for name in group:
            t = tensors[name]
            size = t.numel() * t.element_size()
            header[name] = {
                "dtype": DTYPE_CODES[t.dtype],
                "shape": list(t.shape),
                "data_offsets": [offset, offset + size],
            }
            offset += size
            weight_map[name] = file
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(directory / file, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)
        header_bytes += 8 + len(raw)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    cfg = {
        "architectures": ["Eagle3LlamaForCausalLM"],
        "model_type": "llama",
        **llama_keys(d),
        "draft_vocab_size": d.Vd,
        "target_hidden_size": d.T,
        "fc_norm": False,
        "norm_output": False,
        "norm_before_fc": False,
        "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": default_input_ids(d),
        "torch_dtype": "bfloat16",
    }
    (directory / "config.json").write_text(json.dumps(cfg))
    return directory, header_bytes


def json_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.json"))


# ---------------------------------------------------------------------------------------------------------------
# inspect / validate: headers only
# ---------------------------------------------------------------------------------------------------------------


def test_a_1gb_sharded_drafter_is_inspected_and_validated_from_its_headers_alone(fake_hub: FakeHub, tmp_path, cli):
    src, header_bytes = sparse_sharded_drafter(tmp_path / "big")
    weights = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    assert (
        weights >= 2**30 and sum(p.stat().st_blocks * 512 for p in src.iterdir()) < 2**20
    )  # 1.4 GB apparent, tiny on disk
    commit = seed(fake_hub, "org/big-eagle3", src)
    expected = header_bytes + json_bytes(src)

    result = cli("inspect", "org/big-eagle3", "--json")
    data = json.loads(result.stdout)
    assert (
        data["dialect"]["dialect"] == "vllm"
        and data["num_tensors"] == 16
        and data["total_bytes"] == weights - header_bytes
    )
    from eaglekit import schemas

    assert schemas.check(data, "inspect.schema.json") == []
    assert data["origin"] == {
        "kind": "hub",
        "repo_id": "org/big-eagle3",
        "revision": "main",
        "commit": commit,
        "downloaded": False,
        "bytes_read": expected,
        "requests": 2 + 2 * 3,
    }
    assert fake_hub.state.bytes_served("org/big-eagle3") == expected  # the server's own count: headers and configs only
    for shard in src.glob("*.safetensors"):
        assert fake_hub.state.bytes_served("org/big-eagle3", shard.name) < 4096

    before = fake_hub.state.bytes_served("org/big-eagle3")
    report = json.loads(cli("validate", "org/big-eagle3", "--engine", "vllm==0.31", "--json").stdout)
    assert report["ok"] and "0.31" in report["engine"]
    assert report["origin"]["commit"] == commit and report["origin"]["bytes_read"] == expected
    assert fake_hub.state.bytes_served("org/big-eagle3") - before == expected
    skipped = [f for f in report["findings"] if f["check"] == "remote.values_skipped"]
    assert skipped and "pass `download`" in skipped[0]["message"]

    human = cli("inspect", "org/big-eagle3")
    assert f"read from the Hub (commit {commit[:12]}), headers only: {expected:,} bytes" in human.stderr
    assert "dialect     vllm" in human.stdout


def test_revision_by_at_or_option_and_local_path_wins(fake_hub: FakeHub, tmp_path, cli, monkeypatch):
    src = write_vllm(tmp_path / "src", Dims())
    first = seed(fake_hub, "org/d", src)
    second = fake_hub.state.advance_branch("org/d", files={"notes.md": b"later"})
    fake_hub.state.add_tag("org/d", "v1", "main")
    assert json.loads(cli("inspect", f"org/d@{first}", "--json").stdout)["origin"]["commit"] == first
    assert json.loads(cli("inspect", "org/d", "--revision", "v1", "--json").stdout)["origin"]["commit"] == second
    assert "contradicts" in cli("inspect", "org/d@v1", "--revision", "main", expect=2).stderr
    # a local directory of that name wins, and says so
    local = tmp_path / "cwd" / "org" / "d"
    write_vllm(local, Dims())
    monkeypatch.chdir(tmp_path / "cwd")
    data = json.loads(cli("inspect", "org/d", "--json").stdout)
    assert data["origin"] == {"kind": "local", "path": "org/d"}
    assert "--revision" in cli("inspect", "org/d", "--revision", "v1", expect=2).stderr


def test_values_need_download_and_bin_only_repos_say_so(fake_hub: FakeHub, tmp_path, cli):
    bad = write_vllm(tmp_path / "bad", Dims())
    from safetensors.torch import load_file, save_file

    t = load_file(bad / "model.safetensors")
    t["d2t"] = torch.zeros_like(t["d2t"])  # a d2t whose contents are wrong: only a read of its values sees it
    save_file(t, bad / "model.safetensors")
    seed(fake_hub, "org/bad-d2t", bad)
    remote = json.loads(cli("validate", "org/bad-d2t", "--json").stdout)
    assert remote["ok"] and any(f["check"] == "remote.values_skipped" for f in remote["findings"])
    scanned = json.loads(cli("validate", "org/bad-d2t", "--scan", "--json").stdout)
    assert any(f["check"] == "remote.scan_skipped" for f in scanned["findings"])
    downloaded = cli("validate", "org/bad-d2t", "--download", "--json", expect=1)
    assert any(f["check"].startswith("vocab.") for f in json.loads(downloaded.stdout)["findings"])

    seed(fake_hub, "org/old-bin", write_eagle(tmp_path / "bin", Dims()))
    message = cli("inspect", "org/old-bin", expect=2).stderr
    assert "weights are .bin only (pytorch_model.bin)" in message and "--download" in message
    assert fake_hub.state.bytes_served("org/old-bin", "pytorch_model.bin") == 0
    assert json.loads(cli("inspect", "org/old-bin", "--download", "--json").stdout)["format"] == "bin"


# ---------------------------------------------------------------------------------------------------------------
# convert / push from a Hub id
# ---------------------------------------------------------------------------------------------------------------


def test_convert_from_a_hub_id_equals_convert_from_the_directory(fake_hub: FakeHub, tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    commit = seed(fake_hub, "org/small", src)
    cli("convert", src, tmp_path / "from-dir", "--to", "speculators")
    result = cli("convert", "org/small", tmp_path / "from-hub", "--to", "speculators", "--json")
    assert json.loads(result.stdout)["origin"]["commit"] == commit
    a, b = on_disk(tmp_path / "from-dir"), on_disk(tmp_path / "from-hub")
    assert set(a) == set(b)
    assert a["model.safetensors"].read_bytes() == b["model.safetensors"].read_bytes()
    ca, cb = json.loads(a["config.json"].read_text()), json.loads(b["config.json"].read_text())
    assert cb["eaglekit"].pop("source_repo") == "org/small" and cb["eaglekit"].pop("source_commit") == commit
    assert ca == cb  # the same output, plus where it came from
    cached = list((tmp_path / "hf-home").rglob("snapshots/*/config.json"))
    assert cached and cached[0].parent.name == commit  # downloaded through the huggingface_hub cache


def test_push_from_a_hub_id_records_the_source_in_the_card(fake_hub: FakeHub, tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    commit = seed(fake_hub, "org/small", src)
    result = json.loads(cli("push", "org/small", "tester/mirror", "--dry-run", "--json").stdout)
    assert f"source: Hub repo `org/small` at commit `{commit}`" in result["card"]
    assert result["origin"]["repo_id"] == "org/small"


# ---------------------------------------------------------------------------------------------------------------
# survey
# ---------------------------------------------------------------------------------------------------------------


def test_survey_of_twelve_drafters_reports_each(fake_hub: FakeHub, tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    ids = []
    for i in range(10):
        seed(fake_hub, f"org/good-{i}", src)
        ids.append(f"org/good-{i}")
    broken = write_vllm(tmp_path / "broken", Dims(), ids=[2, 4, 99])  # aux id past the target's depth... or any error
    cfg = json.loads((broken / "config.json").read_text())
    cfg["draft_vocab_size"] = 48  # contradicts the tensors
    (broken / "config.json").write_text(json.dumps(cfg))
    seed(fake_hub, "org/broken", broken)
    seed(fake_hub, "other/secret", src, private=True)
    listing = tmp_path / "list.txt"
    listing.write_text("# more drafters\norg/broken\nother/secret\n")

    result = cli("validate", *ids, "--from-file", listing, "--engine", "vllm==0.31", expect=1)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["DRAFTER", "COMMIT", "DIALECT", "EAGLE", "VERDICT", "FIRST", "ERROR"]
    rows = {line.split()[0]: line for line in lines[1:13]}
    assert len(rows) == 12
    assert all(" OK" in rows[i] for i in ids)
    assert "FAILED" in rows["org/broken"] and "[" in rows["org/broken"]
    assert "ERROR" in rows["other/secret"] and "not visible to this token" in rows["other/secret"]
    assert lines[-1] == "12 drafters: 10 OK, 1 FAILED, 1 could not be read"

    as_json = cli("validate", *ids, "--from-file", listing, "--engine", "vllm==0.31", "--json", expect=1)
    docs = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [d["path"] for d in docs] == [*ids, "org/broken", "other/secret"]
    assert [d["ok"] for d in docs] == [True] * 10 + [False, False]
    assert docs[-1]["error"]["type"] == "HubReadError" and docs[-1]["error"]["exit_code"] == 2
    assert all(d["origin"]["commit"] == fake_hub.state.head(d["path"]) for d in docs[:11])
    from eaglekit import schemas

    assert all(schemas.check(d, "validate.schema.json") == [] for d in docs[:11])
    assert schemas.check(docs[-1], "error.schema.json") == []


def test_a_single_path_keeps_the_one_drafter_output(fake_hub: FakeHub, tmp_path, cli):
    src = write_vllm(tmp_path / "src", Dims())
    out = cli("validate", src)
    assert out.stdout.startswith(f"validate {src} (") and "DRAFTER" not in out.stdout and out.stderr == ""


# ---------------------------------------------------------------------------------------------------------------
# failures: one line, exit 2, no traceback
# ---------------------------------------------------------------------------------------------------------------


def refused(cli, fragment: str, *args: str, code: int = 2) -> str:
    result = cli(*args, expect=code)
    assert fragment in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    return result.stderr


@pytest.fixture
def small(fake_hub: FakeHub, tmp_path) -> Path:
    src = write_vllm(tmp_path / "small", Dims())
    seed(fake_hub, "org/small", src)
    return src


def test_private_and_gated_repos(fake_hub: FakeHub, small, cli, monkeypatch):
    seed(fake_hub, "other/secret", small, private=True)
    refused(
        cli,
        "repository not found, or private and not visible to this token (404 RepoNotFound)",
        "inspect",
        "other/secret",
    )
    monkeypatch.delenv("HF_TOKEN")
    refused(cli, "private or missing, and the Hub wants a token (401)", "inspect", "other/secret")
    assert "set HF_TOKEN" in refused(cli, "(401)", "convert", "other/secret", "/tmp/never", "--to", "vllm")
    seed(fake_hub, "org/gated", small, gated=True)
    refused(cli, "access is gated (403 GatedRepo)", "validate", "org/gated")


def test_missing_repo_revision_and_file(fake_hub: FakeHub, small, cli):
    refused(cli, "org/nothing: repository not found", "inspect", "org/nothing")
    refused(cli, "revision 'v9' not found (404 RevisionNotFound)", "inspect", "org/small@v9")
    fake_hub.state.fail("GET", r"/resolve/[0-9a-f]{40}/model\.safetensors$", 404, error_code="EntryNotFound")
    refused(
        cli,
        "file not found at revision 'main' (404 EntryNotFound) while reading model.safetensors",
        "inspect",
        "org/small",
    )


def test_rate_limits_and_server_errors_are_retried_then_said(fake_hub: FakeHub, small, cli):
    fake_hub.state.fail("GET", r"/resolve/", 429, times=2)
    assert json.loads(cli("inspect", "org/small", "--json").stdout)["ok"]  # retried through
    assert fake_hub.sleeps == [1, 2]
    fake_hub.state.fail("GET", r"^/api/models/", 429, times=99)
    refused(
        cli,
        "rate limited by the Hub (429) while reading the repository's file list, still after 5 retries",
        "inspect",
        "org/small",
    )
    assert fake_hub.sleeps[2:] == [1, 2, 4, 8, 8]
    fake_hub.state.faults.clear()
    fake_hub.state.fail("GET", r"/resolve/", 503, times=99)
    refused(cli, "Hub server error (503) while reading config.json, still after 5 retries", "validate", "org/small")


def closed_port() -> int:
    """A loopback port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused(fake_hub: FakeHub, small, cli, monkeypatch, tmp_path):
    """A Hub that cannot be reached is said at once: huggingface_hub's backoff retried the refused connection 5 times
    (1+2+4+8+8 s: 25 s offline, before the one-line error), which never helps a machine without a network."""
    port = closed_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    refused(cli, f"cannot reach the Hub at http://127.0.0.1:{port}", "inspect", "org/small")
    err = refused(cli, "(ConnectError)", "convert", "org/small", tmp_path / "out", "--to", "vllm")
    assert "HF_HUB_OFFLINE=1 reads what the local Hub cache holds" in err and "--endpoint" not in err
    assert fake_hub.sleeps == []  # no backoff


def test_a_busy_hub_is_still_retried_and_its_retries_are_not_printed(fake_hub: FakeHub, small, cli, monkeypatch):
    """429 and 5xx are what a reached Hub answers when busy: retried with backoff, as before; the client's warnings
    about each retry ("HTTP Error 503 thrown while requesting ...", "Retrying in 1s") stay off stderr unless
    HF_HUB_VERBOSITY asks for them."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    backoff = logging.getLogger("huggingface_hub.utils._http")
    backoff.addHandler(handler)
    try:
        fake_hub.state.fail("GET", r"^/api/models/", 503, times=2)
        assert json.loads(cli("inspect", "org/small", "--json").stdout)["ok"]
        assert fake_hub.sleeps == [1, 2] and records == []
        monkeypatch.setenv("HF_HUB_VERBOSITY", "warning")
        fake_hub.state.fail("GET", r"^/api/models/", 503, times=1)
        assert json.loads(cli("inspect", "org/small", "--json").stdout)["ok"]
        assert any("Retrying in 1s" in r.getMessage() for r in records)
    finally:
        backoff.removeHandler(handler)


@pytest.mark.parametrize(
    "argv, env",
    [
        (["inspect", "org/name"], {}),
        (["convert", "org/name", "OUT", "--to", "vllm"], {}),
        (["inspect", "models/drafter"], {}),  # a mistyped local path: the Hub is asked once; its retry line leaked
        (["inspect", "org/name"], {"HF_HUB_OFFLINE": "1"}),
    ],
)
def test_a_hub_id_without_a_network_is_one_line_on_stderr(tmp_path, argv, env):
    """The whole stderr of a Hub read that cannot reach the Hub, or is offline with nothing cached, is eaglekit's one
    error line: huggingface_hub's retry warnings came before it (11 lines for a Hub id, 1 for a mistyped path)."""
    import os
    import subprocess
    import sys

    (tmp_path / "models").mkdir()
    environment = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}", HF_HOME=str(tmp_path / "hf"))
    for name in ("HF_HUB_OFFLINE", "HF_HUB_VERBOSITY"):
        environment.pop(name, None)
    environment.update(env)
    result = subprocess.run(
        [sys.executable, "-m", "eaglekit", *[str(tmp_path / "out") if a == "OUT" else a for a in argv]],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {argv[1]}: no such "), result.stderr
    assert ("offline" if env else "cannot reach the Hub") in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_mistyped_local_path_says_it_is_no_local_directory_and_what_the_hub_said(
    fake_hub: FakeHub, small, cli, tmp_path, monkeypatch
):
    """`inspect models/drafter` with no such folder went to the Hub (24 s of retries offline) and said only what the Hub
    said. A Hub id that is no local path says both; one whose first part is a folder here is asked of the Hub once."""
    (tmp_path / "cwd" / "models").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "cwd")
    err = refused(
        cli,
        "models/drafter: no such local directory (models/ is a folder here, without drafter), and as a Hub repo id: "
        "models/drafter: repository not found",
        "inspect",
        "models/drafter",
    )
    assert "internal error" not in err
    refused(
        cli,
        "models/drafter: no such local directory (models/ is a folder here",
        "convert",
        "models/drafter",
        tmp_path / "out",
        "--to",
        "vllm",
    )
    fake_hub.state.fail("GET", r"^/api/models/", 503, times=99)
    refused(
        cli,
        "models/drafter: no such local directory (models/ is a folder here, without drafter), and as a Hub repo id: "
        f"{fake_hub.url}: Hub server error (503) while reading the repository's file list: retry later",
        "validate",
        "models/drafter",
    )
    assert fake_hub.sleeps == []  # asked once: no backoff
    refused(
        cli, "org/small: no such local directory, and as a Hub repo id: ", "inspect", "org/small"
    )  # still 503; no org/ here
    assert fake_hub.sleeps == [1, 2, 4, 8, 8]  # a Hub id: retried as before


def test_offline_with_nothing_cached(fake_hub: FakeHub, small, cli, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    refused(cli, "not a Hub repo in the local cache (offline: HF_HUB_OFFLINE=1", "inspect", "org/small")
    refused(cli, "not a Hub repo in the local cache", "convert", "org/small", "/tmp/never", "--to", "vllm")
    assert fake_hub.state.log == []


def test_short_ranged_answers_and_headers_longer_than_the_file(fake_hub: FakeHub, small, tmp_path, cli):
    fake_hub.state.short_ranges[("org/small", "model.safetensors")] = 4
    refused(cli, "answered 4 of the 8 bytes asked for (bytes 0-7): a short ranged answer", "inspect", "org/small")
    fake_hub.state.short_ranges.clear()

    lying = tmp_path / "lying"
    lying.mkdir()
    (lying / "config.json").write_bytes((small / "config.json").read_bytes())
    (lying / "model.safetensors").write_bytes(struct.pack("<Q", 10_000) + b"{}")
    seed(fake_hub, "org/lying", lying)
    refused(cli, "truncated (header says 10000 bytes, file has 2 after the length)", "validate", "org/lying")
    assert fake_hub.state.bytes_served("org/lying", "model.safetensors") == 8  # the length only: nothing past the file
    (lying / "model.safetensors").write_bytes(struct.pack("<Q", 2**40) + b"{}")
    seed(fake_hub, "org/huge-header", lying)
    refused(cli, "exceeds the 104857600-byte limit", "inspect", "org/huge-header")


def test_the_fake_hub_ignores_clients_that_hang_up_and_records_its_own_crashes(capsys):
    """A client giving up mid-connection once printed socketserver's traceback into the CLI's captured stderr (a flaky
    CI failure of the retry test above); now a hang-up is ignored and any other failure is a recorded crash."""
    hub = FakeHub()
    try:
        for exc in (
            ConnectionResetError(104, "Connection reset by peer"),
            BrokenPipeError(32, "Broken pipe"),
            ValueError("bad request line"),
        ):
            try:
                raise exc
            except Exception:
                hub.server.handle_error(None, ("127.0.0.1", 1))
    finally:
        hub.close()
    assert hub.state.crashes == ["request from ('127.0.0.1', 1): ValueError('bad request line')"]
    assert capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.parametrize("command", [["inspect", "org/name"], ["convert", "org/name", "OUT", "--to", "vllm"]])
def test_an_endpoint_that_never_answers_ends_in_a_one_line_error(tmp_path, command):
    """A server that accepts connections and never answers held `inspect org/name` forever (huggingface_hub's client
    sets no timeout); eaglekit's own requests wait HF_HUB_DOWNLOAD_TIMEOUT for bytes, then the client's retries end.
    `convert org/name` downloads through huggingface_hub's snapshot_download, whose own requests for the repo's info
    and file tree pass no timeout: it hung there until eaglekit bounded them too (`hub._bounded_waits`)."""
    import os
    import subprocess
    import sys

    from fakehub import silent_server

    with silent_server() as (url, held):
        env = dict(
            os.environ, HF_ENDPOINT=url, HF_HOME=str(tmp_path / "hf"), HF_HUB_DOWNLOAD_TIMEOUT="1", HF_TOKEN="hf_x"
        )
        env.pop("HF_HUB_OFFLINE", None)
        argv = [str(tmp_path / "out") if part == "OUT" else part for part in command]
        result = subprocess.run(
            [sys.executable, "-m", "eaglekit", *argv], env=env, capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 2 and held, (result.returncode, result.stderr)
    [line] = result.stderr.strip().splitlines()  # one wait, no retries, no retry warnings
    assert (
        line.startswith("error: org/name: no such local directory, and as a Hub repo id: cannot reach the Hub")
        and "Timeout" in line
    )
    assert not (tmp_path / "out").exists()


def test_a_snapshot_eaglekit_downloaded_is_found_offline(fake_hub: FakeHub, small, tmp_path, cli, monkeypatch):
    """eaglekit downloads a drafter's own files only (and `hf download REPO FILES` fetches what it is told): with
    huggingface_hub 2.x such a snapshot, lacking the repo's .gitattributes, was refused as incomplete, so offline it
    was 'not a Hub repo in the local cache'."""
    from huggingface_hub import constants

    fake_hub.state.advance_branch("org/small", files={".gitattributes": b"*.safetensors filter=lfs\n"})
    cli("convert", "org/small", tmp_path / "online", "--to", "speculators")  # downloads, without .gitattributes
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    served = len(fake_hub.state.log)
    assert json.loads(cli("inspect", "org/small", "--json").stdout)["ok"]
    assert "read from the local Hub cache (offline)" in cli("inspect", "org/small").stderr
    cli("convert", "org/small", tmp_path / "offline", "--to", "sglang")
    assert (tmp_path / "offline" / "config.json").exists() and len(fake_hub.state.log) == served


def test_push_of_a_hub_source_says_where_it_was_read_from(fake_hub: FakeHub, small, cli):
    result = cli("push", "org/small", "tester/mirror", "--dry-run")
    assert "note: org/small@main: downloaded through the Hub cache" in result.stderr


def test_push_reads_a_hub_source_from_the_endpoint_it_names(fake_hub: FakeHub, small, cli):
    """`push SRC DST --endpoint E --token T` read SRC from HF_ENDPOINT with HF_TOKEN: a same-named repo there, or
    'repository not found' for one that lives on E alone."""
    other = FakeHub(token="hf_OTHERtoken")
    try:
        seed(other, "org/only-there", small)
        result = cli(
            "push", "org/only-there", "tester/mirror", "--endpoint", other.url, "--token", other.token, "--dry-run"
        )
        assert "would publish" in result.stdout or "dry run" in result.stdout
        assert other.state.log and not fake_hub.state.log
    finally:
        other.close()


@pytest.mark.parametrize(
    "command, fragment",
    [
        (["push", "org/small", "tester/bad id", "--dry-run"], "not a valid repository id"),
        (["push", "org/small", "tester/x", "--base-model", "https://example.com/x", "--dry-run"], "--base-model"),
        (["convert", "org/small", "OCCUPIED", "--to", "vllm"], "not replaced even with --force"),
        (["verify", "org/small", "--target", "/nonexistent/x.gguf"], "no such GGUF file"),
        (["inspect", "org/small", "--revision", ""], "--revision: empty; give a branch, tag or commit"),
    ],
)
def test_bad_arguments_are_refused_before_a_hub_drafter_downloads(
    fake_hub: FakeHub, small, cli, tmp_path, command, fragment
):
    """Each was refused correctly, but only after the whole drafter had been fetched (its weights: GBs for a real
    one); `--revision ''` was read as not given."""
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine\n")
    refused(cli, fragment, *[str(occupied) if part == "OCCUPIED" else part for part in command])
    assert fake_hub.state.bytes_served("org/small") == 0, "a file was downloaded"


def test_a_failing_hub_does_not_turn_into_a_cached_older_commit(fake_hub: FakeHub, small, cli, tmp_path):
    """With a snapshot cached, snapshot_download fell back to it in silence when the Hub answered 500 (or 403, or not
    at all): `convert org/small` gave the branch's old weights for its new head, said "downloaded" and recorded the old
    commit as its source."""
    cli("convert", "org/small", tmp_path / "first", "--to", "speculators")
    old = json.loads((tmp_path / "first" / "config.json").read_text())["eaglekit"]["source_commit"]
    fake_hub.state.advance_branch("org/small", files={"notes.txt": b"new head\n"})
    fake_hub.state.fail("GET", r"^/api/models/org/small", 500, times=99)
    refused(
        cli,
        "Hub server error (500) while reading the repository's file list",
        "convert",
        "org/small",
        str(tmp_path / "second"),
        "--to",
        "speculators",
    )
    assert not (tmp_path / "second").exists() and old != fake_hub.state.head("org/small")
