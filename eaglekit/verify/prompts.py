"""The prompts verify runs: records read from a JSONL file or the built-in set (``io.prompts_file``), encoded to token
ids with the target's tokenizer: raw text as it is, prompts and messages under its chat template where it has one."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..io.prompts_file import kind

# how a prompt's record became its token ids (a verify report's per-prompt "encoding")
ENCODINGS = {"input_ids": "token ids", "text": "raw text", "prompt": "chat template", "messages": "chat template"}


@dataclass
class Prompt:
    id: str
    category: str
    ids: list[int]
    encoding: str = "token ids"  # ENCODINGS' values; "raw text" also for a chat record on a target with no template


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The token ids of ``messages`` under the tokenizer's chat template, with the generation prompt (transformers 5
    returns a BatchEncoding where 4 returned the list)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)


def encode_prompts(records: list[dict], tokenizer, limit: int | None, vocab_size: int | None = None) -> list[Prompt]:
    """Each record's token ids, as ``io.prompts_file`` says each kind is read: ``input_ids`` as they are, ``text`` raw
    (the tokenizer's special tokens added, as vLLM's completion requests add them), ``prompt`` and ``messages`` under
    the target's chat template with the generation prompt (a target without one: their text joined, raw)."""
    out = []
    for record in records[:limit] if limit else records:
        which = kind(record)
        encoding = ENCODINGS[which]
        if which == "input_ids":
            ids = [int(i) for i in record["input_ids"]]
        elif tokenizer is None:
            raise UsageError("the target has no tokenizer: give prompts as input_ids")
        elif which == "text":
            ids = list(tokenizer(record["text"])["input_ids"])
        else:
            ids = _templated(record, tokenizer)
            encoding = encoding if _has_template(tokenizer) else "raw text"
        if not ids:  # vLLM refuses an empty prompt and serves a one-token one (its first chain drafts from position 0)
            raise UsageError(f"prompt {record['id']}: no tokens")
        if vocab_size is not None and max(ids) >= vocab_size:
            raise UsageError(
                f"prompt {record['id']}: token id {max(ids)} is outside the target's vocabulary 0..{vocab_size - 1}"
            )
        out.append(Prompt(str(record["id"]), str(record.get("category", "custom")), ids, encoding))
    return out


def _has_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _templated(record: dict, tokenizer) -> list[int]:
    messages = record.get("messages") or [{"role": "user", "content": record["prompt"]}]
    if _has_template(tokenizer):
        try:
            return chat_ids(tokenizer, messages)
        except Exception as exc:  # jinja's errors, and a template's own str/list mix-ups (TypeError)
            raise UsageError(
                f"prompt {record['id']}: the target's chat template cannot render its messages "
                f"({type(exc).__name__}: {exc})"
            ) from None
    if all(isinstance(m["content"], str) for m in messages):
        return tokenizer("\n".join(m["content"] for m in messages))["input_ids"]
    raise UsageError(f"prompt {record['id']}: the target has no chat template, so each message's content must be text")
