"""One drafter over drift's sequences: read and checked against the target once (``load_drafter``), then drafting a
K-step chain at every continuation position, in chunks of start positions (``run_drafter``), with the reference
forward's recorder on."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import dialects
from ..errors import UsageError
from ..findings import errors
from ..reference.model import ReferenceDrafter
from ..reference.record import DriftRecorder
from ..reference.simulate import Counters, accepted_lengths, chains_from, every_position, first_pass
from ..target import heap
from ..validate.checks import CheckInput, run_checks
from ..verify.run import Verifier, chain_starts, count, judged_tokens, last_full_start, resolved_ids
from .options import DriftOptions
from .sampling import Expected, prefix_acceptance


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
