"""The other drafter families (``families.json``): DFlash, DFlash2, DSpark, XPress, MTP. eaglekit recognises them by
their config.json and does not handle them yet: ``identify`` names one, so that inspect can say what it is and the other
commands refuse it in one line, instead of reading it as a broken EAGLE 3 drafter or calling it unknown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_TABLE: dict[str, Any] = json.loads(Path(__file__).with_name("families.json").read_text())
FAMILIES: dict[str, dict[str, Any]] = _TABLE["families"]


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def identify(config: dict | None) -> dict | None:
    """The family ``config`` says it is ({"family", "label", "what", "evidence"}), or None (an EAGLE drafter, or a
    config no family claims). speculators' ``speculators_model_type`` decides first, then an architectures string, a
    model_type, and last a key only that family's configs have."""
    if not isinstance(config, dict):
        return None
    kind = config.get("speculators_model_type")
    archs = _strings(config.get("architectures"))
    model_type = config.get("model_type")
    tests = (
        (
            "speculators_model_types",
            lambda row: kind in row.get("speculators_model_types", ()),
            "speculators_model_type",
        ),
        ("architectures", lambda row: next((a for a in archs if a in row.get("architectures", ())), None), None),
        ("model_types", lambda row: model_type in row.get("model_types", ()), "model_type"),
        ("config_keys", lambda row: next((k for k in row.get("config_keys", ()) if k in config), None), None),
    )
    for what, test, key in tests:
        for name, row in FAMILIES.items():
            hit = test(row)
            if not hit:
                continue
            if what == "architectures":
                evidence = f"architectures {hit}"
            elif what == "config_keys":
                evidence = f"config key {hit}"
            else:
                evidence = f"{key} {config.get(key)}"
            return {"family": name, "label": row["label"], "what": row["what"], "evidence": evidence}
    return None


def refusal(label: str, family: dict) -> str:
    """The one line every command but inspect refuses such a checkpoint with."""
    return (
        f"{label}: a {family['label']} drafter ({family['evidence']}), not an EAGLE 3 or P-EAGLE drafter: eaglekit"
        f" does not handle {family['label']} drafters yet (`eaglekit inspect` says what it is)"
    )


__all__ = ["FAMILIES", "identify", "refusal"]
