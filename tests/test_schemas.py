"""The JSON Schemas: valid draft 2020-12 schemas, followed by every --json output, and shipped in the wheel."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
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


def test_schemas_ship_in_the_wheel(tmp_path):
    pytest.importorskip("hatchling")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
    )
    wheel = next(tmp_path.glob("eaglekit-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
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
