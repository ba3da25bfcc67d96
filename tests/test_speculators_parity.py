"""The reference forward against an independent, trainer-side implementation: the speculators package's
Eagle3DraftModel, loading eaglekit's speculators output, on the same inputs and every training-time-test step.
(speculators' model requires target hidden == hidden and has no MLA.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from drafters import Dims, write_tiny_target, write_vllm
from eaglekit import dialects
from eaglekit.convert import ConvertOptions, convert
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.reference.simulate import draft_chains
from parity import require

pytestmark = pytest.mark.speculators

BASE = dict(H=64, T=64, V=96, heads=2, kv_heads=1, head_dim=32, I=96)
CASES = {
    "eagle3": (Dims(**BASE, Vd=96), {}),
    "eagle3.1 + d2t": (Dims(**BASE, Vd=48, fc_norm=True), {"norm_output": True}),
    "norm_before_fc": (Dims(**BASE, Vd=48, norm_before_fc=True), {}),
    "norm_before_residual": (Dims(**BASE, Vd=48), {"norm_before_residual": True}),
    "2 layers, 4 aux layers, qwen3": (Dims(**BASE, Vd=48, layers=2, n=4, qwen3=True, fc_norm=True), {"norm_output": True, "ids": [1, 3, 5, 7]}),
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
    src = write_vllm(tmp_path / "src", dims, ids=extra.get("ids", [2, 4, 5]), norm_output=extra.get("norm_output", False))
    if extra.get("norm_before_residual"):
        import json

        cfg = json.loads((src / "config.json").read_text())
        cfg["norm_before_residual"] = True
        (src / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "speculators"
    convert(src, out, ConvertOptions(to="speculators", target=str(target)))

    config = Eagle3SpeculatorConfig.from_pretrained(str(out))
    config.transformer_layer_config._attn_implementation = "eager"  # flex attention needs 128-multiple lengths on CPU
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
    chains = draft_chains(ours, tokens, aux, torch.arange(S - 1), K, teacher=True)  # training-time test, as speculators runs
    assert len(logits) == K
    for step in range(K):
        valid = S - 1 - step  # speculators pads the shifted inputs at the end
        mine = ours.draft_logits(chains.y[:valid, step])
        diff = (mine - logits[step][0, :valid]).abs().max()
        assert diff <= 1e-5 * mine.abs().max(), (case, step + 1, float(diff))
