"""A KV cache whose layers keep their keys and values in room reserved for the whole decode.

transformers' ``DynamicLayer`` appends each step's keys and values with ``torch.cat``, which copies the layer's whole
cache: per step 2 x layers copies of everything decoded so far. On the demo (8 rows, 30 layers, ~115 positions)
those copies were 0.38 s of a 4.1 s decode, a tenth of it (torch.profiler's ``aten::cat``). A ``ReservedLayer``
allocates its keys and values once for as many positions as the decode will hold and writes each step into the next
free positions; ``keys`` and ``values`` are views of the filled part, so attention reads the same floats in the same
order as from the concatenated tensors (the tests hold the tokens and captured states equal to the plain cache's).

Only plain full-attention layers (exactly ``DynamicLayer``) are replaced; a sliding window, a quantised or a
linear-attention layer keeps transformers' own class. Past the reserved room a layer grows as ``DynamicLayer`` does.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):
    """``DynamicLayer`` that writes into storage reserved for ``capacity`` positions (grown by concatenation past
    it)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self._key_room: torch.Tensor | None = None
        self._value_room: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()  # cropping shortens ``keys``, so the length is read from it, never counted apart
        end = n + key_states.shape[-2]
        if self._key_room is None and n == 0 and end <= self.capacity:
            shape = (*key_states.shape[:-2], self.capacity, key_states.shape[-1])
            self._key_room = key_states.new_empty(shape)
            self._value_room = value_states.new_empty((*shape[:-1], value_states.shape[-1]))
        room = self._key_room
        if (
            room is None
            or end > self.capacity
            or room.shape[:-2] != key_states.shape[:-2]
            or (n and self.keys.data_ptr() != room.data_ptr())
        ):  # no room (any more), or keys replaced: as DynamicLayer
            self._key_room = self._value_room = None
            return super().update(key_states, value_states, *args, **kwargs)
        room[..., n:end, :] = key_states
        self._value_room[..., n:end, :] = value_states
        self.keys, self.values = room[..., :end, :], self._value_room[..., :end, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` only (the rows a batched decode still feeds), in room of their own."""
        if self._key_room is None or not self.is_initialized:
            return super().batch_select_indices(indices)
        n = self.get_seq_length()
        self._key_room, self._value_room = self._key_room[indices], self._value_room[indices]
        self.keys, self.values = self._key_room[..., :n, :], self._value_room[..., :n, :]

    def reset(self) -> None:
        self._key_room = self._value_room = None
        super().reset()


def reserve(cache, capacity: int):
    """``cache`` (a fresh ``DynamicCache``) with each plain full-attention layer replaced by a ``ReservedLayer`` for
    ``capacity`` positions; returns the cache."""
    layers = getattr(cache, "layers", None)
    if isinstance(layers, list):
        for i, layer in enumerate(layers):
            if type(layer) is DynamicLayer and not layer.is_initialized:
                layers[i] = ReservedLayer(capacity)
    return cache
