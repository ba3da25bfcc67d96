"""``drift --temperature T [--top-p P]``: the acceptance a vLLM run at temperature T would see, as an expectation
computed exactly from the target's and the drafter's distributions (no sampling).

What vLLM 0.32.0 does (source, the released wheel):

- The drafter's tokens: ``SpeculativeConfig.draft_sample_method`` (vllm/config/speculative.py) defaults to
  ``"greedy"``: EAGLE's proposer drafts the argmax of its logits (``LLMBaseProposer._sample_draft_tokens`` in
  vllm/v1/spec_decode/llm_base_proposer.py returns no draft probabilities), and the rejection sampler treats the
  draft distribution q as one-hot (``rejection_random_sample_kernel`` in vllm/v1/sample/rejection_sampler.py:
  ``NO_DRAFT_PROBS`` -> ``draft_prob = 1``). ``"probabilistic"`` (q = the drafter's own tempered distribution) is
  opt-in and refused with a draft vocabulary (``use_heterogeneous_vocab``); this module computes the default.
- The target's distribution p: ``RejectionSampler.forward`` -> ``apply_sampling_constraints``: the logits in float32
  divided by the temperature, then top-k/top-p (``apply_top_k_top_p``; without Triton, as on CPU,
  ``apply_top_k_top_p_pytorch`` in vllm/v1/sample/ops/topk_topp_sampler.py: sort ascending, softmax, cumulative sum,
  drop every token whose cumulative sum is <= 1 - P, always keep the largest), then softmax.
  ``top_p_probs`` gives the same floats without the sort where the cut is certain.
- Draft x_i is accepted when ``target_prob / draft_prob >= u``, u ~ U[0, 1): with q one-hot, P(accept) = p_i(x_i);
  on the first rejection a token is drawn from the residual max(p - q, 0) and the step ends.

So for a context c and the drafter's greedy chain d_1..d_K, with p_i the target's distribution after c, d_1..d_{i-1}:
P(the first i drafts accepted | c) = prod_{m <= i} p_m(d_m), and the expected accepted count is the sum over i.
The target distributions come from one pass over each chain's drafted prefix (``TargetModel.chain_logits``).
"""

from __future__ import annotations

import torch

DRAFT_DISTRIBUTION = (
    "one-hot on the drafter's greedy token (vLLM 0.32.0's default draft_sample_method 'greedy'; "
    "accept with probability p(x), resample from the residual)"
)


def vllm_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """The target distribution vLLM's rejection sampler uses: float32 logits / T, top-p as
    apply_top_k_top_p_pytorch cuts it, softmax. [..., V] -> [..., V]."""
    logits = logits.float() / temperature
    if top_p >= 1.0:
        return logits.softmax(dim=-1)
    shape = logits.shape
    return top_p_probs(logits.reshape(-1, shape[-1]), top_p).reshape(shape)


# How far a token's mass above it must lie from P for vLLM's float32 cumulative sum to decide its cut as exact
# arithmetic does: that sum's rounding error measured under 1e-6 on 49k- and 152k-token vocabularies.
EDGE = 1e-5


def _cut_as_vllm(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """apply_top_k_top_p_pytorch's top-p, then softmax: sort ascending, softmax, cumulative sum, drop each token whose
    sum is <= 1 - P but the largest."""
    ordered, index = logits.sort(dim=-1, descending=False)
    drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
    drop[:, -1] = False
    return logits.scatter(-1, index, ordered.masked_fill(drop, float("-inf"))).softmax(dim=-1)


def top_p_probs(logits: torch.Tensor, top_p: float, k: int = 256) -> torch.Tensor:
    """``_cut_as_vllm`` of ``logits`` [N, V], the same floats, without sorting the whole vocabulary where the cut is
    certain: vLLM drops a token when the mass strictly above it is >= P. A row whose ``k`` largest tokens hold more
    than P + EDGE (exact arithmetic, float64), none of them with a mass above it within EDGE of P, keeps the same
    tokens however the sum rounds: those come from ``topk`` and the softmax runs over the same masked row vLLM builds.
    The other rows (a flat distribution; a token at the very edge) are cut as vLLM cuts them. ~8x faster on the
    demo's target, whose nuclei at T = 0.8, P = 0.95 are mostly a few dozen tokens; ~20% slower on flat rows."""
    V = logits.shape[-1]
    top, index = logits.topk(min(k, V), dim=-1)  # largest first
    # float32 log-normaliser (its rounding moves a mass by ~1e-6 of itself, well inside EDGE), float64 sums
    mass = (top.double() - torch.logsumexp(logits, dim=-1, keepdim=True).double()).exp()
    above = mass.cumsum(dim=-1) - mass
    certain = (mass.sum(dim=-1) > top_p + EDGE) & ((above - top_p).abs() > EDGE).all(dim=-1)
    kept = top.masked_fill(above >= top_p, float("-inf"))
    out = torch.full_like(logits, float("-inf")).scatter(-1, index, kept).softmax(dim=-1)
    rest = (~certain).nonzero().squeeze(-1)
    if rest.numel():
        out[rest] = _cut_as_vllm(logits[rest], top_p)
    return out


def prefix_acceptance(
    first_logits: torch.Tensor, chain_logits: torch.Tensor, drafts: torch.Tensor, temperature: float, top_p: float
) -> torch.Tensor:
    """P(the first i drafts accepted), i = 1..K, per chain. first_logits [J, V]: the target after the context;
    chain_logits [J, K-1, V]: after each drafted prefix; drafts [J, K] (target ids). -> [J, K] float64."""
    logits = torch.cat([first_logits[:, None], chain_logits], dim=1)
    probs = vllm_probs(logits, temperature, top_p)
    p_draft = probs.gather(-1, drafts[..., None].to(probs.device)).squeeze(-1).double()
    return p_draft.cumprod(dim=1)


class Expected:
    """Expected counters over chains: sums of P(first i accepted) per position, and the number of drafts."""

    def __init__(self, k: int):
        self.k = k
        self.num_drafts = 0
        self.accepted_per_position = [0.0] * k

    def add(self, prefix: torch.Tensor) -> None:
        self.num_drafts += prefix.shape[0]
        for i, total in enumerate(prefix.sum(dim=0).tolist()):
            self.accepted_per_position[i] += total

    def merge(self, other: Expected) -> None:
        self.num_drafts += other.num_drafts
        self.accepted_per_position = [a + b for a, b in zip(self.accepted_per_position, other.accepted_per_position)]

    @property
    def per_position_rate(self) -> list[float]:
        return [a / self.num_drafts for a in self.accepted_per_position] if self.num_drafts else []

    @property
    def acceptance_length(self) -> float | None:
        return 1 + sum(self.accepted_per_position) / self.num_drafts if self.num_drafts else None


def context_acceptance(
    target, model, tokens: torch.Tensor, aux: torch.Tensor, k: int, settings: list[tuple[float, float]]
) -> list[torch.Tensor]:
    """P(the first i drafts accepted), i = 1..K, for the one chain a vLLM run drafts right after ``tokens`` (its
    context: the prompt and every token out so far), under each (temperature, top_p) of ``settings``: one [K] float64
    per setting, from one drafting and one pass of the target (the chain and the target's logits do not depend on the
    setting). ``aux`` the target's aux states on ``tokens``."""
    from ..reference.simulate import chains_from, first_pass

    S = tokens.shape[0]
    start = torch.tensor([S - 2])
    with torch.no_grad():
        chains = chains_from(model, first_pass(model, tokens, aux), tokens, start, k)
    first_logits, cache = target.sequence_pass(tokens, start + 1)
    drafts = chains.drafts.cpu()
    first_logits, chain_logits = first_logits.cpu(), target.chain_logits(cache, S, start, drafts).cpu()
    return [
        prefix_acceptance(first_logits, chain_logits, drafts, temperature, top_p)[0] for temperature, top_p in settings
    ]
