"""GGUF drafters (llama.cpp's eagle3 architecture): `convert --to gguf` writes what llama.cpp's loader reads (read back
here with the gguf package's own reader, not eaglekit's), refuses what it cannot hold in one line, and GGUF drafters
are read by inspect, validate and convert like any other dialect. llama.cpp itself serving them is
tests/engines/test_llamacpp_matrix.py and tests/test_llamacpp_real_pair.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from drafters import Dims, write_gguf_target, write_specforge, write_speculators, write_vllm

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "drafters"

gguf = pytest.importorskip("gguf")


def read_gguf(path: Path) -> tuple[dict, dict]:
    """(key -> value, tensor name -> (numpy shape, ggml type name, values)) through gguf's reader."""
    reader = gguf.GGUFReader(str(path))
    values = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    tensors = {
        t.name: (tuple(int(n) for n in reversed(t.shape.tolist())), t.tensor_type.name, np.array(t.data))
        for t in reader.tensors
    }
    return values, tensors


def interleaved(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's converter's q/k order, typed out here: per head, row i of the first half then row i of the second."""
    d = rows.shape[0] // heads
    out = torch.empty_like(rows)
    for h in range(heads):
        for i in range(d // 2):
            out[h * d + 2 * i] = rows[h * d + i]
            out[h * d + 2 * i + 1] = rows[h * d + d // 2 + i]
    return out


@pytest.fixture
def tiny(tmp_path):
    d = Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96, embed=False)
    return d, write_gguf_target(tmp_path / "target.gguf", d)


def test_a_vllm_drafter_becomes_the_gguf_llama_cpp_reads(cli, tmp_path, tiny):
    d, target = tiny
    src = write_vllm(tmp_path / "src", d, ids=[1, 4, 6])
    out = tmp_path / "d.gguf"
    result = cli("convert", src, out, "--to", "gguf", "--target", target)
    assert "llama-server -m" in result.stdout and "--spec-type draft-eagle3" in result.stdout
    assert "serve.gguf_target" not in result.stdout  # that note is vLLM's: llama-server takes the GGUF target as given
    dry = cli("convert", src, tmp_path / "dry.gguf", "--to", "gguf", "--target", target, "--dry-run", "--json")
    (serving,) = json.loads(dry.stdout)["serving"]  # from llama.cpp's release table, as vLLM's lines from vLLM's
    assert (
        serving["engine"] == "llama.cpp"
        and serving["first"] == "b11434"
        and serving["command"].startswith(f"llama-server -m {target} -md ")
    )
    values, tensors = read_gguf(out)
    assert values["general.architecture"] == "eagle3"
    assert values["eagle3.target_layers"] == [1, 4, 6]
    assert values["eagle3.target_hidden_size"] == 64 and values["eagle3.block_count"] == 1
    assert values["eagle3.norm_before_residual"] is False and values["eagle3.norm_before_fc"] is False
    assert values["eagle3.attention.head_count"] == 2 and values["eagle3.attention.head_count_kv"] == 1
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id"):
        assert values[key] == read_gguf(target)[0][key]
    source = load_file(str(src / "model.safetensors"))
    assert "t2d" not in tensors and "blk.0.attn_norm_2.weight" in tensors and "fc.weight" in tensors
    d2t = tensors["d2t"]
    assert d2t[1] == "I64" and (d2t[2] == source["d2t"].numpy() + np.arange(48)).all()  # absolute target ids
    q = torch.from_numpy(tensors["blk.0.attn_q.weight"][2].copy())
    k = torch.from_numpy(tensors["blk.0.attn_k.weight"][2].copy())
    assert q.equal(interleaved(source["layers.0.self_attn.q_proj.weight"], 2))
    assert k.equal(interleaved(source["layers.0.self_attn.k_proj.weight"], 1))
    assert tensors["blk.0.attn_v.weight"][2].tobytes() == source["layers.0.self_attn.v_proj.weight"].numpy().tobytes()
    assert tensors["output_norm.weight"][1] == "F32" and tensors["output.weight"][0] == (48, 64)


def test_the_gguf_reads_back_as_the_drafter_it_was(cli, tmp_path, tiny):
    d, target = tiny
    src = write_vllm(tmp_path / "src", Dims(**{**d.__dict__, "dtype": torch.bfloat16}), ids=[1, 4, 6])
    cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target)
    shown = json.loads(cli("inspect", tmp_path / "d.gguf", "--json").stdout)
    assert shown["dialect"]["dialect"] == "gguf" and shown["format"] == "gguf"
    assert shown["aux_layers"]["input_ids"] == [1, 4, 6]
    cli("convert", tmp_path / "d.gguf", tmp_path / "back", "--to", "vllm")
    before, after = load_file(str(src / "model.safetensors")), load_file(str(tmp_path / "back" / "model.safetensors"))
    assert set(after) == set(before) - {"t2d"}
    for name, tensor in after.items():  # every value exact (norms come back float32: GGUF keeps them so)
        assert tensor.to(before[name].dtype).equal(before[name]), name
    validated = json.loads(cli("validate", tmp_path / "d.gguf", "--json", expect=None).stdout)
    assert validated["ok"] and not validated["findings"]


def test_specforge_ids_in_eagle_config_are_written_as_llama_cpp_counts_them(cli, tmp_path, tiny):
    """SpecForge keeps output-of-layer ids in eagle_config only; llama.cpp's target_layers are input-of-layer."""
    d, target = tiny
    src = write_specforge(tmp_path / "sf", d, ids=[0, 3, 5])
    cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target)
    assert read_gguf(tmp_path / "d.gguf")[0]["eagle3.target_layers"] == [1, 4, 6]


def test_a_speculators_drafter_keeps_its_flags(cli, tmp_path, tiny):
    d, target = tiny
    src = write_speculators(tmp_path / "sp", Dims(**{**d.__dict__, "norm_before_fc": True}), ids=[2, 4, 5])
    cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target)
    values, tensors = read_gguf(tmp_path / "d.gguf")
    assert values["eagle3.norm_before_fc"] is True and values["eagle3.norm_before_residual"] is True
    assert tensors["enc.output_norm.weight"][0] == (192,)


def test_the_example_eagle31_drafter_is_refused_in_one_line(cli, tmp_path):
    from test_real_pair import smollm2

    out = tmp_path / "d.gguf"
    result = cli(
        "convert", EXAMPLES / "smollm2-eagle3.1-specforge", out, "--to", "gguf", "--target", smollm2(), expect=None
    )
    assert result.exit_code in (1, 2) and not out.exists()
    line = result.stderr.strip()
    assert "\n" not in line and "EAGLE 3.1" in line and "fc_norm" in line and "norm_output" in line
    assert "no key for fc_norm or norm_output" in line


@pytest.mark.parametrize(
    "dims, why",
    [
        (
            dict(
                mla={
                    "q_lora_rank": 12,
                    "kv_lora_rank": 8,
                    "qk_nope_head_dim": 4,
                    "qk_rope_head_dim": 4,
                    "v_head_dim": 6,
                }
            ),
            "MLA",
        ),
        (dict(qwen3=True), "Qwen3 attention"),
        (dict(layers=2), "2 decoder layers"),
        (dict(n=4), "fuses 4 target states"),
    ],
)
def test_what_llama_cpp_cannot_serve_is_refused(cli, tmp_path, tiny, dims, why):
    d, target = tiny
    extra = {"model_type": "deepseek_v3"} if "mla" in dims else {}
    src = write_vllm(tmp_path / "src", Dims(**{**d.__dict__, **dims}), ids=[1, 3, 5, 6][: dims.get("n", 3)])
    if extra:
        cfg = json.loads((src / "config.json").read_text())
        cfg.update(extra, architectures=["Eagle3DeepseekV2ForCausalLM"])
        (src / "config.json").write_text(json.dumps(cfg))
    result = cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target, expect=None)
    assert result.exit_code == 2 and why in result.stderr and not (tmp_path / "d.gguf").exists()


def test_the_output_and_the_target_are_checked_first(cli, tmp_path, tiny, target_dir):
    d, target = tiny
    src = write_vllm(tmp_path / "src", d, ids=[1, 4, 6])
    assert (
        "a gguf output needs the target, as its GGUF file"
        in cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", expect=2).stderr
    )
    assert (
        "not a GGUF file"
        in cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target_dir, expect=2).stderr
    )
    assert (
        "ending in .gguf" in cli("convert", src, tmp_path / "out", "--to", "gguf", "--target", target, expect=2).stderr
    )
    cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target)
    assert (
        "already exists"
        in cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target, expect=2).stderr
    )
    cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target, "--force")  # its own earlier output
    other = tmp_path / "other.gguf"
    other.write_bytes(target.read_bytes())  # a GGUF eaglekit did not write: never replaced
    result = cli("convert", src, other, "--to", "gguf", "--target", target, "--force", expect=2)
    assert "eaglekit did not write it" in result.stderr and other.read_bytes() == target.read_bytes()


def test_a_gguf_target_given_as_the_drafter_is_said_to_be_one(cli, tiny):
    _, target = tiny
    result = cli("inspect", target, expect=2)
    assert "architecture 'llama' is a target model" in result.stderr and "--target" in result.stderr


def test_a_llama3_rope_travels_as_llama_cpps_divisors(cli, tmp_path, tiny):
    d, target = tiny
    src = write_vllm(tmp_path / "src", d, ids=[1, 4, 6])
    cfg = json.loads((src / "config.json").read_text())
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    cfg.update(rope_scaling=scaling, rope_theta=500000.0)
    (src / "config.json").write_text(json.dumps(cfg))
    cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target)
    _, tensors = read_gguf(tmp_path / "d.gguf")
    assert tensors["rope_freqs.weight"][0] == (16,) and tensors["rope_freqs.weight"][2].max() == pytest.approx(8.0)
    shown = json.loads(cli("inspect", tmp_path / "d.gguf", "--json").stdout)
    assert shown["rope"]["scaling"]["rope_type"] == "llama3"
    assert shown["rope"]["scaling"]["factor"] == pytest.approx(8.0)


def test_a_quantised_gguf_drafter_is_read_dequantised(cli, tmp_path, tiny):
    """llama-quantize's Q8_0 weights: listed float32, read dequantised (gguf's own dequantizer)."""
    from eaglekit import dialects

    d, target = tiny
    src = write_vllm(tmp_path / "src", d, ids=[1, 4, 6])
    cli("convert", src, tmp_path / "d.gguf", "--to", "gguf", "--target", target)
    values, tensors = read_gguf(tmp_path / "d.gguf")
    writer = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "eagle3")
    reader = gguf.GGUFReader(str(tmp_path / "d.gguf"))
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), kind, sub)
    for name, (_shape, kind, data) in tensors.items():
        if name == "fc.weight":
            quantised = gguf.quants.quantize(data.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, quantised, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with dialects.load(tmp_path / "q.gguf") as loaded:
        fc = loaded.read("fc.weight")
        assert loaded.checkpoint.quantized == {"fc.weight": 8} and fc.dtype == torch.float32
        original = load_file(str(src / "model.safetensors"))["fc.weight"]
        assert (fc - original).abs().max() < 0.01 * original.abs().max()
