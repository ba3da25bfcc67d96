"""The prompts verify runs: records read from a JSONL file or the built-in set (``io.prompts_file``), encoded to token
ids with the target's tokenizer (its chat template where it has one)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


@dataclass
class Prompt:
    id: str
    category: str
    ids: list[int]


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The token ids of ``messages`` under the tokenizer's chat template, with the generation prompt (transformers 5
    returns a BatchEncoding where 4 returned the list)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)


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
                try:
                    ids = chat_ids(tokenizer, messages)
                except Exception as exc:  # jinja's errors, and a template's own str/list mix-ups (TypeError)
                    raise UsageError(
                        f"prompt {record['id']}: the target's chat template cannot render its messages "
                        f"({type(exc).__name__}: {exc})"
                    ) from None
            elif all(isinstance(m["content"], str) for m in messages):
                ids = tokenizer("\n".join(m["content"] for m in messages))["input_ids"]
            else:
                raise UsageError(
                    f"prompt {record['id']}: the target has no chat template, so each message's content must be text"
                )
        if not ids:  # vLLM refuses an empty prompt and serves a one-token one (its first chain drafts from position 0)
            raise UsageError(f"prompt {record['id']}: no tokens")
        if vocab_size is not None and max(ids) >= vocab_size:
            raise UsageError(
                f"prompt {record['id']}: token id {max(ids)} is outside the target's vocabulary 0..{vocab_size - 1}"
            )
        out.append(Prompt(str(record["id"]), str(record.get("category", "custom")), ids))
    return out
