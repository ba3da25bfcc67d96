"""Shared helpers for the suites that run the peers themselves (vLLM on CPU, speculators)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require(module: str, marker_reason: str):
    """Skip when ``module`` is missing, unless EAGLEKIT_REQUIRE_PARITY=1 (CI), where its absence is a failure."""
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("EAGLEKIT_REQUIRE_PARITY") == "1":
        pytest.fail(f"{module} is not installed but EAGLEKIT_REQUIRE_PARITY=1 ({marker_reason})")
    pytest.skip(f"{module} is not installed ({marker_reason})")
