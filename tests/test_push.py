"""push: the real huggingface_hub client against a loopback fake Hub (Xet disabled). No network beyond loopback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglekit.convert import ConvertOptions, convert

from drafters import Dims, write_vllm
from fakehub import TOKEN, serve


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """The real huggingface_hub client against the loopback fake Hub (Xet off, no stored token, no backoff sleeps)."""
    with serve(monkeypatch, tmp_path) as fake:
        yield fake


@pytest.fixture
def drafter(tmp_path) -> Path:
    out = tmp_path / "drafter"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", aux_layers=(2, 4, 5)))
    return out


def push(cli, path, repo="tester/drafter", *args, expect=0):
    result = cli("push", path, repo, *args, expect=expect)
    assert TOKEN not in result.stdout and TOKEN not in result.stderr  # never, in any outcome
    return result


def test_new_repo_one_commit_with_every_file_and_the_card(cli, hub, drafter):
    result = push(cli, drafter)
    state = hub.state
    assert state.commits_posted() == 1
    files = state.files("tester/drafter")
    assert {"config.json", "model.safetensors", "README.md", ".gitattributes"} == set(files)
    assert files["model.safetensors"] == (drafter / "model.safetensors").read_bytes()
    card = files["README.md"].decode()
    assert "vllm serve" in card and '"method": "eagle3"' in card and "tester/drafter" in card
    assert "published 3 files to tester/drafter" in result.stdout and "/commit/" in result.stdout


def test_existing_repo_and_repush_of_identical_files(cli, hub, drafter):
    push(cli, drafter)
    head = hub.state.head("tester/drafter")
    result = push(cli, drafter)
    assert hub.state.head("tester/drafter") == head  # nothing new committed
    assert "nothing changed" in result.stdout
    cfg = json.loads((drafter / "config.json").read_text())
    cfg["eaglekit"]["notes"] = ["changed"]
    (drafter / "config.json").write_text(json.dumps(cfg))
    push(cli, drafter)
    assert hub.state.head("tester/drafter") != head
    assert hub.state.commits_posted() == 2  # one per changing push


def test_new_branch_and_pull_request(cli, hub, drafter):
    push(cli, drafter)
    main = hub.state.head("tester/drafter")
    push(cli, drafter, "tester/drafter", "--revision", "v2", "--commit-message", "v2 of the drafter")
    assert hub.state.head("tester/drafter") == main
    assert "v2" in hub.state.repos["tester/drafter"].refs
    (drafter / "config.json").write_text((drafter / "config.json").read_text().replace('"silu"', '"silu" '))
    result = push(cli, drafter, "tester/drafter", "--create-pr")
    assert "refs/pr/1" in hub.state.repos["tester/drafter"].refs and hub.state.head("tester/drafter") == main
    assert "opened" in result.stdout and "discussions/1" in result.stdout


def test_stale_shards_are_deleted_in_the_same_commit(cli, hub, tmp_path, drafter):
    sharded = tmp_path / "sharded"
    convert(drafter, sharded, ConvertOptions(to="vllm", max_shard_bytes=4000))
    push(cli, sharded)
    before = set(hub.state.files("tester/drafter"))
    assert any(f.startswith("model-0000") for f in before) and "model.safetensors.index.json" in before
    commits = hub.state.commits_posted()
    result = push(cli, drafter, "tester/drafter", "--json")
    after = set(hub.state.files("tester/drafter"))
    assert hub.state.commits_posted() == commits + 1
    assert not any(f.startswith("model-0000") for f in after) and "model.safetensors.index.json" not in after
    assert {"model.safetensors", ".gitattributes", "README.md"} <= after
    assert sorted(json.loads(result.stdout)["commit"]["deleted"])[0].startswith("model-0000")


def test_concurrent_push_is_refused_not_clobbered(cli, hub, drafter):
    push(cli, drafter)
    hub.state.on("POST", r"/preupload/", lambda: hub.state.advance_branch("tester/drafter"))
    (drafter / "config.json").write_text((drafter / "config.json").read_text().replace('"silu"', '"silu" '))
    result = push(cli, drafter, expect=1)
    assert "another push landed first" in result.stderr
    files = hub.state.files("tester/drafter")
    assert files["other.txt"] == b"someone else"  # the other pusher's commit stands
    assert b'"silu" ' not in files["config.json"]


@pytest.mark.parametrize(
    "status, code, fragment, exit_code",
    [
        (401, None, "authentication failed (401)", 1),  # the Hub answered and refused: ran and found a problem
        (403, "GatedRepo", "gated", 1),
        (403, None, "forbidden (403)", 1),
        (404, "RepoNotFound", "not found", 1),
        (429, None, "rate limited", 2),  # the Hub could not take it (busy, failing): the push could not run
        (500, None, "server error (500)", 2),
    ],
)
def test_hub_failures_are_clear_and_leave_the_branch_unchanged(cli, hub, drafter, status, code, fragment, exit_code):
    push(cli, drafter)
    head = hub.state.head("tester/drafter")
    (drafter / "config.json").write_text((drafter / "config.json").read_text().replace('"silu"', '"silu" '))
    path = r"/api/whoami-v2" if status == 401 else r"/commit/" if status in (403, 404) else r"/preupload/"
    hub.state.fail("GET" if status == 401 else "POST", path, status, error_code=code, times=10)
    result = push(cli, drafter, expect=exit_code)
    assert result.stderr.startswith("error: ") and fragment in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert hub.state.head("tester/drafter") == head


def test_a_failed_push_says_what_it_created_and_leaves_it(cli, hub, drafter):
    """The commit fails after the push made the repository or the branch: they stay (deleting on the Hub after a
    failure could race another push), holding none of the files, and the one error line says so; a retry lands."""
    hub.state.fail("POST", r"/commit/", 500, times=10)
    first = push(cli, drafter, expect=2)
    assert "created the repository tester/drafter, which stays, holding none of its files" in first.stderr
    assert first.stderr.count("\n") == 1 and "tester/drafter" in hub.state.repos
    hub.state.faults.clear()
    push(cli, drafter)
    (drafter / "config.json").write_text((drafter / "config.json").read_text().replace('"silu"', '"silu" '))
    hub.state.fail("POST", r"/commit/", 500, times=10)
    second = push(cli, drafter, "tester/drafter", "--revision", "v2", expect=2)
    assert (
        "created the branch v2 (at the default branch's head), which stays" in second.stderr
        and "repository" not in second.stderr
    )
    assert hub.state.head("tester/drafter", "v2") == hub.state.head("tester/drafter")
    hub.state.faults.clear()
    push(cli, drafter, "tester/drafter", "--revision", "v2")
    assert hub.state.head("tester/drafter", "v2") != hub.state.head("tester/drafter")


def test_bad_token(cli, hub, drafter, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_WRONGtoken999")
    result = cli("push", drafter, "tester/drafter", expect=1)
    assert "authentication failed" in result.stderr and "hf_WRONGtoken999" not in result.stderr + result.stdout
    assert "tester/drafter" not in hub.state.repos


def test_offline_mode_makes_no_request(cli, hub, drafter, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    result = push(cli, drafter, expect=2)
    assert "offline mode" in result.stderr
    assert hub.state.log == []


def test_invalid_drafter_is_refused_before_any_request(cli, hub, drafter):
    from safetensors.torch import load_file, save_file

    t = load_file(str(drafter / "model.safetensors"))
    t.pop("layers.0.mlp.up_proj.weight")
    save_file(t, str(drafter / "model.safetensors"))
    result = push(cli, drafter, expect=1)
    assert "refusing to publish" in result.stderr and "layers.0.mlp.up_proj.weight" in result.stderr
    assert hub.state.log == []
    push(cli, drafter, "tester/drafter", "--no-validate")  # the user's call, recorded in the card
    assert b"not validated" in hub.state.files("tester/drafter")["README.md"]


def test_dry_run_sends_nothing(cli, hub, drafter):
    import hashlib

    result = push(cli, drafter, "tester/drafter", "--dry-run")
    assert hub.state.log == []
    digest = hashlib.sha256((drafter / "model.safetensors").read_bytes()).hexdigest()
    assert digest in result.stdout and "nothing sent (--dry-run)" in result.stdout
    assert "base_model" in result.stdout or "library_name" in result.stdout  # the card is shown
    data = json.loads(push(cli, drafter, "tester/drafter", "--dry-run", "--json").stdout)
    assert {f["path"] for f in data["files"]} == {"config.json", "model.safetensors", "README.md"}
    from eaglekit import schemas

    assert schemas.check(data, "push.schema.json") == []


def test_card_metadata_and_verify_figures(cli, hub, drafter):
    report = {
        "target": "org/target",
        "acceptance_length": 2.345,
        "num_speculative_tokens": 3,
        "device": "cpu",
        "dtype": "float32",
        "trajectory": {"per_position_rate": [0.7, 0.5, 0.3]},
        "prompts": [{}, {}],
        "checks": [{"name": "reference_parity", "passed": True, "detail": "bit-identical"}],
    }
    (drafter / "eaglekit-verify.json").write_text(json.dumps(report))
    push(cli, drafter, "tester/drafter", "--base-model", "org/target")
    card = hub.state.files("tester/drafter")["README.md"].decode()
    meta = card.split("---")[1]
    assert (
        "base_model: org/target" in meta
        and "eagle3" in meta
        and "speculative-decoding" in meta
        and "pipeline_tag: text-generation" in meta
    )
    assert "vllm serve org/target" in card and "**2.345**" in card and "passed: reference_parity" in card
    assert "eaglekit-verify.json" in hub.state.files("tester/drafter")
    assert "- converted from the vllm dialect by eaglekit" in card


@pytest.mark.parametrize(
    "edit, said",
    [
        ({"eagle_version": "3.1"}, "it measured an EAGLE 3.1 reading, push reads this drafter as EAGLE 3"),
        ({"aux_layer_ids": [1, 2, 3]}, "it fused target layers [1, 2, 3], this drafter records [2, 4, 5]"),
        (
            {"aux_layer_ids": [3, 5, 6]},
            None,
        ),  # the recorded ids read output-of-layer, as verify settles them with a target's depth
        ({"passed": False}, "its verdict (passed: false) contradicts its checks"),
        ({"eagle_version": "3", "aux_layer_ids": [5, 2, 4], "passed": True}, None),
    ],
)
def test_a_verify_report_of_another_drafter_is_not_published_as_this_ones(cli, hub, drafter, edit, said):
    """A report left from earlier weights (another EAGLE version, other aux layers) or whose verdict contradicts its
    checks was published as this drafter's verification, its figures in the card."""
    report = {
        "target": "org/target",
        "acceptance_length": 4.9,
        "num_speculative_tokens": 3,
        "device": "cpu",
        "dtype": "float32",
        "trajectory": {"per_position_rate": [0.99, 0.98, 0.97]},
        "prompts": [{}],
        "checks": [{"name": "min_acceptance_length", "passed": True, "detail": "4.9 >= 4"}],
        **edit,
    }
    (drafter / "eaglekit-verify.json").write_text(json.dumps(report))
    if said is None:
        assert "**4.900**" in push(cli, drafter, "tester/drafter", "--dry-run").stdout
        return
    result = push(cli, drafter, "tester/drafter", "--dry-run", expect=2)
    assert f"eaglekit-verify.json is not a report on this drafter: {said}" in result.stderr


def test_the_report_verify_wrote_for_a_drafter_is_published_with_it(cli, hub, tmp_path):
    """SpecForge ids [2, 4, 8] that verify reads input-of-layer [2, 4, 8] once it knows the target has 8 layers
    (output-of-layer would reach layer 9): push, which has no target, reads them [3, 5, 9] and refused the report verify
    had just written."""
    from drafters import write_specforge, write_tiny_target

    target = write_tiny_target(tmp_path / "target", layers=8, hidden=16, vocab=64)
    drafter = write_specforge(tmp_path / "drafter", Dims(), ids=[2, 4, 8])
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "input_ids": [1 + i, 5, 7, 9]}) + "\n" for i in range(3)))
    cli(
        "verify",
        drafter,
        "--target",
        target,
        "--prompts",
        prompts,
        "--max-new-tokens",
        8,
        "--report",
        drafter / "eaglekit-verify.json",
    )
    assert json.loads((drafter / "eaglekit-verify.json").read_text())["aux_layer_ids"] == [2, 4, 8]
    assert "## Verification" in push(cli, drafter, "tester/drafter", "--dry-run").stdout


def test_card_names_a_local_target_by_its_file_name_only(cli, hub, drafter, tmp_path):
    local = tmp_path / "private" / "models" / "target.Q4_1.gguf"
    report = {
        "target": str(local),
        "acceptance_length": 2.0,
        "num_speculative_tokens": 3,
        "device": "cpu",
        "dtype": "float32",
        "trajectory": {"per_position_rate": [0.5, 0.3, 0.2]},
        "prompts": [{}],
        "checks": [],
    }
    (drafter / "eaglekit-verify.json").write_text(json.dumps(report))
    card = push(cli, drafter, "tester/drafter", "--dry-run", "--base-model", "org/target").stdout
    assert "on a local `target.Q4_1.gguf` (1 prompts" in card and "private" not in card


def test_existing_readme_is_kept_unless_overwritten(cli, hub, drafter):
    (drafter / "README.md").write_text("# my own card\n")
    push(cli, drafter)
    assert hub.state.files("tester/drafter")["README.md"] == b"# my own card\n"
    push(cli, drafter, "tester/drafter", "--overwrite-card")
    assert b"vllm serve" in hub.state.files("tester/drafter")["README.md"]


def test_no_token_at_all(cli, hub, drafter, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    result = cli("push", drafter, "tester/drafter", expect=2)
    assert "no Hub token" in result.stderr and hub.state.log == []


def test_a_push_that_could_not_be_made_exits_2_and_one_the_hub_refused_exits_1(cli, hub, drafter, monkeypatch):
    """push without a token exited 1, like a push the Hub refused, and so did one whose Hub could not be reached:
    neither ran. Could not be made (no token, offline, unreachable, 429/5xx): 2; refused by the Hub: 1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("HF_TOKEN")
    no_token = cli("push", drafter, "tester/drafter", expect=None)
    endpoint = f"http://127.0.0.1:{port}"
    unreachable = cli("push", drafter, "tester/drafter", "--token", "hf_x", "--endpoint", endpoint, expect=None)
    refused = cli("push", drafter, "tester/drafter", "--token", "hf_WRONGtoken999", expect=None)
    assert (no_token.exit_code, unreachable.exit_code, refused.exit_code) == (2, 2, 1), (
        no_token.stderr,
        unreachable.stderr,
        refused.stderr,
    )
    assert "no Hub token" in no_token.stderr and "cannot reach the Hub" in unreachable.stderr


def test_an_untrained_upgrade_is_flagged_by_validate_and_refused_by_push(cli, hub, tmp_path):
    up = tmp_path / "up"
    convert(write_vllm(tmp_path / "src3", Dims()), up, ConvertOptions(to="vllm", upgrade="3.1"))
    report = json.loads(cli("validate", up, "--json").stdout)
    assert [f["check"] for f in report["findings"] if f["severity"] == "warning"] == ["flags.untrained_upgrade"]
    again = json.loads(cli("convert", up, tmp_path / "again", "--to", "speculators", "--json").stdout)
    assert [f["check"] for f in again["findings"]] == [
        "flags.untrained_upgrade"
    ]  # still untrained after another conversion
    result = push(cli, up, "tester/drafter", "--dry-run", expect=1)
    assert "fine-tune it first, or pass --allow-untrained" in result.stderr
    assert "Serve it" in push(cli, up, "tester/drafter", "--dry-run", "--allow-untrained").stdout
    assert hub.state.log == []


def test_an_ambiguous_checkpoint_is_refused_until_decided(cli, hub, tmp_path):
    """validate warns (the files can be read); push refuses: engines read a published checkpoint one way, and nothing
    in it says which reading was meant. The checkpoint is issue 14's (two dialects score equally, ids one apart)."""
    from test_wild import write_issue14_mla

    src = write_issue14_mla(tmp_path / "mla")
    result = push(cli, src, "tester/drafter", "--dry-run", expect=1)
    assert (
        "refusing to publish: ambiguous" in result.stderr
        and "[2, 4, 5]" in result.stderr
        and "[1, 3, 4]" in result.stderr
    )
    assert "--allow-ambiguous" in result.stderr and "--resolve" in result.stderr
    assert "Serve it" in push(cli, src, "tester/drafter", "--dry-run", "--allow-ambiguous").stdout
    decided = tmp_path / "decided"
    cli("convert", src, decided, "--to", "vllm", "--from", "torchspec")
    assert "Serve it" in push(cli, decided, "tester/drafter", "--dry-run").stdout
    assert hub.state.log == []


def test_no_local_path_is_published(cli, hub, tmp_path):
    """The drafter records its target as a path on the publisher's machine: neither the card nor the files show it."""
    local_target = tmp_path / "home" / "me" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    src = write_vllm(tmp_path / "src", Dims())
    out = tmp_path / "drafter"
    convert(src, out, ConvertOptions(to="speculators", aux_layers=(2, 4, 5)))
    config = json.loads((out / "config.json").read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = str(local_target)
    (out / "config.json").write_text(json.dumps(config))
    (out / "eaglekit-verify.json").write_text(
        json.dumps(
            {
                "drafter": str(out),
                "target": str(local_target),
                "acceptance_length": 2.0,
                "num_speculative_tokens": 3,
                "device": "cpu",
                "dtype": "float32",
                "trajectory": {"per_position_rate": [0.5]},
                "prompts": [{}],
                "checks": [],
            }
        )
    )
    dry = push(cli, out, "tester/drafter", "--dry-run").stdout
    assert str(tmp_path) not in dry and "<target model>" in dry and "pass --base-model ORG/NAME" in dry
    push(cli, out, "tester/drafter", "--base-model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    published = hub.state.files("tester/drafter")
    for name in ("config.json", "eaglekit-verify.json", "README.md"):
        assert str(tmp_path).encode() not in published[name], name
    sent = json.loads(published["config.json"])
    assert sent["speculators_config"]["verifier"]["name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert json.loads((out / "config.json").read_text())["speculators_config"]["verifier"]["name_or_path"] == str(
        local_target
    )  # source untouched


@pytest.mark.parametrize(
    "local, name",
    [
        ("file:///home/alice/llama", "llama"),
        ("\\\\server\\share\\llama", "llama"),
        ("$HOME/models/llama", "llama"),
        ("C:\\Users\\alice\\llama", "llama"),
        ("~/llama/", "llama"),
    ],
)
def test_paths_of_every_form_are_scrubbed(local, name):
    """A file URL, a Windows share and a home variable were published as they were; a Windows path kept its folders
    (this machine's Path reads it as one name)."""
    from eaglekit.push import scrub_local_paths

    doc = {"eaglekit": {"source_repo": local}, "speculators_config": {"verifier": {"name_or_path": local}}}
    assert scrub_local_paths(doc, "org/llama") == {
        "eaglekit": {"source_repo": name},
        "speculators_config": {"verifier": {"name_or_path": "org/llama"}},
    }
    assert scrub_local_paths(["org/llama", "https://example.com/x"], None) == [
        "org/llama",
        "https://example.com/x",
    ]  # not paths


@pytest.mark.parametrize(
    "text, published",
    [
        ("converted from /home/alice/ckpt on 2026-11-20.", "converted from ckpt on 2026-11-20."),
        ("speculators /home/alice/x", "speculators x"),
        (
            "/home/alice/x/config.json: $.hidden_size = 'sixteen': not an integer",
            "config.json: $.hidden_size = 'sixteen': not an integer",
        ),
        (
            "path=~/runs/a, other=$HOME/m (C:\\Users\\bob\\x) \\\\srv\\share\\q file:///home/a/b",
            "path=a, other=m (x) q b",
        ),
        ("a drafter at '/home/alice/q' and ../up/x", "a drafter at 'q' and x"),
        ("saved:/home/alice/ckpt, **/home/alice/b** and a dash—/home/alice/c", "saved:ckpt, **b** and a dash—c"),
        # a space inside a path's part, scp's user@host:, another user's home, a share written with slashes
        ("converted from /Users/Bob Smith/ckpts/run7 on a node", "converted from run7 on a node"),
        ("/home/Bob Smith/ckpt/config.json: hidden_size must be 4096", "config.json: hidden_size must be 4096"),
        (
            "copied via alice@gpu-node7.corp:/srv/models/llama from ~alice/models/x and //nas/alice/y",
            "copied via llama from x and y",
        ),
        # a command line is no path: each path in it is
        ("./train.sh --data /home/alice/data --lr 1e-4", "train.sh --data data --lr 1e-4"),
        ("contact alice@x.com: hi, /4 heads", "contact alice@x.com: hi, /4 heads"),
        # typographic quotes and brackets; a host without a user; a home folder itself is a user's name
        ("Saved in “/home/alice/ckpt”, «/home/alice/a» 「/home/alice/b」", "Saved in “ckpt”, «a» 「b」"),
        ("trained on gpu01.corp.example.com:/data/run3", "trained on run3"),
        ("see /home/alice, HOME=/home/alice and C:\\Users\\alice; /root/ckpt", "see ~, HOME=~ and ~; ckpt"),
        # a message starts with its file's path, whatever folder it is in
        ("/weird/custom/config.json: bad value", "config.json: bad value"),
        # routes, relative links and dates inside a sentence are not paths
        (
            "served via the /v1/chat/completions endpoint, [EAGLE-3](/abs/2503.01840), 2024/05/01 and /05/02",
            "served via the /v1/chat/completions endpoint, [EAGLE-3](/abs/2503.01840), 2024/05/01 and /05/02",
        ),
        # not paths: URLs, Hub ids, ratios, a lone slash, units and prefix lengths, one part alone
        (
            "see https://huggingface.co/org/x and hf://a/b s3://b/c/d http://localhost:8000/v1/x",
            "see https://huggingface.co/org/x and hf://a/b s3://b/c/d http://localhost:8000/v1/x",
        ),
        ("org/name and/or 1/2 of 8/16 GPUs, a / b", "org/name and/or 1/2 of 8/16 GPUs, a / b"),
        (
            "acceptance 3.1 /4 drafts, subnet 10.0.0.0 /8, 120 tok/s, loss /s",
            "acceptance 3.1 /4 drafts, subnet 10.0.0.0 /8, 120 tok/s, loss /s",
        ),
        # only where the path stands: a short one is not replaced inside a Hub id or a URL that holds the same letters
        (
            "mounted at /srv/model, from org/srv/model and https://example.com/srv/model",
            "mounted at model, from org/srv/model and https://example.com/srv/model",
        ),
    ],
)
def test_paths_inside_longer_strings_are_scrubbed(text, published):
    """A path inside a sentence (a note, a finding's message in eaglekit-verify.json) was published whole."""
    from eaglekit.push import scrub_local_paths

    assert scrub_local_paths({"eaglekit": {"notes": [text]}}, "org/llama") == {"eaglekit": {"notes": [published]}}


@pytest.mark.parametrize("local", ["C:\\Users\\Bob Smith\\models\\llama", "/home/alice/My Models/llama"])
def test_a_path_with_a_space_is_still_one_path(local):
    """Told apart from sentences, a path with a space in it lost its target's base model and kept the user's name."""
    from eaglekit.push import scrub_local_paths

    assert scrub_local_paths({"verifier": local, "source_repo": local}, "org/llama") == {
        "verifier": "org/llama",
        "source_repo": "llama",
    }


def test_the_card_replaces_a_path_only_where_it_stands(cli, hub, tmp_path):
    """The card's text had each quoted path replaced everywhere: a note naming ``/srv/model`` turned the card's link
    to the base model ``srv/model`` into ``huggingface.comodel``."""
    out = tmp_path / "drafter"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", aux_layers=(2, 4, 5)))
    config = json.loads((out / "config.json").read_text())
    config["eaglekit"]["notes"] = ["weights mounted at /srv/model inside the container"]
    (out / "config.json").write_text(json.dumps(config))
    card = push(cli, out, "srv/model-drafter", "--base-model", "srv/model", "--dry-run").stdout
    assert "weights mounted at model inside the container" in card and " /srv/model" not in card
    assert (
        "[srv/model](https://huggingface.co/srv/model)" in card
        and 'vllm serve srv/model --speculative-config \'{"model": "srv/model-drafter"' in card
    )


def test_a_path_inside_a_note_is_scrubbed_in_the_files_and_the_card(cli, hub, tmp_path):
    out = tmp_path / "drafter"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", aux_layers=(2, 4, 5)))
    config = json.loads((out / "config.json").read_text())
    config["eaglekit"]["notes"] = [
        "trained on /home/alice/data/train.jsonl with lr 1e-4",
        "/home/alice/x/config.json: a message",
    ]
    (out / "config.json").write_text(json.dumps(config))
    push(cli, out, "tester/drafter")
    published = hub.state.files("tester/drafter")
    assert b"/home/alice" not in published["config.json"] and b"/home/alice" not in published["README.md"]
    assert json.loads(published["config.json"])["eaglekit"]["notes"] == [
        "trained on train.jsonl with lr 1e-4",
        "config.json: a message",
    ]
    assert "trained on train.jsonl with lr 1e-4" in published["README.md"].decode()


@pytest.mark.parametrize(
    "note, what",
    [
        ("pushed with hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "a Hub token (hf_...)"),
        ("mirror at https://alice:hunter2@example.com/x", "a password in a URL"),
        ("token THE-PUSH-TOKEN-123", "the Hub token this push was given"),
    ],
)
def test_a_secret_in_a_published_file_is_refused(cli, hub, tmp_path, monkeypatch, note, what):
    """A Hub token (the push's own too) or a password in a URL, written into a note of config.json, was published in
    config.json and in the card's provenance, and printed by the dry run."""
    out = tmp_path / "drafter"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", aux_layers=(2, 4, 5)))
    config = json.loads((out / "config.json").read_text())
    config["eaglekit"]["notes"] = [note]
    (out / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("HF_TOKEN", "THE-PUSH-TOKEN-123")
    for dry in (["--dry-run"], []):
        result = cli("push", out, "tester/drafter", *dry, expect=2)
        assert (
            f"config.json holds what looks like {what}" in result.stderr
            and "hunter2" not in result.stderr + result.stdout
        )
    assert "tester/drafter" not in hub.state.repos


def test_words_that_start_like_a_token_are_published(cli, hub, tmp_path):
    """The scan refused `pip install hf_transfer` in a README, `hf_tokenizer = ...` in a script and the card eaglekit
    generated for a repo named org/hf_smollm2drafter: a token is hf_ and 34 letters and digits."""
    out = tmp_path / "drafter"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", aux_layers=(2, 4, 5)))
    push(cli, out, "tester/hf_smollm2drafter", "--dry-run")
    (out / "README.md").write_text("Faster downloads: pip install hf_transfer\n")
    (out / "train.py").write_text('hf_tokenizer = AutoTokenizer.from_pretrained("x")\n')
    listed = push(cli, out, "tester/drafter", "--dry-run").stdout
    assert "README.md" in listed and "train.py" in listed


def test_a_source_recorded_as_a_path_is_not_called_a_hub_repo(cli, hub, tmp_path):
    """source_repo: /home/alice/secret/ckpt was published as "source: Hub repo `ckpt`"."""
    out = tmp_path / "drafter"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", aux_layers=(2, 4, 5)))
    config = json.loads((out / "config.json").read_text())
    config["eaglekit"]["source_repo"] = "/home/alice/secret/ckpt"
    (out / "config.json").write_text(json.dumps(config))
    card = push(cli, out, "tester/drafter", "--dry-run").stdout
    assert "Hub repo" not in card and "/home/alice" not in card


def test_paths_the_card_quotes_are_scrubbed_as_the_files_are(cli, hub, tmp_path):
    """config.json was scrubbed for the upload, but the card was rendered from the unscrubbed one: its provenance
    showed `source: Hub repo /home/...` and the notes' paths. Only the target's key takes the base model's id; any
    other path becomes its file name (a source repo or a note is not the base model)."""
    out = tmp_path / "drafter"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="vllm", aux_layers=(2, 4, 5)))
    home = tmp_path / "home" / "alice"
    config = json.loads((out / "config.json").read_text())
    config["eaglekit"].update(
        notes=[str(home / "data" / "train.jsonl")], source_repo=str(home / "ckpt"), verifier=str(home / "llama")
    )
    (out / "config.json").write_text(json.dumps(config))
    card = (
        push(cli, out, "tester/drafter", "--base-model", "org/llama").stdout
        and hub.state.files("tester/drafter")["README.md"].decode()
    )
    # a source recorded as a path names no Hub repo: not called one (it said "Hub repo `ckpt`")
    assert (
        str(home) not in card
        and "Hub repo" not in card
        and "- train.jsonl" in card
        and "| verifier (target) | org/llama |" in card
    )
    sent = json.loads(hub.state.files("tester/drafter")["config.json"])["eaglekit"]
    assert (sent["notes"], sent["source_repo"], sent["verifier"]) == (["train.jsonl"], "ckpt", "org/llama")
    # a path that names nothing (transformers writes `_name_or_path: ./` for a model saved from here) leaks nothing, and
    # replacing it in the card's text would rewrite the card's own `./name-sglang`
    config["_name_or_path"] = "./"
    (out / "config.json").write_text(json.dumps(config))
    assert "convert tester/drafter ./drafter-sglang --to sglang" in push(cli, out, "tester/drafter", "--dry-run").stdout


def test_a_relative_local_path_is_not_published_as_the_target(cli, hub, tmp_path, monkeypatch):
    """``models/target`` looks like a Hub id; where it names a folder here it is a local path, in the card and the
    files."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "target").mkdir(parents=True)
    out = tmp_path / "drafter"
    convert(write_vllm(tmp_path / "src", Dims()), out, ConvertOptions(to="speculators", aux_layers=(2, 4, 5)))
    config = json.loads((out / "config.json").read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = "models/target"
    (out / "config.json").write_text(json.dumps(config))
    dry = push(cli, out, "tester/drafter", "--dry-run").stdout
    assert "pass --base-model ORG/NAME" in dry and "huggingface.co/models/target" not in dry
    push(cli, out, "tester/drafter")
    published = hub.state.files("tester/drafter")
    assert json.loads(published["config.json"])["speculators_config"]["verifier"]["name_or_path"] == "target"
    assert b"models/target" not in published["README.md"]


def test_dry_run_checks_the_repo_id(cli, hub, drafter):
    assert "is not a valid repository id" in push(cli, drafter, "not a repo", "--dry-run", expect=2).stderr
    assert hub.state.log == []


@pytest.mark.parametrize("base_model", ["org/target", None, "ünïcode/mödel-名前", "org/name: with colon", "yes"])
@pytest.mark.parametrize("library", ["vllm", "sglang"])
def test_card_metadata_is_what_huggingface_hubs_model_card_data_writes(base_model, library):
    """The card's YAML block is written without importing huggingface_hub (push --dry-run start-up); byte for byte what
    ``ModelCardData.to_yaml()`` gives, including values YAML must quote."""
    from huggingface_hub import ModelCardData

    from eaglekit.card import card_metadata

    fields = dict(
        base_model=base_model,
        library_name=library,
        pipeline_tag="text-generation",
        tags=["eagle3", "speculative-decoding", library],
    )
    assert card_metadata(**fields) == ModelCardData(**fields).to_yaml()


def test_dry_run_names_what_is_wrong_with_the_repo_id(cli, drafter):
    for repo, why in (
        ("org/a--b", "'--' or '..'"),
        ("org/x.git", "'.git'"),
        ("a/b/c", "'namespace/name'"),
        ("org/-x", "letters, digits"),
    ):
        err = push(cli, drafter, repo, "--dry-run", expect=2).stderr
        assert (
            err.startswith(f"error: {repo!r} is not a valid repository id: ") and why in err and err.count("\n") == 1
        ), err


# -- push --report: a drift report's figures and plots into the card and the commit ------------------------------


@pytest.fixture
def drift_report(tmp_path) -> Path:
    """A real `eaglekit drift --report` directory, from a tiny random pair (fast; what it measures does not matter
    here)."""
    pytest.importorskip("matplotlib")
    from eaglekit import api

    from drafters import write_fast_pair

    pair = write_fast_pair(tmp_path / "drift-pair")
    out = tmp_path / "drift-report"
    api.drift(pair["drafter"], target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=8, report=out)
    return out


def test_report_puts_the_drift_figures_and_plots_into_one_commit(cli, hub, drafter, drift_report):
    from eaglekit.drift.report import PLOTS, tables

    report = json.loads((drift_report / "report.json").read_text())
    dry = push(cli, drafter, "tester/drafter", "--report", drift_report, "--dry-run").stdout
    assert hub.state.log == []
    for name in PLOTS:
        assert f"drift/{name}" in dry and f"](drift/{name})" in dry  # listed for upload, linked from the card
    push(cli, drafter, "tester/drafter", "--report", drift_report)
    assert hub.state.commits_posted() == 1  # plots, figures, card and drafter together
    files = hub.state.files("tester/drafter")
    for name in PLOTS:
        assert files[f"drift/{name}"] == (drift_report / name).read_bytes()
    published = json.loads(files["drift/report.json"])
    assert published["per_depth"] == report["per_depth"]
    assert str(drift_report.parent) not in files["drift/report.json"].decode()  # no path of the publisher's machine
    card = files["README.md"].decode()
    assert "## Drift report" in card
    for title, rows in tables(report):  # the report's own tables, as Markdown
        assert f"**{title}**" in card
        assert "| " + " | ".join(rows[1]) + " |" in card


def test_report_that_is_not_a_drift_report_is_refused_before_any_request(cli, hub, drafter, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    result = push(cli, drafter, "tester/drafter", "--report", bad, expect=2)
    assert "report.json" in result.stderr and "eaglekit drift --report" in result.stderr
    (bad / "report.json").write_text(json.dumps({"per_depth": [], "by_context_length": [], "acceptance": {}}))
    (bad / "per_depth.png").write_bytes(b"GIF89a not a png")
    result = push(cli, drafter, "tester/drafter", "--report", bad, expect=2)
    assert "per_depth.png" in result.stderr and "PNG" in result.stderr
    assert hub.state.log == []


def test_the_card_of_an_sglang_layout_drafter_gives_no_vllm_line(cli, hub, tmp_path):
    """vLLM reads SGLang's output-of-layer eagle_config ids as its own input-of-layer ones (validate --engine says so):
    the card used to tell readers to serve such a drafter with vLLM as it is."""
    from drafters import write_specforge

    src = write_specforge(tmp_path / "sf", Dims())
    card = push(cli, src, "tester/sf", "--dry-run", "--allow-untrained").stdout
    assert (
        "vllm serve" not in card
        and "For vLLM, convert it first: `eaglekit convert tester/sf ./sf-vllm --to vllm`" in card
    )
    assert "sglang" in card.lower()


def test_a_previous_drafters_verify_report_is_deleted_with_its_weights(cli, hub, tmp_path, drafter):
    """A re-push without a report left the old drafter's eaglekit-verify.json (and its figures reached later cards),
    and its drift/ files; files of the user's own stay."""
    verified = tmp_path / "verified"
    shutil.copytree(drafter, verified)
    (verified / "eaglekit-verify.json").write_text("{}")
    push(cli, verified, "tester/drafter", "--no-validate")
    hub.state.advance_branch("tester/drafter", files={"drift/report.json": b"{}", "notes.txt": b"mine"})
    assert {"eaglekit-verify.json", "drift/report.json"} <= set(hub.state.files("tester/drafter"))
    result = push(cli, drafter, "tester/drafter", "--json")
    after = set(hub.state.files("tester/drafter"))
    assert "eaglekit-verify.json" not in after and "drift/report.json" not in after and "notes.txt" in after
    assert {"drift/report.json", "eaglekit-verify.json"} <= set(json.loads(result.stdout)["commit"]["deleted"])


def test_a_drift_report_missing_what_the_card_reads_is_a_usage_error(cli, hub, drafter, tmp_path):
    """A report.json with the three keys checked before but no `inputs` ended in 'internal error: KeyError'."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "report.json").write_text(json.dumps({"per_depth": [], "by_context_length": [], "acceptance": {}}))
    result = push(cli, drafter, "tester/drafter", "--report", bad, "--dry-run", expect=2)
    assert "not a drift report as eaglekit drift writes it" in result.stderr and "internal error" not in result.stderr


def test_a_token_that_is_not_ascii_is_a_usage_error(cli, hub, drafter):
    result = push(cli, drafter, "tester/drafter", "--token", "hf_\u201cabc\u201d", expect=2)
    assert "--token: a Hub token is ASCII" in result.stderr and "internal error" not in result.stderr
    assert hub.state.log == []


def test_a_dry_run_refuses_a_commit_id_as_the_push_would(cli, hub, drafter):
    result = push(
        cli, drafter, "tester/drafter", "--revision", "0123456789abcdef0123456789abcdef01234567", "--dry-run", expect=2
    )
    assert "is a commit id: commits go to a branch" in result.stderr and hub.state.log == []


@pytest.mark.parametrize(
    "branch, problem",
    [("a b", "it holds ' '"), ("../x", "it holds .."), ("v1.lock", "ends with '.lock'"), ("x/", "ends with '/'")],
)
def test_a_branch_name_git_refuses_is_refused_by_the_dry_run_too(cli, hub, drafter, branch, problem):
    """`--revision 'a b'` was a dry run's "branch a b", exit 0; the Hub's git refuses such a name."""
    for dry in (["--dry-run"], []):
        result = push(cli, drafter, "tester/drafter", "--revision", branch, *dry, expect=2)
        assert f"revision {branch!r} is not a branch name git allows: " in result.stderr and problem in result.stderr
    assert hub.state.log == []


def test_a_card_pushed_to_a_branch_serves_that_branch(cli, hub, drafter, tmp_path):
    """The serve and convert lines named the repo alone, so readers of a --revision v2 card served main's drafter."""
    from drafters import write_specforge

    card = push(cli, drafter, "tester/drafter", "--revision", "v2", "--dry-run").stdout
    assert '"revision": "v2"' in card
    sf = push(
        cli, write_specforge(tmp_path / "sf", Dims()), "tester/sf", "--revision", "v2", "--dry-run", "--allow-untrained"
    ).stdout
    assert "eaglekit convert tester/sf@v2 ./sf-vllm --to vllm" in sf and "hf download tester/sf --revision v2" in sf
    assert '"revision"' not in push(cli, drafter, "tester/drafter", "--dry-run").stdout


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{not json", "not valid JSON"),
        ("[]", "$ = []: [] is not of type 'object'"),
        ('{"trajectory": []}', "$.trajectory = []: [] is not of type 'object'"),
        ('{"trajectory": {"per_position_rate": ["a"]}}', "$.trajectory.per_position_rate[0]"),
        ('{"acceptance_length": "x"}', "$.acceptance_length"),
        ('{"prompts": 3}', "$.prompts = 3"),
        ('{"checks": [1]}', "$.checks[0] = 1"),
        # typed by verify.schema.json itself (the card once restated a looser copy of it)
        ('{"checks": [{"name": "x", "passed": "yes", "detail": ""}]}', "$.checks[0].passed"),
        ('{"dtype": "float64"}', "$.dtype"),
        ('{"acceptance_length": 0.5}', "$.acceptance_length = 0.5"),
    ],
)
def test_a_malformed_verify_report_in_the_drafter_is_a_one_line_error(cli, hub, drafter, content, fragment):
    """eaglekit-verify.json with a list where the card reads an object (and the like) ended in 'internal error'; one
    that was not a JSON object was left out of the card and published anyway."""
    (drafter / "eaglekit-verify.json").write_text(content)
    result = push(cli, drafter, "tester/drafter", "--dry-run", expect=2)
    assert result.stderr.startswith(f"error: {drafter / 'eaglekit-verify.json'}: ") and fragment in result.stderr, (
        result.stderr
    )
    assert result.stderr.count("\n") == 1 and "internal error" not in result.stderr
    assert hub.state.log == []


@pytest.fixture(scope="module")
def drift_document(tmp_path_factory) -> str:
    """What `eaglekit drift --compare` reports (report.json's content, as JSON text), from a tiny random pair; no
    matplotlib needed."""
    from eaglekit import api

    from drafters import write_fast_pair

    pair = write_fast_pair(tmp_path_factory.mktemp("drift"))
    return json.dumps(
        api.drift(
            pair["drafter"],
            target=str(pair["target"]),
            prompts=str(pair["prompts"]),
            max_new_tokens=8,
            compare=str(pair["drafter"]),
        ).data
    )


def test_a_report_kept_inside_the_drafter_goes_up_once_and_scrubbed(cli, hub, drafter, drift_document):
    """`push d --report d/drift` listed drift/report.json twice: the raw one collected with the drafter's files (it
    names this machine's paths) and the scrubbed one."""
    inside = drafter / "drift"
    inside.mkdir()
    (inside / "report.json").write_text(drift_document)
    local = json.loads(drift_document)["path"]  # the raw report names this machine's paths
    assert local.startswith("/")
    listed = [
        f["path"]
        for f in json.loads(push(cli, drafter, "tester/drafter", "--report", inside, "--dry-run", "--json").stdout)[
            "files"
        ]
    ]
    assert len(listed) == len(set(listed)) and listed.count("drift/report.json") == 1, listed
    push(cli, drafter, "tester/drafter", "--report", inside)
    assert local.encode() not in hub.state.files("tester/drafter")["drift/report.json"]


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (lambda r: r["inputs"].update(tokens=[]), "$.inputs.tokens = []: [] should be non-empty"),
        (lambda r: r["by_context_length"][0].update(per_depth=[]), "per_depth = []: [] should be non-empty"),
        (
            lambda r: r["compare"]["ratios"]["per_depth"][0].pop("sink_attention"),
            "'sink_attention' is a required property",
        ),
        (
            lambda r: r["compare"].update(per_depth=r["compare"]["per_depth"][:1]),
            "its tables cannot be built from it (IndexError",
        ),
    ],
)
def test_a_drift_report_the_card_cannot_be_built_from_is_a_usage_error(
    cli, hub, drafter, tmp_path, drift_document, edit, fragment
):
    """inputs.tokens [] (and per-step lists of another length) passed the schema and ended in 'internal error' (min() of
    an empty list, an index out of range) when the card was built."""
    drift_data = json.loads(drift_document)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "report.json").write_text(json.dumps(drift_data))
    assert (
        "## Drift report" in push(cli, drafter, "tester/drafter", "--report", bad, "--dry-run").stdout
    )  # as drift wrote it
    edit(drift_data)
    (bad / "report.json").write_text(json.dumps(drift_data))
    result = push(cli, drafter, "tester/drafter", "--report", bad, "--dry-run", expect=2)
    assert "is not a drift report as eaglekit drift writes it" in result.stderr and fragment in result.stderr, (
        result.stderr
    )
    assert result.stderr.count("\n") == 1 and "internal error" not in result.stderr


@pytest.mark.parametrize(
    "value, why",
    [
        ("not a repo id!!", "use letters, digits"),
        ("org/name/extra", "it must be 'name' or 'namespace/name'"),
        ("gpt2", "give it as namespace/name"),
        ("", "it is empty"),
    ],
)
def test_a_base_model_that_is_no_hub_id_is_refused(cli, hub, drafter, value, why):
    """An invalid --base-model was dropped in silence: the card named no base model and told the user to pass
    --base-model."""
    result = push(cli, drafter, "tester/drafter", "--base-model", value, "--dry-run", expect=2)
    assert result.stderr.startswith(f"error: --base-model {value!r} is not a Hub repo id: {why}"), result.stderr
    assert result.stderr.count("\n") == 1 and hub.state.log == []


def test_a_base_model_naming_a_local_path_is_refused(cli, hub, drafter, tmp_path, monkeypatch):
    (tmp_path / "models" / "target").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    result = push(cli, drafter, "tester/drafter", "--base-model", "models/target", "--dry-run", expect=2)
    assert "--base-model 'models/target' is not a Hub repo id: it names a path on this machine" in result.stderr
