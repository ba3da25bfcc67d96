"""Property-based tests: arbitrary configs and tensor-name sets never crash eaglekit with anything but its own errors,
and any drafter that validates converts and round-trips bit-exactly."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from eaglekit import dialects
from eaglekit.convert import ConvertOptions, convert
from eaglekit.errors import EaglekitError, UnsupportedError
from eaglekit.validate import validate

from drafters import Dims, mla_dims, same_bits, write_specforge, write_speculators, write_torchspec, write_vllm

SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

KEYS = [
    "architectures",
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_hidden_layers",
    "vocab_size",
    "draft_vocab_size",
    "target_hidden_size",
    "rms_norm_eps",
    "hidden_act",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "fc_norm",
    "norm_output",
    "norm_before_fc",
    "norm_before_residual",
    "use_aux_norm",
    "eagle_config",
    "eagle_aux_hidden_state_layer_ids",
    "num_aux_hidden_states",
    "speculators_model_type",
    "speculators_config",
    "transformer_layer_config",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "_torchspec_version",
    "eaglekit",
    "attention_bias",
    "max_position_embeddings",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 200),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=8),
    st.sampled_from(
        ["llama", "qwen3", "kimi_k2", "eagle3", "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "yarn"]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS + ["type", "factor"]), inner, max_size=4)
    ),
    max_leaves=12,
)
configs = st.dictionaries(st.sampled_from(KEYS), values, max_size=14)

NAMES = [
    "fc.weight",
    "norm.weight",
    "lm_head.weight",
    "embed_tokens.weight",
    "d2t",
    "t2d",
    "fc_norm.0.weight",
    "input_norm.weight",
    "midlayer.self_attn.q_proj.weight",
    "layers.0.self_attn.q_proj.weight",
    "layers.0.hidden_norm.weight",
    "model.fc.weight",
    "aux_norm_low.weight",
    "lm_head.down.weight",
    "layers.0.self_attn.kv_a_proj_with_mqa.weight",
    "layers.3.mlp.up_proj.weight",
    "layers.0.self_attn.q_norm.weight",
    "mask_hidden",
    "fc.bias",
]
tensor_sets = st.dictionaries(
    st.one_of(st.sampled_from(NAMES), st.text(alphabet="abcdefgh._0123", min_size=1, max_size=12)),
    st.tuples(
        st.lists(st.integers(0, 6), max_size=3),
        st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.int32]),
    ),
    min_size=1,
    max_size=10,
)


def make_tensor(shape, dtype):
    if dtype == torch.bool:
        return torch.zeros(shape, dtype=torch.bool)
    return torch.zeros(shape, dtype=dtype)


@SETTINGS
@given(config=configs, tensors=tensor_sets)
def test_arbitrary_configs_and_names_raise_only_eaglekit_errors(config, tensors):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ckpt"
        root.mkdir()
        (root / "config.json").write_text(json.dumps(config, allow_nan=False))
        save_file({n: make_tensor(tuple(s), dt) for n, (s, dt) in tensors.items()}, str(root / "model.safetensors"))
        for attempt in (
            lambda: dialects.load(root).close(),
            lambda: validate(root, scan=True),
            lambda: validate(root, engine="vllm==0.33"),
        ):
            try:
                attempt()
            except EaglekitError:
                pass


@st.composite
def drafters(draw):
    heads = draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([4, 8]))
    H = draw(st.sampled_from([8, 16, 24]))
    mla = draw(st.booleans()) and draw(st.booleans())
    V = draw(st.sampled_from([32, 48]))
    fc_norm = draw(st.booleans())
    dims = Dims(
        H=H,
        T=draw(st.sampled_from([H, H + 8])),
        n=draw(st.sampled_from([2, 3, 4])),
        V=V,
        Vd=draw(st.sampled_from([V, V // 2])),
        layers=draw(st.sampled_from([1, 2])),
        heads=heads,
        kv_heads=draw(st.sampled_from([h for h in (1, 2, 4) if heads % h == 0])),
        head_dim=head_dim,
        I=draw(st.sampled_from([16, 32])),
        mla=mla_dims() if mla else None,
        qwen3=not mla and draw(st.booleans()),
        fc_norm=fc_norm,
        norm_before_fc=not fc_norm and not mla and draw(st.booleans()),
        embed=draw(st.booleans()),
        seed=draw(st.integers(0, 1000)),
    )
    dims.target_layers = 12
    source = draw(st.sampled_from(["vllm", "speculators", "specforge", "torchspec"]))
    norm_output = draw(st.booleans())
    return dims, source, norm_output


def write_source(root: Path, dims: Dims, source: str, norm_output: bool) -> Path:
    ids = list(range(2, 2 + dims.n))
    if source == "vllm":
        return write_vllm(root, dims, ids=ids, norm_output=norm_output)
    if source == "speculators":
        return write_speculators(root, dims, ids=ids, norm_output=norm_output)
    if source == "specforge":
        return write_specforge(root, dims, ids=[i - 1 for i in ids], norm_output=norm_output)
    return write_torchspec(root, dims, norm_output=norm_output)


@SETTINGS
@given(case=drafters())
def test_what_validates_converts_and_round_trips_bit_exactly(case):
    dims, source, norm_output = case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = write_source(tmp / "src", dims, source, norm_output)
        if not validate(src).ok:
            return
        with dialects.load(src) as loaded:
            original = {c: loaded.read(c) for c in loaded.names}
        for writer in ("vllm", "speculators", "sglang", "eagle"):
            a, b = tmp / writer, tmp / f"{writer}-back"
            try:
                convert(src, a, ConvertOptions(to=writer))
            except UnsupportedError:
                continue
            with dialects.load(a) as converted:
                for c in converted.names:
                    if c in original:
                        assert same_bits(converted.read(c), original[c]), (writer, c)
            # and back again through the same writer reproduces the same files' tensors
            convert(a, b, ConvertOptions(to=writer))
            first, second = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
            assert set(first) == set(second)
            assert all(same_bits(first[n], second[n]) for n in first)
            shutil.rmtree(a)
            shutil.rmtree(b)


# -- the Hub's repo-id rules, kept in eaglekit so checking an id imports no huggingface_hub ---------------------------

_ID_PARTS = st.text(alphabet="abcXYZ019_.-/ @:é\u0660", max_size=110)  # \u0660: a non-ASCII digit \w would take
_ID_EDGES = st.sampled_from(
    [
        "org/name",
        "a" * 96 + "/b",
        "a/" + "b" * 97,
        "a--b/c",
        "a/b..c",
        "x/y.git",
        "_a/_b",
        "-a/b",
        "a./b",
        "a/b-",
        "name",
        "",
        "/",
        "a/b/c",
        "datasets/a/b",
        "a_/b_",
        "1/2",
        "a b/c",
    ]
)


def _hub_accepts(repo_id: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
        return True
    except HFValidationError:
        return False


@settings(max_examples=3000, deadline=None)  # cheap: no files
@given(st.one_of(_ID_PARTS, _ID_EDGES, st.builds(lambda a, b: f"{a}/{b}", _ID_PARTS, _ID_PARTS)))
def test_repo_id_rules_agree_with_huggingface_hub(repo_id):
    from eaglekit.io.hub_ids import repo_id_problem

    assert (repo_id_problem(repo_id) is None) == _hub_accepts(repo_id), repo_id


def test_repo_id_rules_on_many_ids():
    """The same on every id of up to five characters over the characters the rules treat differently."""
    import itertools

    from eaglekit.io.hub_ids import repo_id_problem

    alphabet = "a_.-/ "
    checked = 0
    for n in range(1, 6):
        for chars in itertools.product(alphabet, repeat=n):
            repo_id = "".join(chars)
            assert (repo_id_problem(repo_id) is None) == _hub_accepts(repo_id), repo_id
            checked += 1
    assert checked == sum(6**n for n in range(1, 6))


_YAML_WORDS = st.sampled_from(
    [
        "yes",
        "No",
        "TRUE",
        "off",
        "null",
        "Null",
        "y",
        "n",
        "~",
        "1.0",
        "1e3",
        "0x1f",
        "2024-01-01",
        "a: b",
        "#x",
        "-x",
        "x-",
        "a/b",
        "org/name-v1.2",
        ".inf",
        "_x",
        "@x",
        "é",
        "x y",
        "<<",
        "=",
        "vllm",
        "sglang",
    ]
)
_YAML_TEXT = st.one_of(_YAML_WORDS, st.text(alphabet="aZ09_./-: #'\"é", min_size=1, max_size=12))


@settings(max_examples=1500, deadline=None)  # cheap: strings only
@given(
    base_model=st.one_of(st.none(), _YAML_TEXT), library=_YAML_TEXT, tags=st.lists(_YAML_TEXT, min_size=1, max_size=4)
)
def test_card_metadata_matches_model_card_data(base_model, library, tags):
    """The card's YAML block, written directly for plain values, is byte for byte what huggingface_hub writes."""
    from huggingface_hub import ModelCardData

    from eaglekit.card import card_metadata

    fields = dict(base_model=base_model, library_name=library, pipeline_tag="text-generation", tags=tags)
    assert card_metadata(**fields) == ModelCardData(**fields).to_yaml()
