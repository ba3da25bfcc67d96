"""Greedy speculative decoding, simulated: what vLLM's proposer would draft at every position of a sequence.

For a sequence x_0..x_{S-1} (prompt + the target's greedy continuation) with the target's aux states h_t:

- first pass (vLLM's prefill of the drafter): drafter position t sees token x_{t+1} and feature h_t, causally;
- at a position j the chain's first draft comes from the first pass's output at j; step k >= 2 feeds the
  previous draft (position j+k-1) with the previous step's fed-back state, attending to first-pass positions
  <= j and to the chain's own earlier steps;
- draft k of the chain at j is accepted when it and all before it equal x_{j+1+k}.

A P-EAGLE drafter (``Drafter.parallel``) drafts all K in one pass: after the first pass's row at j come K-1 rows at
positions j+1 .. j+K-1, each fed the mask token and the fused ``mask_hidden`` state, attending causally to the first
pass up to j and to the mask rows before them; their greedy tokens are drafts 2..K (vLLM's proposer with
``parallel_drafting``: v1/spec_decode/utils.py ``copy_and_expand_eagle_inputs_kernel``). Computed row by row as the
chain's steps are, which a causal pass equals; nothing is fed from one draft to the next.

All chains are computed together: one batched, masked attention per step over every start position.
``trajectory`` then walks the positions a greedy vLLM run visits (start at the last prompt position, jump
ahead by accepted + 1), which is what vLLM's own counters count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .model import KV, ReferenceDrafter, StepOutput
from .record import DriftRecorder


@dataclass
class Chains:
    starts: torch.Tensor  # [J] start positions j
    drafts: torch.Tensor  # [J, K] draft tokens (target ids)
    y: torch.Tensor  # [J, K, H] post-norm states (lm_head inputs), for logit comparisons
    first: StepOutput  # the first pass over the whole sequence


def first_pass(
    model: ReferenceDrafter, tokens: torch.Tensor, aux: torch.Tensor, recorder: DriftRecorder | None = None
) -> StepOutput:
    """Drafter prefill over positions 0..S-2: token x_{t+1} with target feature h_t."""
    n = tokens.shape[0] - 1
    hidden = model.combine(aux[:n], recorder)
    positions = torch.arange(n, device=model.device)
    return model.decode(tokens[1:].to(model.device), hidden, positions, model.causal_attend(recorder=recorder))


def _chain_attend(
    model: ReferenceDrafter,
    base: list[KV],
    starts: torch.Tensor,
    chain: list[list[KV]],
    step: int,
    block: int = 512,
    recorder: DriftRecorder | None = None,
):
    """Attention of draft step ``step`` (>= 2) of every chain: first-pass keys up to the chain's start, then the
    chain's own keys. A sliding-window layer counts its window as ``model.chain_window`` says (see model.py)."""

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        base_k = model._expand_kv(base[layer].k).float()
        base_v = model._expand_kv(base[layer].v).float()
        own_k = torch.stack(
            [model._expand_kv(kv.k) for kv in chain[layer]] + [model._expand_kv(k)], dim=1
        ).float()  # [J, c, h, d]
        own_v = torch.stack([model._expand_kv(kv.v) for kv in chain[layer]] + [model._expand_kv(v)], dim=1).float()
        cols = torch.arange(base_k.shape[0], device=q.device)[None, None, :]
        window = model.d.window.for_layer(layer)
        # the query's own position is start + step - 1; the chain's c-th key (0-based) sits at start + 1 + c
        back = step - 1 if model.chain_window == "position" else 0
        own_hidden = None
        if window is not None and model.chain_window == "position":
            distance = (step - 2) - torch.arange(own_k.shape[1], device=q.device)  # query position - key position
            own_hidden = (distance >= window)[None, None, :]
        out = []
        for lo in range(0, q.shape[0], block):
            hi = lo + block
            qb = q[lo:hi].float()
            # in place where the same floats come out (a copy of a long sequence's scores is memory held at the peak)
            s_base = torch.einsum("jhd,shd->jhs", qb, base_k).mul_(model.scale)
            hidden = cols > starts[lo:hi, None, None]
            if window is not None:
                hidden = hidden | (cols <= starts[lo:hi, None, None] + back - window)
            s_base.masked_fill_(hidden, float("-inf"))
            s_own = torch.einsum("jhd,jchd->jhc", qb, own_k[lo:hi]).mul_(model.scale)
            if own_hidden is not None:
                s_own.masked_fill_(own_hidden, float("-inf"))
            probs = torch.cat([s_base, s_own], dim=-1).softmax(-1)
            del s_base, s_own
            p_base, p_own = probs[..., : base_k.shape[0]], probs[..., base_k.shape[0] :]
            if recorder is not None:
                recorder.chain_attention(layer, p_base, p_own)
            out.append(
                torch.einsum("jhs,shd->jhd", p_base, base_v) + torch.einsum("jhc,jchd->jhd", p_own, own_v[lo:hi])
            )
        return torch.cat(out).to(q.dtype).reshape(q.shape[0], -1)

    return attend


def draft_chains(
    model: ReferenceDrafter,
    tokens: torch.Tensor,
    aux: torch.Tensor,
    starts: torch.Tensor,
    k: int,
    *,
    teacher: bool = False,
) -> Chains:
    """K-step greedy chains from every start position j (0 <= j <= S-2), batched.

    With ``teacher`` the chain at j is fed the sequence's own tokens x_{j+k} instead of its drafts (training-time
    test, as EAGLE 3 trains); the fed-back hidden state is still the drafter's own."""
    return chains_from(model, first_pass(model, tokens, aux), tokens, starts, k, teacher=teacher)


def chains_from(
    model: ReferenceDrafter,
    first: StepOutput,
    tokens: torch.Tensor,
    starts: torch.Tensor,
    k: int,
    *,
    teacher: bool = False,
    recorder: DriftRecorder | None = None,
) -> Chains:
    """The chains of ``draft_chains`` from an already computed first pass (its KV is shared by every chain);
    ``recorder`` (record.py) sees the attention and fed-back states of every step."""
    starts = starts.to(model.device)
    tokens = tokens.to(model.device)
    y = first.y[starts]
    feedback = first.feedback[starts]
    if recorder is not None:
        recorder.chains_started(starts)
        recorder.feedback(feedback)
    drafts, ys = [model.greedy(y)], [y]
    chain: list[list[KV]] = [[] for _ in range(model.d.num_layers)]
    mask = model.mask_rows(starts.shape[0]) if model.d.parallel is not None else None
    for step in range(2, k + 1):
        positions = starts + (step - 1)
        if mask is not None:  # P-EAGLE: the mask token and mask_hidden, whatever came before
            inputs, feedback = mask
        else:
            inputs = tokens[(starts + step).clamp(max=tokens.shape[0] - 1)] if teacher else drafts[-1]
        if recorder is not None:
            recorder.step = step
        out = model.decode(
            inputs, feedback, positions, _chain_attend(model, first.kv, starts, chain, step, recorder=recorder)
        )
        for layer, kv in enumerate(out.kv):
            chain[layer].append(kv)
        feedback = out.feedback
        if recorder is not None:
            recorder.feedback(feedback)
        drafts.append(model.greedy(out.y))
        ys.append(out.y)
    if recorder is not None:
        recorder.chains_done()
    return Chains(starts, torch.stack(drafts, dim=1), torch.stack(ys, dim=1), first)


def accepted_lengths(chains: Chains, tokens: torch.Tensor) -> torch.Tensor:
    """Per chain, how many leading drafts match the target's tokens x_{j+2}, x_{j+3}, ... (targets past the
    end of the sequence never match)."""
    tokens = tokens.to(chains.drafts.device)
    J, K = chains.drafts.shape
    idx = chains.starts[:, None] + 1 + torch.arange(1, K + 1, device=tokens.device)[None, :]
    valid = idx < tokens.shape[0]
    expected = tokens[idx.clamp(max=tokens.shape[0] - 1)]
    match = (chains.drafts == expected) & valid
    return match.int().cumprod(dim=1).sum(dim=1)


@dataclass
class Counters:
    """vLLM's spec-decode counters (vllm/v1/spec_decode/metrics.py), summed over drafts."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def add(self, accepted: int, k: int, drafted: int | None = None) -> None:
        """One verification step of a K-token chain: ``accepted`` of its ``drafted`` tokens (K unless the engine drafted
        fewer) accepted."""
        if not self.accepted_per_pos:
            self.accepted_per_pos = [0] * k
        self.num_drafts += 1
        self.num_draft_tokens += k if drafted is None else drafted
        self.num_accepted_tokens += accepted
        for i in range(accepted):
            self.accepted_per_pos[i] += 1

    def merge(self, other: Counters) -> None:
        if not other.num_drafts:
            return
        if not self.accepted_per_pos:
            self.accepted_per_pos = [0] * len(other.accepted_per_pos)
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        self.accepted_per_pos = [a + b for a, b in zip(self.accepted_per_pos, other.accepted_per_pos)]

    @property
    def acceptance_length(self) -> float:
        """Mean acceptance length: 1 + accepted / drafts (the bonus token included)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def per_position(self) -> list[float]:
        return [a / self.num_drafts for a in self.accepted_per_pos] if self.num_drafts else []

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    def to_dict(self) -> dict:
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "accepted_per_position": self.accepted_per_pos,
            "per_position_rate": [round(r, 6) for r in self.per_position],
            "acceptance_length": round(self.acceptance_length, 6),
            "acceptance_rate": round(self.acceptance_rate, 6),
        }


def every_position(accepted: torch.Tensor, starts: torch.Tensor, k: int, last_full: int) -> Counters:
    """Counters over every start position whose K targets all lie inside the sequence (j <= last_full)."""
    counters = Counters()
    for j, a in zip(starts.tolist(), accepted.tolist()):
        if j <= last_full:
            counters.add(int(a), k)
    return counters


def continuation_length(max_new_tokens: int, k: int) -> int:
    """The target tokens after the prompt that ``trajectory`` judges: with n tokens out a step starts at position
    P + n - 2 (``trajectory``'s j) and compares its K drafts with x_{P+n} .. x_{P+n+K-1}; the last step starts with
    at most ``max_new_tokens`` - 1 out, so its last draft is judged by the continuation's token number
    ``max_new_tokens`` + K - 1 (counting from 1). Decoding further changes no counter
    (tests/test_simulate_bounds.py)."""
    return max(max_new_tokens, 1) + k - 1


def trajectory(
    accepted: torch.Tensor,
    starts: torch.Tensor,
    k: int,
    prompt_len: int,
    max_new_tokens: int,
    eos: int | None = None,
    *,
    capped: bool = False,
) -> Counters:
    """Counters along the positions a greedy vLLM run visits, as its scheduler counts them.

    After prefill the target has produced x_P and the drafter proposes K tokens from position P-1. Each
    verification step counts K drafts and the accepted prefix, then the run continues from the last accepted
    token. Steps happen while fewer than ``max_new_tokens`` tokens are out and no end-of-sequence token
    (``eos``) is among them; the last step counts its full chain even past max_new_tokens, as vLLM does, so
    ``accepted`` must have been measured against a continuation of ``continuation_length`` tokens.

    ``capped``: as llama.cpp's server counts instead (``steps``): a step drafts at most max_new_tokens - produced - 1
    tokens, and none when none fit (a plain decoding step, not counted)."""
    counters = Counters()
    for accepted_here, drafted, _ in steps(accepted, starts, k, prompt_len, max_new_tokens, eos, capped=capped):
        if drafted:
            counters.add(accepted_here, k, drafted)
    return counters


def steps(
    accepted: torch.Tensor,
    starts: torch.Tensor,
    k: int,
    prompt_len: int,
    max_new_tokens: int,
    eos: int | None = None,
    *,
    capped: bool = False,
) -> list[tuple[int, int, int]]:
    """The verification steps of ``trajectory``, in order: (accepted, drafted, start position j); ``capped`` as
    there (llama.cpp's get_n_draft_max: min(K, max_new_tokens - produced - 1); a step drafting 0 decodes one
    token)."""
    by_start = dict(zip(starts.tolist(), accepted.tolist()))
    out = []
    j = prompt_len - 1
    produced = 1
    while produced < max_new_tokens and j in by_start and not (eos is not None and eos <= j + 1):
        drafted = min(k, max_new_tokens - produced - 1) if capped else k
        a = min(int(by_start[j]), drafted)
        out.append((a, drafted, j))
        j += a + 1
        produced += a + 1
    return out
