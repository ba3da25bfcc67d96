"""The target model itself, through transformers (for verify): loading, greedy continuations, the aux hidden states,
its embedding and lm_head.

Aux id k (vLLM's input-of-layer convention) is HF ``hidden_states[k]`` for k < L. For k == L vLLM captures the
final *pre*-norm residual stream, while HF's last hidden state is after the final norm, so that one is taken
from a hook on the final norm's input.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch

from ..errors import MissingDependencyError, UnsupportedError
from . import gguf_cache
from .config import TargetConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@contextlib.contextmanager
def _quiet_gguf_loader():
    """transformers' GGUF dequantisation shows its own tqdm bar with no switch; eaglekit's output stays clean."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    original = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UnsupportedError(f"--device {device}: CUDA is not available here")
    return device


@dataclass
class TargetModel:
    config: TargetConfig
    model: object  # transformers PreTrainedModel
    tokenizer: object | None
    device: str
    dtype: torch.dtype

    @classmethod
    def load(cls, config: TargetConfig, *, device: str = "cpu", dtype: torch.dtype = torch.float32, device_map: str | None = None) -> "TargetModel":
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

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
                    import gguf  # noqa: F401
                except ImportError:
                    raise MissingDependencyError("loading a GGUF target needs the gguf package: pip install 'eaglekit[gguf]'") from None
                gguf_kwargs = {"gguf_file": config.gguf_file}
        if device_map:
            kwargs["device_map"] = device_map
        with _quiet_gguf_loader():
            model = AutoModelForCausalLM.from_pretrained(directory, **kwargs, **gguf_kwargs)
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, **gguf_kwargs)
        except (OSError, ValueError):
            tokenizer = None
        if gguf_path is not None and not device_map:
            gguf_cache.save(gguf_path, model, tokenizer, config.config)
        if not device_map:
            model = model.to(device)
        model.eval()
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

    def _final_norm(self):
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else getattr(self.model, "model", None)
        norm = getattr(decoder, "norm", None)
        if norm is None:
            raise UnsupportedError("cannot find the target's final norm, needed for aux layer id == num_layers")
        return norm

    def eos_token_ids(self) -> set[int]:
        ids = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if ids is None and self.tokenizer is not None:
            ids = getattr(self.tokenizer, "eos_token_id", None)
        if ids is None:
            return set()
        return {int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids])}

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
            pad_token_id=getattr(self.tokenizer, "pad_token_id", None) or getattr(self.tokenizer, "eos_token_id", None) or 0,
        )
        return out[0].cpu()

    @torch.no_grad()
    def generate_batch(self, prompts: list[list[int]], max_new_tokens: int, batch_size: int = 16) -> list[torch.Tensor]:
        """``generate`` for several prompts at once, the same tokens: prompts are left-padded to a common length (the
        attention mask hides the padding, positions count from each prompt's first token) and decoded together
        with one KV cache; each row is cut where the one-prompt run stops (after its first end-of-sequence token,
        or at ``max_new_tokens``). A row that finishes early is padded by generate; the cut removes that."""
        pad = getattr(self.tokenizer, "pad_token_id", None) or getattr(self.tokenizer, "eos_token_id", None) or 0
        eos = self.eos_token_ids()
        # longest first, so that each batch holds prompts of similar length (less padding)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        out: list[torch.Tensor | None] = [None] * len(prompts)
        for start in range(0, len(order), batch_size):
            group = order[start : start + batch_size]
            width = max(len(prompts[i]) for i in group)
            ids = torch.tensor([[pad] * (width - len(prompts[i])) + list(prompts[i]) for i in group], device=self.model.device)
            mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in group], device=self.model.device)
            generated = self.model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                            pad_token_id=pad).cpu()
            for row, i in enumerate(group):
                new = generated[row, width:]
                stop = next((j + 1 for j, t in enumerate(new.tolist()) if t in eos), new.shape[0])
                out[i] = torch.cat([torch.tensor(prompts[i], dtype=generated.dtype), new[:stop]])
        return out  # type: ignore[return-value]

    @torch.no_grad()
    def aux_states(self, tokens: torch.Tensor, layer_ids: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(aux [S, n*T] concatenated in ascending layer order, target greedy next tokens [S])."""
        ids = tuple(sorted(set(layer_ids)))
        L = self.num_layers
        if ids and (ids[0] < 0 or ids[-1] > L):
            raise UnsupportedError(f"aux layer ids {list(ids)} outside 0..{L} for a {L}-layer target")
        captured: dict[str, torch.Tensor] = {}
        handle = None
        if L in ids:
            handle = self._final_norm().register_forward_pre_hook(lambda module, args: captured.__setitem__("pre_norm", args[0].detach()))
        try:
            out = self.model(tokens[None].to(self.model.device), output_hidden_states=True, use_cache=False)
        finally:
            if handle is not None:
                handle.remove()
        states = [captured["pre_norm"][0] if k == L else out.hidden_states[k][0] for k in ids]
        return torch.cat(states, dim=-1), out.logits[0].argmax(-1)

    @torch.no_grad()
    def sequence_pass(self, tokens: torch.Tensor, keep: torch.Tensor):
        """One pass over ``tokens`` that keeps its KV cache: (next-token logits at the positions ``keep`` [n, V], the
        cache) for ``chain_logits``. Only the kept rows are projected to the vocabulary (a 5k-token sequence's full
        logits would be ~1 GB for a 49k vocabulary)."""
        out = self.model(tokens[None].to(self.model.device), use_cache=True, logits_to_keep=keep.to(self.model.device))
        return out.logits[0].float(), out.past_key_values

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
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=device).masked_fill(~allowed, torch.finfo(self.dtype).min)
        try:
            out = self.model(drafts[:, : K - 1].reshape(1, n).to(device), position_ids=positions[None], attention_mask=mask[None, None],
                             past_key_values=cache, use_cache=True)
        finally:
            cache.crop(seq_len)
        return out.logits[0].float().view(J, K - 1, -1)
