"""The JSON Schemas: valid draft 2020-12 schemas, followed by every --json output, and shipped in the wheel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from eaglekit import api, schemas

from drafters import Dims, mla_dims, write_specforge, write_speculators, write_torchspec, write_vllm

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", schemas.all_schema_files())
def test_every_schema_is_a_valid_draft_2020_12_schema(name):
    schema = schemas.load(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == schemas.BASE_URI + name


def test_each_dialect_has_a_config_schema_and_the_mla_variant():
    names = set(schemas.all_schema_files())
    for dialect in ("vllm", "speculators", "sglang", "eagle", "modelopt", "torchspec", "automodel", "mla"):
        assert f"config/{dialect}.schema.json" in names
    for output in ("inspect", "convert", "validate", "verify", "push"):
        assert f"{output}.schema.json" in names


@pytest.mark.parametrize(
    "make",
    [
        lambda p: write_specforge(p, Dims(fc_norm=True), norm_output=True),
        lambda p: write_speculators(p, Dims()),
        lambda p: write_torchspec(p, Dims(Vd=64, mla=mla_dims(), fc_norm=True), norm_output=True),
    ],
)
def test_inspect_and_convert_outputs_follow_their_schemas(tmp_path, cli, make):
    src = make(tmp_path / "src")
    assert schemas.check(json.loads(cli("inspect", src, "--json").stdout), "inspect.schema.json") == []
    dry = json.loads(cli("convert", src, tmp_path / "out", "--to", "vllm", "--dry-run", "--json").stdout)
    assert schemas.check(dry, "convert.schema.json") == []
    done = json.loads(cli("convert", src, tmp_path / "out", "--to", "vllm", "--json").stdout)
    assert schemas.check(done, "convert.schema.json") == [] and done["written"]
    # and the converted config follows the vllm config schema (and the MLA one where it applies)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert schemas.check(config, "config/vllm.schema.json") == []
    if "kv_lora_rank" in config:
        assert schemas.check(config, "config/mla.schema.json") == []


def test_every_writer_output_follows_its_dialect_schema(tmp_path):
    from eaglekit.convert import ConvertOptions, convert

    src = write_vllm(tmp_path / "src", Dims())
    for dialect in ("vllm", "speculators", "sglang", "eagle"):
        convert(src, tmp_path / dialect, ConvertOptions(to=dialect))
        config = json.loads((tmp_path / dialect / "config.json").read_text())
        assert schemas.check(config, f"config/{dialect}.schema.json") == [], dialect


def test_schemas_ship_in_the_wheel(wheel_files):
    names = wheel_files
    for name in schemas.all_schema_files():
        assert f"eaglekit/schemas/{name}" in names
    assert "eaglekit/engines/vllm_releases.json" in names and "eaglekit/data/prompts.jsonl" in names
    assert "eaglekit/model/architectures.json" in names


# -- the JSON contract: one success key, one path key, a version; offline schemas; an error document ---------------

OUTPUT_SCHEMAS = (
    "inspect",
    "convert",
    "validate",
    "verify",
    "push",
    "convert-list",
    "engines",
    "drift",
    "error",
    "capture",
)


@pytest.mark.parametrize("name", OUTPUT_SCHEMAS)
def test_output_schemas_need_nothing_but_themselves(name, monkeypatch):
    """A user validates with plain jsonschema and no network: no schema refers outside its own file."""
    import socket

    import jsonschema

    def no_network(*args, **kwargs):
        raise AssertionError("a schema tried to reach the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    schema = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    refs = [v for v in json.dumps(schema).split('"$ref": ')[1:]]
    assert all(ref.startswith('"#') for ref in refs), refs
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schema_version": 2, "ok": "yes", "path": 3, "findings": [{"check": 1}]}, schema)


def test_every_command_prints_the_contract_keys(tmp_path, cli):
    import jsonschema

    src = write_vllm(tmp_path / "src", Dims())
    docs = {
        "inspect": json.loads(cli("inspect", src, "--json").stdout),
        "validate": json.loads(cli("validate", src, "--json").stdout),
        "convert": json.loads(cli("convert", src, tmp_path / "out", "--to", "vllm", "--json").stdout),
        "convert-list": json.loads(cli("convert", "--list", "--json").stdout),
    }
    for name, doc in docs.items():
        assert doc["schema_version"] == api.SCHEMA_VERSION == 2 and doc["ok"] is True, name
        if name != "convert-list":
            assert doc["path"] == str(src), name
        jsonschema.validate(doc, json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text()))


def test_under_json_a_failure_prints_an_error_document(tmp_path, cli):
    import jsonschema

    result = cli("validate", tmp_path / "typo-dir", "--json", expect=2)
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, json.loads((ROOT / "schemas" / "error.schema.json").read_text()))
    assert doc["error"] == {
        "message": f"{tmp_path / 'typo-dir'}: no such checkpoint directory",
        "type": "CheckpointError",
        "exit_code": 2,
    }
    assert result.stderr.startswith("error: ")


# -- config checks without jsonschema (schemas._Lite) ---------------------------------------------------------------

CONFIG_SCHEMAS = [name for name in schemas.all_schema_files() if name.startswith("config/")]
# values put in place of each key of a real config: every JSON type, near misses of the usual ones
ODD_VALUES = [None, True, 0, -1, 2.0, 1.5, "x", [], [True], [2.5], {"type": "yarn"}]


def _config_corpus(tmp_path) -> list[tuple[str, dict]]:
    """(schema, config) pairs: each dialect writer's config (GQA, and MLA beside the MLA schema too) against its own
    schema, and the example drafters' configs against every config schema."""
    writers = {
        "sglang": lambda p, d: write_specforge(p, d, norm_output=True),
        "speculators": write_speculators,
        "vllm": write_vllm,
        "torchspec": lambda p, d: write_torchspec(p, d, norm_output=True),
    }
    corpus = []
    for name, write in writers.items():
        gqa = json.loads((write(tmp_path / f"{name}-gqa", Dims(fc_norm=True)) / "config.json").read_text())
        mla = json.loads((write(tmp_path / f"{name}-mla", Dims(Vd=64, mla=mla_dims())) / "config.json").read_text())
        corpus += [(f"config/{name}.schema.json", gqa), (f"config/{name}.schema.json", mla), (schemas.MLA_SCHEMA, mla)]
    for config in sorted((ROOT / "examples" / "drafters").glob("*/config.json"))[:1]:
        corpus += [(name, json.loads(config.read_text())) for name in CONFIG_SCHEMAS]
    return corpus


def _mutations(config):
    """``config`` itself, then with each value (at every depth) removed or replaced by each of ``ODD_VALUES``."""
    yield config
    if isinstance(config, dict):
        items = list(config.items())
    elif isinstance(config, list):
        items = list(enumerate(config))
    else:
        return
    for key, value in items:
        for replacement in [*ODD_VALUES, *(m for m in _mutations(value) if m is not value)]:
            changed = dict(config) if isinstance(config, dict) else list(config)
            changed[key] = replacement
            yield changed
        if isinstance(config, dict):
            yield {k: v for k, v in config.items() if k != key}


def _said(errors) -> list[tuple]:
    return [(e.message, e.validator, e.validator_value, list(e.absolute_path), repr(e.instance)) for e in errors]


def test_config_checks_without_jsonschema_say_what_jsonschema_says(tmp_path):
    """validate and convert check a config with schemas._Lite (no jsonschema import: ~3/4 of their start-up floor): its
    errors are jsonschema's, message, keyword, path and order, on every writer's and example's config and on each of
    them with any one value anywhere removed or replaced by an odd one."""
    assert all(schemas._Lite.covers(name) for name in CONFIG_SCHEMAS)
    checked = 0
    for name, config in _config_corpus(tmp_path):
        reference = schemas.validator(name)
        for mutated in _mutations(config):
            lite = schemas._errors(mutated, name, lite=True)
            assert _said(lite) == _said(
                sorted(reference.iter_errors(mutated), key=lambda e: list(map(str, e.absolute_path)))
            ), (name, mutated)
            checked += 1
    assert checked > 4000


def test_a_schema_with_a_keyword_the_lite_check_does_not_know_goes_to_jsonschema(monkeypatch):
    monkeypatch.setattr(
        schemas, "load", lambda name: {"type": "object", "patternProperties": {"^x": {"type": "string"}}}
    )
    schemas._Lite.covers.cache_clear()
    try:
        assert not schemas._Lite.covers("config/odd.schema.json")
        assert [e.message for e in schemas._errors({"xa": 1}, "config/odd.schema.json", lite=True)] == [
            "1 is not of type 'string'"
        ]
    finally:
        schemas._Lite.covers.cache_clear()
