"""Findings say what to do (issue 53, item 10): each rule's next step is data beside it (the engine tables'
``next_steps``, eaglekit/validate/next_steps.json), carried on the Finding and in --json, rendered by the CLI as one
short line in its own flags; and each step keeps its promise: the release it names serves the drafter clean, the
conversion it names leaves that finding behind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from eaglekit import api, dialects, schemas
from eaglekit.engines import support
from eaglekit.errors import EaglekitError
from eaglekit.findings import Finding

from drafters import Dims, write_specforge, write_speculators

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_serve_truth import FIXTURES, target_for

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "drafters" / "smollm2-eagle3.1-specforge"


def test_a_release_that_drops_flags_says_use_a_later_one_or_the_vllm_format(tmp_path, cli):
    src = write_specforge(tmp_path / "src", Dims(fc_norm=True), norm_output=True)
    cli("convert", src, tmp_path / "spec", "--to", "speculators")
    text = cli("validate", tmp_path / "spec", "--engine", "vllm==0.24", expect=1).stdout
    assert "    next: use vLLM >= 0.25.0, or `eaglekit convert SRC OUT --to vllm`" in text
    data = json.loads(cli("validate", tmp_path / "spec", "--engine", "vllm==0.24", "--json", expect=1).stdout)
    [fc] = [f for f in data["findings"] if f["check"] == "engine.flag.fc_norm"]
    assert fc["next_step"] == {"release": "vllm>=0.25.0", "command": "convert", "options": {"to": "vllm"}}
    assert schemas.check(data, "validate.schema.json") == []


def test_aux_ids_an_engine_misreads_say_convert(cli):
    data = json.loads(cli("validate", EXAMPLE, "--engine", "vllm==0.32", "--json", expect=1).stdout)
    [aux] = [f for f in data["findings"] if f["check"] == "engine.aux_ids"]
    assert aux["next_step"]["command"] == "convert" and aux["next_step"]["options"] == {"to": "vllm"}


def test_an_sglang_release_says_the_first_that_works(tmp_path, cli):
    src = write_speculators(tmp_path / "src", Dims(fc_norm=True), norm_output=True, norm_before_residual=False)
    cli("convert", src, tmp_path / "sg", "--to", "sglang")
    text = cli("validate", tmp_path / "sg", "--engine", "sglang==0.5.4", expect=1).stdout
    assert "next: use SGLang >= 0.5.12" in text


def test_the_core_names_no_flag_the_cli_renders_it():
    finding = Finding("verifier.unknown", "info", "m", next_step={"options": {"target_id": "ORG/NAME"}})
    from eaglekit.cli._output import findings_text

    assert findings_text([finding]).splitlines()[-1] == "    next: pass --target-id ORG/NAME"
    for table in (
        json.loads((Path(api.__file__).parents[1] / "validate" / "next_steps.json").read_text())["steps"],
        *(support.load_table(t).get("next_steps", {}) for t in support.TABLES.values()),
    ):
        for step in table.values():
            assert set(step) <= {"command", "options", "release"} and not any("--" in str(v) for v in step.values())


def _dialect(path: Path) -> str:
    with dialects.load(path) as loaded:
        name = loaded.dialect
    return name if dialects.get(name).can_write else "vllm"


RELEASES = [("vllm", r) for r in support.rows("vllm")] + [("sglang", r) for r in support.rows("sglang")]


@pytest.mark.slow  # every fixture x every release row x each conversion a step names: ~1 s a fixture
@pytest.mark.parametrize("fixture", list(FIXTURES))
def test_every_next_step_keeps_its_promise(tmp_path, fixture):
    write, depth = FIXTURES[fixture]
    src = write(tmp_path / "src")
    target = target_for(tmp_path, fixture, src, depth)
    converted: dict[str, Path | None] = {}
    for engine, release in RELEASES:
        spec = f"{engine}=={release}"
        for f in api.validate(src, engine=spec, target=target).findings:
            step = f.next_step or {}
            if step.get("release"):  # that release has nothing to say against the drafter (its own checks aside)
                later = step["release"].replace(">=", "==")
                report = api.validate(src, engine=later, target=target)
                against = [g.check for g in report.findings if g.engine == later and g.severity == "error"]
                assert not against, (fixture, spec, f.check, later, against)
            if step.get("command") != "convert" or step["options"].get("resolve"):
                continue  # --resolve measures the target: tests/test_resolve.py
            to = step["options"]["to"]
            to = _dialect(src) if to == "DIALECT" else to
            if to not in converted:
                try:
                    api.convert(src, tmp_path / to, to=to, target=target)
                    converted[to] = tmp_path / to
                except EaglekitError:
                    converted[to] = None
            assert converted[to] is not None, (fixture, spec, f.check, f"convert --to {to} refused")
            after = api.validate(converted[to], engine=spec if f.engine == spec else None, target=target)
            left = [g for g in after.findings if g.check == f.check and g.severity in ("error", "warning")]
            assert not left, (fixture, spec, f.check, f"after convert --to {to}", [g.message for g in left])
