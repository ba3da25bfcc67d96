"""The prompts verify runs: records from a JSONL file (or the built-in set), encoded to token ids with the target's
tokenizer (its chat template where it has one)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import UsageError
from ..io import jsonfile


@dataclass
class Prompt:
    id: str
    category: str
    ids: list[int]


def read_prompt_records(path: str | None) -> list[dict]:
    if path is None:
        text = resources.files("eaglekit").joinpath("data/prompts.jsonl").read_text()
        label = "built-in prompts"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--prompts {path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"--prompts {path}: not UTF-8 text (byte {exc.start})") from None
        label = path
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        record = jsonfile.loads(line, f"{label} line {number}")
        if not isinstance(record, dict) or not any(k in record for k in ("prompt", "messages", "input_ids")):
            raise UsageError(f"{label} line {number}: expected an object with 'prompt', 'messages' or 'input_ids'")
        _check_record(record, f"{label} line {number}")
        record.setdefault("id", f"prompt-{number}")
        records.append(record)
    if not records:
        raise UsageError(f"{label}: no prompts")
    return records


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The token ids of ``messages`` under the tokenizer's chat template, with the generation prompt (transformers 5
    returns a BatchEncoding where 4 returned the list)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)


def _check_record(record: dict, where: str) -> None:
    """The shape each kind of record must have, so that a bad line is named instead of failing in the tokenizer."""
    if "input_ids" in record:
        ids = record["input_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise UsageError(f"{where}: input_ids should be a list of token ids (whole numbers >= 0)")
    elif record.get("messages") or "prompt" not in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), (str, list)) for m in messages):
            raise UsageError(f"{where}: messages should be a list of {{\"role\": ..., \"content\": ...}} objects")
    elif not isinstance(record["prompt"], str):
        raise UsageError(f"{where}: prompt should be a string")


def encode_prompts(records: list[dict], tokenizer, limit: int | None, vocab_size: int | None = None) -> list[Prompt]:
    out = []
    for record in records[:limit] if limit else records:
        if "input_ids" in record:
            ids = [int(i) for i in record["input_ids"]]
        else:
            if tokenizer is None:
                raise UsageError("the target has no tokenizer: give prompts as input_ids")
            messages = record.get("messages") or [{"role": "user", "content": record["prompt"]}]
            if getattr(tokenizer, "chat_template", None):
                ids = chat_ids(tokenizer, messages)
            else:
                ids = tokenizer("\n".join(m["content"] for m in messages))["input_ids"]
        if not ids:  # vLLM refuses an empty prompt and serves a one-token one (its first chain drafts from position 0)
            raise UsageError(f"prompt {record['id']}: no tokens")
        if vocab_size is not None and max(ids) >= vocab_size:
            raise UsageError(f"prompt {record['id']}: token id {max(ids)} is outside the target's vocabulary 0..{vocab_size - 1}")
        out.append(Prompt(str(record["id"]), str(record.get("category", "custom")), ids))
    return out
