"""drift's inputs: the built-in long inputs (passages of CPython's own documentation, cut to fill every context
bucket), a prompts file, or a capture's files; and the context buckets acceptance is counted in."""

from __future__ import annotations

from ..errors import UsageError
from ..io.prompts_file import read_prompt_records
from ..verify.prompts import chat_ids
from ..verify.run import Verifier
from .options import DriftOptions

FIRST_EDGE = 512  # buckets: < 512, 512-2k, 2k-8k, 8k-32k, ... (x4 each)
LONG_SOURCE = "CPython's own documentation (pydoc_data.topics, shipped with every CPython; PSF licence)"


def bucket_edges(limit: int) -> list[int]:
    """[0, 512, 2048, 8192, ...] up to and including the first edge >= ``limit``."""
    edges = [0, FIRST_EDGE]
    while edges[-1] < limit:
        edges.append(edges[-1] * 4)
    return edges


def bucket_label(lo: int, hi: int) -> str:
    def k(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)

    return f"<{k(hi)}" if lo == 0 else f"{k(lo)}-{k(hi)}"


def long_text() -> str:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - some distributions strip it
        raise UsageError(
            "the built-in long inputs come from CPython's pydoc_data, which this Python lacks: give `prompts`"
        ) from None
    return "\n\n".join(topics[key] for key in sorted(topics))


def long_records(tokenizer, limit: int, per_bucket: int, reserve: int) -> list[dict]:
    """Chat prompts whose passages put the continuation in every context bucket below ``limit``: per bucket,
    ``per_bucket`` prompts of evenly spread lengths, each from its own place in the text. ``reserve``: the tokens
    the continuation (and its lookahead) will add."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise UsageError(
            "the built-in long inputs need the target's tokenizer and chat template: give `prompts` with input_ids"
        )
    ids = tokenizer(long_text(), add_special_tokens=False)["input_ids"]
    framing = ("Here is part of the Python documentation.\n\n", "\n\nSummarize what it explains.")
    overhead = len(chat_ids(tokenizer, [{"role": "user", "content": "".join(framing)}]))
    edges = bucket_edges(limit)
    records = []
    for lo, hi in zip(edges, edges[1:]):
        hi = min(hi, limit)
        top = hi - reserve - 8  # a little slack: a decoded passage may re-tokenize a few tokens longer
        if top <= lo + 16 or top - overhead < 8:  # no room in this bucket, or not even for the chat template's framing
            continue
        for i in range(per_bucket):
            prompt_len = int(lo + 16 + (top - lo - 16) * (i + 1) / (per_bucket + 1))
            n = max(prompt_len - overhead, 8)
            if n + overhead > top:
                continue  # the framing alone would carry this input past the bucket
            offset = (i * 7919 + lo) % max(len(ids) - n, 1)
            passage = tokenizer.decode(ids[offset : offset + n])
            messages = [{"role": "user", "content": framing[0] + passage + framing[1]}]
            if len(chat_ids(tokenizer, messages)) > top:
                continue  # re-tokenized longer than the bucket has room for (a tokenizer that does not round-trip)
            records.append(
                {"id": f"doc-{bucket_label(lo, hi)}-{i + 1}", "category": "long context", "messages": messages}
            )
    if not records:
        raise UsageError(
            f"`max_context` {limit} leaves no room for a built-in input: the chat template takes {overhead} tokens and"
            f" the continuation {reserve}; raise `max_context` or lower `max_new_tokens`"
        )
    return records


def read_inputs(verifier: Verifier, options: DriftOptions, limit: int) -> tuple[list[dict] | None, str, list | None]:
    """(records, where they come from, their --variants framings or None). Records from a file are read, and checked
    for what --variants needs, before the target loads; the built-in ones are cut with its tokenizer (its weights are
    not loaded for that); a capture's files (hidden_states) bring their own sequences."""
    if options.hidden_states:
        return None, options.hidden_states, None
    # the window's room left for the continuation: continuation_length(max_new_tokens, k) tokens, and 2 to spare (the
    # long inputs were cut to this room when verify decoded 2 tokens more; cut anew, every long-context figure would
    # move)
    reserve = options.max_new_tokens + options.k + 1
    from .variants import require_text, variant_records

    if options.prompts:
        records, source = read_prompt_records(options.prompts, raw=options.raw_prompts), options.prompts
        if options.variants:
            require_text(records, source)
    else:
        tokenizer = verifier.target_tokens()[0]
        records, source = long_records(tokenizer, limit, options.inputs_per_bucket, reserve), LONG_SOURCE
    # framed before the long runs, so that a prompt set variants cannot frame fails at once
    framed = variant_records(records, verifier.load_target().tokenizer, source) if options.variants else None
    return records, source, framed
