"""Typed, path-aware access to config.json values, so every bad value is reported with its JSON path."""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import ConfigError

_REQUIRED = object()


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for a one-line message, cut to ``limit`` characters (a 400-digit number, a long list)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Characters that would break a line of human output or steer a terminal: control characters, Unicode's line and
# paragraph separators and its bidirectional controls (which reorder what a terminal shows). Names and values from
# checkpoints (a tensor named "x\nresult: OK") are shown with them escaped.
# DEL and the C1 controls, line and paragraph separators, and Unicode's Bidi_Control set (U+061C, U+200E, U+200F,
# U+202A-U+202E, U+2066-U+2069)
_BEYOND_C0 = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNPRINTABLE = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
_UNSAFE_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f{_BEYOND_C0}]")  # all but tab and newline


def printable(text: str) -> str:
    """``text`` on one line, each character ``_UNPRINTABLE`` holds written as its escape (``\\n``, ``\\x1b``)."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)


def terminal_safe(text: str) -> str:
    """A text of several lines with every other such character escaped: what a command prints, as a last guard."""
    return _UNSAFE_IN_TEXT.sub(lambda m: repr(m.group())[1:-1], text)


def finite_number(value: Any) -> bool:
    """A JSON number a float can hold: not a bool, not NaN or an infinity, and no integer beyond a float's range
    (``1e400`` written out as digits parses as a Python int, on which ``math.isfinite`` raises)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


class ConfigView:
    def __init__(self, data: dict, label: str, path: str = ""):
        self.data = data
        self.label = label  # e.g. "ckpt/config.json"
        self.path = path  # e.g. "eagle_config."

    def _where(self, key: str) -> str:
        return f"{self.label}: {self.path}{key}"

    def _bad(self, key: str, what: str) -> ConfigError:
        """The error for ``key``'s value (``what`` is wrong with it), naming the key's path for findings to match on."""
        return ConfigError(f"{self._where(key)} {what}", key=f"{self.path}{key}")

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def raw(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key, default)
        return default if value is None else value

    def sub(self, key: str) -> ConfigView | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(key, f"must be an object, got {type(value).__name__}")
        return ConfigView(value, self.label, f"{self.path}{key}.")

    def int(self, key: str, default: Any = _REQUIRED, *, minimum: int | None = 0) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self._bad(key, "is missing (expected an integer)")
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._bad(key, f"must be an integer, got {shown(value)}")
        if minimum is not None and value < minimum:
            raise self._bad(key, f"must be >= {minimum}, got {value}")
        return value

    def float(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self._bad(key, "is missing (expected a number)")
            return default
        if not finite_number(value):
            raise self._bad(key, f"must be a finite number, got {shown(value)}")
        return float(value)

    def bool(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self._bad(key, "is missing (expected true or false)")
            return default
        if not isinstance(value, bool):
            raise self._bad(key, f"must be true or false, got {shown(value)}")
        return value

    def str(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self._bad(key, "is missing (expected a string)")
            return default
        if not isinstance(value, str):
            raise self._bad(key, f"must be a string, got {shown(value)}")
        return value

    def str_list(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self._bad(key, "is missing (expected a list of strings)")
            return default
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(key, f"must be a list of strings, got {shown(value)}")
        return tuple(value)
