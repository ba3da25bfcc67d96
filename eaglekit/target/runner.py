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

import torch

from ..errors import MissingDependencyError, UnsupportedError, install_line
from ..io.dtypes import CAST_TARGETS
from . import gguf_cache, heap
from .config import TargetConfig
from .decode import (
    BATCH_MEMORY_SHARE,
    MAX_BATCH,
    PADDING,
    Decoded,
    cut_at_stop,
    decode_group,
    length_groups,
)
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
        raise UnsupportedError(f"`device` {device}: CUDA is not available here")
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


def _keep(captured: dict, slot: int, module, args: tuple, kwargs: dict) -> None:
    """A forward pre-hook: keep the module's input hidden states under ``slot``."""
    captured[slot] = args[0] if args else kwargs["hidden_states"]


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

    def row_bytes(self, prompt: int, steps: int, slots: int, keep_logits: bool) -> int:
        """About what one row of a decoded group holds at most, in bytes, for a prompt of ``prompt`` tokens (its group's
        width) decoding ``steps`` tokens: its keys and values in every layer, the states of ``slots`` aux layers (twice:
        per step, then joined), with ``keep_logits`` the logits after every new token (float32), and its prefill's
        attention scores (heads x prompt x prompt float32, what a masked attention may hold at once)."""
        config = getattr(self.model.config, "get_text_config", lambda: self.model.config)()
        heads = getattr(config, "num_attention_heads", 1) or 1
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        hidden = getattr(config, "hidden_size", 0) or 0
        head_dim = getattr(config, "head_dim", None) or hidden // heads
        layers = getattr(config, "num_hidden_layers", self.num_layers)
        item = torch.empty((), dtype=self.dtype).element_size()
        positions = prompt + steps
        per_position = 2 * layers * kv_heads * head_dim * item + 2 * slots * hidden * item
        logits = (steps + 1) * self.config.vocab_size * 4 if keep_logits else 0
        return positions * per_position + logits + heads * prompt * prompt * 4

    def batch_rows(self, prompt: int, steps: int, slots: int = 0, keep_logits: bool = False) -> int:
        """How many prompts ``decode_batch`` decodes together unless told: ``MAX_BATCH``, or fewer where a group's rows
        (``row_bytes``) would take more than ``BATCH_MEMORY_SHARE`` of the memory available now; at least 1."""
        from .packed_gemm import available_bytes

        available = available_bytes()
        if not available:
            return MAX_BATCH
        per_row = max(self.row_bytes(prompt, steps, slots, keep_logits), 1)
        return max(1, min(MAX_BATCH, int(BATCH_MEMORY_SHARE * available) // per_row))

    def pad_token_id(self) -> int:
        """The id left padding is written with (masked, so any id the embedding has will do): the tokenizer's pad, else
        its eos, else 0; one past the embedding (a pad token added to the tokenizer only) would index out of range."""
        rows = self.model.get_input_embeddings().weight.shape[0]
        for candidate in (getattr(self.tokenizer, "pad_token_id", None), getattr(self.tokenizer, "eos_token_id", None)):
            if isinstance(candidate, int) and 0 <= candidate < rows:
                return candidate
        return 0

    def generate_batch(
        self, prompts: list[list[int]], max_new_tokens: int, batch_size: int | None = None, padding: float = PADDING
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
        batch_size: int | None = None,
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
        most ``batch_size`` per group, default ``batch_rows``; padding at most ``padding`` of a group's real positions,
        its decoded ones included). The tokens all of a group's prompts start with (``shared_prefix``: a chat
        template's system prompt) are run once, for one row, and their keys, values and states given to every row; the
        rest of each prompt follows, left-padded (the padding masked, between the prefix and the prompt's own tokens).
        On a CPU in float32 the steps' linears take oneDNN's prepacked weights where that pays
        (``packed_gemm.packed_linears``), and the rows that are done then leave their batch (``_Rows.drop_done``).

        ``keep_bytes``: each prompt's ``SequencePass`` is kept from the same forwards (every step's logits, the
        row's part of the KV cache), so that ``chain_logits`` needs no second pass over the sequence, for the groups
        decoded while the passes kept so far hold fewer bytes than that (so at most one group's more); the rest get
        None, as do prompts whose cache is not plain per-layer keys and values (a sliding window keeps only its last
        tokens) or that ``generate`` decodes. A pass holds (new tokens + 1) x vocabulary float32 logits and the
        sequence's whole cache (2 x layers x kv heads x head dim x dtype bytes per token).

        ``past_stop``: a row that reaches an end-of-sequence token goes on decoding greedily, ignoring it, for up to
        this many tokens more (none past ``max_new_tokens``), returned apart as ``Decoded.after_stop``: what the target
        would have picked after it, as a speculative step that crosses the stop token compares its drafts with. The
        row stays in its batch for those steps."""
        pad, eos = self.pad_token_id(), self.eos_token_ids()
        slots = self._check_slots(capture)
        out: list = [None] * len(prompts)
        kept_bytes = 0
        if batch_size is None:
            batch_size = self.batch_rows(max(map(len, prompts), default=0), max_new_tokens, len(slots), keep_bytes > 0)
        groups = length_groups([len(p) for p in prompts], batch_size, padding, steps=max_new_tokens)
        plain = self._plain_greedy()
        # the steps' linears through oneDNN's prepacked weights where that pays (target/packed_gemm.py); ``generate``'s
        # own decoding keeps the plain GEMM, so that its tokens stay exactly generate's
        packing = (
            packed_linears(self.model, max(map(len, groups), default=0), max_new_tokens)
            if plain
            else contextlib.nullcontext()
        )
        with packing as packed:
            for group in groups:
                group_prompts = [prompts[i] for i in group]
                if plain:
                    results = decode_group(
                        self,
                        group_prompts,
                        max_new_tokens,
                        pad,
                        eos,
                        slots,
                        keep_passes=kept_bytes < keep_bytes,
                        past_stop=past_stop,
                        drop_done=bool(packed),
                    )
                else:
                    results = self._generate_group(group_prompts, max_new_tokens, pad, eos, slots, past_stop)
                for i, result in zip(group, results):
                    out[i] = result
                    kept_bytes += result.kept.nbytes if result.kept is not None else 0
        heap.trim()  # the prefills' and caches' freed memory back to the system (target/heap.py)
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
        """``decode_group`` through transformers' ``generate`` (for a generation config whose processors change greedy
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
                )  # as decode_group: not the last token's
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


def _returned_cache(out):
    """A forward's KV cache: ``out.cache`` from transformers 5.24 on (its ``past_key_values`` is a deprecated alias)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
