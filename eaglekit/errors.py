"""eaglekit's error types.

Every failure eaglekit anticipates is one of these. The CLI maps them to a one-line message and an exit
code (see ``eaglekit.cli._errors``); library users catch ``EaglekitError``.

Exit codes: 1 means the command ran and found problems (a drafter that does not validate, a failed check,
a push the Hub refused); 2 means it could not run (bad options, a missing or malformed file, an existing
output, a request no dialect can hold, a missing optional dependency, a Hub that could not be asked: no token,
offline, unreachable, a server error).
"""

from __future__ import annotations


class EaglekitError(Exception):
    """Base class: a failure with a message fit to show a user as one line."""

    exit_code = 1

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # one line, always
        return " ".join(self.message.split())


class UsageError(EaglekitError):
    """The command line asks for something contradictory or impossible (exit 2)."""

    exit_code = 2


class CheckpointError(EaglekitError):
    """A checkpoint directory, index, or tensor file is missing, malformed, or unsafe (exit 2)."""

    exit_code = 2


class ConfigError(EaglekitError):
    """A config.json is malformed or contradicts itself or its tensors (exit 2). ``key``: the path of the value at
    fault (``eagle_config.hidden_size``), where one value is."""

    exit_code = 2

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


class NotADrafterError(CheckpointError):
    """The checkpoint is a model of another kind (a base model, a target), not a drafter (exit 2)."""


class OtherFamilyError(NotADrafterError):
    """The checkpoint is a drafter of another family (DFlash, DSpark, MTP, ...: ``model/families.py``), which eaglekit
    recognises and does not handle yet (exit 2). ``family``: what it is, for inspect to say."""

    def __init__(self, message: str, family: dict):
        super().__init__(message)
        self.family = family


class UnsupportedError(EaglekitError):
    """The drafter is valid but the requested dialect or engine cannot represent it (exit 2)."""

    exit_code = 2


class OutputExistsError(EaglekitError):
    """The destination exists and may not be replaced (exit 2)."""

    exit_code = 2


class ValidationFailed(EaglekitError):
    """Checks found error-severity problems (the findings travel with the exception)."""

    def __init__(self, message: str, findings=None):
        super().__init__(message)
        self.findings = list(findings or [])


class HubError(EaglekitError):
    """A Hugging Face Hub request failed; the message never contains the token."""


class HubUnavailableError(HubError):
    """A publish that could not be made: no token, offline mode, the Hub unreachable or not answering, rate limited or
    failing (429, 5xx) after retries (exit 2, as for every command that could not run). A Hub that answered and
    refused (a rejected token, no write access, a branch that moved) is a ``HubError`` (exit 1)."""

    exit_code = 2


class HubReadError(HubError):
    """Reading a drafter from the Hub could not be done (unreachable, refused, missing, rate limited): exit 2."""

    exit_code = 2


class MissingDependencyError(EaglekitError):
    """An optional dependency (vLLM, gguf, ...) is needed but not installed (exit 2)."""

    exit_code = 2


def install_line(extra: str) -> str:
    """The pip command that installs eaglekit's optional ``extra`` wherever eaglekit runs: the extra's requirements as
    eaglekit declares them (pyproject.toml, read back from the installed package's metadata). ``pip install
    'eaglekit[report]'`` reached for a package that is not on PyPI, from a checkout installed with pip's ``-e``."""
    try:
        from importlib.metadata import PackageNotFoundError, requires

        declared = requires("eaglekit") or []
    except (ImportError, PackageNotFoundError):
        declared = []
    wanted = []
    for requirement in declared:
        spec, _, marker = requirement.partition(";")
        if marker.replace('"', "'").split() == ["extra", "==", f"'{extra}'"]:
            wanted.append(spec.strip())
    return "pip install " + " ".join(f"'{w}'" for w in wanted) if wanted else f"pip install 'eaglekit[{extra}]'"


def error_document(message: str | None, kind: str | None, exit_code: int | None, path: str | None = None) -> dict:
    """The JSON document of a failure (schemas/error.schema.json): what `--json` prints for a command that could not
    run, and a survey's row for a drafter that could not be read."""
    from . import SCHEMA_VERSION

    document: dict = {"schema_version": SCHEMA_VERSION, "ok": False}
    if path is not None:
        document["path"] = path
    document["error"] = {"message": message, "type": kind, "exit_code": exit_code}
    return document
