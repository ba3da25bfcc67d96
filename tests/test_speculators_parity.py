"""The reference forward against an independent, trainer-side implementation: the speculators package's
Eagle3DraftModel, loading eaglekit's speculators output, on the same inputs and every training-time-test step.
(speculators' model requires target hidden == hidden and has no MLA.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eaglekit import dialects
from eaglekit.convert import ConvertOptions, convert
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.reference.simulate import draft_chains

from drafters import Dims, write_tiny_target, write_vllm
from parity import require

pytestmark = pytest.mark.speculators

BASE = dict(H=64, T=64, V=96, heads=2, kv_heads=1, head_dim=32, I=96)
CASES = {
    "eagle3": (Dims(**BASE, Vd=96), {}),
    "eagle3.1 + d2t": (Dims(**BASE, Vd=48, fc_norm=True), {"norm_output": True}),
    "norm_before_fc": (Dims(**BASE, Vd=48, norm_before_fc=True), {}),
    "norm_before_residual": (Dims(**BASE, Vd=48), {"norm_before_residual": True}),
    "2 layers, 4 aux layers, qwen3": (
        Dims(**BASE, Vd=48, layers=2, n=4, qwen3=True, fc_norm=True),
        {"norm_output": True, "ids": [1, 3, 5, 7]},
    ),
}


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return write_tiny_target(tmp_path_factory.mktemp("t") / "target", layers=8, hidden=64, vocab=96, heads=2)


@pytest.mark.parametrize("case", list(CASES))
def test_reference_matches_speculators_eagle3_draft_model(tmp_path, target, case):
    require("speculators", "the speculators parity suite")
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.models.eagle3.config import Eagle3SpeculatorConfig

    dims, extra = CASES[case]
    src = write_vllm(
        tmp_path / "src", dims, ids=extra.get("ids", [2, 4, 5]), norm_output=extra.get("norm_output", False)
    )
    if extra.get("norm_before_residual"):
        import json

        cfg = json.loads((src / "config.json").read_text())
        cfg["norm_before_residual"] = True
        (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "speculators"
    convert(src, out, ConvertOptions(to="speculators", target=str(target)))

    config = Eagle3SpeculatorConfig.from_pretrained(str(out))
    config.transformer_layer_config._attn_implementation = "eager"  # flex attention needs 128-multiple lengths on CPU
    # convert writes no path of this machine as the verifier (a local target has no Hub id): named here, at load time
    assert config.speculators_config.verifier.name_or_path is None
    config.speculators_config.verifier.name_or_path = str(target)
    theirs = Eagle3DraftModel.from_pretrained(str(out), config=config).eval()
    logits: list[torch.Tensor] = []
    theirs.lm_head.register_forward_hook(lambda module, args, output: logits.append(output.detach()))

    S, K = 14, 3
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, dims.V, (S,), generator=g)
    aux = torch.randn(S, dims.n * dims.T, generator=g)
    with torch.no_grad():
        theirs(
            hidden_states=aux[None, : S - 1],
            input_ids=tokens[None, 1:],
            document_ids=torch.zeros(1, S - 1, dtype=torch.long),
            position_ids=torch.arange(S - 1)[None],  # speculators defaults to 1-based positions
            ttt_steps=K,
        )

    with dialects.load(out) as loaded:
        ours = ReferenceDrafter(loaded.drafter, weights_for(loaded))
    chains = draft_chains(
        ours, tokens, aux, torch.arange(S - 1), K, teacher=True
    )  # training-time test, as speculators runs
    assert len(logits) == K
    for step in range(K):
        valid = S - 1 - step  # speculators pads the shifted inputs at the end
        mine = ours.draft_logits(chains.y[:valid, step])
        diff = (mine - logits[step][0, :valid]).abs().max()
        assert diff <= 1e-5 * mine.abs().max(), (case, step + 1, float(diff))


@pytest.mark.parametrize("qwen3", [False, True], ids=["llama", "qwen3"])
def test_reference_matches_speculators_with_a_sliding_window(tmp_path, target, qwen3):
    """speculators' training defaults window every draft layer (sliding_window 2048, layer_types sliding_attention).
    With a tiny window (8) on sequences longer than it, speculators' own forward equals the reference that counts
    chain steps' windows from the chain's start, as speculators' mask does; full attention and the engine's count (by
    the draft token's position) differ from it."""
    require("speculators", "the speculators parity suite")
    import json

    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.models.eagle3.config import Eagle3SpeculatorConfig

    from eaglekit.model.drafter import Window

    W = 8
    dims = Dims(**BASE, Vd=48, layers=2, qwen3=qwen3, fc_norm=True)
    src = write_vllm(tmp_path / "src", dims, ids=[2, 4, 5], norm_output=True)
    out = tmp_path / "speculators"
    convert(src, out, ConvertOptions(to="speculators", target=str(target)))
    cfg = json.loads((out / "config.json").read_text())
    # as speculators' create_transformer_layer_config writes it: layer 1 full (--full-attention-indices 1)
    cfg["transformer_layer_config"].update(
        sliding_window=W, use_sliding_window=True, layer_types=["sliding_attention", "full_attention"]
    )
    (out / "config.json").write_text(json.dumps(cfg))

    config = Eagle3SpeculatorConfig.from_pretrained(str(out))
    config.transformer_layer_config._attn_implementation = "eager"
    config.speculators_config.verifier.name_or_path = str(target)  # convert writes none for a local target
    theirs = Eagle3DraftModel.from_pretrained(str(out), config=config).eval()
    assert theirs.sliding_window == W and theirs.sliding_window_indices == [0]
    logits: list[torch.Tensor] = []
    theirs.lm_head.register_forward_hook(lambda module, args, output: logits.append(output.detach()))

    S, K = 24, 3
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, dims.V, (S,), generator=g)
    aux = torch.randn(S, dims.n * dims.T, generator=g)
    with torch.no_grad():
        theirs(
            hidden_states=aux[None, : S - 1],
            input_ids=tokens[None, 1:],
            document_ids=torch.zeros(1, S - 1, dtype=torch.long),
            position_ids=torch.arange(S - 1)[None],
            ttt_steps=K,
        )

    with dialects.load(out) as loaded:
        d, weights = loaded.drafter, weights_for(loaded)
    assert d.window == Window(W, ("sliding_attention", "full_attention")) and d.windowed_layers == (0,)
    trained = ReferenceDrafter(d, weights, chain_window="chain_start")
    served = ReferenceDrafter(d, weights)  # the engine's count
    full = ReferenceDrafter(d.with_(window=Window()), weights)
    starts = torch.arange(S - 1)
    ours = draft_chains(trained, tokens, aux, starts, K, teacher=True)
    engine = draft_chains(served, tokens, aux, starts, K, teacher=True)
    plain = draft_chains(full, tokens, aux, starts, K, teacher=True)
    for step in range(K):
        valid = S - 1 - step
        mine = trained.draft_logits(ours.y[:valid, step])
        scale = mine.abs().max()
        assert (mine - logits[step][0, :valid]).abs().max() <= 1e-5 * scale, (
            step + 1,
            float((mine - logits[step][0, :valid]).abs().max()),
        )
        assert (
            full.draft_logits(plain.y[:valid, step]) - logits[step][0, :valid]
        ).abs().max() > 1e-3 * scale  # the window matters
        if step == 0:
            assert torch.equal(engine.y[:, 0], ours.y[:, 0])  # the first pass is the same either way
        else:
            assert (served.draft_logits(engine.y[:valid, step]) - logits[step][0, :valid]).abs().max() > 1e-3 * scale
