"""The JSON Schemas in ``schemas/``: config.json per dialect, and eaglekit's own JSON outputs.

In a wheel they live in ``eaglekit/schemas``; in a source checkout, in ``schemas/`` beside the package.
Schemas refer to each other by ``$id`` (https://eaglekit.dev/schemas/...), resolved from these files only.

A config is checked against its dialect's schema by ``check_config`` without jsonschema where the schema uses only the
keywords ``_Lite`` knows (every config schema does): importing jsonschema takes ~70-80 ms of CPU, three quarters of what
``python -c "import click, jsonschema"`` takes, the floor ``benchmarks/startup_bench.py`` holds validate and convert to.
``_Lite`` gives jsonschema 4's Draft 2020-12 errors for those keywords (messages, paths, keywords, order; its source,
jsonschema 4.26's ``_keywords.py``, read), and ``tests/test_schemas.py`` holds the two equal on every fixture config and
thousands of mutations of them. Every other schema, and eaglekit's output schemas, go to jsonschema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .findings import Finding

if TYPE_CHECKING:  # pragma: no cover
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

BASE_URI = "https://eaglekit.dev/schemas/"
MLA_SCHEMA = "config/mla.schema.json"


def schema_root() -> Path:
    """Where the schemas are: beside this module in a wheel (``eaglekit/schemas``, package data), else the checkout's
    ``schemas/``. Looked up as paths: importlib.resources would cost validate and convert ~15 ms of imports."""
    packaged = Path(__file__).resolve().parent / "schemas"
    if packaged.is_dir():
        return packaged
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
    from referencing import Resource
    from referencing.exceptions import NoSuchResource

    name = uri[len(BASE_URI) :] if uri.startswith(BASE_URI) else None
    if name is None or name not in all_schema_files():
        raise NoSuchResource(ref=uri)
    return Resource.from_contents(load(name))


@lru_cache(maxsize=1)
def registry() -> Registry:
    from referencing import Registry

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
    from jsonschema import Draft202012Validator

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


def _errors(data: Any, schema: str | dict, lite: bool = False) -> list:
    """Every violation, ordered by path; ``lite``: by ``_Lite`` where it knows every keyword of ``schema`` (a name)."""
    found = _Lite(schema).errors(data) if lite and isinstance(schema, str) and _Lite.covers(schema) else None
    if found is None:
        found = validator(schema).iter_errors(data)
    return sorted(found, key=lambda e: list(map(str, e.absolute_path)))


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
        errors = [
            e
            for e in _errors(config, name, lite=True)
            if _wrong_key(e) not in reported and not _told_elsewhere(e, told)
        ]
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


# -- config checks without jsonschema ------------------------------------------------------------------------------


class LiteError(NamedTuple):
    """A violation as ``_Lite`` finds it: the attributes of jsonschema's ``ValidationError`` that this module reads."""

    message: str
    validator: str
    validator_value: Any
    instance: Any
    absolute_path: tuple


def _equal(one: Any, two: Any) -> bool:
    """JSON equality as jsonschema's ``equal`` has it: ``true`` is not ``1``, in lists and objects too."""
    if isinstance(one, str) or isinstance(two, str):
        return one == two
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two))
    if isinstance(one, dict) and isinstance(two, dict):
        return len(one) == len(two) and all(k in two and _equal(v, two[k]) for k, v in one.items())
    if isinstance(one, bool) or isinstance(two, bool):
        return one is two
    return one == two


def _is_type(instance: Any, kind: str) -> bool:
    """Draft 2020-12's types as jsonschema checks them (a float with no fraction is an integer; a bool no number)."""
    if kind in ("integer", "number") and isinstance(instance, bool):
        return False
    if kind == "integer":
        return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())
    types = {"number": (int, float), "string": str, "object": dict, "array": list, "boolean": bool}
    return instance is None if kind == "null" else isinstance(instance, types[kind])


class _Lite:
    """Draft 2020-12 for the keywords the config schemas use (``KEYWORDS``), on the files in ``schemas/``."""

    KEYWORDS = {
        "type", "$ref", "properties", "required", "allOf", "anyOf", "oneOf", "not", "items", "const", "enum",
        "minimum", "exclusiveMinimum", "minItems", "maxItems",
    }  # fmt: skip
    ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs", "$comment", "default", "examples"}

    def __init__(self, name: str):
        self.name = name

    @staticmethod
    @cache
    def covers(name: str) -> bool:
        """Whether every keyword of schema file ``name``, and of the schemas it refers to, is one ``_Lite`` checks."""
        seen: set[tuple[str, str]] = set()

        def known(schema: Any, base: str) -> bool:
            if not isinstance(schema, dict):
                return False
            for keyword, value in schema.items():
                if keyword not in _Lite.KEYWORDS | _Lite.ANNOTATIONS:
                    return False
                if keyword == "$ref":
                    if (base, value) in seen:
                        continue
                    seen.add((base, value))
                    if not known(*_resolve(base, value)):
                        return False
                elif keyword in ("properties", "$defs"):
                    if not all(known(sub, base) for sub in value.values()):
                        return False
                elif keyword in ("allOf", "anyOf", "oneOf"):
                    if not all(known(sub, base) for sub in value):
                        return False
                elif keyword in ("not", "items") and not known(value, base):
                    return False
            return True

        try:
            return known(load(name), name)
        except (OSError, KeyError, TypeError, ValueError):
            return False

    def errors(self, instance: Any) -> list[LiteError]:
        return list(self._check(instance, load(self.name), self.name, ()))

    def _valid(self, instance: Any, schema: dict, base: str) -> bool:
        return next(self._check(instance, schema, base, ()), None) is None

    def _check(self, instance: Any, schema: dict, base: str, path: tuple):
        for keyword, value in schema.items():
            if keyword in self.ANNOTATIONS:
                continue
            if keyword == "$ref":
                yield from self._check(instance, *_resolve(base, value), path)
            elif keyword == "properties":
                if isinstance(instance, dict):
                    for key, sub in value.items():
                        if key in instance:
                            yield from self._check(instance[key], sub, base, (*path, key))
            elif keyword == "items":
                if isinstance(instance, list):
                    for index, item in enumerate(instance):
                        yield from self._check(item, value, base, (*path, index))
            elif keyword == "allOf":
                for sub in value:
                    yield from self._check(instance, sub, base, path)
            else:
                for message in self._messages(keyword, value, instance, base):
                    yield LiteError(message, keyword, value, instance, path)

    def _messages(self, keyword: str, value: Any, instance: Any, base: str):
        """The messages of a keyword that judges ``instance`` itself (jsonschema's wording)."""
        if keyword == "type":
            kinds = value if isinstance(value, list) else [value]
            if not any(_is_type(instance, kind) for kind in kinds):
                yield f"{instance!r} is not of type {', '.join(repr(kind) for kind in kinds)}"
        elif keyword == "required":
            if isinstance(instance, dict):
                yield from (f"{key!r} is a required property" for key in value if key not in instance)
        elif keyword in ("anyOf", "oneOf"):
            valid = [sub for sub in value if self._valid(instance, sub, base)]
            if not valid:
                yield f"{instance!r} is not valid under any of the given schemas"
            elif keyword == "oneOf" and len(valid) > 1:
                reprs = ", ".join(repr(sub) for sub in [*valid[1:], valid[0]])
                yield f"{instance!r} is valid under each of {reprs}"
        elif keyword == "not":
            if self._valid(instance, value, base):
                yield f"{instance!r} should not be valid under {value!r}"
        elif keyword == "const":
            if not _equal(instance, value):
                yield f"{value!r} was expected"
        elif keyword == "enum":
            if all(not _equal(each, instance) for each in value):
                yield f"{instance!r} is not one of {value!r}"
        elif keyword in ("minimum", "exclusiveMinimum"):
            if _is_type(instance, "number") and (instance < value if keyword == "minimum" else instance <= value):
                said = "less than" if keyword == "minimum" else "less than or equal to"
                yield f"{instance!r} is {said} the minimum of {value!r}"
        elif keyword == "minItems":
            if isinstance(instance, list) and len(instance) < value:
                yield f"{instance!r} {'should be non-empty' if value == 1 else 'is too short'}"
        elif keyword == "maxItems":
            if isinstance(instance, list) and len(instance) > value:
                yield f"{instance!r} {'is expected to be empty' if value == 0 else 'is too long'}"


def _resolve(base: str, ref: str) -> tuple[dict, str]:
    """The schema a ``$ref`` in schema file ``base`` points to, and the file it lies in: ``other.schema.json#/a/b``
    (beside ``base``) or ``#/a/b`` (in ``base``)."""
    where, _, pointer = ref.partition("#")
    name = str(Path(base).parent / where) if where else base
    schema = load(name)
    for part in filter(None, pointer.split("/")):
        schema = schema[part.replace("~1", "/").replace("~0", "~")]
    return schema, name
