"""Moved to ``eaglekit.drift.run``; kept importable for ``api.py``'s deferred import."""

from ..drift.run import DriftOptions, drift

__all__ = ["DriftOptions", "drift"]
