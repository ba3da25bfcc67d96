"""Optional recording inside the reference forward, for ``eaglekit drift``: what the drafter attends to, how large
the state it feeds back is, and how balanced its fused input is, per draft step.

The forward (``model.py``, ``simulate.py``) calls a ``DriftRecorder`` where it has one and skips every line of it
where it has none (the default), so verify's numbers are untouched. The recorder only reads tensors the forward
already computed; it never recomputes any of the drafter's math.

Per chain started at position j, per draft step k = 1..K:

- step 1 drafts from the first pass's row j: its attention spreads over context positions 0..j only (no drafted
  token yet); step k >= 2 attends to context positions <= j and to the chain's own k-1 entries, whose inputs are
  the drafted tokens;
- ``sink``: attention probability on positions 0..S-1 (S = ``sinks``), ``own``: on the chain's own entries; each
  averaged over heads and then over layers;
- ``feedback``: the L2 norm of the state step k hands to step k+1 (step 1's: the first pass's state at j);
- ``fc``: the L2 norm of each aux chunk at j as it enters ``fc`` (after input_norm / fc_norm where present).

Values are kept per chain until ``chains_done`` folds them into totals per (bucket, step), where ``bucket`` is any
grouping of start positions the caller chooses (e.g. by absolute position), of the chains started up to
``counted_until`` (all by default).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class DriftRecorder:
    def __init__(self, sinks: int = 4, bucket_of: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.sinks = sinks
        self.bucket_of = bucket_of or (lambda starts: torch.zeros_like(starts))
        self.step = 1  # the draft step the forward is in; chains_from moves it
        # chains started after this position are drafted but left out of the totals (drift: the chains whose K targets
        # run past the judged continuation, which acceptance over every position does not count); None: every chain
        self.counted_until: int | None = None
        self._first_attn: dict[
            int, list[torch.Tensor]
        ] = {}  # layer -> [rows] sink mass of the first pass, in row order
        self._first_fc: torch.Tensor | None = None  # [rows, n] chunk norms of the first pass
        self._starts: torch.Tensor | None = None
        self._chain: dict[
            tuple[int, int], list[tuple[torch.Tensor, torch.Tensor]]
        ] = {}  # (step, layer) -> [(sink, own)]
        self._feedback: dict[int, torch.Tensor] = {}  # step -> [J]
        self.totals: dict[tuple[int, int], dict[str, float]] = {}  # (bucket, step) -> sums
        self.fc_totals: dict[int, dict] = {}  # bucket -> {"n": chains, "sum": [n chunks]}

    # -- called by the forward ------------------------------------------------------------------------

    def fc_input(self, x: torch.Tensor, num_aux: int) -> None:
        """``x`` [N, n*T]: what ``fc`` reads in the first pass."""
        self._first_fc = torch.stack([c.float().norm(dim=-1) for c in x.chunk(num_aux, dim=-1)], dim=-1).cpu()

    def first_pass_attention(self, layer: int, probs: torch.Tensor) -> None:
        """``probs`` [heads, rows, cols]: one block of rows of the causal first pass, in order."""
        sink = probs[..., : self.sinks].sum(-1).mean(0)
        self._first_attn.setdefault(layer, []).append(sink.cpu())

    def chain_attention(self, layer: int, p_context: torch.Tensor, p_own: torch.Tensor) -> None:
        """``p_context`` [rows, heads, context], ``p_own`` [rows, heads, own]: one block of chain rows, in order."""
        sink = p_context[..., : self.sinks].sum(-1).mean(-1)
        own = p_own.sum(-1).mean(-1)
        self._chain.setdefault((self.step, layer), []).append((sink.cpu(), own.cpu()))

    def feedback(self, state: torch.Tensor) -> None:
        """``state`` [J, H]: what the current step feeds to the next one."""
        self._feedback[self.step] = state.float().norm(dim=-1).cpu()

    def chains_started(self, starts: torch.Tensor) -> None:
        self._starts = starts.cpu()
        self.step = 1

    # -- folding -----------------------------------------------------------------------------------------

    def chains_done(self) -> None:
        """Fold the chains just drafted (since ``chains_started``) into the totals."""
        starts = self._starts
        if starts is None:
            return
        buckets = self.bucket_of(starts)
        counted = (
            starts <= self.counted_until
            if self.counted_until is not None
            else torch.ones(len(starts), dtype=torch.bool)
        )
        per_step: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        if self._first_attn:
            layers = [torch.cat(rows)[starts] for _, rows in sorted(self._first_attn.items())]
            per_step[1] = (torch.stack(layers).mean(0), torch.zeros(len(starts)))
        steps = sorted({s for s, _ in self._chain})
        for step in steps:
            layers = [self._chain[(s, layer)] for s, layer in sorted(self._chain) if s == step]
            sink = torch.stack([torch.cat([b[0] for b in blocks]) for blocks in layers]).mean(0)
            own = torch.stack([torch.cat([b[1] for b in blocks]) for blocks in layers]).mean(0)
            per_step[step] = (sink, own)
        for bucket in buckets[counted].unique().tolist():
            rows = (buckets == bucket) & counted
            for step, (sink, own) in per_step.items():
                t = self.totals.setdefault((bucket, step), {"chains": 0, "sink": 0.0, "own": 0.0, "feedback": 0.0})
                t["chains"] += int(rows.sum())
                t["sink"] += float(sink[rows].double().sum())
                t["own"] += float(own[rows].double().sum())
                if step in self._feedback:
                    t["feedback"] += float(self._feedback[step][rows].double().sum())
            if self._first_fc is not None:
                f = self.fc_totals.setdefault(
                    bucket, {"chains": 0, "sum": torch.zeros(self._first_fc.shape[-1], dtype=torch.float64)}
                )
                f["chains"] += int(rows.sum())
                f["sum"] += self._first_fc[starts][rows].double().sum(0)
        self._chain.clear()
        self._feedback.clear()
        self._starts = None

    def sequence_done(self) -> None:
        """Forget the first pass (the next sequence brings its own)."""
        self._first_attn.clear()
        self._first_fc = None


__all__ = ["DriftRecorder"]
