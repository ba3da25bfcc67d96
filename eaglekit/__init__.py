"""eaglekit: convert, inspect, validate, verify and publish EAGLE 3 / 3.1 speculative-decoding drafters."""

__version__ = "0.1.0"

# The version of eaglekit's JSON contract: every --json document starts with it (docs/json.md). Bump it on
# any change that could break a reader (a key removed or renamed, a meaning changed); a key added is no change to it.
# A key that moves is added under its new name first, and the old one kept beside it, holding the same value, for one
# release; it goes with the next bump. Moved so, waiting for 3: inspect's "notes" (now "findings", as validate's).
SCHEMA_VERSION = 2  # 2: validate's engine_view no longer repeats the engine's findings (they are in findings)

# The Python API's result types, re-exported from ``eaglekit.api`` on first use (``from eaglekit import Verification``):
# importing ``eaglekit`` itself stays free of everything below it (the CLI's start-up: tests/test_startup.py).
_API_RESULTS = (
    "Capture",
    "Conversion",
    "DriftReport",
    "Inspection",
    "Publication",
    "SurveyRow",
    "ValidationReport",
    "Verification",
)


def __getattr__(name: str):
    """One of the API's result types, imported from ``eaglekit.api`` when first asked for."""
    if name not in _API_RESULTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(".api", __name__), name)
    globals()[name] = value
    return value


__all__ = ["SCHEMA_VERSION", "__version__", *_API_RESULTS]
