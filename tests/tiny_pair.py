"""A tiny target and a drafter trained on it in seconds, so acceptance tests have something that accepts.

The target is a random Llama (transformers, safetensors); the drafter is trained with examples/train_drafter.py's
loop on the target's own greedy continuations, and saved in SpecForge's layout. ``build_mla``: the same with a random
DeepSeek-V3 (MLA) target and an MLA drafter of the target's MLA dimensions, saved in vLLM's native layout.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import torch

from drafters import write_tiny_mla_target, write_tiny_target

ROOT = Path(__file__).resolve().parent.parent


def train_module():
    spec = importlib.util.spec_from_file_location("train_drafter", ROOT / "examples" / "train_drafter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prompts(n: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(rng.randrange(4, 9))] for _ in range(n)]


def build(
    root: Path,
    *,
    eagle: str = "3",
    steps: int = 120,
    seed: int = 0,
    vocab: int = 96,
    hidden: int = 64,
    layers: int = 8,
    draft_vocab: int = 64,
    attention_scale: float = 0.3,
    mask_token_id: int | None = None,
    flags: dict | None = None,
) -> dict:
    """Target dir, drafter dir (SpecForge layout; with ``mask_token_id`` a P-EAGLE drafter in speculators' layout),
    prompts file and the training figures."""
    # head_dim 32: the smallest vLLM's CPU attention kernels support
    target_dir = write_tiny_target(
        root / "target", layers=layers, hidden=hidden, vocab=vocab, heads=2, seed=seed, attention_scale=attention_scale
    )
    return _train(
        root,
        target_dir,
        eagle=eagle,
        steps=steps,
        seed=seed,
        draft_vocab=draft_vocab,
        mask_token_id=mask_token_id,
        flags=flags,
    )


def build_mla(
    root: Path,
    *,
    eagle: str = "3",
    steps: int = 60,
    seed: int = 0,
    vocab: int = 96,
    hidden: int = 64,
    layers: int = 8,
    draft_vocab: int = 64,
    model_type: str = "kimi_k2",
    target: Path | None = None,
    n_prompts: int = 6,
) -> dict:
    """An MLA drafter trained on a tiny DeepSeek-V3 target (``target``, or a new one: kv_lora_rank 512 +
    qk_rope_head_dim 64, q_lora_rank 64, the dimensions vLLM's CPU MLA takes), with the target's MLA dimensions, saved
    in vLLM's native layout (``Eagle3DeepseekV2ForCausalLM``, ``model_type``). Same loop, same data recipe as
    ``build``."""
    target_dir = target or write_tiny_mla_target(
        root / "target", layers=layers, hidden=hidden, vocab=vocab, heads=2, seed=seed
    )
    return _train(
        root,
        target_dir,
        eagle=eagle,
        steps=steps,
        seed=seed,
        draft_vocab=draft_vocab,
        mla=True,
        model_type=model_type,
        n_prompts=n_prompts,
    )


def _train(
    root: Path,
    target_dir: Path,
    *,
    eagle: str,
    steps: int,
    seed: int,
    draft_vocab: int,
    mla: bool = False,
    model_type: str | None = None,
    n_prompts: int = 6,
    mask_token_id: int | None = None,
    flags: dict | None = None,
) -> dict:
    """``flags``: flag values over those ``eagle`` sets (e.g. EAGLE 3.1 with norm_output and no fc_norm)."""
    from dataclasses import replace

    from eaglekit.model.drafter import default_aux_ids
    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    tm = train_module()
    cfg = read_target_config(target_dir)
    vocab = cfg.vocab_size
    target = TargetModel.load(cfg)
    # The drafter is trained on the very prompts the tests verify with: these tests need a drafter whose
    # acceptance is well above zero on known sequences, not one that generalises.
    train_prompts = prompts(n_prompts, vocab, seed)
    eval_prompts = train_prompts
    aux_ids = default_aux_ids(cfg.num_layers)
    data = []
    for p in train_prompts:
        seq = target.generate(p, 40)
        aux, _ = target.aux_states(seq, aux_ids)
        data.append((seq, aux, len(p)))
    d2t, t2d = tm.build_vocab([s for s, _, _ in data], [p for _, _, p in data], vocab, draft_vocab)
    d = tm.drafter_spec(
        cfg,
        eagle,
        draft_vocab,
        aux_ids,
        mla=tm.target_mla(cfg) if mla else None,
        model_type=model_type,
        mask_token_id=mask_token_id,
    )
    if flags:
        d = d.with_(flags=replace(d.flags, **flags))
    weights = tm.init_weights(d, target, d2t, seed)
    frozen = {"embed_tokens.weight": target.embed_weight.float(), "d2t": d2t}
    tm.train(d, weights, frozen, data, t2d, d2t, steps, 3, 5e-3, seed, log_every=10**9)
    if d.parallel is not None:  # P-EAGLE: speculators' layout, embed_tokens kept (the target's, frozen here)
        drafter_dir = root / f"drafter-peagle-{eagle}{'-' + '-'.join(sorted(flags)) if flags else ''}"
        weights = {"embed_tokens.weight": frozen["embed_tokens.weight"], **weights}
        tm.save_speculators(drafter_dir, d, weights, d2t, t2d, torch.float32, "tests/tiny_pair.py", seed, "target")
    else:
        drafter_dir = root / (f"drafter-mla-{eagle}" if mla else f"drafter-{eagle}")
        save = tm.save_vllm if mla else tm.save_specforge
        save(drafter_dir, d, weights, d2t, t2d, torch.float32, "tests/tiny_pair.py", seed)
    prompts_file = root / "prompts.jsonl"
    prompts_file.write_text(
        "\n".join(json.dumps({"id": f"p{i}", "input_ids": p}) for i, p in enumerate(eval_prompts)) + "\n"
    )
    return {"target": target_dir, "drafter": drafter_dir, "prompts": prompts_file}


CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '[' + m['role'] + ']' + m['content'] + '|' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '[assistant]' }}{% endif %}"
)


def add_char_tokenizer(target_dir: Path) -> None:
    """A character-level tokenizer for the tiny target (96 ids: '<s>' then printable ASCII), with a small chat
    template, so that text prompts and their framings (drift --variants) can run on the tiny pair."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, **{chr(32 + i): i + 1 for i in range(95)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<s>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<s>", pad_token="<s>", chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(str(target_dir))


def captured_results(monkeypatch) -> list:
    """Every SequenceResult verify simulates while ``monkeypatch`` (a pytest MonkeyPatch) holds, in order."""
    from eaglekit.verify import run

    results: list = []
    simulate = run.simulate

    def keep(*args, **kwargs):
        results.append(simulate(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(run, "simulate", keep)
    return results


def target_stopping_inside_a_step(pair: dict, root: Path, max_new_tokens: int) -> tuple[Path, str, int]:
    """A copy of ``pair``'s target whose generation_config makes an end-of-sequence token of the first draft target of a
    prompt's first verification step, where that step accepts a >= 2 drafts on the plain target: (the copy, the prompt's
    id, a). Decoded with that eos the sequence ends there; vLLM still counts the step's a accepted drafts."""
    import shutil

    import pytest

    from eaglekit.verify import VerifyOptions, verify

    with pytest.MonkeyPatch.context() as mp:
        results = captured_results(mp)
        verify(
            str(pair["drafter"]),
            VerifyOptions(target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=max_new_tokens),
        )
    for r in results:
        P, tokens = len(r.prompt.ids), r.tokens.tolist()
        if int(r.accepted[0]) >= 2 and tokens[P + 1] != tokens[P]:  # the chain at P - 1: the first step's
            target = root / "target-eos"
            shutil.copytree(pair["target"], target)
            config = json.loads((target / "generation_config.json").read_text())
            config["eos_token_id"] = tokens[P + 1]
            (target / "generation_config.json").write_text(json.dumps(config))
            return target, r.prompt.id, int(r.accepted[0])
    raise AssertionError("no prompt's first step accepts 2 drafts: the tiny pair did not train")
