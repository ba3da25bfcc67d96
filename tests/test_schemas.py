"""The JSON Schemas: valid draft 2020-12 schemas, followed by every --json output, and shipped in the wheel."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from drafters import Dims, mla_dims, write_specforge, write_speculators, write_torchspec, write_vllm
from eaglekit import schemas

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
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)], check=True)
    wheel = next(tmp_path.glob("eaglekit-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for name in schemas.all_schema_files():
        assert f"eaglekit/schemas/{name}" in names
    assert "eaglekit/engines/vllm_releases.json" in names and "eaglekit/data/prompts.jsonl" in names
