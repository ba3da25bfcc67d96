"""``eaglekit drift``: EAGLE 3.1's diagnosis measured for any drafter on its own target.

Long inputs (built-in: passages of CPython's own documentation, see ``long_records``) get greedy continuations from
the target (the Verifier's run); the drafter drafts a K-step chain at every continuation position, in chunks of
start positions (one first pass per sequence, whose keys/values every chunk shares), so memory stays bounded by
the sequence and the chunk. The reference forward records (``reference/record.py``), per draft step: attention on
the first S positions (sinks) and on the chain's own drafts, the norm of the fed-back state, and the norm of each
aux chunk entering ``fc``. Acceptance is counted as verify counts it (``verify.run.count``), and by absolute position.

``compare`` runs a second drafter on the same sequences; every figure is given for both, with ratios (other / drafter).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .. import dialects
from ..engines.vllm_scale import Parallel
from ..errors import UsageError
from ..findings import errors
from ..io.prompts_file import read_prompt_records
from ..reference.model import ReferenceDrafter
from ..reference.record import DriftRecorder
from ..reference.simulate import Counters, accepted_lengths, chains_from, every_position, first_pass
from ..serving import MIN_TEMPERATURE
from ..target import heap
from ..validate.checks import CheckInput, run_checks
from ..verify.options import VerifyOptions
from ..verify.prompts import chat_ids
from ..verify.report import target_engine_report
from ..verify.run import Verifier, chain_starts, count, judged_tokens, last_full_start, layers_of, resolved_ids
from .sampling import DRAFT_DISTRIBUTION, Expected, prefix_acceptance

FIRST_EDGE = 512  # buckets: < 512, 512-2k, 2k-8k, 8k-32k, ... (x4 each)
LONG_SOURCE = "CPython's own documentation (pydoc_data.topics, shipped with every CPython; PSF licence)"


@dataclass
class DriftOptions:
    target: str
    compare: str | None = None
    sink_tokens: int = 4
    max_context: int | None = None  # None: the target's window (max_position_embeddings)
    prompts: str | None = None  # JSONL long inputs (prompt / text / messages / input_ids); None: built-in long material
    raw_prompts: bool = False  # each {"prompt": ...} taken as raw text, as {"text": ...} is (io.prompts_file)
    inputs_per_bucket: int = 2  # built-in material: sequences per context bucket
    max_new_tokens: int = 32  # the continuation judged after each input
    k: int = 3
    chunk: int = 256  # chain start positions drafted together
    device: str = "cpu"
    dtype: str = "float32"
    source_dialect: str = "auto"
    norm_output_semantics: str = "auto"
    variants: bool = False  # the same content under every prompt framing of data/drift_variants.json
    temperature: float | None = None  # expected acceptance under vLLM's rejection sampler (sampling.py)
    top_p: float = 1.0
    target_engine: str | None = None  # the target run by vLLM (verify.capture), never loaded here
    hidden_states: str | None = None  # the target's states from files (an `eaglekit capture` folder): no target run
    vllm_python: str | None = None
    parallel: Parallel = field(default_factory=Parallel)
    batch_size: int | None = None  # inputs the target decodes together; None: as many as memory allows (batch_rows)


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
            "the built-in long inputs come from CPython's pydoc_data, which this Python lacks: give --prompts"
        ) from None
    return "\n\n".join(topics[key] for key in sorted(topics))


def long_records(tokenizer, limit: int, per_bucket: int, reserve: int) -> list[dict]:
    """Chat prompts whose passages put the continuation in every context bucket below ``limit``: per bucket,
    ``per_bucket`` prompts of evenly spread lengths, each from its own place in the text. ``reserve``: the tokens
    the continuation (and its lookahead) will add."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise UsageError(
            "the built-in long inputs need the target's tokenizer and chat template: give --prompts with input_ids"
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
            f"--max-context {limit} leaves no room for a built-in input: the chat template takes {overhead} tokens and"
            f" the continuation {reserve}; raise --max-context or lower --max-new-tokens"
        )
    return records


@dataclass
class Side:
    """One drafter's run: its counters overall and per bucket, and the recorder's totals."""

    path: str
    eagle_version: str
    trajectory: Counters
    every: Counters
    buckets: dict[int, Counters]
    recorder: DriftRecorder
    seconds: float
    sampling: Expected | None = None  # --temperature: expected acceptance over the every-position chains


@dataclass
class Drafting:
    """A drafter read, checked against the target and made into its reference model once, for every run over it (the
    main inputs and each --variants framing); ``ids``: the target layers it fuses."""

    path: str
    model: ReferenceDrafter
    ids: tuple[int, ...]


def load_drafter(verifier: Verifier, path: str, options: DriftOptions, *, build: bool = True) -> Drafting | None:
    """The drafter at ``path`` read and checked against the target's config, and (``build``) made into its reference
    model, which may need the loaded target (a drafter that borrows a GGUF target's embedding or head)."""
    L = verifier.target_config.num_layers
    with dialects.load(
        path, options.source_dialect, norm_output_semantics=options.norm_output_semantics, target_num_layers=L
    ) as loaded:
        d = loaded.drafter.with_(target_num_layers=L)
        loaded.drafter = d
        bad = errors(
            run_checks(
                CheckInput(
                    d,
                    loaded.present(),
                    values=loaded.read_values,
                    target=verifier.target_config,
                    stored_name=loaded.stored_name,
                )
            )
        )
        if bad:
            raise UsageError(
                f"{path} cannot run on {verifier.target_config.name}: {bad[0].message} (see `eaglekit validate`)"
            )
        return Drafting(path, verifier.model_for(loaded), resolved_ids(d, L)) if build else None


def run_drafter(
    verifier: Verifier,
    drafting: Drafting,
    options: DriftOptions,
    edges: list[int],
    label: str,
    progress: Callable[[str, int], object] | None,
) -> Side:
    path, model, ids, d = drafting.path, drafting.model, drafting.ids, drafting.model.d
    edge_t = torch.tensor(edges[1:-1])
    recorder = DriftRecorder(options.sink_tokens, lambda starts: torch.bucketize(starts, edge_t, right=True))
    traj, every = Counters(), Counters()
    buckets: dict[int, Counters] = {}
    total_chunks = sum(
        (tokens.shape[0] - len(p.ids) + options.chunk - 1) // options.chunk for p, tokens in verifier.sequences
    )
    bar = progress(f"drafting ({label})", total_chunks) if progress else None
    seconds = 0.0
    sampling = Expected(options.k) if options.temperature else None
    for index, (prompt, tokens) in enumerate(verifier.sequences):
        aux, _ = verifier.aux(index, ids)
        start_time = time.perf_counter()
        P, S = len(prompt.ids), tokens.shape[0]
        starts = chain_starts(P, S)
        last_full = last_full_start(P, S, options.k, verifier.max_new[index], verifier.eos[index])
        # the per-depth figures count the chains acceptance over every position counts: none whose K targets run past
        # the end of sequence or max_new_tokens (the trajectory's last step still drafts them, so they are drafted)
        recorder.counted_until = last_full
        compared = judged_tokens(tokens, verifier.past_eos[index])
        if sampling is not None:  # the target's distributions after each context (the every-position chains)
            judged = starts[starts <= last_full]
            first_logits, cache = verifier.sequence_pass(index, judged + 1)
        with torch.no_grad():
            first = first_pass(model, tokens, aux, recorder)
            accepted = []
            for lo in range(0, len(starts), options.chunk):
                chains = chains_from(
                    model, first, tokens, starts[lo : lo + options.chunk], options.k, recorder=recorder
                )
                accepted.append(accepted_lengths(chains, compared).cpu())
                if sampling is not None:
                    rows = (chains.starts <= last_full).nonzero().squeeze(-1)
                    if len(rows):
                        drafts = chains.drafts[rows].cpu()
                        at = torch.searchsorted(judged, chains.starts[rows].cpu())
                        chain_logits = verifier.target.chain_logits(cache, S, chains.starts[rows].cpu(), drafts)
                        sampling.add(
                            prefix_acceptance(
                                first_logits[at].cpu(), chain_logits.cpu(), drafts, options.temperature, options.top_p
                            )
                        )
                if bar is not None:
                    bar.update(1)
        recorder.sequence_done()
        del first
        if sampling is not None:
            del cache, first_logits
        heap.trim()  # the first pass's freed memory back to the system before the next sequence (target/heap.py)
        accepted_t = torch.cat(accepted)
        t, e = count(accepted_t, starts, options.k, P, S, verifier.max_new[index], verifier.eos[index])
        traj.merge(t)
        every.merge(e)
        which = torch.bucketize(starts, edge_t, right=True)
        for b in which.unique().tolist():
            rows = which == b
            buckets.setdefault(b, Counters()).merge(
                every_position(accepted_t[rows], starts[rows], options.k, last_full)
            )
        seconds += time.perf_counter() - start_time
    if bar is not None:
        bar.close()
    return Side(path, d.eagle_version, traj, every, buckets, recorder, seconds, sampling)


# -- figures ---------------------------------------------------------------------------------------------


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


def per_depth(counters: Counters, recorder: DriftRecorder, k: int, bucket: int | None = None) -> list[dict]:
    """Rows for steps 1..K: acceptance (P(step accepted), and given the step before was), attention on sinks and on
    the chain's own drafts, the fed-back state's mean norm and its ratio to step 1's."""
    sums: dict[int, dict[str, float]] = {}
    for (b, step), t in recorder.totals.items():
        if bucket is not None and b != bucket:
            continue
        acc = sums.setdefault(step, {"chains": 0, "sink": 0.0, "own": 0.0, "feedback": 0.0})
        for key in acc:
            acc[key] += t[key]
    rates = counters.per_position
    rows = []
    base = None
    for step in range(1, k + 1):
        s = sums.get(step)
        n = s["chains"] if s else 0
        fb = s["feedback"] / n if n else None
        if step == 1:
            base = fb
        rate = rates[step - 1] if len(rates) >= step else None
        prev = 1.0 if step == 1 else (rates[step - 2] if len(rates) >= step - 1 else None)
        rows.append(
            {
                "step": step,
                "acceptance_rate": _r(rate),
                "conditional_acceptance_rate": _r(rate / prev) if rate is not None and prev else None,
                "sink_attention": _r(s["sink"] / n) if n else None,
                "own_draft_attention": _r(s["own"] / n) if n else None,
                "feedback_norm": _r(fb),
                "feedback_norm_relative": _r(fb / base) if fb is not None and base else None,
                "chains": n,
            }
        )
    return rows


def fc_input(recorder: DriftRecorder) -> dict | None:
    """Mean norm of each aux chunk entering fc, and each one's share of their sum (balanced: 1/n each)."""
    if not recorder.fc_totals:
        return None
    n = sum(f["chains"] for f in recorder.fc_totals.values())
    total = sum(f["sum"] for f in recorder.fc_totals.values()) / max(n, 1)
    norms = [float(x) for x in total]
    share = [x / sum(norms) if sum(norms) else 0.0 for x in norms]
    return {
        "chunk_norms": [_r(x) for x in norms],
        "chunk_shares": [_r(x) for x in share],
        "max_over_min": _r(max(norms) / min(norms)) if min(norms) else None,
    }


def side_report(side: Side, edges: list[int], k: int, temperature: float | None = None, top_p: float = 1.0) -> dict:
    by_context = []
    for b, counters in sorted(side.buckets.items()):
        lo, hi = edges[b], edges[b + 1]
        by_context.append(
            {
                "bucket": bucket_label(lo, hi),
                "from": lo,
                "to": hi,
                "every_position": counters.to_dict(),
                "acceptance_length": _r(counters.acceptance_length),
                "per_depth": per_depth(counters, side.recorder, k, b),
            }
        )
    return {
        "path": side.path,
        "eagle_version": side.eagle_version,
        "acceptance": {"trajectory": side.trajectory.to_dict(), "every_position": side.every.to_dict()},
        "per_depth": per_depth(side.every, side.recorder, k),
        "by_context_length": by_context,
        "fc_input": fc_input(side.recorder),
        "seconds": round(side.seconds, 3),
        "sampling": sampling_report(side, temperature, top_p) if side.sampling is not None else None,
    }


def sampling_report(side: Side, temperature: float, top_p: float) -> dict:
    e = side.sampling
    return {
        "temperature": temperature,
        "top_p": top_p,
        "draft_distribution": DRAFT_DISTRIBUTION,
        "contexts": (
            "every position of the same greedy continuations the greedy figures use (each context's expectation is"
            " exact)"
        ),
        "num_drafts": e.num_drafts,
        "expected_accepted_per_position": [_r(x) for x in e.accepted_per_position],
        "per_position_rate": [_r(x) for x in e.per_position_rate],
        "acceptance_length": _r(e.acceptance_length),
        "greedy_acceptance_length": _r(side.every.acceptance_length),
    }


def _ratio(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and a:
        return _r(b / a)
    return None


FIGURES = (
    "acceptance_rate",
    "conditional_acceptance_rate",
    "sink_attention",
    "own_draft_attention",
    "feedback_norm_relative",
)


def ratios(mine: dict, other: dict) -> dict:
    """other / mine for every figure both have."""

    def depth(rows_a, rows_b):
        return [{"step": a["step"], **{f: _ratio(a[f], b[f]) for f in FIGURES}} for a, b in zip(rows_a, rows_b)]

    by_b = {r["bucket"]: r for r in other["by_context_length"]}
    return {
        "acceptance_length": _ratio(
            mine["acceptance"]["trajectory"]["acceptance_length"],
            other["acceptance"]["trajectory"]["acceptance_length"],
        ),
        "every_position_acceptance_length": _ratio(
            mine["acceptance"]["every_position"]["acceptance_length"],
            other["acceptance"]["every_position"]["acceptance_length"],
        ),
        "per_depth": depth(mine["per_depth"], other["per_depth"]),
        "by_context_length": [
            {
                "bucket": r["bucket"],
                "acceptance_length": _ratio(r["acceptance_length"], by_b[r["bucket"]]["acceptance_length"]),
                "per_depth": depth(r["per_depth"], by_b[r["bucket"]]["per_depth"]),
            }
            for r in mine["by_context_length"]
            if r["bucket"] in by_b
        ],
    }


def _variant_side(side: Side) -> dict:
    out = {
        "acceptance": {"trajectory": side.trajectory.to_dict(), "every_position": side.every.to_dict()},
        "acceptance_length": _r(side.trajectory.acceptance_length),
        "every_position_acceptance_length": _r(side.every.acceptance_length),
    }
    if side.sampling is not None:
        out["sampling_acceptance_length"] = _r(side.sampling.acceptance_length)
    return out


def run_variants(
    verifier: Verifier,
    framed_records: list[tuple[dict, list[dict]]],
    draftings: list[Drafting],
    keep: tuple[int, ...],
    options: DriftOptions,
    limit: int,
    progress: Callable[[str, int], object] | None,
) -> dict:
    """--variants: the inputs' content framed by every variant (variants.py), each with its own greedy continuation,
    drafted by the drafter (and --compare); acceptance per variant and its spread across variants."""
    from .variants import spread

    rows = []
    for variant, framed in framed_records:
        v = Verifier(verifier.options, progress)
        v.target = verifier.target  # one target for every variant
        v.prepare(framed, capture=keep, keep_passes=options.temperature is not None)
        too_long = [p.id for p, tokens in v.sequences if tokens.shape[0] > limit]
        if too_long:
            raise UsageError(
                f"input {too_long[0]} framed as variant {variant['name']} runs past --max-context {limit} with its"
                " continuation"
            )
        edges = bucket_edges(max(limit, max(t.shape[0] for _, t in v.sequences)))
        row = {
            "name": variant["name"],
            "description": variant["description"],
            "tokens": [int(t.shape[0]) for _, t in v.sequences],
            **_variant_side(run_drafter(v, draftings[0], options, edges, f"variant {variant['name']}", progress)),
        }
        if len(draftings) > 1:
            row["compare"] = _variant_side(
                run_drafter(v, draftings[1], options, edges, f"variant {variant['name']}, compare", progress)
            )
        rows.append(row)

    def spreads(pick) -> dict:
        return {
            "acceptance_length": spread([pick(r)["acceptance_length"] for r in rows]),
            "every_position_acceptance_length": spread([pick(r)["every_position_acceptance_length"] for r in rows]),
        }

    out = {"inputs": len(framed_records[0][1]), "variants": rows, "spread": spreads(lambda r: r)}
    if options.compare:
        out["compare_spread"] = spreads(lambda r: r["compare"])
    return out


def check_options(options: DriftOptions) -> None:
    """The options that need no file, told before anything is read or loaded."""
    if options.sink_tokens < 1:
        raise UsageError("--sink-tokens must be at least 1")
    if options.chunk < 1:
        raise UsageError("--chunk must be at least 1")
    if options.temperature is not None and not options.temperature >= MIN_TEMPERATURE:
        raise UsageError(
            f"--temperature {options.temperature:g}: at least {MIN_TEMPERATURE} (vLLM raises a lower one to"
            f" {MIN_TEMPERATURE}; the greedy figures, the default report, are temperature 0)"
        )
    if not 0 < options.top_p <= 1:
        raise UsageError("--top-p must lie in (0, 1]")
    if options.top_p != 1.0 and options.temperature is None:
        raise UsageError("--top-p applies to sampling: give --temperature too")
    _refuse_without_target(options)


def _refuse_without_target(options: DriftOptions) -> None:
    """What needs the target's own run, refused where vLLM runs it (its capture keeps no distributions; every framing
    of variants would start an engine) or files bring its states (hidden_states)."""
    needs = {"temperature": options.temperature is not None, "variants": options.variants}
    if options.target_engine and any(needs.values()):
        raise UsageError(
            f"{next(f for f, v in needs.items() if v)} needs the target run by eaglekit, not by vLLM (target_engine)"
        )
    needs.update({"target_engine": bool(options.target_engine), "prompts": bool(options.prompts)})
    if options.hidden_states and any(needs.values()):
        raise UsageError(
            f"hidden_states brings the target's states; {next(f for f, v in needs.items() if v)} runs the target"
        )


def _inputs(verifier: Verifier, options: DriftOptions, limit: int) -> tuple[list[dict] | None, str, list | None]:
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


def _prepare(verifier: Verifier, options: DriftOptions, records: list[dict] | None, draftings: list, keep) -> None:
    """The target's states for every input: from a capture's files, from vLLM (target_engine), or decoded here (with
    --temperature each sequence's logits and KV cache kept from its decoding, for the target's distributions)."""
    if options.hidden_states:  # a capture's files: every layer both drafters fuse must be there
        verifier.prepare_stored(draftings[0].model.d, keep)
    elif options.target_engine:  # the target run by vLLM: the same layers, captured by vLLM itself
        verifier.prepare_engine(records, capture=keep)
    else:
        verifier.prepare(records, capture=keep, keep_passes=options.temperature is not None)


def drift(path: str, options: DriftOptions, progress: Callable[[str, int], object] | None = None) -> dict:
    """Run the drift measurement and return the report's data (schemas/drift.schema.json, without the contract keys)."""
    check_options(options)
    verifier = Verifier(
        VerifyOptions(
            target=options.target,
            max_new_tokens=options.max_new_tokens,
            k=options.k,
            device=options.device,
            dtype=options.dtype,
            source_dialect=options.source_dialect,
            norm_output_semantics=options.norm_output_semantics,
            command="drift",
            target_engine=options.target_engine,
            vllm_python=options.vllm_python,
            parallel=options.parallel,
            hidden_states=options.hidden_states,
            batch_size=options.batch_size,
        ),
        progress,
    )
    window = verifier.target_config.config.get("max_position_embeddings")
    limit = options.max_context or window
    if not limit:
        raise UsageError("the target records no window (max_position_embeddings): give --max-context")
    if window and limit > window:
        raise UsageError(f"--max-context {limit} exceeds the target's window ({window})")
    # each drafter checked before the target loads (one that cannot run fails at once), made into its model once the
    # target is there (or, where vLLM runs it, its borrowed tensors read alone); the layers both fuse are kept while
    # the target decodes (no second full pass per sequence)
    paths = (path, *([options.compare] if options.compare else []))
    for drafter in paths:
        load_drafter(verifier, drafter, options, build=False)
    records, source, framed = _inputs(verifier, options, limit)
    if not (options.target_engine or options.hidden_states):
        verifier.load_target()
    draftings = [load_drafter(verifier, p, options) for p in paths]
    keep = layers_of([x.model.d for x in draftings], verifier.target_config.num_layers)
    _prepare(verifier, options, records, draftings, keep)
    too_long = [p.id for p, tokens in verifier.sequences if tokens.shape[0] > limit]
    if too_long:
        raise UsageError(f"input {too_long[0]} runs past --max-context {limit} with its continuation")
    edges = bucket_edges(max(limit, max(t.shape[0] for _, t in verifier.sequences)))
    sampling = (options.temperature, options.top_p)
    sides = [
        side_report(run_drafter(verifier, drafting, options, edges, label, progress), edges, options.k, *sampling)
        for drafting, label in zip(draftings, ("drafter", "compare"))
    ]
    verifier.drop_passes()  # the caches of the main inputs, before the variants decode theirs
    mine, other = sides[0], sides[1] if len(sides) > 1 else None
    variants = run_variants(verifier, framed, draftings, keep, options, limit, progress) if framed else None
    findings = []
    for side in (mine, other):
        if (
            side
            and side["acceptance"]["every_position"]["num_drafts"]
            and not side["acceptance"]["every_position"]["num_accepted_tokens"]
        ):
            findings.append(
                {
                    "check": "drift.nothing_accepted",
                    "severity": "warning",
                    "message": f"{side['path']}: no drafted token was accepted at any position (wrong target?)",
                }
            )
    return {
        "drafter": str(path),
        "eagle_version": mine["eagle_version"],
        "target": verifier.target_config.name,
        "device": verifier.device,
        "dtype": options.dtype,
        "num_speculative_tokens": options.k,
        "sink_tokens": options.sink_tokens,
        "max_context": limit,
        "window": window,
        "inputs": {
            "source": source,
            "count": len(verifier.sequences),
            "max_new_tokens": options.max_new_tokens,
            "tokens": [int(t.shape[0]) for _, t in verifier.sequences],
        },
        "acceptance": mine["acceptance"],
        "per_depth": mine["per_depth"],
        "by_context_length": mine["by_context_length"],
        "fc_input": mine["fc_input"],
        "seconds": mine["seconds"],
        "compare": None if other is None else {**other, "ratios": ratios(mine, other)},
        "variants": variants,
        "sampling": mine["sampling"],
        "target_engine": target_engine_report(verifier),
        "findings": findings,
        "resources": verifier.resources,
    }
