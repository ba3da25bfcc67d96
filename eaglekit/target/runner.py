"""The target model itself, through transformers (for verify): loading, greedy continuations, the aux hidden states,
its embedding and lm_head.

Aux id k (vLLM's input-of-layer convention) is HF ``hidden_states[k]`` for k < L. For k == L vLLM captures the
final *pre*-norm residual stream, while HF's last hidden state is after the final norm, so that one is taken
from a hook on the final norm's input.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..errors import MissingDependencyError, UnsupportedError, install_line
from ..io.dtypes import CAST_TARGETS
from . import gguf_cache
from .config import TargetConfig
from .long_lived import long_lived
from .packed_gemm import packed_linears
from .tokens import eos_ids, load_tokenizer
from .transformers_import import import_transformers_models

DTYPES = {
    name: dtype.torch for name, dtype in CAST_TARGETS.items()
}  # what the target may run in: the float types convert casts to


@contextlib.contextmanager
def _gguf_loader():
    """transformers' GGUF loading, quiet and parsing the file once.

    Its dequantisation shows a tqdm bar of its own with no switch; eaglekit's output stays clean. And it reads the
    file afresh for each thing it takes from it: ``load_gguf_checkpoint`` builds a new ``gguf.GGUFReader`` (every
    metadata field, the tokenizer's ~49k strings included) for the config, the weights and the tokenizer's config, and
    builds gguf's tensor-name map anew for each of the model's ~400 modules (``get_gguf_hf_weights_map``; both read in
    transformers 5.19's and 5.24's source, which import them from ``gguf`` when called). Inside, a file's reader is
    built once and shared (transformers only reads it; the file is mapped read-only) and the name map once per
    architecture and depth: SmolLM2's cold load parsed the file 3 times instead of 1 and built the map 397 times."""
    try:
        import gguf
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    reader_class, name_map, bar = gguf.GGUFReader, gguf.get_tensor_name_map, gguf_utils.tqdm
    gguf.GGUFReader, gguf.get_tensor_name_map = (
        functools.cache(reader_class),
        functools.cache(name_map),
    )  # dropped on leaving
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map, gguf_utils.tqdm = reader_class, name_map, bar


def _without_cudnn_attention(method):
    """Run a ``TargetModel`` method with attention kept off cuDNN's kernels on CUDA.

    Given half-precision inputs on an H100, torch's scaled-dot-product attention picks cuDNN's, which builds an
    execution plan for every new shape on the host, and a KV-cached decode feeds a new key length at every step: the
    example pair's 20-prompt verify in bf16 spent 14-16 s generating where fp32 (which cuDNN's kernel does not take)
    spent 3.5-5.4 s, and a profile put 2.8 ms of host time in each cuDNN attention call (torch 2.11, 2026-11-26); with
    cuDNN's kernel off, 3.2-4.1 s. Flash and memory-efficient attention (and the math fallback) keep their usual order;
    fp32 runs the kernel it ran."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        if torch.device(self.device).type != "cuda":
            return method(self, *args, **kwargs)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
            return method(self, *args, **kwargs)

    return run


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UnsupportedError(f"--device {device}: CUDA is not available here")
    return device


# generation-config entries under which transformers' greedy ``generate`` changes the logits before its argmax (its
# logits processors), with their neutral values: a target that sets any other value is decoded by ``generate``
# itself, so that its tokens stay generate's (``TargetModel.decode_batch``)
GREEDY_NEUTRAL = {
    "repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None, []),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "suppress_tokens": (None, []),
    "begin_suppress_tokens": (None, []),
    "sequence_bias": (None, {}),
    "exponential_decay_length_penalty": (None,),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
}


# The most of a group's prefill that may go to padding (see length_groups).
PADDING = 0.25

# A group's prompts share a leading run of tokens (a chat template's system prompt: 24 of the demo's 37-48) where at
# least this many prefill rows are saved by running it once ((prompts - 1) x its length; see shared_prefix). The one
# more forward costs its ~1,300 small ops beyond its rows (~20 ms on 2 cores), a row of the demo's padded prefill ~3 ms:
# 16 rows is about twice that (an estimate from those two figures, not a measured break-even).
MIN_SHARED_ROWS = 16


def shared_prefix(prompts: list[list[int]]) -> int:
    """How many leading tokens ``_decode_group`` runs once for all of ``prompts``: the tokens they all start with, each
    prompt keeping at least one of its own (its last position's logits pick its first new token), or 0 where that
    saves fewer than ``MIN_SHARED_ROWS`` prefill rows."""
    if len(prompts) < 2:
        return 0
    n = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for p in prompts[1:]:
        n = next((i for i in range(n) if p[i] != first[i]), n)
    return n if (len(prompts) - 1) * n >= MIN_SHARED_ROWS else 0


def length_groups(lengths: list[int], batch_size: int, padding: float = PADDING) -> list[list[int]]:
    """Which prompts to decode together (indices, longest first): a group is left-padded to its longest prompt, so its
    prefill runs width x n positions, and its padding mask keeps attention off the fused causal kernels. A group
    closes when it holds ``batch_size`` prompts or when taking the next prompt would spend more than ``padding`` of
    its prefill on padding. Prompts of like length share a batch (the demo's 8 prompts of 37-48 tokens are one);
    inputs of 0.3k, 1.3k and 5.2k tokens each get their own (padded together they decoded 5x slower on 2 cores)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        group = groups[-1] if groups else None
        if group is not None and len(group) < batch_size:
            width, total = lengths[group[0]], sum(lengths[j] for j in group) + lengths[i]
            if width * (len(group) + 1) <= (1 + padding) * total:
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


def _keep(captured: dict, slot: int, module, args: tuple, kwargs: dict) -> None:
    """A forward pre-hook: keep the module's input hidden states under ``slot``."""
    captured[slot] = args[0] if args else kwargs["hidden_states"]


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


@dataclass
class TargetModel:
    config: TargetConfig
    model: object  # transformers PreTrainedModel
    tokenizer: object | None
    device: str
    dtype: torch.dtype

    @classmethod
    @long_lived()
    def load(
        cls,
        config: TargetConfig,
        *,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        device_map: str | None = None,
    ) -> TargetModel:
        import_transformers_models()  # its folder of models read once, not twice (transformers_import.py)
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        from .gguf_rope import apply_rope_freqs, apply_stated_scaling, check_loadable
        from .gqa_attention import use_shared_kv_heads

        check_loadable(config)  # a GGUF file whose rope transformers would not load as the file states it
        hf_logging.disable_progress_bar()  # eaglekit shows its own progress; loading bars garble reports and logs
        hf_logging.set_verbosity_error()
        kwargs: dict = {"dtype": dtype}
        directory, gguf_kwargs = str(config.directory), {}
        gguf_path = config.directory / config.gguf_file if config.gguf_file else None
        if gguf_path is not None:
            cached = gguf_cache.cached(gguf_path)
            if cached is not None:  # dequantised before: a plain transformers directory
                directory, gguf_path = str(cached), None
            else:
                try:
                    import gguf  # noqa: F401  (transformers' GGUF reader needs it)
                except ImportError:
                    raise MissingDependencyError(
                        "loading a GGUF target needs the gguf package (eaglekit's [gguf] extra):"
                        f" {install_line('gguf')}"
                    ) from None
                gguf_kwargs = {"gguf_file": config.gguf_file}
        if device_map:
            kwargs["device_map"] = device_map
        with _gguf_loader() if gguf_kwargs else contextlib.nullcontext():
            model = AutoModelForCausalLM.from_pretrained(directory, **kwargs, **gguf_kwargs)
            tokenizer = load_tokenizer(config, directory, gguf_kwargs)
        apply_stated_scaling(model, config)  # before the cache entry is written: its config states the scaling
        if gguf_path is not None and not device_map:
            gguf_cache.save(gguf_path, model, tokenizer, config.config)
        if not device_map:
            model = model.to(device)
        model.eval()
        apply_rope_freqs(model, config)  # a GGUF file's llama.cpp rope divisors, which transformers does not load
        use_shared_kv_heads(model)  # on a CPU: SDPA without copying a GQA model's KV heads (the same floats)
        return cls(config, model, tokenizer, device if not device_map else str(model.device), dtype)

    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    @property
    def embed_weight(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight.detach()

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight.detach()

    @functools.cached_property
    def _cache_kwarg(self) -> str:
        """The keyword the model's forward takes its KV cache by: ``cache`` from transformers 5.24 on (which warns, and
        renames on every call, when given the older ``past_key_values``), ``past_key_values`` before."""
        return "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    def _decoder(self):
        return self.model.get_decoder() if hasattr(self.model, "get_decoder") else getattr(self.model, "model", None)

    def _final_norm(self):
        norm = getattr(self._decoder(), "norm", None)
        if norm is None:
            raise UnsupportedError("cannot find the target's final norm, needed for aux layer id == num_layers")
        return norm

    def eos_token_ids(self) -> set[int]:
        """Where the continuation stops, as vLLM stops it: the tokenizer's eos and every generation_config eos id
        (SamplingParams.update_from_generation_config adds the latter to the former)."""
        return eos_ids(getattr(self.model, "generation_config", None), self.tokenizer)

    @_without_cudnn_attention
    @torch.no_grad()
    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> torch.Tensor:
        """The target's greedy continuation: prompt + new tokens, as one id tensor on the CPU."""
        ids = torch.tensor([prompt_ids], device=self.model.device)
        out = self.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=self.pad_token_id(),
            eos_token_id=sorted(self.eos_token_ids()) or None,
        )
        return out[0].cpu()

    def pad_token_id(self) -> int:
        """The id left padding is written with (masked, so any id the embedding has will do): the tokenizer's pad, else
        its eos, else 0; one past the embedding (a pad token added to the tokenizer only) would index out of range."""
        rows = self.model.get_input_embeddings().weight.shape[0]
        for candidate in (getattr(self.tokenizer, "pad_token_id", None), getattr(self.tokenizer, "eos_token_id", None)):
            if isinstance(candidate, int) and 0 <= candidate < rows:
                return candidate
        return 0

    def generate_batch(
        self, prompts: list[list[int]], max_new_tokens: int, batch_size: int = 16, padding: float = PADDING
    ) -> list[torch.Tensor]:
        """``generate`` for several prompts at once, the same tokens (``decode_batch`` without capture)."""
        return [d.tokens for d in self.decode_batch(prompts, max_new_tokens, batch_size=batch_size, padding=padding)]

    @_without_cudnn_attention
    @torch.inference_mode()  # not just no_grad: no version counters or view tracking, 3-7% of the demo's decode
    def decode_batch(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        *,
        batch_size: int = 16,
        padding: float = PADDING,
        capture: tuple[int, ...] = (),
        keep_bytes: int = 0,
        past_stop: int = 0,
    ) -> list[Decoded]:
        """Greedy continuations of several prompts at once, with the hidden states of the aux slots ``capture`` at every
        position, taken from the very forwards that picked the tokens (no second pass over the sequences).

        Per prompt: (prompt + new tokens as one id tensor on the CPU, {slot: [S - 1, T] states on the model's device}).
        In float32 the tokens are ``generate``'s, token for token (in bf16 they are not always: a padded batch rounds
        otherwise, and 6 of 24 random prompts of a tiny target took another greedy path): prompts are left-padded to a
        common length (an attention mask hides the padding, positions count from each prompt's first token), one KV
        cache decodes them together, and this loop makes the forward calls transformers' ``generate`` makes for greedy
        decoding (2D mask, dropped when nothing is padded; positions from the mask; logits of the last position only; a
        finished row is fed the pad token), without its per-step machinery. Each row is cut after its first
        end-of-sequence token or at ``max_new_tokens``. The states of a row's last token are not computed: a drafter
        fuses the states of position t with token t + 1, and the last token has none after it (its logits are, with
        ``keep_bytes``: one more forward feeds every row's last token). Prompts are grouped by ``length_groups`` (at
        most ``batch_size`` per group, at most ``padding`` of a group's prefill spent on padding). The tokens all of a
        group's prompts start with (``shared_prefix``: a chat template's system prompt) are run once, as a batch of one
        row, and their keys, values and states given to every row; the rest of each prompt follows, left-padded (the
        padding masked, between the prefix and the prompt's own tokens): the demo's prefill runs 24 + 8 x 24 positions
        instead of 8 x 48. On a CPU in float32 the steps' linears take oneDNN's prepacked weights while the groups
        decode, where that pays (``packed_gemm.packed_linears``).

        ``keep_bytes``: each prompt's ``SequencePass`` is kept from the same forwards (every step's logits, the
        row's part of the KV cache), so that ``chain_logits`` needs no second pass over the sequence, for the groups
        decoded while the passes kept so far hold fewer bytes than that (so at most one group's more); the rest get
        None, as do prompts whose cache is not plain per-layer keys and values (a sliding window keeps only its last
        tokens) or that ``generate`` decodes. A pass holds (new tokens + 1) x vocabulary float32 logits and the
        sequence's whole cache (2 x layers x kv heads x head dim x dtype bytes per token).

        ``past_stop``: a row that reaches an end-of-sequence token goes on decoding greedily, ignoring it, for up to
        this many tokens more (none past ``max_new_tokens``), returned apart as ``Decoded.after_stop``: what the target
        would have picked after it, as a speculative step that crosses the stop token compares its drafts with. The
        row stays in its batch for those steps (free while any other row still decodes)."""
        pad, eos = self.pad_token_id(), self.eos_token_ids()
        slots = self._check_slots(capture)
        out: list = [None] * len(prompts)
        kept_bytes = 0
        groups = length_groups([len(p) for p in prompts], batch_size, padding)
        plain = self._plain_greedy()
        # the steps' linears through oneDNN's prepacked weights where that pays (target/packed_gemm.py); ``generate``'s
        # own decoding keeps the plain GEMM, so that its tokens stay exactly generate's
        packing = (
            packed_linears(self.model, max(map(len, groups), default=0), max_new_tokens)
            if plain
            else contextlib.nullcontext()
        )
        with packing:
            for group in groups:
                group_prompts = [prompts[i] for i in group]
                if plain:
                    results = self._decode_group(
                        group_prompts,
                        max_new_tokens,
                        pad,
                        eos,
                        slots,
                        keep_passes=kept_bytes < keep_bytes,
                        past_stop=past_stop,
                    )
                else:
                    results = self._generate_group(group_prompts, max_new_tokens, pad, eos, slots, past_stop)
                for i, result in zip(group, results):
                    out[i] = result
                    kept_bytes += result.kept.nbytes if result.kept is not None else 0
        return out

    def _plain_greedy(self) -> bool:
        config = getattr(self.model, "generation_config", None)
        return config is None or all(getattr(config, key, None) in neutral for key, neutral in GREEDY_NEUTRAL.items())

    def _generate_group(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        pad: int,
        eos: set[int],
        slots: tuple[int, ...],
        past_stop: int = 0,
    ):
        """``_decode_group`` through transformers' ``generate`` (for a generation config whose processors change greedy
        tokens), the states from one full pass per sequence. With ``past_stop``, ``generate`` decodes every row to
        ``max_new_tokens`` (it has no way to stop a row a given count after its end-of-sequence token)."""
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=self.model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.model.device)
        unstopped = {}
        if past_stop:
            config = copy.deepcopy(self.model.generation_config)
            config.eos_token_id = None
            unstopped = {"generation_config": config}
        generated = self.model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=pad,
            **unstopped,
        ).cpu()
        for row, prompt in enumerate(prompts):
            kept_new, after_stop = cut_at_stop(generated[row, width:], eos, past_stop)
            tokens = torch.cat([torch.tensor(prompt, dtype=generated.dtype), kept_new])
            states = {}
            if slots:
                aux, _ = self.aux_states(tokens, slots)
                states = dict(
                    zip(slots, aux[:-1].split(aux.shape[-1] // len(slots), dim=-1))
                )  # as _decode_group: not the last token's
            yield Decoded(tokens, states, None, after_stop)

    def _check_slots(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        ids = tuple(sorted(set(ids)))
        L = self.num_layers
        if ids and (ids[0] < 0 or ids[-1] > L):
            raise UnsupportedError(f"aux layer ids {list(ids)} outside 0..{L} for a {L}-layer target")
        return ids

    def _forward(self, slots: tuple[int, ...], **inputs) -> tuple[object, dict[int, torch.Tensor]]:
        """One forward of the model; with ``slots``, their hidden states, each the input of its decoder layer (HF
        ``hidden_states[k]``) or, for slot L, of the final norm: hooks keep those alone (``output_hidden_states``
        would hold every layer's, for the whole padded batch)."""
        captured: dict[int, torch.Tensor] = {}
        L = self.num_layers
        layers = getattr(self._decoder(), "layers", None) if slots else None
        if slots and (layers is None or len(layers) < L):
            raise UnsupportedError("cannot find the target's decoder layers to take the aux states from")
        modules = {k: self._final_norm() if k == L else layers[k] for k in slots}
        handles = [
            module.register_forward_pre_hook(functools.partial(_keep, captured, k), with_kwargs=True)
            for k, module in modules.items()
        ]
        try:
            out = self.model(**inputs)
        finally:
            for handle in handles:
                handle.remove()
        return out, captured

    def _decode_group(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        pad: int,
        eos: set[int],
        slots: tuple[int, ...],
        keep_passes: bool = False,
        past_stop: int = 0,
    ):
        from transformers import DynamicCache

        from .reserved_cache import ReservedLayer, reserve

        device = self.model.device
        # room for every position this group's forwards feed: the shared prefix, the padded rest of the prompts, then
        # one per new token
        shared = shared_prefix(prompts)
        width = max(len(p) for p in prompts) - shared
        cache = reserve(DynamicCache(config=self.model.config), shared + width + max_new_tokens)
        if shared and not (cache.layers and all(isinstance(layer, ReservedLayer) for layer in cache.layers)):
            shared, width = (
                0,
                width + shared,
            )  # a sliding window, a linear-attention layer: no keys to hand on as they are
        # columns: the shared prefix, each prompt's own tokens left-padded to a common width (masked), the new tokens
        own_lengths = [len(p) - shared for p in prompts]
        ids = torch.tensor(
            [[pad] * (width - n) + list(p[shared:]) for p, n in zip(prompts, own_lengths)], device=device
        )
        mask = torch.tensor([[1] * shared + [0] * (width - n) + [1] * n for n in own_lengths], device=device)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)[:, shared:]
        attention = None if bool((mask == 1).all()) else mask
        states: list[dict[int, torch.Tensor]] = []  # per forward: {slot: [B, n, T]}
        if shared:  # one forward of one row; its keys, values and states are every row's
            prefix = DynamicCache(config=self.model.config)
            _, captured = self._forward(
                slots,
                input_ids=torch.tensor([prompts[0][:shared]], device=device),
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_kwarg: prefix},
            )
            rows = len(prompts)
            for index, (keys, values) in enumerate(_plain_layers(prefix)):
                cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), index)
            states.append({k: v.expand(rows, -1, -1) for k, v in captured.items()})
            del prefix
        logits = None  # keep_passes: [B, forward, V] float32, every forward's logits
        new: list[torch.Tensor] = []
        done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
        stopped = torch.zeros_like(done)  # an end-of-sequence token decoded
        left = torch.zeros(
            len(prompts), dtype=torch.long, device=device
        )  # of a stopped row: tokens still to decode past it
        eos_ids = torch.tensor(sorted(eos), device=device) if eos else None
        step_ids = ids
        while True:
            out, captured = self._forward(
                slots,
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_kwarg: cache},
            )
            states.append(captured)
            last = out.logits[:, -1].to(dtype=torch.float32)
            if keep_passes:
                if logits is None:
                    logits = last.new_empty((len(prompts), max_new_tokens + 1, last.shape[-1]))
                logits[:, len(new)] = last
            token = last.argmax(-1)
            token = torch.where(done, torch.full_like(token, pad), token)
            new.append(token)
            if eos_ids is not None:
                left = torch.where(stopped, left - 1, left)  # this token was decoded past the stop
                newly = ~stopped & ~done & torch.isin(token, eos_ids)
                stopped |= newly
                left = torch.where(newly, past_stop, left)
                done |= stopped & (left <= 0)
            # what the next forward is fed: these tokens, one position on
            step_ids = token[:, None]
            positions = positions[:, -1:] + 1
            if attention is not None:
                attention = torch.cat([attention, attention.new_ones((attention.shape[0], 1))], dim=-1)
            if len(new) == max_new_tokens or bool(done.all()):
                break
        if keep_passes:  # the last new tokens' logits and keys: one more forward (nothing decodes past it)
            out, _ = self._forward(
                (),
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{self._cache_kwarg: cache},
            )
            logits[:, len(new)] = out.logits[:, -1]
        generated = torch.stack(new, dim=1).cpu()
        joined = {k: torch.cat([s[k] for s in states], dim=1) for k in slots}  # [B, shared + width + steps - 1, T]
        layers = _plain_layers(cache) if keep_passes else None
        del states
        for row, prompt in enumerate(prompts):
            row_new, after_stop = cut_at_stop(generated[row], eos, past_stop)
            tokens = torch.cat([torch.tensor(prompt, dtype=generated.dtype), row_new])
            own = _row_columns(
                shared, shared + width - (len(prompt) - shared)
            )  # this row's columns, its padding left out
            kept = None
            if layers is not None:  # this row's keys and values (in a cache of its sequence alone)
                rows = [
                    (own(k[row : row + 1], tokens.shape[0], dim=2), own(v[row : row + 1], tokens.shape[0], dim=2))
                    for k, v in layers
                ]
                kept = SequencePass(
                    len(prompt) - 1, logits[row, : row_new.shape[0] + 1], DynamicCache(ddp_cache_data=rows)
                )  # a view: one block for the group
            yield Decoded(
                tokens,
                {k: own(v[row], tokens.shape[0] - 1, dim=0).clone() for k, v in joined.items()},
                kept,
                after_stop,
            )

    @_without_cudnn_attention
    @torch.no_grad()
    def aux_states(self, tokens: torch.Tensor, layer_ids: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(aux [S, n*T] concatenated in ascending layer order, target greedy next tokens [S])."""
        ids = self._check_slots(layer_ids)
        L = self.num_layers
        captured: dict[str, torch.Tensor] = {}
        handle = None
        if L in ids:
            handle = self._final_norm().register_forward_pre_hook(
                lambda module, args: captured.__setitem__("pre_norm", args[0].detach())
            )
        try:
            out = self.model(tokens[None].to(self.model.device), output_hidden_states=True, use_cache=False)
        finally:
            if handle is not None:
                handle.remove()
        states = [captured["pre_norm"][0] if k == L else out.hidden_states[k][0] for k in ids]
        return torch.cat(states, dim=-1), out.logits[0].argmax(-1)

    @_without_cudnn_attention
    @torch.no_grad()
    def sequence_pass(self, tokens: torch.Tensor, keep: torch.Tensor):
        """One pass over ``tokens`` that keeps its KV cache: (next-token logits at the positions ``keep`` [n, V], the
        cache) for ``chain_logits``. Only the kept rows are projected to the vocabulary (a 5k-token sequence's full
        logits would be ~1 GB for a 49k vocabulary)."""
        out = self.model(tokens[None].to(self.model.device), use_cache=True, logits_to_keep=keep.to(self.model.device))
        return out.logits[0].float(), _returned_cache(out)

    @_without_cudnn_attention
    @torch.no_grad()
    def chain_logits(self, cache, seq_len: int, starts: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """The target's next-token logits after each chain's drafted prefix: row m (1 <= m < K) of chain j follows
        x_0..x_{j+1}, d_1..d_m (d_m at position j+1+m). All chains go through one pass over the cached sequence with
        a 4D mask (a chain sees the sequence up to j+1 and its own earlier drafts); the cache is cut back to the
        sequence afterwards, so the next chunk reuses it. [J, K-1, V] float32."""
        J, K = drafts.shape
        if K == 1:
            return torch.empty(J, 0, self.model.config.vocab_size)
        device = self.model.device
        n = J * (K - 1)
        starts = starts.to(device)
        chain = torch.arange(J, device=device).repeat_interleave(K - 1)  # chain of each new row
        step = torch.arange(K - 1, device=device).repeat(J)  # its index m-1 inside the chain
        positions = starts[chain] + 2 + step
        seen = torch.arange(seq_len, device=device)[None, :] <= (starts[chain] + 1)[:, None]  # [n, S]
        own = (chain[:, None] == chain[None, :]) & (step[None, :] <= step[:, None])  # [n, n]
        allowed = torch.cat([seen, own], dim=1)
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=device).masked_fill(
            ~allowed, torch.finfo(self.dtype).min
        )
        try:
            out = self.model(
                drafts[:, : K - 1].reshape(1, n).to(device),
                position_ids=positions[None],
                attention_mask=mask[None, None],
                use_cache=True,
                **{self._cache_kwarg: cache},
            )
        # back to the sequence: a negative crop removes that many positions (transformers 5.24 refuses a length)
        finally:
            cache.crop(seq_len - cache.get_seq_length())
        return out.logits[0].float().view(J, K - 1, -1)


def cut_at_stop(new: torch.Tensor, eos: set[int], past_stop: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(a row's new tokens up to its first end-of-sequence token, that one included; the tokens decoded after it, at
    most ``past_stop``: None where the row has no end-of-sequence token or none were asked for)."""
    stop = next((j + 1 for j, t in enumerate(new.tolist()) if t in eos), None)
    if stop is None:
        return new, None
    return new[:stop], new[stop : stop + past_stop].clone() if past_stop else None


def _returned_cache(out):
    """A forward's KV cache: ``out.cache`` from transformers 5.24 on (its ``past_key_values`` is a deprecated alias)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
