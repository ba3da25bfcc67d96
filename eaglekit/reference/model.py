"""The reference forward: an EAGLE 3 / 3.1 drafter in plain torch, from the canonical model, on any device/dtype.

It follows vLLM's computation step for step (docs/engines.md; vLLM's llama_eagle3.py):

- fusion ``combine``: ``input_norm`` over the concatenation (norm_before_fc), per-chunk ``fc_norm`` (3.1), ``fc``;
  the identity when ``use_aux_hidden_state`` is false;
- layer 0 on ``cat(input_layernorm(embed), hidden_norm(h))``, residual ``h`` or ``hidden_norm(h)``
  (``norm_before_residual``); further layers are plain decoder layers on the running residual;
- attention: Llama GQA (neox rope, llama3/yarn/linear scaling), Qwen3 (per-head q/k norm before rope), or
  DeepSeek/Kimi MLA (low-rank q/kv, interleaved rope on the rope slice, yarn mscale² in the softmax scale);
- final fused add-norm gives the post-norm state and ``pre``; the state fed to the next draft step is ``pre``
  (EAGLE 3) or the post-norm one (``norm_output``, EAGLE 3.1); lm_head reads the post-norm state, or ``pre``
  where it was trained so (``norm_before_lm_head`` false: SpecForge 0.2.0's ``norm_output: false``);
- logits over the draft vocabulary; a draft index i is target token ``i + d2t[i]``;
- P-EAGLE (``Drafter.parallel``): the rows after the first are fed the mask token and the fused ``mask_hidden``
  (``mask_rows``), not the previous draft and state (simulate.py).

Attention takes a callback so that one decoder serves both the causal first pass over a sequence and the
batched draft chains (``simulate.py``).

Sliding-window layers (``Drafter.window``): a position p attends to p-W+1 .. p, as transformers and speculators
mask it. At a draft step k >= 2 of a chain started at j there are two ways to count the window, chosen with
``chain_window``: "position" (default) counts back from the draft token's own position j+k-1, as an engine's KV
cache does (vLLM); "chain_start" counts back from the chain's start j and always sees the chain's own keys, as
speculators' training-time-test mask does (its draft keys sit on the diagonal of extra blocks, outside the window).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ..errors import UnsupportedError
from ..model.drafter import Drafter
from .ops import add_rms_norm, apply_rope, rms_norm, rope_cos_sin

if TYPE_CHECKING:  # pragma: no cover
    from .record import DriftRecorder


@dataclass
class KV:
    """Keys and values of some drafter positions, per layer: k [N, kv_heads, dk], v [N, kv_heads, dv]."""

    k: torch.Tensor
    v: torch.Tensor


@dataclass
class StepOutput:
    y: torch.Tensor  # what lm_head sees [N, H]: the post-norm hidden (pre-norm without norm_before_lm_head)
    pre: torch.Tensor  # pre-norm residual sum [N, H]
    feedback: torch.Tensor  # what the next draft step receives as its hidden state
    kv: list[KV]  # this call's keys/values, per layer


CHAIN_WINDOWS = ("position", "chain_start")

Attend = Callable[
    [int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
]  # (layer, q, k, v) -> out [N, heads*dv]


class ReferenceDrafter:
    def __init__(
        self,
        drafter: Drafter,
        weights: Mapping[str, torch.Tensor],
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        chain_window: str = "position",
    ):
        """``weights``: canonical name -> tensor, including ``embed_tokens.weight`` and ``lm_head.weight``
        (the caller supplies the target's when the drafter ships none). ``chain_window``: how a sliding window counts
        at draft steps >= 2, "position" (an engine's KV cache) or "chain_start" (speculators' training mask)."""
        if chain_window not in CHAIN_WINDOWS:
            raise UnsupportedError(f"chain_window must be one of {', '.join(CHAIN_WINDOWS)}, got {chain_window!r}")
        self.d = drafter
        self.chain_window = chain_window
        self.device = torch.device(device)
        self.dtype = dtype
        self.w: dict[str, torch.Tensor] = {}
        for name, tensor in weights.items():
            if name in ("d2t", "t2d"):
                self.w[name] = tensor.to(self.device)
            else:
                self.w[name] = tensor.to(self.device, dtype)
        if "lm_head.weight" not in self.w and "lm_head.up.weight" in self.w:
            self.w["lm_head.weight"] = (self.w["lm_head.up.weight"].float() @ self.w["lm_head.down.weight"].float()).to(
                dtype
            )
        for needed in ("embed_tokens.weight", "lm_head.weight", "norm.weight"):
            if needed not in self.w:
                raise UnsupportedError(f"the reference forward needs {needed} (from the drafter or the target)")
        d2t = self.w.get("d2t")
        self.draft_to_target = torch.arange(self.w["lm_head.weight"].shape[0], device=self.device)
        if d2t is not None:
            self.draft_to_target = self.draft_to_target + d2t.to(torch.int64)
        self.rope = drafter.rope_as_loaded  # as transformers hands it to vLLM
        if drafter.attention == "mla":
            m = drafter.mla
            self.qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
            mscale = self.rope.mla_softmax_mscale()
            self.scale = self.qk_dim**-0.5 * mscale * mscale  # in vLLM's order: the float it computes
        else:
            self.scale = drafter.head_dim**-0.5

    # -- pieces ----------------------------------------------------------------------------------------

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[f"{name}.weight"], self.w.get(f"{name}.bias"))

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return rms_norm(x, self.w[f"{name}.weight"], self.d.rms_norm_eps)

    def combine(self, aux: torch.Tensor, recorder: DriftRecorder | None = None) -> torch.Tensor:
        """Fuse the concatenated target states [N, n*T] into the drafter's hidden [N, H] (``recorder``: see
        record.py)."""
        x = aux.to(self.device, self.dtype)
        if not self.d.flags.use_aux_hidden_state:
            return x
        if self.d.flags.norm_before_fc:
            x = self._norm(x, "input_norm")
        if self.d.flags.fc_norm:
            chunks = x.chunk(self.d.num_aux, dim=-1)
            x = torch.cat([self._norm(c, f"fc_norm.{i}") for i, c in enumerate(chunks)], dim=-1)
        if recorder is not None:
            recorder.fc_input(x, self.d.num_aux)
        return self._linear(x, "fc")

    def mask_rows(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A P-EAGLE drafter's mask rows, ``n`` of them: the mask token's ids [n] and the fused ``mask_hidden`` [n, H]
        (fused as a target state is: vLLM runs ``combine_hidden_states`` on it once, at load)."""
        parallel = self.d.parallel
        if parallel is None or parallel.mask_token_id is None or "mask_hidden" not in self.w:
            raise UnsupportedError("cannot run the P-EAGLE drafter's mask rows: it needs a mask token and mask_hidden")
        state = self.combine(self.w["mask_hidden"].reshape(1, -1))
        ids = torch.full((n,), parallel.mask_token_id, dtype=torch.long, device=self.device)
        return ids, state.expand(n, -1)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids.to(self.device), self.w["embed_tokens.weight"])

    def draft_logits(self, y: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary [.., Vd]."""
        return F.linear(y, self.w["lm_head.weight"])

    def greedy(self, y: torch.Tensor) -> torch.Tensor:
        """Greedy draft tokens, as target ids."""
        return self.draft_to_target[self.draft_logits(y).argmax(-1)]

    def _qkv(self, i: int, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        p = f"layers.{i}.self_attn"
        d = self.d
        if d.attention == "mla":
            m = d.mla
            if m.q_lora_rank:
                q = self._linear(self._norm(self._linear(x, f"{p}.q_a_proj"), f"{p}.q_a_layernorm"), f"{p}.q_b_proj")
            else:
                q = self._linear(x, f"{p}.q_proj")
            q = q.view(-1, d.num_heads, self.qk_dim)
            latent = self._linear(x, f"{p}.kv_a_proj_with_mqa")
            kv_c, k_pe = latent.split([m.kv_lora_rank, m.qk_rope_head_dim], dim=-1)
            kv = self._linear(self._norm(kv_c, f"{p}.kv_a_layernorm"), f"{p}.kv_b_proj").view(
                -1, d.num_heads, m.qk_nope_head_dim + m.v_head_dim
            )
            k_nope, v = kv.split([m.qk_nope_head_dim, m.v_head_dim], dim=-1)
            cos, sin = rope_cos_sin(self.rope, m.qk_rope_head_dim, positions, deepseek=True)
            q_nope, q_pe = q.split([m.qk_nope_head_dim, m.qk_rope_head_dim], dim=-1)
            q_pe = apply_rope(q_pe, cos, sin, neox=False)
            k_pe = apply_rope(k_pe.unsqueeze(1), cos, sin, neox=False)
            q = torch.cat([q_nope, q_pe], dim=-1)
            k = torch.cat([k_nope, k_pe.expand(-1, d.num_heads, -1)], dim=-1)
            return q, k, v.contiguous()
        q = self._linear(x, f"{p}.q_proj").view(-1, d.num_heads, d.head_dim)
        k = self._linear(x, f"{p}.k_proj").view(-1, d.num_kv_heads, d.head_dim)
        v = self._linear(x, f"{p}.v_proj").view(-1, d.num_kv_heads, d.head_dim)
        if d.attention == "qwen3":
            q = self._norm(q, f"{p}.q_norm")
            k = self._norm(k, f"{p}.k_norm")
        # vLLM's get_rope: the first rotary_dim dimensions of each head rotate, neox-style, with frequencies over
        # rotary_dim; the rest pass through (partial_rotary_factor < 1)
        rot = d.rotary_dim
        cos, sin = rope_cos_sin(self.rope, rot, positions)
        if rot == d.head_dim:
            return apply_rope(q, cos, sin, neox=True), apply_rope(k, cos, sin, neox=True), v
        q = torch.cat((apply_rope(q[..., :rot], cos, sin, neox=True), q[..., rot:]), dim=-1)
        k = torch.cat((apply_rope(k[..., :rot], cos, sin, neox=True), k[..., rot:]), dim=-1)
        return q, k, v

    def _mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        p = f"layers.{i}.mlp"
        return self._linear(
            F.silu(self._linear(x, f"{p}.gate_proj")) * self._linear(x, f"{p}.up_proj"), f"{p}.down_proj"
        )

    # -- the decoder ---------------------------------------------------------------------------------------

    def decode(self, ids: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, attend: Attend) -> StepOutput:
        """Run the decoder layers on N rows: ``ids`` [N] (target vocab), ``hidden`` [N, H], ``positions`` [N]."""
        d, eps = self.d, self.d.rms_norm_eps
        e = self.embed(ids)
        hidden = hidden.to(self.device, self.dtype)
        positions = positions.to(self.device)
        kvs: list[KV] = []
        m = residual = None
        for i in range(d.num_layers):
            p = f"layers.{i}"
            if i == 0:
                e_hat = self._norm(e, f"{p}.input_layernorm")
                h_hat = self._norm(hidden, f"{p}.hidden_norm")
                residual = h_hat if d.flags.norm_before_residual else hidden
                x = torch.cat([e_hat, h_hat], dim=-1)
            else:
                x, residual = add_rms_norm(m, residual, self.w[f"{p}.input_layernorm.weight"], eps)
            q, k, v = self._qkv(i, x, positions)
            kvs.append(KV(k, v))
            attn = attend(i, q, k, v)
            o = self._linear(attn, f"{p}.self_attn.o_proj")
            h2, residual = add_rms_norm(o, residual, self.w[f"{p}.post_attention_layernorm.weight"], eps)
            m = self._mlp(i, h2)
        normed, pre = add_rms_norm(m, residual, self.w["norm.weight"], eps)
        y = normed if d.flags.norm_before_lm_head else pre
        return StepOutput(y, pre, normed if d.flags.norm_output else pre, kvs)

    # -- attention ---------------------------------------------------------------------------------------

    def _expand_kv(self, t: torch.Tensor) -> torch.Tensor:
        """[.., kv_heads, d] -> [.., heads, d] (GQA)."""
        groups = self.d.num_heads // t.shape[-2]
        return t if groups == 1 else t.repeat_interleave(groups, dim=-2)

    def causal_attend(self, block: int = 256, recorder: DriftRecorder | None = None) -> Attend:
        """Causal self-attention over the rows of one call (the first pass over a sequence): row i is position i,
        and a sliding-window layer's row i sees rows i-W+1 .. i."""

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            k, v = self._expand_kv(k).float(), self._expand_kv(v).float()
            window = self.d.window.for_layer(layer)
            n = q.shape[0]
            out = []
            for start in range(0, n, block):
                qb = q[start : start + block].float()
                # in place where the same floats come out: a long sequence's blocks of scores are ~47 MB each (9
                # heads x 256 rows x 5k columns), and each copy of them is memory the process holds at its peak
                scores = torch.einsum("qhd,khd->hqk", qb, k[: start + qb.shape[0]]).mul_(self.scale)
                rows = torch.arange(start, start + qb.shape[0], device=q.device)[:, None]
                cols = torch.arange(start + qb.shape[0], device=q.device)[None, :]
                hidden = cols > rows
                if window is not None:
                    hidden = hidden | (cols <= rows - window)
                probs = scores.masked_fill_(hidden, float("-inf")).softmax(-1)
                del scores
                if recorder is not None:
                    recorder.first_pass_attention(layer, probs)
                out.append(torch.einsum("hqk,khd->qhd", probs, v[: start + qb.shape[0]]))
            return torch.cat(out).to(q.dtype).reshape(n, -1)

        return attend


def weights_for(
    loaded, *, target_embed: torch.Tensor | None = None, target_lm_head: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Canonical weights of a loaded drafter, with the target's embedding / lm_head where the drafter ships none.

    A missing norm weight is replaced by ones, which is what vLLM runs with (and validate reports); any other
    missing weight makes the drafter undefined, and is refused."""
    from ..model.layout import expected_tensors

    weights = {c: loaded.read(c) for c in loaded.names}
    for name, spec in expected_tensors(loaded.drafter).items():
        if name in weights or not spec.required or name in ("d2t",):
            continue
        if name.startswith("fc_norm.") or name.endswith("norm.weight"):
            weights[name] = torch.ones(spec.shape)
        else:
            raise UnsupportedError(
                f"cannot run the drafter: tensor {loaded.stored_name(name)} is missing (see `eaglekit validate`)"
            )
    if "embed_tokens.weight" not in weights:
        if target_embed is None:
            raise UnsupportedError("the drafter ships no embed_tokens: the target's embedding is needed")
        weights["embed_tokens.weight"] = target_embed
    if "lm_head.weight" not in weights and "lm_head.up.weight" not in weights:
        if target_lm_head is None:
            raise UnsupportedError("the drafter ships no lm_head: the target's lm_head is needed")
        if target_lm_head.shape[0] != loaded.drafter.draft_vocab_size:
            raise UnsupportedError(
                f"the drafter ships no lm_head and its draft vocabulary ({loaded.drafter.draft_vocab_size}) "
                f"differs from the target's ({target_lm_head.shape[0]})"
            )
        weights["lm_head.weight"] = target_lm_head
    return weights


__all__ = ["Attend", "KV", "ReferenceDrafter", "StepOutput", "weights_for"]
