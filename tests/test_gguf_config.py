"""A GGUF target's config read from its metadata alone (io/gguf_metadata.py, target/gguf_config.py): the values
are gguf's own reader's, the config is transformers' own reading for every architecture read so, anything else goes
to transformers, and broken files fail in one line."""

from __future__ import annotations

import struct
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eaglekit.errors import CheckpointError
from eaglekit.io import gguf_metadata
from eaglekit.io.gguf_metadata import KEEP_ARRAY, SkippedArray, read_metadata
from eaglekit.target import config as target_config
from eaglekit.target import gguf_config, read_target_config

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")


def write_gguf(path: Path, arch: str, values: dict, *, tensors: dict | None = None, endian=None) -> Path:
    """A GGUF file of architecture ``arch`` with these key/values (each written with the type gguf's writer picks,
    or as given by a (scalar or string, GGUFValueType) pair) and tensors."""
    kwargs = {"endianess": endian} if endian is not None else {}
    writer = gguf.GGUFWriter(str(path), arch, **kwargs)
    for key, value in values.items():
        if isinstance(value, tuple):
            value, kind = value
            writer.add_key_value(key, value, kind)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    for name, array in (tensors or {"token_embd.weight": np.zeros((4, 8), dtype=np.float32)}).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def model_keys(
    arch: str,
    *,
    layers=3,
    hidden=64,
    vocab: int | None = 96,
    tokens: int | None = None,
    theta=500000.0,
    context: int | None = 2048,
    **extra,
) -> dict:
    """What a small model of ``arch`` states (as llama.cpp's converters write it)."""
    values = {
        f"{arch}.block_count": layers,
        f"{arch}.embedding_length": hidden,
        f"{arch}.feed_forward_length": 128,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.rope.dimension_count": hidden // 4,
    }
    if theta is not None:
        values[f"{arch}.rope.freq_base"] = theta
    if context is not None:
        values[f"{arch}.context_length"] = context
    if vocab is not None:
        values[f"{arch}.vocab_size"] = vocab
    if "moe" in arch:
        values.update(
            {f"{arch}.expert_count": 4, f"{arch}.expert_used_count": 2, f"{arch}.expert_feed_forward_length": 32}
        )
    if tokens is not None:
        values.update(
            {
                "tokenizer.ggml.model": "gpt2",
                "tokenizer.ggml.tokens": [f"t{i}" for i in range(tokens)],
                "tokenizer.ggml.token_type": [1] * tokens,
                "tokenizer.ggml.merges": ["t 0"],
            }
        )
    values.update(extra)
    return values


def with_transformers(monkeypatch, path: Path):
    """read_target_config as transformers reads the file (what every GGUF target took before gguf_config)."""
    monkeypatch.setattr(
        target_config,
        "_gguf_config",
        lambda directory, name, label, weights=False: target_config._transformers_gguf_config(directory, name, label),
    )
    try:
        return read_target_config(path)
    finally:
        monkeypatch.undo()


def fields(cfg) -> dict:
    return {
        "num_layers": cfg.num_layers,
        "hidden_size": cfg.hidden_size,
        "vocab_size": cfg.vocab_size,
        "rope": cfg.rope,
        "model_type": cfg.model_type,
        "architectures": cfg.architectures,
        "context": cfg.config.get("max_position_embeddings"),
    }


CASES = {
    **{arch: (arch, {}) for arch in gguf_config.ARCHITECTURES},
    "llama named mistral": ("llama", {"general.name": "mistral"}),
    "llama named Mistral 7B": ("llama", {"general.name": "Mistral 7B"}),  # transformers: exactly "mistral" only
    "vocab from the tokens": ("qwen2", {"vocab": None, "tokens": KEEP_ARRAY + 7}),
    "vocab from a short token list": ("llama", {"vocab": None, "tokens": 40}),
    "vocab key beside the tokens": ("llama", {"vocab": 96, "tokens": 90}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_metadata_gives_transformers_reading_without_it(case, tmp_path, monkeypatch):
    arch, options = CASES[case]
    extra = {k: v for k, v in options.items() if k not in ("vocab", "tokens")}
    kwargs = {k: v for k, v in options.items() if k in ("vocab", "tokens")}
    path = write_gguf(tmp_path / "target.gguf", arch, model_keys(arch, **kwargs, **extra))
    assert gguf_config.config_from_metadata(read_metadata(path)) is not None  # read without transformers
    fast = read_target_config(path)
    assert fields(fast) == fields(with_transformers(monkeypatch, path))
    assert fast.num_layers == 3 and fast.hidden_size == 64 and fast.rope.theta == 500000.0 and fast.rope.scaling is None


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_rope_scaling_keys_are_read_from_the_metadata_and_kept_as_the_files_rope(arch, tmp_path, monkeypatch):
    """transformers drops a linear or YaRN scaling of these architectures (tests/test_gguf_rope.py runs it): its other
    fields are the metadata's, and eaglekit states the file's scaling as the target's rope (the runner sets it:
    tests/test_gguf_rope.py).
    """
    scaling = {
        f"{arch}.rope.scaling.type": "yarn",
        f"{arch}.rope.scaling.factor": 4.0,
        f"{arch}.rope.scaling.original_context_length": 32768,
    }
    path = write_gguf(tmp_path / "target.gguf", arch, model_keys(arch, **scaling))
    assert gguf_config.config_from_metadata(read_metadata(path)) is not None  # read without transformers
    fast, slow = read_target_config(path), with_transformers(monkeypatch, path)
    assert {**fields(fast), "rope": None} == {**fields(slow), "rope": None}
    assert slow.rope.rope_type == "default"
    assert fast.rope.theta == slow.rope.theta and fast.rope.scaling == {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    }


LEFT_TO_TRANSFORMERS = {
    "another architecture": ("gemma2", {"gemma2.attention.sliding_window": 64}),
    "no rope base": ("llama", {"theta": None}),
    "no vocabulary size": ("qwen3", {"vocab": None}),
    "no context length": ("llama", {"context": None}),
}


@pytest.mark.parametrize("case", list(LEFT_TO_TRANSFORMERS))
def test_what_is_more_than_a_renaming_is_left_to_transformers(case, tmp_path, monkeypatch):
    arch, options = LEFT_TO_TRANSFORMERS[case]
    kwargs = {k: v for k, v in options.items() if k in ("vocab", "theta", "context")}
    extra = {k: v for k, v in options.items() if k not in kwargs}
    path = write_gguf(tmp_path / "target.gguf", arch, model_keys(arch, **kwargs, **extra))
    assert gguf_config.config_from_metadata(read_metadata(path)) is None
    asked = []
    real = target_config._transformers_gguf_config
    monkeypatch.setattr(target_config, "_transformers_gguf_config", lambda *a: asked.append(a) or real(*a))
    cfg = read_target_config(path)
    assert len(asked) == 1 and "rms_norm_eps" in cfg.config  # transformers' whole config


def test_every_value_is_gguf_readers_own_and_long_arrays_keep_their_length(tmp_path):
    T = gguf.GGUFValueType
    long_floats = [float(i) / 3 for i in range(KEEP_ARRAY + 1)]
    values = {
        "k.u8": (7, T.UINT8),
        "k.i8": (-7, T.INT8),
        "k.u16": (65535, T.UINT16),
        "k.i16": (-300, T.INT16),
        "k.u32": (2**32 - 1, T.UINT32),
        "k.i32": (-(2**31), T.INT32),
        "k.f32": (0.1, T.FLOAT32),
        "k.bool": (True, T.BOOL),
        "k.u64": (2**64 - 1, T.UINT64),
        "k.i64": (-(2**63), T.INT64),
        "k.f64": (0.1, T.FLOAT64),
        "k.str": ("héllo ✓", T.STRING),
        "k.empty": ("", T.STRING),
        "k.ints": [1, 2, 3],
        "k.strs": ["a", "", "ç"],
        "k.floats": long_floats,
        "k.long_strs": [f"token {i}" for i in range(KEEP_ARRAY + 5)],
        "k.nested": [[1, 2], [3]],
    }
    for endian in (gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG):
        path = write_gguf(tmp_path / f"{endian.name}.gguf", "llama", values, endian=endian)
        ours = read_metadata(path)
        reader = gguf.GGUFReader(str(path))
        assert ours.version == 3 and ours.tensor_count == len(reader.tensors) == 1
        theirs = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
        assert list(ours.values) == list(theirs)
        for key, field in theirs.items():
            mine = ours.values[key]
            if isinstance(mine, SkippedArray):
                assert mine.length == len(field.data) > KEEP_ARRAY, key
            elif key == "k.nested":
                assert mine == [[1, 2], [3]]
            else:
                expected = field.contents()
                assert mine == (pytest.approx(expected) if isinstance(expected, float) else expected), key
        assert ours.values["k.floats"] == SkippedArray("float32", KEEP_ARRAY + 1)
        assert ours.values["k.long_strs"] == SkippedArray("string", KEEP_ARRAY + 5)


# the damage tests' file: with arrays longer than this stepped over (KEEP_ARRAY, lowered while they read), every
# path of the reader is in a file of a few hundred bytes
SMALL_KEEP = 4


@pytest.fixture(scope="module")
def small_file(tmp_path_factory) -> tuple[bytes, int]:
    """A small target's bytes, and where its key/value section ends (gguf's reader: where its first tensor's index
    entry starts)."""
    path = write_gguf(
        tmp_path_factory.mktemp("gguf") / "small.gguf",
        "llama",
        model_keys(
            "llama",
            tokens=SMALL_KEEP + 3,
            **{
                "general.name": "small",
                "k.nested": [[1], [2, 3]],
                "k.long_nested": [[i] for i in range(SMALL_KEEP + 2)],
                "k.last": [f"s{i}" for i in range(SMALL_KEEP + 2)],
            },
        ),
    )  # stepped over, last
    return path.read_bytes(), int(gguf.GGUFReader(str(path)).tensors[0].field.offset)


def test_every_truncation_of_the_metadata_fails_in_one_line(small_file, tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_metadata, "KEEP_ARRAY", SMALL_KEEP)
    content, end = small_file
    path = tmp_path / "whole.gguf"
    path.write_bytes(content)
    whole = read_metadata(path)
    assert whole.values["tokenizer.ggml.tokens"] == SkippedArray("string", SMALL_KEEP + 3)
    assert whole.values["k.long_nested"] == SkippedArray("array", SMALL_KEEP + 2) and whole.values["k.nested"] == [
        [1],
        [2, 3],
    ]
    path = tmp_path / "cut.gguf"
    for size in range(end):
        path.write_bytes(content[:size])
        with pytest.raises(CheckpointError) as caught:
            read_metadata(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: ") and "\n" not in message, size
    path.write_bytes(content[:end])  # the tensor index and data are never read
    assert read_metadata(path) == whole


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_corrupted_metadata_is_read_or_refused_in_one_line(small_file, tmp_path, data):
    content, end = small_file
    damaged = bytearray(content)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, end - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    path = tmp_path / "damaged.gguf"
    path.write_bytes(bytes(damaged))
    try:
        with mock.patch.object(gguf_metadata, "KEEP_ARRAY", SMALL_KEEP):
            read_metadata(path)
    except CheckpointError as exc:
        assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc)


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "not a GGUF file (0 bytes"),
        (b"GGUF" + bytes(10), "shorter than GGUF's 24-byte header"),
        (b"PK\x03\x04" + bytes(40), "not a GGUF file (starts with b'PK\\x03\\x04'"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "GGUF version 1; eaglekit reads versions 2 and 3"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 2**40), "claims 1099511627776 keys"),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 3) + b"a.b" + struct.pack("<I", 13) + bytes(8),
            "value type 13, not one of GGUF's 0..12",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 3) + b"a.b" + struct.pack("<IQ", 8, 2**30),
            "ends early: a string of 1073741824 bytes",
        ),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + (struct.pack("<Q", 3) + b"a.b" + struct.pack("<IB", 0, 1)) * 2,
            "states this key a second time",
        ),
        (
            b"GGUF"
            + struct.pack("<IQQ", 3, 0, 1)
            + struct.pack("<Q", 3)
            + b"a.b"
            + struct.pack("<I", 9)
            + struct.pack("<IQ", 9, 1) * 5000,
            "nests arrays more than 8 deep",
        ),
        (
            b"GGUF"
            + struct.pack("<IQQ", 3, 0, 1)
            + struct.pack("<Q", 3)
            + b"a.b"
            + struct.pack("<IQ", 8, 2**26 + 1)
            + bytes(2**26 + 1),
            "holds a string of 67108865 bytes, more than the 67108864 eaglekit reads",
        ),
    ],
)
def test_a_broken_file_is_named_with_what_was_expected(content, expected, tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as caught:
        read_metadata(path)
    assert str(caught.value).startswith(f"{path}: ") and expected in str(caught.value)


def test_a_target_whose_metadata_is_broken_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "target.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 99))
    with pytest.raises(CheckpointError, match=r"target\.gguf: GGUF metadata ends early"):
        read_target_config(path)
