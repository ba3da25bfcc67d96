"""``drift --variants``: the same content under several prompt framings (the target's chat template with and
without system prompts, no template, another template). The framings are data: ``eaglekit/data/drift_variants.json``.

Each text record (``prompt`` or ``messages``) is encoded once per variant into ``input_ids``; a record that is
already ``input_ids`` has no content to re-frame."""

from __future__ import annotations

import json
from importlib import resources

from ..errors import UsageError


def load_variants() -> list[dict]:
    return json.loads(resources.files("eaglekit").joinpath("data/drift_variants.json").read_text())["variants"]


def content_messages(record: dict) -> list[dict]:
    """The record's turns without any system message of its own (the variant decides the system prompt); raw text is
    one user turn, as a prompt is."""
    messages = record.get("messages") or [{"role": "user", "content": record.get("text", record.get("prompt"))}]
    return [m for m in messages if m.get("role") != "system"]


def _ids(encoded) -> list[int]:
    if isinstance(encoded, dict) or hasattr(encoded, "input_ids"):
        encoded = encoded["input_ids"]
    return [int(i) for i in encoded]


def encode(record: dict, tokenizer, variant: dict) -> list[int]:
    """The record's content framed as ``variant`` says, as token ids."""
    messages = content_messages(record)
    if variant["template"] == "none":
        text = "\n\n".join(([variant["system"]] if variant["system"] else []) + [m["content"] for m in messages])
        return _ids(tokenizer(text))
    if variant["system"]:
        messages = [{"role": "system", "content": variant["system"]}] + messages
    kwargs = {} if variant["template"] == "target" else {"chat_template": variant["template"]}
    return _ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs))


def require_text(records: list[dict], source: str) -> None:
    """Every record holds text to frame (asked before the target loads: it needs no tokenizer)."""
    plain = [r.get("id", "?") for r in records if not any(k in r for k in ("prompt", "text", "messages"))]
    if plain:
        raise UsageError(
            f"`variants`: {source} record {plain[0]} holds input_ids only; variants need text (prompt, text, messages)"
        )


def variant_records(records: list[dict], tokenizer, source: str) -> list[tuple[dict, list[dict]]]:
    """(variant, records as input_ids) for every variant."""
    if tokenizer is None:
        raise UsageError("`variants` needs the target's tokenizer to frame the prompts (this target has none)")
    require_text(records, source)
    variants = load_variants()
    if not getattr(tokenizer, "chat_template", None):
        variants = [v for v in variants if v["template"] != "target"]
    out = []
    for variant in variants:
        framed = [
            {"id": r["id"], "category": r.get("category", "custom"), "input_ids": encode(r, tokenizer, variant)}
            for r in records
        ]
        out.append((variant, framed))
    return out


def spread(values: list[float]) -> dict:
    """How far acceptance moves across variants: min, max, range, range over the mean, standard deviation."""
    n = len(values)
    mean = sum(values) / n
    std = (sum((v - mean) ** 2 for v in values) / n) ** 0.5
    return {
        "min": round(min(values), 6),
        "max": round(max(values), 6),
        "range": round(max(values) - min(values), 6),
        "relative_range": round((max(values) - min(values)) / mean, 6) if mean else None,
        "std": round(std, 6),
    }
