"""The decode's KV cache with room reserved up front (eaglekit.target.reserved_cache): the keys and values
transformers' ``DynamicLayer`` would hold, written in place instead of concatenated, and a decode through it that
gives the plain cache's tokens, states, logits and kept caches bit for bit."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from eaglekit.target import reserved_cache
from eaglekit.target.reserved_cache import ReservedLayer, reserve

from drafters import write_tiny_target


def states(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, n, 4, generator=g), torch.randn(2, 3, n, 4, generator=g)


def test_the_keys_and_values_dynamic_layer_holds_written_in_place():
    ours, theirs = ReservedLayer(capacity=9), DynamicLayer()
    for step, n in enumerate([5, 1, 1, 2]):  # a prefill, two decode steps, a two-token chunk
        k, v = states(n, step)
        keys, values = ours.update(k, v)
        expected = theirs.update(k, v)
        assert torch.equal(keys, expected[0]) and torch.equal(values, expected[1])
        assert keys.data_ptr() == ours._key_room.data_ptr()  # a view of the room: nothing copied but the new states
        assert ours.get_seq_length() == theirs.get_seq_length() == keys.shape[-2]
    ours.crop(-3)
    theirs.crop(-3)
    k, v = states(1, 9)
    assert torch.equal(ours.update(k, v)[0], theirs.update(k, v)[0])  # written over the cropped positions


def test_past_its_room_it_grows_as_dynamic_layer_does():
    ours, theirs = ReservedLayer(capacity=4), DynamicLayer()
    for step, n in enumerate([3, 1, 1, 1]):
        k, v = states(n, step)
        assert torch.equal(ours.update(k, v)[1], theirs.update(k, v)[1])
    assert ours._key_room is None and ours.get_seq_length() == 6
    big = ReservedLayer(capacity=4)  # a prefill longer than the room: no room is made at all
    k, v = states(6, 0)
    assert torch.equal(big.update(k, v)[0], k) and big._key_room is None
    big.reset()
    assert big.get_seq_length() == 0


def test_only_plain_full_attention_layers_are_replaced():
    cache = DynamicCache()
    cache.layers = [DynamicLayer(), DynamicSlidingWindowLayer(sliding_window=4), DynamicLayer()]
    used = cache.layers[2]
    used.update(*states(2, 0))  # already holding states: left as it is
    assert reserve(cache, 16) is cache
    assert [type(layer) for layer in cache.layers] == [ReservedLayer, DynamicSlidingWindowLayer, DynamicLayer]
    assert cache.layers[0].capacity == 16 and cache.layers[2] is used


def test_a_decode_through_it_is_the_plain_cache_decode_bit_for_bit(tmp_path, monkeypatch):
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    target = TargetModel.load(read_target_config(write_tiny_target(tmp_path / "t", heads=4, kv_heads=2, hidden=32)))
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (9, 4, 7, 12)]  # unequal: left padding
    concatenated, caches = [], []
    plain_update, plain_reserve = DynamicLayer.update, reserved_cache.reserve
    monkeypatch.setattr(
        DynamicLayer, "update", lambda self, *a, **k: concatenated.append(type(self)) or plain_update(self, *a, **k)
    )
    monkeypatch.setattr(
        reserved_cache, "reserve", lambda cache, capacity: caches.append(plain_reserve(cache, capacity)) or cache
    )
    ours = target.decode_batch(prompts, 16, padding=float("inf"), capture=(2, 8), keep_bytes=2**30)
    assert len(caches) == 1 and all(type(layer) is ReservedLayer for layer in caches[0].layers)
    assert ReservedLayer not in concatenated  # every step wrote into the room: no layer fell back to concatenating
    monkeypatch.setattr(reserved_cache, "reserve", lambda cache, capacity: cache)
    theirs = target.decode_batch(prompts, 16, padding=float("inf"), capture=(2, 8), keep_bytes=2**30)
    assert (
        [d.tokens.tolist() for d in ours]
        == [d.tokens.tolist() for d in theirs]
        == [target.generate(p, 16).tolist() for p in prompts]
    )
    for a, b in zip(ours, theirs):
        assert all(torch.equal(a.states[k], b.states[k]) for k in (2, 8))
        assert a.kept is not None and b.kept is not None and torch.equal(a.kept.logits, b.kept.logits)
        assert all(
            torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
            for x, y in zip(a.kept.cache.layers, b.kept.cache.layers)
        )
