"""The target runner follows the installed transformers' API: from 5.24 on a causal LM's forward takes its KV cache as
``cache`` (``past_key_values`` still works but warns, and is renamed on every call) and returns it as ``out.cache``;
before, both were ``past_key_values``. The runner passes the keyword the forward declares and reads what it returned."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch

from drafters import write_tiny_target


def forward_taking(keyword: str, original, original_keyword: str, seen: list):
    """A forward declaring the KV cache under ``keyword`` (as one transformers release does), refusing the other."""
    other = "past_key_values" if keyword == "cache" else "cache"

    def forward(input_ids=None, **kwargs):
        seen.append(sorted(k for k in ("cache", "past_key_values") if k in kwargs))
        if other in kwargs:
            raise TypeError(f"forward() got an unexpected keyword argument {other!r}")
        if keyword in kwargs:
            kwargs[original_keyword] = kwargs.pop(keyword)
        return original(input_ids=input_ids, **kwargs)

    named = ["attention_mask", "position_ids", keyword, "use_cache", "logits_to_keep"]
    forward.__signature__ = inspect.Signature(
        [inspect.Parameter("input_ids", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
        + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in named]
        + [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    )
    return forward


@pytest.mark.parametrize("keyword", ["cache", "past_key_values"])
def test_the_decode_passes_the_cache_by_the_keyword_the_forward_declares(tmp_path, keyword):
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    config = read_target_config(write_tiny_target(tmp_path / "t", heads=4, kv_heads=2, hidden=32))
    plain = TargetModel.load(config)
    target = TargetModel.load(config)
    original = target.model.forward
    original_keyword = "cache" if "cache" in inspect.signature(original).parameters else "past_key_values"
    seen: list = []
    target.model.forward = forward_taking(keyword, original, original_keyword, seen)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (6, 9, 4)]
    ours = target.decode_batch(prompts, 8, padding=float("inf"), capture=(1, 3), keep_bytes=2**30)
    theirs = plain.decode_batch(prompts, 8, padding=float("inf"), capture=(1, 3), keep_bytes=2**30)
    assert seen and all(s == [keyword] for s in seen)  # every forward got its cache, under the declared keyword only
    assert [d.tokens.tolist() for d in ours] == [d.tokens.tolist() for d in theirs]
    for a, b in zip(ours, theirs):
        assert all(torch.equal(a.states[k], b.states[k]) for k in (1, 3)) and torch.equal(a.kept.logits, b.kept.logits)
    # the chains' pass over a kept cache goes through the same keyword
    seen.clear()
    sequence = ours[0]
    target.chain_logits(
        sequence.kept.cache, sequence.tokens.shape[0], torch.tensor([0, 1]), torch.tensor([[3, 4, 5], [6, 7, 8]])
    )
    assert seen == [[keyword]]


def test_the_cache_a_forward_returned_is_read_under_either_name():
    from eaglekit.target.runner import _returned_cache

    new, old = object(), object()
    assert (
        _returned_cache(SimpleNamespace(cache=new, past_key_values=old)) is new
    )  # 5.24: past_key_values is a deprecated alias
    assert _returned_cache(SimpleNamespace(past_key_values=old)) is old  # before 5.24
