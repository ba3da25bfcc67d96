"""The JSON Schemas in ``schemas/``: config.json per dialect, and eaglekit's own JSON outputs.

In a wheel they live in ``eaglekit/schemas``; in a source checkout, in ``schemas/`` beside the package.
Schemas refer to each other by ``$id`` (https://eaglekit.dev/schemas/...), resolved from these files only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from .findings import Finding

BASE_URI = "https://eaglekit.dev/schemas/"
MLA_SCHEMA = "config/mla.schema.json"


def schema_root() -> Path:
    packaged = resources.files("eaglekit").joinpath("schemas")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "schemas"


@lru_cache(maxsize=1)
def all_schema_files() -> list[str]:
    root = schema_root()
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.schema.json"))


@cache
def load(name: str) -> dict:
    return json.loads((schema_root() / name).read_text())


def _retrieve(uri: str) -> Resource:
    """A schema another refers to, loaded when first referred to (not all of them up front: ~10 ms of every
    validate)."""
    from referencing.exceptions import NoSuchResource

    name = uri[len(BASE_URI) :] if uri.startswith(BASE_URI) else None
    if name is None or name not in all_schema_files():
        raise NoSuchResource(ref=uri)
    return Resource.from_contents(load(name))


@lru_cache(maxsize=1)
def registry() -> Registry:
    return Registry(retrieve=_retrieve)


def without_required(schema: Any) -> Any:
    """``schema`` with every ``required`` list left out (a copy): the same types, no key demanded. For reading a file an
    older or partial writer may have left keys out of."""
    if isinstance(schema, dict):
        return {
            key: without_required(value)
            for key, value in schema.items()
            if not (key == "required" and isinstance(value, list))
        }
    if isinstance(schema, list):
        return [without_required(item) for item in schema]
    return schema


def validator(schema: str | dict) -> Draft202012Validator:
    """A validator for the schema file ``schema`` names (``config/vllm.schema.json``), or for ``schema`` itself."""
    return Draft202012Validator(load(schema) if isinstance(schema, str) else schema, registry=registry())


def json_path(path) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _describe(error) -> str:
    value = json.dumps(error.instance, default=str)
    if len(value) > 60:
        value = value[:57] + "..."
    return (
        f"{json_path(error.absolute_path)} = {value}:"
        f" {error.message if len(error.message) < 160 else error.message[:157] + '...'}"
    )


def _errors(data: Any, schema: str | dict) -> list:
    return sorted(validator(schema).iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))


def check(data: Any, schema: str | dict) -> list[str]:
    """Every violation of ``schema`` (a file name, as ``validator`` takes it) as 'JSON path = value: what was
    expected'."""
    return [_describe(e) for e in _errors(data, schema)]


def check_config(
    config: dict, schema: str | None, *, mla: bool, label: str = "config.json", told: Collection[str] = ()
) -> list[Finding]:
    """``config`` against a dialect's schema (``Dialect.schema``) and, for an MLA drafter, the MLA schema. A key one
    schema has already found wrong is not reported again by the next (``architectures: [5]`` is not a string to the
    dialect's schema, and to the MLA schema not one of its architectures: one finding).

    ``told``: the config values (paths, as findings' subjects) that other errors already name, a check that knows
    what the key means or the error that stopped the config's reading: a violation of a rule about such a value is
    left to them (one fault, one finding: ``hidden_size must be an integer``, not also "is not of type 'integer'"), as
    is one about an item of a list they name (a check of ``eagle_aux_hidden_state_layer_ids`` speaks of all of it). A
    rule about an object as a whole (``rope_scaling`` matching none of its forms) is still told: it may hold faults of
    that object the other error does not name, as is any value at another path (``eagle_config.x`` is not ``x``)."""
    findings = []
    names = [schema] if schema else []
    if mla:
        names.append(MLA_SCHEMA)
    reported: set[str] = set()
    for name in names:
        errors = [e for e in _errors(config, name) if _wrong_key(e) not in reported and not _told_elsewhere(e, told)]
        reported |= {_wrong_key(e) for e in errors}
        findings += [Finding("schema.config", "error", f"{label}: {_describe(e)}", _config_key(e)) for e in errors]
    return findings


# JSON Schema rules about an object as a whole, or that combine other rules: broken by an object, their violation may
# be more than one fault of it (broken by a scalar, ``draft_vocab_size: "32"`` against oneOf [integer, null], it is one)
_WHOLE_OBJECT_RULES = {
    "oneOf",
    "anyOf",
    "allOf",
    "not",
    "if",
    "additionalProperties",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedProperties",
}


def _told_elsewhere(error, told: Collection[str]) -> bool:
    key = _config_key(error)
    whole_object = error.validator in _WHOLE_OBJECT_RULES and isinstance(error.instance, dict)
    return key is not None and not whole_object and (key in told or re.sub(r"\[\d+\]$", "", key) in told)


def _config_key(error) -> str | None:
    """The config value a violation is about, as a dotted path with list positions
    (``speculators_config.proposal_methods[1].speculative_tokens``), a missing required key included; None for the
    config as a whole."""
    path = json_path(error.absolute_path).removeprefix("$")
    if error.validator == "required" and isinstance(
        error.instance, dict
    ):  # one error per missing key, named first in its message
        missing = [k for k in error.validator_value if k not in error.instance and error.message.startswith(repr(k))]
        path += f".{missing[0]}" if missing else ""
    return path.lstrip(".") or None


def _wrong_key(error) -> str:
    """What a violation is about: a value, by its JSON path; or, where the value is an object (a key missing from it, a
    rule over its keys together), that path and what is wrong, so that two different faults of one object are each told.
    """
    path = json_path(error.absolute_path)
    return f"{path}: {error.message}" if isinstance(error.instance, dict) else path
