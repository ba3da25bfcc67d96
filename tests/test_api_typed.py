"""The Python API's surface: explicit, annotated and documented keyword arguments (no ``**options``), the options
dataclasses they feed matched name for name and default for default, the result types exported from ``eaglekit.api``
and ``eaglekit``, and ``py.typed`` shipped so type checkers read the annotations."""

from __future__ import annotations

import dataclasses
import importlib.resources
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import eaglekit
from eaglekit import api
from eaglekit.api import Capture, Conversion, DriftReport, Inspection, Publication, ValidationReport, Verification

ROOT = Path(__file__).resolve().parent.parent
RESULTS = (
    "Capture",
    "Conversion",
    "DriftReport",
    "Inspection",
    "Publication",
    "SurveyRow",
    "ValidationReport",
    "Verification",
)
FUNCTIONS = sorted(name for name in api.__all__ if inspect.isfunction(getattr(api, name)))
# each function's required positional arguments and keywords, all dummies: an unknown keyword is refused before them
REQUIRED = {"capture": ("t", "o"), "push": ("p", "org/name"), "survey": ([],)}
KEYWORDS = {"convert": {"to": "vllm"}, "verify": {"target": "t"}, "drift": {"target": "t"}}


def _documented(function) -> set[str]:
    """The parameters the docstring's Args section names (``name:``, or ``a, b, c:`` for several alike)."""
    doc = inspect.getdoc(function) or ""
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    names = set()
    for match in re.finditer(r"^    (\w+(?:, \w+)*):", args, re.MULTILINE):
        names |= set(match.group(1).split(", "))
    return names


def test_the_public_functions_are_the_commands():
    commands = ["capture", "convert", "drift", "inspect", "push", "survey", "validate", "verify"]
    assert FUNCTIONS == sorted([*commands, "document"])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_parameter_is_explicit_annotated_and_documented(name):
    function = getattr(api, name)
    signature = inspect.signature(function)
    kinds = {p.kind for p in signature.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds
    unannotated = [p.name for p in signature.parameters.values() if p.annotation is inspect.Parameter.empty]
    assert not unannotated and signature.return_annotation is not inspect.Signature.empty
    assert set(signature.parameters) - _documented(function) == set(), "parameters the docstring does not document"


def test_the_documentation_check_sees_an_undocumented_parameter():
    def f(a: int, *, b: int = 0) -> None:
        """F.

        Args:
            a: documented.
        """

    assert set(inspect.signature(f).parameters) - _documented(f) == {"b"}


@pytest.mark.parametrize("name", [n for n in FUNCTIONS if n != "document"])
def test_an_unknown_keyword_is_a_type_error(name, tmp_path):
    function = getattr(api, name)
    args = REQUIRED.get(name, (str(tmp_path / "nothing"),))
    with pytest.raises(TypeError, match="no_such_option"):
        function(*args, **KEYWORDS.get(name, {}), no_such_option=1)


def _options_of(cls) -> dict[str, object]:
    """An options dataclass's fields and their defaults (a default factory's: None, the API's "its default")."""
    out = {}
    for f in dataclasses.fields(cls):
        out[f.name] = None if f.default_factory is not dataclasses.MISSING else f.default
    return out


@pytest.mark.parametrize(
    ("name", "module", "cls", "left_out"),
    [
        ("verify", "eaglekit.verify.options", "VerifyOptions", {"command"}),  # which command runs: drift's own
        ("drift", "eaglekit.drift.options", "DriftOptions", set()),
        ("push", "eaglekit.push", "PushOptions", set()),
        ("convert", "eaglekit.convert", "ConvertOptions", {"output_name"}),  # OUT's name, taken from ``out``
    ],
)
def test_the_keywords_are_the_options_fields_with_their_defaults(name, module, cls, left_out):
    options = _options_of(getattr(__import__(module, fromlist=[cls]), cls))
    parameters = inspect.signature(getattr(api, name)).parameters
    for field_name, default in options.items():
        if field_name in left_out:
            assert field_name not in parameters
            continue
        assert field_name in parameters, f"{cls}.{field_name} is not a keyword of api.{name}"
        given = parameters[field_name].default
        if name == "convert" and field_name == "max_shard_bytes":
            assert given is None  # None: the dataclass's default shard size
        elif default is not dataclasses.MISSING:
            assert given == default, f"api.{name}({field_name}=...) defaults to {given!r}, {cls} to {default!r}"


def test_survey_takes_what_validate_takes():
    validate = inspect.signature(api.validate).parameters
    survey = inspect.signature(api.survey).parameters
    assert {n: p.default for n, p in validate.items() if n != "path"} == {
        n: p.default for n, p in survey.items() if n not in ("paths", "max_workers")
    }


def test_the_result_types_are_exported_from_the_api_and_the_package():
    from eaglekit.validate import ValidationReport as Report

    assert ValidationReport is Report
    for name in RESULTS:
        assert name in api.__all__ and name in eaglekit.__all__
        assert getattr(eaglekit, name) is getattr(api, name)
    assert [Capture, Conversion, DriftReport, Inspection, Publication, Verification] == [
        getattr(eaglekit, n)
        for n in ("Capture", "Conversion", "DriftReport", "Inspection", "Publication", "Verification")
    ]
    with pytest.raises(AttributeError, match="no_such_result"):
        eaglekit.no_such_result  # noqa: B018


def test_the_result_types_import_without_torch():
    """``from eaglekit import Verification`` (the whole API's types) is a light import, as the CLI's start-up is."""
    code = (
        "import sys\n"
        "from eaglekit import " + ", ".join(RESULTS) + "\n"
        "from eaglekit.api import " + ", ".join(RESULTS) + "\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_py_typed_is_in_the_installed_package():
    assert importlib.resources.files("eaglekit").joinpath("py.typed").is_file()


def test_py_typed_ships_in_the_wheel(wheel_files):
    names = wheel_files
    assert "eaglekit/py.typed" in names
    assert {"eaglekit/api/__init__.py", "eaglekit/api/results.py"} <= set(names)
