"""The GPU path: the reference and the target on CUDA in fp32, bf16 and fp16 against the CPU. Skipped without CUDA;
run on an H100 through our device machine (figures in benchmarks/README.md)."""

from __future__ import annotations

import pytest
import torch

from eaglekit import dialects
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.reference.simulate import draft_chains
from eaglekit.verify import VerifyOptions, verify

import tiny_pair
from drafters import Dims, mla_dims, write_vllm

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _chains_and_logits(drafter, weights, tokens, aux, device="cpu", dtype=torch.float32):
    model = ReferenceDrafter(drafter, weights, device=device, dtype=dtype)
    chains = draft_chains(model, tokens, aux, torch.arange(0, tokens.shape[0] - 1), 3, teacher=True)
    logits = torch.stack([model.draft_logits(chains.y[:, s]).float().cpu() for s in range(3)], dim=1)
    return chains.drafts.cpu(), logits


def _error(logits, reference):
    """Per step: max |logit difference| over the largest reference logit magnitude."""
    return [
        float((logits[:, s] - reference[:, s]).abs().max() / reference[:, s].abs().max())
        for s in range(reference.shape[1])
    ]


DIMS = [
    Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96, fc_norm=True),
    Dims(H=64, T=64, V=96, Vd=96, heads=2, I=96, mla=mla_dims(), fc_norm=True),
]


def _setup(tmp_path, dims):
    with dialects.load(write_vllm(tmp_path / "d", dims, norm_output=True)) as loaded:
        drafter, weights = loaded.drafter, weights_for(loaded)
    g = torch.Generator().manual_seed(0)
    return drafter, weights, torch.randint(0, dims.V, (40,), generator=g), torch.randn(40, dims.n * dims.T, generator=g)


@pytest.mark.parametrize("dims", DIMS, ids=["gqa", "mla"])
def test_reference_on_cuda_in_fp32_is_the_cpu_computation(tmp_path, dims):
    """The CUDA path is the same math: in fp32 it agrees with the CPU to float rounding (measured on an H100:
    at most 1e-5 of the largest logit over 3 draft steps), drafts identical."""
    drafter, weights, tokens, aux = _setup(tmp_path, dims)
    cpu_drafts, cpu_logits = _chains_and_logits(drafter, weights, tokens, aux)
    drafts, logits = _chains_and_logits(drafter, weights, tokens, aux, "cuda")
    assert max(_error(logits, cpu_logits)) <= 1e-5
    assert torch.equal(drafts, cpu_drafts)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dims", DIMS, ids=["gqa", "mla"])
def test_reference_on_cuda_in_half_precision_costs_what_the_dtype_costs(tmp_path, dims, dtype):
    """bf16/fp16 move logits away from fp32 (on these random tiny drafters, up to ~16% of the largest logit by
    step 3 in bf16 and ~2% in fp16: the fed-back state compounds rounding). The CUDA path must add nothing to
    that: its error against fp32 stays within the same dtype's error on the CPU (measured equal to 2 digits)."""
    drafter, weights, tokens, aux = _setup(tmp_path, dims)
    fp32_drafts, reference = _chains_and_logits(drafter, weights, tokens, aux)
    _, cpu_half = _chains_and_logits(drafter, weights, tokens, aux, "cpu", dtype)
    drafts, gpu_half = _chains_and_logits(drafter, weights, tokens, aux, "cuda", dtype)
    for gpu, cpu in zip(_error(gpu_half, reference), _error(cpu_half, reference)):
        assert gpu <= 1.5 * cpu + 1e-3
    assert (drafts == fp32_drafts).float().mean() >= 0.9


def test_verify_on_cuda(tmp_path):
    """verify with the target and the drafter on CUDA: in fp32 every counter equals the CPU run's; in bf16 it runs
    end to end and the drafter still accepts (this 60-step tiny pair has near-tied logits and loses ~0.4 of its
    acceptance length to bf16, on the CPU as on the GPU; the real pair's figures are in benchmarks/README.md)."""
    pair = tiny_pair.build(tmp_path, eagle="3.1", steps=60)

    def run(**kw):
        return verify(
            str(pair["drafter"]),
            VerifyOptions(target=str(pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=30, **kw),
        )

    cpu = run()
    gpu = run(device="cuda")
    assert gpu["device"] == "cuda"
    assert gpu["every_position"] == cpu["every_position"] and gpu["trajectory"] == cpu["trajectory"]
    half = run(device="cuda", dtype="bfloat16")
    assert half["dtype"] == "bfloat16" and half["every_position"]["acceptance_length"] > 1.5


def test_a_half_precision_decode_on_cuda_runs_no_cudnn_attention(tmp_path):
    """bf16 attention on an H100 goes to cuDNN by default, which plans every new key length on the host (the example
    pair's bf16 generation took 3-4x fp32's); the target's decode keeps it off (runner._without_cudnn_attention)."""
    from torch.profiler import ProfilerActivity, profile

    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    pair = tiny_pair.build(tmp_path, eagle="3.1", steps=10)
    target = TargetModel.load(read_target_config(pair["target"]), device="cuda", dtype=torch.bfloat16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        decoded = target.decode_batch([[1, 2, 3, 4, 5], [6, 7, 8]], 6, capture=(2,))
    names = {event.key for event in prof.key_averages()}
    assert any("attention" in name for name in names)  # attention ran, through some kernel
    assert not any("cudnn_attention" in name for name in names)
    assert len(decoded) == 2 and decoded[0].tokens.shape[0] > 5
