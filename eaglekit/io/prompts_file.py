"""Reading a prompts file (``--prompts FILE.jsonl``): one JSON object per line, each a ``prompt``, ``messages`` or
``input_ids``, checked for its shape so that a bad line is named before anything runs. No torch, no tokenizer:
verify and drift read it before the target loads."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ..errors import CheckpointError, UsageError
from . import jsonfile

MAX_PROMPTS_BYTES = 2**30  # far past any prompt set verify or drift could run through a target


def read_prompt_records(path: str | None) -> list[dict]:
    """The records of ``path`` (None: the built-in prompts), in order, each with an ``id`` (its line, ``prompt-N``,
    where it gives none). Lines are split at ``\\n`` alone: JSON strings may hold U+2028, U+2029 and U+0085, which
    ``str.splitlines`` takes for line ends. A UTF-8 byte order mark at the start is skipped."""
    if path is None:
        text = resources.files("eaglekit").joinpath("data/prompts.jsonl").read_text()
        label = "built-in prompts"
    else:
        label = path
        try:
            size = jsonfile.regular_file_size(Path(path), f"--prompts {path}", "a JSONL file")
            if size > MAX_PROMPTS_BYTES:
                raise UsageError(
                    f"--prompts {path}: {size} bytes is more than a prompts file may hold ({MAX_PROMPTS_BYTES})"
                )
            text = Path(path).read_text(encoding="utf-8-sig")
        except CheckpointError as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"--prompts {path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"--prompts {path}: not UTF-8 text (byte {exc.start})") from None
    records = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        record = jsonfile.loads(line, f"{label} line {number}")
        if not isinstance(record, dict) or not any(k in record for k in ("prompt", "messages", "input_ids")):
            raise UsageError(f"{label} line {number}: expected an object with 'prompt', 'messages' or 'input_ids'")
        _check_record(record, f"{label} line {number}")
        record["id"] = _shown(record.get("id"), f"prompt-{number}")
        if "category" in record:
            record["category"] = _shown(record["category"], "custom")
        records.append(record)
    if not records:
        raise UsageError(f"{label}: no prompts")
    return records


def _shown(value, default: str) -> str:
    """An id or category as reports show it: a string as it is, null as not given, anything else as its JSON."""
    if value is None:
        return default
    return value if isinstance(value, str) else json.dumps(value)


def _check_record(record: dict, where: str) -> None:
    """The shape each kind of record must have, so that a bad line is named instead of failing in the tokenizer. A
    message's content is text, or (as some chat templates take it) a list of parts; whether the target's template can
    render it is known once the tokenizer is there (``verify.prompts.encode_prompts``)."""
    if "input_ids" in record:
        ids = record["input_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise UsageError(f"{where}: input_ids should be a list of token ids (whole numbers >= 0)")
    elif record.get("messages") or "prompt" not in record:
        messages = record["messages"]
        if (
            not isinstance(messages, list)
            or not messages
            or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and _is_content(m.get("content"))
                for m in messages
            )
        ):
            raise UsageError(
                f'{where}: messages should be a list of {{"role": ..., "content": ...}} objects, each content '
                "a string or a list of parts (objects)"
            )
    elif not isinstance(record["prompt"], str):
        raise UsageError(f"{where}: prompt should be a string")


def _is_content(content) -> bool:
    return isinstance(content, str) or (isinstance(content, list) and all(isinstance(part, dict) for part in content))
