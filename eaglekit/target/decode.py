"""The target's batched greedy decode (``TargetModel.decode_batch``): which prompts decode together, and one group's
decode, with the aux states of the forwards that pick the tokens.

A group is left-padded to its longest prompt (an attention mask hides the padding, positions count from each prompt's
first token), the tokens its prompts all start with run once (``shared_prefix``), and one KV cache, reserved for the
whole decode, serves every step. Rows that are done (an end-of-sequence token, and the tokens asked for past it) leave
the batch while oneDNN's prepacked linears serve it (``_Rows.drop_done``), so that the rows left decode without them:
the linears give each row the same floats whatever the rows beside it (tests/test_packed_gemm.py); torch's CPU attention
does on one thread, while on more it splits its work by the batch's size, so the rows left then move within fp32 noise,
as a batch's rows do against one prompt decoded alone (tests/test_verify.py holds the tokens equal and the states within
1e-5 of their magnitude). On the 20 held-out prompts x 258 steps, 8 of which stop after 47-157 tokens, that saved 4-7%
of the decode's CPU time (one thread, 2026-11-29); where a few long answers outlast the rest, most of the steps after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .packed_gemm import MAX_ROWS, MIN_ROWS

# The most padding a group may hold, as a share of its real positions (see length_groups). Where the padding is wide the
# prompts prefill row by row (prefill_alone), so that it costs no prefill, only KV memory and the attention of each step
# (a cached position is read once a step: 46 KB for SmolLM2, where a group more reads its 0.5 GB of weights a step).
# 0.5 keeps 8 passages of 1.4k-2.9k tokens in one group (0.25 left the shortest alone: 256 steps of one row more, the
# whole decode 100 against 84 s) and drift's inputs of 0.3k, 1.3k and 5.2k tokens apart (together they would hold 0.5 GB
# more of padded KV cache, against drift's 2 GiB).
PADDING = 0.5

# A group's prompts share a leading run of tokens (a chat template's system prompt: 24 of the demo's 37-48) where at
# least this many prefill rows are saved by running it once ((prompts - 1) x its length; see shared_prefix). The one
# more forward costs its ~1,300 small ops beyond its rows (~20 ms on 2 cores), a row of the demo's padded prefill ~3 ms:
# 16 rows is about twice that (an estimate from those two figures, not a measured break-even).
MIN_SHARED_ROWS = 16


def shared_prefix(prompts: list[list[int]]) -> int:
    """How many leading tokens ``decode_group`` runs once for all of ``prompts``: the tokens they all start with, each
    prompt keeping at least one of its own (its last position's logits pick its first new token), or 0 where that
    saves fewer than ``MIN_SHARED_ROWS`` prefill rows."""
    if len(prompts) < 2:
        return 0
    n = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for p in prompts[1:]:
        n = next((i for i in range(n) if p[i] != first[i]), n)
    return n if (len(prompts) - 1) * n >= MIN_SHARED_ROWS else 0


# A padded prefill feeds every row of a group its widest prompt, padding included, through masked attention; a prefill
# row by row feeds each row its own tokens, through causal attention, for one forward more per row. A forward reads
# every weight once whatever its rows, and a prefill row costs its arithmetic: SmolLM2 on 2 cores (2026-11-29, one
# forward with the aux hooks) took 73 ms for 1 row of 1 token, 97 ms for 16 tokens, 689 ms for 20 rows x 24 (1.4 ms a
# row), and masked attention over wide padded blocks costs more again (4 rows x 2,048 positions: 2.6 ms a row, one row
# of 2,048 causal 2.0). Row by row pays where the padding saved is more than about 73 / 1.4 rows per forward added (a
# ratio of the machine's arithmetic to its memory speed more than of the model's size): the 20 held-out prompts' 163
# padded positions stay padded (alone: 1.9-2.0 s against 0.94-0.96 s), 8 passages of 1.4k-2.9k tokens go row by row.
PREFILL_PADDING_PER_FORWARD = 50


def prefill_alone(prompts: list[list[int]], shared: int) -> bool:
    """Whether ``decode_group`` prefills its prompts one row at a time (``_prefill_rows``) rather than left-padded
    together: where the padding the batch would feed (each prompt's own tokens after the ``shared`` prefix, against
    the longest one's) is more than ``PREFILL_PADDING_PER_FORWARD`` positions per forward it adds."""
    own = [len(p) - shared for p in prompts]
    return len(own) > 1 and len(own) * max(own) - sum(own) > PREFILL_PADDING_PER_FORWARD * (len(own) - 1)


def prefills_row_by_row(prompts: list[list[int]]) -> bool:
    """Whether ``decode_group`` prefills this group's prompts one at a time (where its target's cache is plain
    full-attention layers; a sliding window prefills them padded): ``prefill_alone`` after their shared prefix."""
    return prefill_alone(prompts, shared_prefix(prompts))


# The most prompts decoded together unless told (``TargetModel.batch_rows``): as many as oneDNN's prepacked weights
# serve (packed_gemm.MAX_ROWS). Each group decodes every step on its own, and a step of few rows costs nearly as much
# as one of many (its weights are read once whatever its rows), so fewer groups pay; but past ~32 rows a step is bound
# by its arithmetic, not by reading the weights: one step of SmolLM2 on one core of an AMD EPYC (2026-11-29, CPU time,
# busy machine) took 57 ms for 4 rows, 99-104 for 20, 117-147 for 32, 194 (prepacked) to 221 ms (plain) for 48 and
# 235-310 ms for 64: per row no cheaper than at 32, and the plain GEMM past 32 rows costs more than two groups.
MAX_BATCH = 32
# The share of the memory available when a decode starts that one group's KV cache, captured states, kept logits and
# prefill attention may take together (``TargetModel.batch_rows``).
BATCH_MEMORY_SHARE = 0.25


def length_groups(lengths: list[int], batch_size: int, padding: float = PADDING, steps: int = 0) -> list[list[int]]:
    """Which prompts to decode together (indices, longest first): a group is left-padded to its longest prompt, and the
    padding stays in its KV cache, and in what every step's attention reads, while it decodes ``steps`` tokens. A group
    closes when it holds ``batch_size`` prompts or when taking the next prompt would bring its padded positions to more
    than ``padding`` times its real ones (each prompt's tokens and the ``steps`` it decodes). Prompts of like length
    share a batch (the demo's 8 prompts of 37-48 tokens are one, and so are its 20 of 37-48 with 258 steps, and 8
    passages of 1.4k-2.9k tokens with 256); inputs of 0.3k, 1.3k and 5.2k tokens with 34 steps each get their own
    (``PADDING``). Each group decodes every step on its own, and a step costs about as much for 4 rows as for 20 (its
    weights are read once per step: packed_gemm.py), so the fewer the groups the better where the padding is small
    beside the decode."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        group = groups[-1] if groups else None
        if group is not None and len(group) < batch_size:
            n = len(group) + 1
            width, total = lengths[group[0]], sum(lengths[j] for j in group) + lengths[i]
            if (width + steps) * n <= (1 + padding) * (total + steps * n):
                group.append(i)
                continue
        groups.append([i])
    return groups


def _row_columns(shared: int, first: int):
    """The columns a row of a decoded group holds its sequence in: the ``shared`` prefix, then its own from ``first``
    on (past its padding). Returns ``take(tensor, n, dim)``: the first ``n`` of them along ``dim`` (a view where the row
    shares no prefix)."""

    def take(tensor: torch.Tensor, n: int, dim: int) -> torch.Tensor:
        if not shared:
            return tensor.narrow(dim, first, n)
        return torch.cat(
            [tensor.narrow(dim, 0, min(shared, n)), tensor.narrow(dim, first, max(n - shared, 0))], dim=dim
        )

    return take


@dataclass
class SequencePass:
    """What ``TargetModel.sequence_pass`` computes for a sequence, kept from the forwards that decoded it: the
    next-token logits after every position from ``first`` (the prompt's last) to the sequence's end, [S - first, V]
    float32, and the KV cache of the whole sequence, for ``chain_logits``."""

    first: int
    logits: torch.Tensor
    cache: object

    @property
    def nbytes(self) -> int:
        """What it holds: its logits (a view of its group's block, counted as its own rows) and its cache."""
        return self.logits.nbytes + sum(layer.keys.nbytes + layer.values.nbytes for layer in self.cache.layers)

    def logits_at(self, positions: torch.Tensor) -> torch.Tensor:
        """The logits after each of ``positions`` (each >= ``first``: the prompt's own were never computed)."""
        rows = positions.to(self.logits.device) - self.first
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= self.logits.shape[0]):
            raise IndexError(
                f"positions {int(positions.min())}..{int(positions.max())} outside the kept"
                f" {self.first}..{self.first + self.logits.shape[0] - 1}"
            )
        return self.logits[rows]


class Decoded(NamedTuple):
    """One prompt decoded by ``TargetModel.decode_batch``: prompt + new tokens (CPU ids), {aux slot: [S - 1, T] states:
    every position but the last, whose next token the sequence does not hold, so that no drafter step reads its states},
    when asked for (``keep_bytes``) its ``SequencePass`` (None where none was kept), and, when asked for
    (``past_stop``), the greedy tokens decoded after its end-of-sequence token (None where it did not stop at one)."""

    tokens: torch.Tensor
    states: dict[int, torch.Tensor]
    kept: SequencePass | None = None
    after_stop: torch.Tensor | None = None


def _plain_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """The (keys, values) [B, kv heads, T, head dim] of every layer of a ``DynamicCache`` whose layers all hold the
    whole sequence as plain tensors; None for any other cache (a sliding window keeps only its last tokens)."""
    from transformers.cache_utils import DynamicLayer

    from .reserved_cache import ReservedLayer

    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) not in (DynamicLayer, ReservedLayer) for layer in layers):
        return None
    kv = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in layers]
    return (
        kv if all(isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor) and k.dim() == 4 for k, v in kv) else None
    )


def cut_at_stop(new: torch.Tensor, eos: set[int], past_stop: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(a row's new tokens up to its first end-of-sequence token, that one included; the tokens decoded after it, at
    most ``past_stop``: None where the row has no end-of-sequence token or none were asked for)."""
    stop = next((j + 1 for j, t in enumerate(new.tolist()) if t in eos), None)
    if stop is None:
        return new, None
    return new[:stop], new[stop : stop + past_stop].clone() if past_stop else None


class _Rows:
    """The rows of a decoding group the next forward feeds: which of the group's they are (``index``, None while all
    are), and per row fed whether it decoded an end-of-sequence token, how many tokens it still decodes past it, and
    whether it is done (a done row still fed gets the pad token, as transformers' ``generate`` feeds it)."""

    def __init__(self, n: int, device, eos: set[int], past_stop: int, pad: int):
        self.n, self.past_stop, self.pad = n, past_stop, pad
        self.index: torch.Tensor | None = None
        self.done = torch.zeros(n, dtype=torch.bool, device=device)
        self.stopped = torch.zeros_like(self.done)
        self.left = torch.zeros(n, dtype=torch.long, device=device)  # of a stopped row: tokens still to decode past it
        self.eos = torch.tensor(sorted(eos), device=device) if eos else None

    def pick(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's greedy tokens: (those of the rows fed, those of every row of the group: pad where not fed)."""
        token = logits.argmax(-1)
        token = torch.where(self.done, torch.full_like(token, self.pad), token)
        if self.eos is not None:
            self.left = torch.where(self.stopped, self.left - 1, self.left)  # this token was decoded past the stop
            newly = ~self.stopped & ~self.done & torch.isin(token, self.eos)
            self.stopped |= newly
            self.left = torch.where(newly, self.past_stop, self.left)
            self.done |= self.stopped & (self.left <= 0)
        if self.index is None:
            return token, token
        every = torch.full((self.n,), self.pad, dtype=token.dtype, device=token.device)
        every[self.index] = token
        return token, every

    def drop_done(self) -> torch.Tensor | None:
        """Stop feeding the done rows where they are at least a quarter of the rows fed and every forward before and
        after feeds ``MIN_ROWS`` to ``MAX_ROWS`` rows (the prepacked linears' range, whose floats per row do not depend
        on the rows beside it; fewer rows would change GEMM). Returns which of the rows fed stay, None for no change."""
        fed = self.done.shape[0]
        keep = (~self.done).nonzero().squeeze(1)
        if fed > MAX_ROWS or len(keep) < MIN_ROWS or 4 * (fed - len(keep)) < fed:
            return None
        self.done, self.stopped, self.left = self.done[keep], self.stopped[keep], self.left[keep]
        self.index = keep if self.index is None else self.index[keep]
        return keep


def decode_group(
    target,
    prompts: list[list[int]],
    max_new_tokens: int,
    pad: int,
    eos: set[int],
    slots: tuple[int, ...],
    *,
    keep_passes: bool = False,
    past_stop: int = 0,
    drop_done: bool = False,
):
    """One group of ``TargetModel.decode_batch`` (``target``), a ``Decoded`` per prompt in order. ``drop_done``: done
    rows leave the batch (``_Rows.drop_done``; never with ``keep_passes``, whose kept caches hold every row)."""
    from transformers import DynamicCache

    from .reserved_cache import ReservedLayer, reserve

    # room for every position this group's forwards feed: the shared prefix, the padded rest of the prompts, then one
    # per new token
    shared = shared_prefix(prompts)
    width = max(len(p) for p in prompts) - shared
    cache = reserve(DynamicCache(config=target.model.config), shared + width + max_new_tokens)
    reserved = bool(cache.layers) and all(isinstance(layer, ReservedLayer) for layer in cache.layers)
    if shared and not reserved:
        shared, width = 0, width + shared  # a sliding window, a linear-attention layer: no keys to hand on as they are
    states: list[
        tuple[torch.Tensor | None, dict]
    ] = []  # per forward: (the rows it fed, None: all; {slot: [rows, n, T]})
    if shared:
        states.append((None, _run_prefix(target, cache, prompts, shared, slots)))
    rows = _Rows(len(prompts), target.model.device, eos, past_stop, pad)
    prefilled = (
        _prefill_rows(target, cache, prompts, shared, width, slots)
        if reserved and prefill_alone(prompts, shared)
        else None
    )
    generated, logits = _decode_steps(
        target,
        cache,
        _padded_inputs(prompts, shared, width, pad, target.model.device),
        rows,
        states,
        slots,
        max_new_tokens,
        keep_passes=keep_passes,
        drop_done=drop_done and not keep_passes,
        prefilled=prefilled,
    )
    joined = {k: _joined(states, k, len(prompts)) for k in slots}  # [B, shared + width + steps - 1, T]
    layers = _plain_layers(cache) if keep_passes else None
    del states
    for row, prompt in enumerate(prompts):
        row_new, after_stop = cut_at_stop(generated[row], eos, past_stop)
        tokens = torch.cat([torch.tensor(prompt, dtype=generated.dtype), row_new])
        own = _row_columns(shared, shared + width - (len(prompt) - shared))  # this row's columns, its padding left out
        kept = None
        if layers is not None:  # this row's keys and values (in a cache of its sequence alone)
            kv = [
                (own(k[row : row + 1], tokens.shape[0], dim=2), own(v[row : row + 1], tokens.shape[0], dim=2))
                for k, v in layers
            ]
            kept = SequencePass(len(prompt) - 1, logits[row, : row_new.shape[0] + 1], DynamicCache(ddp_cache_data=kv))
        states_of_row = {k: own(v[row], tokens.shape[0] - 1, dim=0).clone() for k, v in joined.items()}
        yield Decoded(tokens, states_of_row, kept, after_stop)


def _padded_inputs(prompts: list[list[int]], shared: int, width: int, pad: int, device):
    """(ids [B, width], attention mask [B, shared + width] or None where nothing is padded, positions [B, width]):
    each prompt's own tokens after the ``shared`` prefix, left-padded to ``width`` (the padding masked, between the
    prefix and the prompt's own tokens), positions counted from each prompt's first token."""
    own_lengths = [len(p) - shared for p in prompts]
    ids = torch.tensor([[pad] * (width - n) + list(p[shared:]) for p, n in zip(prompts, own_lengths)], device=device)
    mask = torch.tensor([[1] * shared + [0] * (width - n) + [1] * n for n in own_lengths], device=device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)[:, shared:]
    return ids, None if bool((mask == 1).all()) else mask, positions


def _run_prefix(target, cache, prompts: list[list[int]], shared: int, slots: tuple[int, ...]) -> dict:
    """One forward of one row over the ``shared`` tokens every prompt starts with; its keys and values go to every
    row's place in ``cache``; returns its states, every row's ({slot: [B, shared, T]}, views)."""
    from transformers import DynamicCache

    prefix = DynamicCache(config=target.model.config)
    _, captured = target._forward(
        slots,
        input_ids=torch.tensor([prompts[0][:shared]], device=target.model.device),
        use_cache=True,
        logits_to_keep=1,
        **{target._cache_kwarg: prefix},
    )
    n = len(prompts)
    for index, (keys, values) in enumerate(_plain_layers(prefix)):
        cache.update(keys.expand(n, -1, -1, -1), values.expand(n, -1, -1, -1), index)
    return {k: v.expand(n, -1, -1) for k, v in captured.items()}


def _prefill_rows(target, cache, prompts: list[list[int]], shared: int, width: int, slots: tuple[int, ...]):
    """The prefill of a group one row at a time: each prompt's own tokens (after the ``shared`` prefix ``cache``
    holds) in a forward of their own, causal, no padding fed; their keys and values go to the row's own columns of
    ``cache`` (the last of the group's ``width``; the padding before them zero, and masked), whose layers are all
    ``ReservedLayer``. Returns what the padded prefill's forward would give ``_decode_steps``: (the logits after each
    prompt's last token [B, V] float32, {slot: [B, width, T] states, zero on the padding})."""
    from transformers import DynamicCache

    n, device = len(prompts), target.model.device
    logits, states = [], {}
    for row, prompt in enumerate(prompts):
        own = len(prompt) - shared
        past = DynamicCache(
            ddp_cache_data=[
                (layer.keys[row : row + 1, :, :shared], layer.values[row : row + 1, :, :shared])
                for layer in cache.layers
            ]
            if shared
            else None,
            config=None if shared else target.model.config,
        )
        out, captured = target._forward(
            slots,
            input_ids=torch.tensor([prompt[shared:]], device=device),
            position_ids=torch.arange(shared, len(prompt), device=device)[None],
            use_cache=True,
            logits_to_keep=1,
            **{target._cache_kwarg: past},
        )
        logits.append(out.logits[0, -1].to(dtype=torch.float32))
        layers = _plain_layers(past)
        if row == 0:  # the group's columns for its prompts, every row's zero until its prefill writes them
            for index, (keys, values) in enumerate(layers):
                shape = (n, keys.shape[1], width, keys.shape[3])
                cache.update(keys.new_zeros(()).expand(shape), values.new_zeros(()).expand(shape), index)
            states = {k: v.new_zeros((n, width, v.shape[-1])) for k, v in captured.items()}
        for layer, (keys, values) in zip(cache.layers, layers):
            layer.keys[row, :, shared + width - own :] = keys[0, :, shared:]
            layer.values[row, :, shared + width - own :] = values[0, :, shared:]
        for k, v in captured.items():
            states[k][row, width - own :] = v[0]
        del out, past, layers, captured
    return torch.stack(logits), states


def _decode_steps(
    target,
    cache,
    inputs: tuple,
    rows: _Rows,
    states: list,
    slots: tuple[int, ...],
    max_new_tokens: int,
    *,
    keep_passes: bool,
    drop_done: bool,
    prefilled: tuple | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The forwards of a group, one per new token, the states of each appended to ``states``: (the new tokens [B,
    steps] on the CPU, pad after a row is done; with ``keep_passes`` every forward's logits [B, steps + 1, V] float32,
    the last from one more forward that feeds the last tokens, else None). ``prefilled``: what the first forward (the
    prompts' prefill) gave where ``_prefill_rows`` ran it, (logits [B, V], {slot: states}): it is not run again."""
    step_ids, attention, positions = inputs
    logits = None
    new: list[torch.Tensor] = []

    def forward(with_slots: tuple[int, ...]):
        return target._forward(
            with_slots,
            input_ids=step_ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{target._cache_kwarg: cache},
        )

    while True:
        if prefilled is not None:
            (last, captured), prefilled = prefilled, None
        else:
            out, captured = forward(slots)
            last = out.logits[:, -1].to(dtype=torch.float32)
        states.append((rows.index, captured))
        if keep_passes:
            if logits is None:
                logits = last.new_empty((rows.n, max_new_tokens + 1, last.shape[-1]))
            logits[:, len(new)] = last
        token, every = rows.pick(last)
        new.append(every)
        if len(new) == max_new_tokens or bool(rows.done.all()):
            break
        # what the next forward is fed: these tokens, one position on (the done rows left out where that pays)
        step_ids, positions = token[:, None], positions[:, -1:] + 1
        if attention is not None:
            attention = torch.cat([attention, attention.new_ones((attention.shape[0], 1))], dim=-1)
        keep = rows.drop_done() if drop_done else None
        if keep is not None:
            step_ids, positions = step_ids[keep], positions[keep]
            attention = attention[keep] if attention is not None else None
            cache.batch_select_indices(keep)
    if keep_passes:  # the last new tokens' logits and keys: one more forward (nothing decodes past it)
        step_ids, positions = token[:, None], positions[:, -1:] + 1
        if attention is not None:
            attention = torch.cat([attention, attention.new_ones((attention.shape[0], 1))], dim=-1)
        out, _ = forward(())
        logits[:, len(new)] = out.logits[:, -1]
    return torch.stack(new, dim=1).cpu(), logits


def _joined(states: list, slot: int, n: int) -> torch.Tensor:
    """Slot ``slot``'s states of every forward, side by side: [n, positions, T]. A row the later forwards no longer fed
    (done) has zeros there, past its sequence's end, where nothing reads them."""
    pieces = [(index, captured[slot]) for index, captured in states]
    if all(index is None for index, _ in pieces):
        return torch.cat([piece for _, piece in pieces], dim=1)
    first = pieces[0][1]
    out = first.new_zeros((n, sum(piece.shape[1] for _, piece in pieces), first.shape[-1]))
    column = 0
    for index, piece in pieces:
        width = piece.shape[1]
        out[slice(None) if index is None else index, column : column + width] = piece
        column += width
    return out
