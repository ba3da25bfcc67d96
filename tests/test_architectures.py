"""The architecture table is data: a row added to it is recognised by inspect, convert and validate with no code
change."""

from __future__ import annotations

import json

import pytest

from eaglekit.model import architectures

from drafters import Dims, write_vllm

NEW = "Eagle3FooForCausalLM"


@pytest.fixture
def foo_drafter(tmp_path):
    return write_vllm(tmp_path / "foo", Dims(), arch=NEW)


def _vllm_candidate(cli, path) -> dict:
    report = json.loads(cli("inspect", path, "--json").stdout)
    return next(c for c in report["candidates"] if c["dialect"] == "vllm")


def test_an_unknown_architecture_is_not_claimed_and_vllm_refuses_it(cli, foo_drafter):
    assert "architectures names a vLLM-native Eagle3* class" not in _vllm_candidate(cli, foo_drafter)["evidence"]
    report = json.loads(cli("validate", foo_drafter, "--engine", "vllm==0.32", "--json", expect=1).stdout)
    assert [f["check"] for f in report["findings"]] == ["engine.architecture"]


def test_a_row_added_to_the_table_is_recognised_everywhere(cli, foo_drafter, tmp_path, monkeypatch):
    monkeypatch.setitem(architectures.ROWS, NEW, {"attention": "llama", "claimed_by": ["vllm"], "vllm": "llama"})
    assert "architectures names a vLLM-native Eagle3* class" in _vllm_candidate(cli, foo_drafter)["evidence"]
    report = json.loads(cli("validate", foo_drafter, "--engine", "vllm==0.32", "--json").stdout)
    assert not [f for f in report["findings"] if f["check"].startswith("engine.")]
    plan = json.loads(
        cli("convert", foo_drafter, tmp_path / "out", "--to", "speculators", "--dry-run", "--json").stdout
    )
    assert plan["source_dialect"] == "vllm" and plan["findings"] == []


def test_writers_take_their_architecture_string_from_the_table(cli, foo_drafter, tmp_path, monkeypatch):
    monkeypatch.setitem(architectures.ROWS, NEW, {"attention": "llama", "claimed_by": ["vllm"], "vllm": "llama"})
    monkeypatch.setitem(architectures.WRITTEN_AS, "vllm", {**architectures.WRITTEN_AS["vllm"], "llama": NEW})
    cli("convert", foo_drafter, tmp_path / "out", "--to", "vllm")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == [NEW]


def test_every_architecture_string_lives_in_the_table_alone():
    """No module spells an architecture string that the table holds (docstrings and messages aside)."""
    import re
    from pathlib import Path

    root = Path(architectures.__file__).parent.parent
    names = "|".join(map(re.escape, architectures.ROWS))
    pattern = re.compile(rf"""["']({names})["']""")
    offenders = [
        f"{p.relative_to(root)}: {m.group(1)}" for p in root.rglob("*.py") for m in pattern.finditer(p.read_text())
    ]
    assert offenders == []
