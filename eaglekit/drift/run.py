"""``eaglekit drift``: EAGLE 3.1's diagnosis measured for any drafter on its own target.

Long inputs (built-in: passages of CPython's own documentation, see ``inputs.long_records``) get greedy
continuations from the target (the Verifier's run); the drafter drafts a K-step chain at every continuation
position, in chunks of start positions (one first pass per sequence, whose keys/values every chunk shares), so
memory stays bounded by the sequence and the chunk. The reference forward records (``reference/record.py``), per
draft step: attention on the first S positions (sinks) and on the chain's own drafts, the norm of the fed-back
state, and the norm of each aux chunk entering ``fc``. Acceptance is counted as verify counts it
(``verify.run.count``), and by absolute position.

``compare`` runs a second drafter on the same sequences; every figure is given for both, with ratios (other / drafter).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import UsageError
from ..verify.options import VerifyOptions
from ..verify.report import target_engine_report
from ..verify.run import Verifier, layers_of
from .drafting import Drafting, load_drafter, run_drafter
from .figures import ratios, side_report, variant_side
from .inputs import bucket_edges, read_inputs
from .options import DriftOptions, check_options


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
                f"input {too_long[0]} framed as variant {variant['name']} runs past `max_context` {limit} with its"
                " continuation"
            )
        edges = bucket_edges(max(limit, max(t.shape[0] for _, t in v.sequences)))
        row = {
            "name": variant["name"],
            "description": variant["description"],
            "tokens": [int(t.shape[0]) for _, t in v.sequences],
            **variant_side(run_drafter(v, draftings[0], options, edges, f"variant {variant['name']}", progress)),
        }
        if len(draftings) > 1:
            row["compare"] = variant_side(
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


def drift(path: str, options: DriftOptions, progress: Callable[[str, int], object] | None = None) -> dict:
    """Run the drift measurement and return the report's data (schemas/drift.schema.json, without the contract keys)."""
    check_options(options)
    verifier = _verifier(options, progress)
    window, limit = _context_limit(verifier, options)
    paths = (path, *([options.compare] if options.compare else []))
    draftings, records, source, framed = _drafters_and_inputs(verifier, options, paths, limit)
    keep = layers_of([x.model.d for x in draftings], verifier.target_config.num_layers)
    _prepare(verifier, options, records, draftings, keep)
    edges = _edges(verifier, limit)
    sampling = (options.temperature, options.top_p)
    sides = [
        side_report(run_drafter(verifier, drafting, options, edges, label, progress), edges, options.k, *sampling)
        for drafting, label in zip(draftings, ("drafter", "compare"))
    ]
    verifier.drop_passes()  # the caches of the main inputs, before the variants decode theirs
    variants = run_variants(verifier, framed, draftings, keep, options, limit, progress) if framed else None
    return _report(path, options, verifier, sides, variants, source, (window, limit))


def _verifier(options: DriftOptions, progress: Callable[[str, int], object] | None) -> Verifier:
    """verify's Verifier, asked for what drift needs: the target's greedy continuations and its states."""
    return Verifier(
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


def _context_limit(verifier: Verifier, options: DriftOptions) -> tuple[int | None, int]:
    """(the target's window, the context the inputs may fill: max_context, or the window)."""
    window = verifier.target_config.config.get("max_position_embeddings")
    limit = options.max_context or window
    if not limit:
        raise UsageError("the target records no window (max_position_embeddings): give `max_context`")
    if window and limit > window:
        raise UsageError(f"`max_context` {limit} exceeds the target's window ({window})")
    return window, limit


def _drafters_and_inputs(
    verifier: Verifier, options: DriftOptions, paths: tuple[str, ...], limit: int
) -> tuple[list[Drafting], list[dict] | None, str, list | None]:
    """(the drafters as models, the inputs, where they come from, their --variants framings). Each drafter is checked
    before the target loads (one that cannot run fails at once), and made into its model once the target is there (or,
    where vLLM runs it, its borrowed tensors read alone); the layers both fuse are then kept while the target decodes
    (no second full pass per sequence)."""
    for drafter in paths:
        load_drafter(verifier, drafter, options, build=False)
    records, source, framed = read_inputs(verifier, options, limit)
    if not (options.target_engine or options.hidden_states):
        verifier.load_target()
    draftings = [load_drafter(verifier, p, options) for p in paths]
    return draftings, records, source, framed


def _prepare(verifier: Verifier, options: DriftOptions, records: list[dict] | None, draftings: list, keep) -> None:
    """The target's states for every input: from a capture's files, from vLLM (target_engine), or decoded here (with
    --temperature each sequence's logits and KV cache kept from its decoding, for the target's distributions)."""
    if options.hidden_states:  # a capture's files: every layer both drafters fuse must be there
        verifier.prepare_stored(draftings[0].model.d, keep)
    elif options.target_engine:  # the target run by vLLM: the same layers, captured by vLLM itself
        verifier.prepare_engine(records, capture=keep)
    else:
        verifier.prepare(records, capture=keep, keep_passes=options.temperature is not None)


def _edges(verifier: Verifier, limit: int) -> list[int]:
    """The context buckets' edges, once every input is known to fit in ``limit`` with its continuation."""
    too_long = [p.id for p, tokens in verifier.sequences if tokens.shape[0] > limit]
    if too_long:
        raise UsageError(f"input {too_long[0]} runs past `max_context` {limit} with its continuation")
    return bucket_edges(max(limit, max(t.shape[0] for _, t in verifier.sequences)))


def _findings(sides: list[dict]) -> list[dict]:
    """A warning for each drafter none of whose drafted tokens was accepted anywhere."""
    findings = []
    for side in sides:
        if (
            side["acceptance"]["every_position"]["num_drafts"]
            and not side["acceptance"]["every_position"]["num_accepted_tokens"]
        ):
            findings.append(
                {
                    "check": "drift.nothing_accepted",
                    "severity": "warning",
                    "message": f"{side['path']}: no drafted token was accepted at any position (wrong target?)",
                }
            )
    return findings


def _report(
    path: str,
    options: DriftOptions,
    verifier: Verifier,
    sides: list[dict],
    variants: dict | None,
    source: str,
    context: tuple[int | None, int],
) -> dict:
    """The report's data: the drafter's figures at the top, the compared drafter's with their ratios under compare."""
    mine, other = sides[0], sides[1] if len(sides) > 1 else None
    window, limit = context
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
        "findings": _findings(sides),
        "resources": verifier.resources,
    }
