"""Trainer conformance with SpecForge 0.2.0's own model (issue 15): checkpoints saved by SpecForge's own
``save_pretrained``; eaglekit's reference forward equals SpecForge's backbone + compute_logits over 3
training-time-test steps under eaglekit's reading; a trip through eaglekit's sglang writer leaves SpecForge's
own forward unchanged.

SpecForge is installed beside the suite, never into the venv (its dependencies are not needed for the model):

    pip install --no-deps --target /tmp/specforge-site specforge==0.2.0
    PYTHONPATH=/tmp/specforge-site pytest tests/test_specforge_parity.py

SpecForge's ``from_pretrained`` (transformers 5.x) leaves its rotary buffers uninitialised, so its model is built
from the config and given the saved weights with ``load_state_dict``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from eaglekit import dialects
from eaglekit.convert import ConvertOptions, convert
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.reference.simulate import draft_chains

from parity import require

pytestmark = pytest.mark.specforge

H, V, VD, S, K = 64, 96, 48, 14, 3
CASES = {
    "norm_output false (lm_head on the un-normalised state)": dict(norm_output=False, fc_norm=False),
    "norm_output true (plain EAGLE 3)": dict(norm_output=True, fc_norm=False),
    "fc_norm, norm_output true": dict(norm_output=True, fc_norm=True),
}


def _model_class():
    require("specforge", "the SpecForge conformance suite")
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from transformers import LlamaConfig

    return LlamaForCausalLMEagle3, LlamaConfig


def _build(config):
    cls, _ = _model_class()
    torch.manual_seed(0)
    return cls(config).eval()


def _save_specforge(directory: Path, case: dict) -> Path:
    """A checkpoint as SpecForge's training leaves it: its model class, its save_pretrained."""
    _, LlamaConfig = _model_class()
    config = LlamaConfig(
        hidden_size=H,
        intermediate_size=96,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        num_hidden_layers=1,
        vocab_size=V,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        pad_token_id=0,
        architectures=["LlamaForCausalLMEagle3"],
    )
    config.draft_vocab_size = VD
    config.target_hidden_size = H
    config.norm_output = case["norm_output"]
    config.fc_norm = case["fc_norm"]
    config.eagle_config = {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True}
    model = _build(config)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or ".norm" in name or name.startswith("fc_norm"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
        used = torch.sort(torch.randperm(V, generator=g)[:VD]).values
        model.d2t.copy_(used - torch.arange(VD))
        model.t2d.zero_()
        model.t2d[used] = True
    model.save_pretrained(str(directory), safe_serialization=True)
    return directory


def _specforge_forward(
    directory: Path, tokens: torch.Tensor, aux: torch.Tensor, embed: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """SpecForge's training-time test, as its Eagle3 training loop runs it: backbone, then compute_logits; the
    backbone's (pre-norm) output is the next step's hidden state; step k's inputs are shifted by k. ``embed``: the
    target's embedding, where the checkpoint ships none (SpecForge loads it from the target)."""
    cls, LlamaConfig = _model_class()
    config = LlamaConfig.from_pretrained(str(directory))
    model = _build(config)
    state = {}
    for f in directory.glob("*.safetensors"):
        state.update(load_file(str(f)))
    if "embed_tokens.weight" not in state and embed is not None:
        state["embed_tokens.weight"] = embed
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m or m.endswith("inv_freq") for m in missing), (missing, unexpected)
    n = S - 1
    mask = model.prepare_decoder_attention_mask(
        attention_mask=torch.ones(1, n, dtype=torch.bool),
        hidden_states=aux[None, :n],
        batch_size=1,
        seq_length=n,
        past_key_values_length=0,
    )
    cache = [[], []]
    out = []
    with torch.no_grad(), torch._dynamo.config.patch(disable=True):
        hidden = model.project_hidden_states(aux[None, :n])
        for step in range(K):
            ids = torch.zeros(n, dtype=torch.long)
            ids[: n - step] = tokens[1 + step :]
            embeds = model.embed_input_ids(ids[None])
            hidden = model.backbone(embeds, hidden, cache, mask, torch.arange(n)[None])
            out.append(model.compute_logits(hidden)[0])
    return out


def _inputs():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, V, (S,), generator=g), torch.randn(S, 3 * H, generator=g)


@pytest.mark.parametrize("case", list(CASES))
def test_reference_matches_specforge_and_sglang_round_trip_keeps_its_forward(tmp_path, case):
    src = _save_specforge(tmp_path / "specforge", CASES[case])
    tokens, aux = _inputs()
    theirs = _specforge_forward(src, tokens, aux)

    with dialects.load(src) as loaded:  # SpecForge's own save path: the reading cannot be told, and is said so
        assert loaded.dialect == "sglang"
        assert any(n.check == "flags.norm_output_semantics" for n in loaded.notes)
    with dialects.load(src, norm_output_semantics="specforge") as loaded:
        assert loaded.drafter.flags.norm_before_lm_head == CASES[case]["norm_output"]
        ours = ReferenceDrafter(loaded.drafter, weights_for(loaded))
    chains = draft_chains(ours, tokens, aux, torch.arange(S - 1), K, teacher=True)
    for step in range(K):
        valid = S - 1 - step
        mine = ours.draft_logits(chains.y[:valid, step])
        diff = (mine - theirs[step][:valid]).abs().max()
        assert diff <= 1e-5 * mine.abs().max(), (case, step + 1, float(diff))

    out = tmp_path / "sglang"
    convert(src, out, ConvertOptions(to="sglang", norm_output_semantics="specforge"))
    again = _specforge_forward(out, tokens, aux, embed=load_file(str(src / "model.safetensors"))["embed_tokens.weight"])
    for step in range(K):
        assert torch.allclose(again[step], theirs[step], atol=1e-6, rtol=0), (case, step + 1)
    assert json.loads((out / "config.json").read_text()).get("norm_output", True) == CASES[case]["norm_output"]
