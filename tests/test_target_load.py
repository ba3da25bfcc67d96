"""Loading the target runs with Python's cyclic garbage collector off (``runner._no_cyclic_gc``: importing transformers'
model code and parsing a GGUF file only grow the heap, and each full collection over it freed next to nothing) and
gives the collector back as it found it, whether the load succeeds or fails."""

from __future__ import annotations

import gc

import pytest

from drafters import write_tiny_target


@pytest.fixture
def target_config(tmp_path):
    from eaglekit.target import read_target_config

    return read_target_config(write_tiny_target(tmp_path / "t", hidden=32))


def spy_on_from_pretrained(monkeypatch, seen: list, fail: bool = False):
    import transformers

    original = transformers.AutoModelForCausalLM.from_pretrained

    def from_pretrained(*args, **kwargs):
        seen.append(gc.isenabled())
        if fail:
            raise OSError("no weights here")
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)


def test_the_collector_is_off_while_the_target_loads_and_on_again_after(target_config, monkeypatch):
    from eaglekit.target.runner import TargetModel

    seen: list[bool] = []
    spy_on_from_pretrained(monkeypatch, seen)
    assert gc.isenabled()
    target = TargetModel.load(target_config)
    assert seen == [False] and gc.isenabled()
    assert target.model is not None


def test_a_failed_load_gives_the_collector_back(target_config, monkeypatch):
    from eaglekit.target.runner import TargetModel

    seen: list[bool] = []
    spy_on_from_pretrained(monkeypatch, seen, fail=True)
    with pytest.raises(OSError, match="no weights here"):
        TargetModel.load(target_config)
    assert seen == [False] and gc.isenabled()


def test_a_caller_that_turned_the_collector_off_keeps_it_off(target_config):
    from eaglekit.target.runner import TargetModel

    gc.disable()
    try:
        TargetModel.load(target_config)
        assert not gc.isenabled()
    finally:
        gc.enable()
