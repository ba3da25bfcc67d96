"""The GPU path: the reference and the target in bf16/fp16 on CUDA against fp32 on the CPU. Skipped without CUDA;
run on a GPU machine (figures in benchmarks/README.md when one was available)."""

from __future__ import annotations

import pytest
import torch

import tiny_pair
from drafters import Dims, mla_dims, write_vllm
from eaglekit import dialects
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.reference.simulate import draft_chains
from eaglekit.verify import VerifyOptions, verify

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 1e-2}  # of the largest logit magnitude


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dims", [Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96, fc_norm=True),
                                  Dims(H=64, T=64, V=96, Vd=96, heads=2, I=96, mla=mla_dims(), fc_norm=True)], ids=["gqa", "mla"])
def test_reference_on_cuda_matches_cpu_fp32(tmp_path, dtype, dims):
    src = write_vllm(tmp_path / "d", dims, norm_output=True)
    with dialects.load(src) as loaded:
        weights = weights_for(loaded)
        cpu = ReferenceDrafter(loaded.drafter, weights)
        gpu = ReferenceDrafter(loaded.drafter, weights, device="cuda", dtype=dtype)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, dims.V, (40,), generator=g)
    aux = torch.randn(40, dims.n * dims.T, generator=g)
    starts = torch.arange(0, 39)
    a = draft_chains(cpu, tokens, aux, starts, 3, teacher=True)
    b = draft_chains(gpu, tokens, aux, starts, 3, teacher=True)
    for step in range(3):
        la = cpu.draft_logits(a.y[:, step]).float()
        lb = gpu.draft_logits(b.y[:, step]).float().cpu()
        assert (la - lb).abs().max() <= TOLERANCE[dtype] * la.abs().max()


def test_verify_on_cuda_in_bf16(tmp_path):
    pair = tiny_pair.build(tmp_path, eagle="3.1", steps=60)
    cpu = verify(str(pair["drafter"]), VerifyOptions(target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=30))
    gpu = verify(str(pair["drafter"]), VerifyOptions(target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=30,
                                                   device="cuda", dtype="bfloat16"))
    assert gpu["device"] == "cuda"
    assert abs(gpu["every_position"]["acceptance_length"] - cpu["every_position"]["acceptance_length"]) < 0.3
