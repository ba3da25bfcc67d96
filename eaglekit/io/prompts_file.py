"""Reading a prompts file (``--prompts FILE.jsonl``): one JSON object per line, each a ``prompt``, ``text``,
``messages`` or ``input_ids``, checked for its shape so that a bad line is named before anything runs. No torch, no
tokenizer: verify and drift read it before the target loads.

How each kind becomes tokens (``verify.prompts.encode_prompts``): ``prompt`` is one user turn under the target's chat
template (as a chat request to vLLM sends it), ``text`` is taken raw, as a completion request is (the tokenizer's own
special tokens, such as a BOS, and nothing else: vLLM's completion default, ``add_special_tokens=True``), ``messages``
is a conversation under the chat template, ``input_ids`` are the tokens themselves. ``raw`` reads every ``prompt`` as
``text``."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ..errors import CheckpointError, UsageError
from . import jsonfile

MAX_PROMPTS_BYTES = 2**30  # far past any prompt set verify or drift could run through a target


# the keys a record may give its content under, in the order they are looked for
KINDS = ("input_ids", "text", "messages", "prompt")


def read_prompt_records(path: str | None, *, raw: bool = False) -> list[dict]:
    """The records of ``path`` (None: the built-in prompts), in order, each with an ``id`` (its line, ``prompt-N``,
    where it gives none). Lines are split at ``\\n`` alone: JSON strings may hold U+2028, U+2029 and U+0085, which
    ``str.splitlines`` takes for line ends. A UTF-8 byte order mark at the start is skipped. ``raw``: a ``prompt``
    record is read as ``text`` (no chat template)."""
    if path is None:
        text = resources.files("eaglekit").joinpath("data/prompts.jsonl").read_text()
        label = "built-in prompts"
    else:
        label = path
        try:
            size = jsonfile.regular_file_size(Path(path), f"`prompts` {path}", "a JSONL file")
            if size > MAX_PROMPTS_BYTES:
                raise UsageError(
                    f"`prompts` {path}: {size} bytes is more than a prompts file may hold ({MAX_PROMPTS_BYTES})"
                )
            text = Path(path).read_text(encoding="utf-8-sig")
        except CheckpointError as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"`prompts` {path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"`prompts` {path}: not UTF-8 text (byte {exc.start})") from None
    records = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        record = jsonfile.loads(line, f"{label} line {number}")
        if not isinstance(record, dict) or not any(k in record for k in KINDS):
            raise UsageError(
                f"{label} line {number}: expected an object with 'prompt', 'text', 'messages' or 'input_ids'"
            )
        _check_record(record, f"{label} line {number}")
        if raw and kind(record) == "prompt":
            record["text"] = record.pop("prompt")
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


def kind(record: dict) -> str:
    """Which key a record's content is read from (the first of ``KINDS`` it has; an empty ``messages`` beside a
    ``prompt`` leaves the prompt)."""
    if "messages" in record and not record["messages"] and "prompt" in record:
        return "prompt"
    return next(k for k in KINDS if k in record)


def _check_record(record: dict, where: str) -> None:
    """The shape each kind of record must have, so that a bad line is named instead of failing in the tokenizer. A
    message's content is text, or (as some chat templates take it) a list of parts; whether the target's template can
    render it is known once the tokenizer is there (``verify.prompts.encode_prompts``)."""
    which = kind(record)
    if which == "input_ids":
        ids = record["input_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise UsageError(f"{where}: input_ids should be a list of token ids (whole numbers >= 0)")
    elif which == "text":
        if not isinstance(record["text"], str):
            raise UsageError(f"{where}: text should be a string (taken raw, without the chat template)")
    elif which == "messages":
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
