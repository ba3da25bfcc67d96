"""How far past the prompt the target must decode for the counters verify reports (``continuation_length``): exactly
far enough. More tokens change no counter; one fewer leaves the last verification's last draft unjudged."""

from __future__ import annotations

import pytest
import torch

from eaglekit.reference.simulate import Chains, accepted_lengths, continuation_length
from eaglekit.verify.run import chain_starts, count


def counters(tokens: torch.Tensor, drafts_for, prompt_len: int, k: int, max_new: int, eos: int | None = None):
    starts = chain_starts(prompt_len, tokens.shape[0])
    chains = Chains(starts, drafts_for(starts), None, None)
    traj, every = count(accepted_lengths(chains, tokens), starts, k, prompt_len, tokens.shape[0], max_new, eos)
    return traj.to_dict(), every.to_dict()


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("max_new", [1, 2, 7, 64])
@pytest.mark.parametrize("accuracy", [1.0, 0.7, 0.3])
def test_the_continuation_verify_decodes_judges_every_counter(k, max_new, accuracy):
    g = torch.Generator().manual_seed(k * 1000 + max_new)
    prompt_len = 11
    tokens = torch.randint(0, 50, (prompt_len + max_new + k + 8,), generator=g)  # a continuation longer than needed

    def drafts_for(starts):  # draft i of the chain at j predicts x_{j+1+i}: right with probability ``accuracy``
        idx = (starts[:, None] + 1 + torch.arange(1, k + 1)[None, :]).clamp(max=tokens.shape[0] - 1)
        wrong = torch.rand(idx.shape, generator=torch.Generator().manual_seed(7)) > accuracy
        return torch.where(wrong, tokens[idx] + 50, tokens[idx])  # + 50: never a token of the sequence

    n = continuation_length(max_new, k)
    full = counters(tokens, drafts_for, prompt_len, k, max_new)
    assert counters(tokens[: prompt_len + n], drafts_for, prompt_len, k, max_new) == full


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_one_token_fewer_leaves_the_last_draft_unjudged(k):
    """A drafter that is always right moves K + 1 tokens a step: with ``max_new`` = 2 (K + 1) + 2 its last step starts
    with ``max_new`` - 1 tokens out, the latest any step can start, and needs the continuation's every token."""
    g = torch.Generator().manual_seed(k)
    prompt_len, max_new = 6, 2 * (k + 1) + 2
    tokens = torch.randint(0, 50, (prompt_len + max_new + k + 8,), generator=g)

    def perfect(starts):
        return tokens[(starts[:, None] + 1 + torch.arange(1, k + 1)[None, :]).clamp(max=tokens.shape[0] - 1)]

    n = continuation_length(max_new, k)
    full = counters(tokens[: prompt_len + n], perfect, prompt_len, k, max_new)[0]
    short = counters(tokens[: prompt_len + n - 1], perfect, prompt_len, k, max_new)[0]
    assert full["num_drafts"] == short["num_drafts"] == 3 and full["acceptance_length"] == k + 1
    assert short["num_accepted_tokens"] == full["num_accepted_tokens"] - 1


def test_an_end_of_sequence_token_stops_the_trajectory_as_before():
    g = torch.Generator().manual_seed(0)
    k, max_new, prompt_len = 3, 20, 5
    tokens = torch.randint(0, 50, (prompt_len + max_new + k + 4,), generator=g)

    def perfect(starts):
        idx = (starts[:, None] + 1 + torch.arange(1, k + 1)[None, :]).clamp(max=tokens.shape[0] - 1)
        return tokens[idx]

    eos = prompt_len + 9
    full = counters(tokens, perfect, prompt_len, k, max_new, eos)
    assert (
        counters(tokens[: prompt_len + continuation_length(max_new, k)], perfect, prompt_len, k, max_new, eos) == full
    )
    assert full[0]["num_drafts"] < counters(tokens, perfect, prompt_len, k, max_new)[0]["num_drafts"]


@pytest.mark.parametrize("k", [1, 3])
def test_a_one_token_prompt_has_its_first_chain_at_position_0(k):
    """vLLM serves a one-token prompt: its first step drafts from position 0 (the prompt's last) and moves K + 1
    tokens a step with a drafter that is always right."""
    g = torch.Generator().manual_seed(k)
    max_new = 3 * (k + 1) + 1
    tokens = torch.randint(0, 50, (1 + continuation_length(max_new, k),), generator=g)

    def perfect(starts):
        return tokens[(starts[:, None] + 1 + torch.arange(1, k + 1)[None, :]).clamp(max=tokens.shape[0] - 1)]

    assert int(chain_starts(1, tokens.shape[0])[0]) == 0
    traj = counters(tokens, perfect, 1, k, max_new)[0]
    assert traj["num_drafts"] == 3 and traj["num_accepted_tokens"] == 3 * k


def test_drafts_accepted_past_the_end_of_sequence_are_judged_by_the_tokens_after_it():
    """The target's sequence stops at its eos; the step that produces it counts every draft vLLM's rejection sampler
    accepts, those past the eos included (vLLM counts before it cuts at the stop token): judged_tokens hands the
    trajectory the target's greedy tokens after the eos, and the counters are those of the uncut sequence."""
    from eaglekit.verify.run import judged_tokens

    g = torch.Generator().manual_seed(0)
    k, max_new, prompt_len = 3, 20, 5
    tokens = torch.randint(0, 50, (prompt_len + continuation_length(max_new, k),), generator=g)

    def perfect(starts):
        return tokens[(starts[:, None] + 1 + torch.arange(1, k + 1)[None, :]).clamp(max=tokens.shape[0] - 1)]

    eos = prompt_len + 1  # the first step's first draft target
    cut = tokens[: eos + 1]
    starts = chain_starts(prompt_len, cut.shape[0])
    chains = Chains(starts, perfect(starts), None, None)
    past = tokens[eos + 1 : eos + k]
    traj, _ = count(
        accepted_lengths(chains, judged_tokens(cut, past)), starts, k, prompt_len, cut.shape[0], max_new, eos
    )
    assert (traj.num_drafts, traj.num_accepted_tokens) == (1, k)
    assert traj.to_dict() == counters(tokens, perfect, prompt_len, k, max_new, eos)[0]
    unjudged, _ = count(accepted_lengths(chains, cut), starts, k, prompt_len, cut.shape[0], max_new, eos)
    assert unjudged.num_accepted_tokens == 1  # what the sequence cut at the eos alone can judge
