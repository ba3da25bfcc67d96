"""The public Python API drives every command alone (no CLI), with typed results that match the CLI's JSON."""

from __future__ import annotations

import json

import pytest

from eaglekit import api, schemas
from eaglekit.errors import EaglekitError, OutputExistsError

from drafters import Dims, write_specforge


@pytest.fixture(scope="module")
def pair(trained_pair) -> dict:
    return trained_pair(eagle="3.1")


def test_inspect_convert_validate_through_the_api(tmp_path, cli):
    src = write_specforge(tmp_path / "src", Dims(fc_norm=True), norm_output=True)
    info = api.inspect(src)
    assert isinstance(info, api.Inspection)
    assert (info.dialect, info.eagle_version, info.flags["fc_norm"]) == ("sglang", "3.1", True)
    assert info.data == json.loads(cli("inspect", src, "--json").stdout)

    plan = api.convert(src, tmp_path / "out", to="vllm", dry_run=True)
    assert not plan.written and not (tmp_path / "out").exists() and "config.json" in plan.files
    done = api.convert(src, tmp_path / "out", to="vllm")
    assert done.written and sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(done.files)
    assert (done.source_dialect, done.to) == ("sglang", "vllm")
    with pytest.raises(OutputExistsError):
        api.convert(src, tmp_path / "out", to="vllm")

    report = api.validate(tmp_path / "out", engine="vllm==0.32")
    assert report.ok and report.dialect == "vllm"
    assert schemas.check(report.to_dict(), "validate.schema.json") == []


def test_errors_are_eaglekit_errors(tmp_path):
    with pytest.raises(EaglekitError, match="nothing-here: no such checkpoint directory"):
        api.inspect(tmp_path / "nothing-here")


def test_verify_through_the_api(pair):
    result = api.verify(
        pair["drafter"], target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=16, num_prompts=2
    )
    assert isinstance(result, api.Verification)
    assert result.passed and result.acceptance_length == result.data["acceptance_length"] > 1.0
    assert schemas.check(result.data, "verify.schema.json") == []


def test_push_dry_run_through_the_api(tmp_path):
    out = tmp_path / "drafter"
    api.convert(write_specforge(tmp_path / "src", Dims()), out, to="vllm", aux_layers=(2, 4, 5))
    published = api.push(out, "tester/drafter", dry_run=True)
    assert published.dry_run and published.commit is None
    assert set(published.files) == {"config.json", "model.safetensors", "README.md"}


def test_a_verify_run_leaves_nothing_frozen_and_its_target_collectable(pair, monkeypatch):
    """verify's target ends up in a garbage cycle when the run is over: were it still frozen, a process that verifies
    again and again would keep every target it loaded."""
    import gc
    import weakref

    from eaglekit.target.runner import TargetModel

    models, frozen = [], []
    load = TargetModel.load.__func__

    def spy(cls, *args, **kwargs):
        target = load(cls, *args, **kwargs)
        models.append(weakref.ref(target.model))
        frozen.append(
            not any(o is target.model for o in gc.get_objects())
        )  # out of the collector's walks while the run lasts
        return target

    monkeypatch.setattr(TargetModel, "load", classmethod(spy))
    api.verify(
        str(pair["drafter"]), target=str(pair["target"]), prompts=str(pair["prompts"]), num_prompts=2, max_new_tokens=4
    )
    assert len(models) == 1 and frozen == [True] and gc.get_freeze_count() == 0
    gc.collect()
    assert models[0]() is None
