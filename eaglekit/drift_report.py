"""Moved to ``eaglekit.drift.report``; kept importable for ``api.py`` and ``card.py``."""

from .drift.report import (
    PLOT_FILES,
    REPORT_JSON,
    REPORT_KEYS,
    check_report_destination,
    is_drift_report,
    require_matplotlib,
    tables,
    write_report,
)

__all__ = [
    "PLOT_FILES",
    "REPORT_JSON",
    "REPORT_KEYS",
    "check_report_destination",
    "is_drift_report",
    "require_matplotlib",
    "tables",
    "write_report",
]
