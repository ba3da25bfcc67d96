"""llama.cpp's drafter format: one GGUF file of architecture ``eagle3``.

What the file holds, as llama.cpp's loader reads it (``src/models/eagle3.cpp``, ``src/llama-arch.cpp``, build
b11434's source; what its build does with it is ``engines/llamacpp.py``'s):

- metadata under ``eagle3.``: the Llama dimensions (``KEYS``), ``target_layers`` (exactly three, input-of-layer ids as
  vLLM counts them: llama.cpp extracts the input of target layer k, and k = L is the last layer's output),
  ``target_hidden_size``, and two flags, ``norm_before_residual`` and ``norm_before_fc`` (both false when absent). No
  key holds EAGLE 3.1's ``fc_norm`` or ``norm_output``: a 3.1 drafter cannot be written here (llama.cpp feeds the
  pre-norm state forward and has no per-state norm), and ``check_writable`` refuses it;
- tensors under llama.cpp's names (``TENSORS``); the one decoder layer's q/k rows interleaved per head (its converter's
  rope layout, undone on read: ``io.gguf_tensors``); ``d2t`` as int64 absolute target ids (canonical d2t holds
  offsets); the encoder norm of ``norm_before_fc`` as ``enc.output_norm``; a llama3 rope as a ``rope_freqs`` tensor of
  divisors; no ``t2d``;
- the tokenizer: the target's ``tokenizer.*`` keys, copied from the target's GGUF file (llama.cpp sizes the draft
  logits by the vocabulary and checks draft and target tokenizers against each other).

Reading makes a flat, vLLM-style config of the metadata (``config_from_metadata``), so the shared reader, the checks
and the writers see what they see for any other dialect.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import CheckpointError, ConfigError, NotADrafterError, UnsupportedError, UsageError
from ..findings import Finding
from ..io import dtypes
from ..io.atomic import check_file_destination
from ..io.gguf_metadata import SkippedArray, read_metadata, read_vector
from ..io.gguf_tensors import ggml_type
from ..io.gguf_writer import GGUFTensor, copied_entries, encode_value, write_gguf
from ..model.architectures import written_as
from ..model.drafter import Drafter
from ..model.hf_config import base_config, frequency_divisors, rope_from_divisors
from .base import FLAT_FLAGS_FALSE, INPUT, Clue, ConfigRules, Dialect, NameMap, provenance_block

ARCH = "eagle3"
# eagle3.<suffix> -> (flat config key, GGUF value type); read in this order, the first key found wins for a config key
KEYS = (
    ("context_length", "max_position_embeddings", "uint32"),
    ("embedding_length", "hidden_size", "uint32"),
    ("feed_forward_length", "intermediate_size", "uint32"),
    ("block_count", "num_hidden_layers", "uint32"),
    ("attention.head_count", "num_attention_heads", "uint32"),
    ("attention.head_count_kv", "num_key_value_heads", "uint32"),
    ("attention.key_length", "head_dim", "uint32"),
    ("attention.value_length", "head_dim", "uint32"),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps", "float32"),
    ("rope.dimension_count", "head_dim", "uint32"),
    ("rope.freq_base", "rope_theta", "float32"),
    ("vocab_size", "vocab_size", "uint32"),
    ("target_hidden_size", "target_hidden_size", "uint32"),
    ("target_layers", "eagle_aux_hidden_state_layer_ids", "int32[]"),
    ("norm_before_residual", "norm_before_residual", "bool"),
    ("norm_before_fc", "norm_before_fc", "bool"),
)
ROPE_SCALING = ("rope.scaling.type", "rope.scaling.factor")  # the linear scaling, as keys
ROPE_FREQS = "rope_freqs.weight"  # a llama3 rope's divisors
PROVENANCE_KEY = "eaglekit.provenance"  # eaglekit's provenance block (config.json's "eaglekit"), as JSON text
# llama.cpp name -> canonical, for the top-level tensors and (with blk.N. / layers.N.) the decoder layer's
TOP = (
    ("token_embd.", "embed_tokens."),
    ("output_norm.", "norm."),
    ("output.", "lm_head."),
    ("enc.output_norm.", "input_norm."),
)
LAYER = (
    ("attn_norm_2.", "hidden_norm."),
    ("attn_norm.", "input_layernorm."),
    ("attn_q.", "self_attn.q_proj."),
    ("attn_k.", "self_attn.k_proj."),
    ("attn_v.", "self_attn.v_proj."),
    ("attn_output.", "self_attn.o_proj."),
    ("ffn_norm.", "post_attention_layernorm."),
    ("ffn_gate.", "mlp.gate_proj."),
    ("ffn_up.", "mlp.up_proj."),
    ("ffn_down.", "mlp.down_proj."),
)
MAX_LAYERS = 8  # layer names mapped (llama.cpp serves one; more are read, to be refused by the rules)


def _name_rules() -> tuple[tuple[str, str], ...]:
    layers = tuple((f"blk.{i}.{g}", f"layers.{i}.{c}") for i in range(MAX_LAYERS) for g, c in LAYER)
    return TOP + layers


def written_here(path: Path) -> bool:
    """A GGUF file eaglekit wrote (its metadata carries eaglekit's provenance key): what a forced write may replace."""
    try:
        return PROVENANCE_KEY in read_metadata(path).values
    except CheckpointError:
        return False


def is_gguf(ckpt) -> bool:
    return getattr(ckpt, "format", None) == "gguf"


def _value(values: dict, key: str):
    value = values.get(key)
    return None if isinstance(value, SkippedArray) else value


def config_from_metadata(ckpt) -> tuple[dict, list[Finding]]:
    """The flat config a GGUF drafter's metadata states (``KEYS``), and what reading it noticed."""
    values = ckpt.metadata.values
    config: dict = {"architectures": [written_as("vllm", "llama")], "model_type": "llama"}
    notes: list[Finding] = []
    for suffix, key, _ in KEYS:
        value = _value(values, f"{ARCH}.{suffix}")
        if value is not None and key not in config:
            config[key] = value
    if "vocab_size" not in config:  # the target's vocabulary, which the tokenizer lists
        tokens = values.get("tokenizer.ggml.tokens")
        if isinstance(tokens, (list, SkippedArray)):
            config["vocab_size"] = len(tokens) if isinstance(tokens, list) else tokens.length
    rows = {name: info.shape[0] for name, info in ckpt.tensors.items() if info.shape}
    config["draft_vocab_size"] = rows.get("d2t") or rows.get("output.weight") or config.get("vocab_size")
    if values.get(f"{ARCH}.{ROPE_SCALING[0]}") == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": values.get(f"{ARCH}.{ROPE_SCALING[1]}")}
    if ROPE_FREQS in ckpt.tensors and config.get("rope_theta"):
        divisors = read_vector(ckpt.path, ckpt.metadata, ROPE_FREQS, ckpt.label)
        rope = rope_from_divisors(divisors, float(config["rope_theta"]))
        if rope is None:
            raise ConfigError(f"{ckpt.label}: {ROPE_FREQS} holds divisors no default, linear or llama3 rope gives")
        if rope.scaling:
            config["rope_scaling"] = rope.scaling
    provenance = values.get(PROVENANCE_KEY)
    if isinstance(provenance, str):
        try:
            config["eaglekit"] = json.loads(provenance)
        except ValueError:
            pass
    known = {f"{ARCH}.{s}" for s, _, _ in KEYS} | {f"{ARCH}.{k}" for k in ROPE_SCALING}
    for key in sorted(k for k in values if k.startswith(f"{ARCH}.") and k not in known):
        notes.append(
            Finding(
                "gguf.unknown_key",
                "warning",
                f"metadata key {key}: eaglekit does not know it, and llama.cpp's eagle3 loader reads no such key",
                key,
            )
        )
    return config, notes


def prepare(ckpt) -> list[Finding]:
    """A GGUF file opened as a drafter: refused unless its architecture is eagle3; its config made from the metadata,
    and the tensors llama.cpp stores in its own conventions named to the reader (``GGUFCheckpoint.adapt``)."""
    arch = ckpt.metadata.architecture()
    if arch != ARCH:
        raise NotADrafterError(
            f"{ckpt.label}: a GGUF file of architecture {arch!r} is a target model, not an EAGLE drafter (llama.cpp's"
            " drafters are architecture eagle3); did you mean to pass it as `target`?"
        )
    config, notes = config_from_metadata(ckpt)
    ckpt.config = config
    heads, kv_heads = (
        config.get("num_attention_heads"),
        config.get("num_key_value_heads", config.get("num_attention_heads")),
    )
    rows = {}
    for i in range(MAX_LAYERS):
        if isinstance(heads, int) and heads > 0:
            rows[f"blk.{i}.attn_q.weight"] = heads
        if isinstance(kv_heads, int) and kv_heads > 0:
            rows[f"blk.{i}.attn_k.weight"] = kv_heads
    ckpt.adapt(row_interleaved=rows, absolute_index=("d2t",))
    return notes


class GGUFDialect(Dialect):
    name = "gguf"
    aliases = ("llama.cpp", "llamacpp")
    summary = "llama.cpp: one .gguf file, architecture eagle3 (EAGLE 3 only; ids input-of-layer)"
    reads = (
        "a GGUF file of architecture eagle3 (llama.cpp's converter or eaglekit wrote it); quantised tensors dequantised"
    )
    writes = (
        "OUT.gguf: architecture eagle3 for llama-server --spec-type draft-eagle3; needs the target's GGUF file (its"
        " tokenizer is copied); EAGLE 3.1, MLA, Qwen3 and multi-layer drafters refused"
    )
    names = NameMap(rules=_name_rules())
    rules = ConfigRules(flags=FLAT_FLAGS_FALSE, aux_ids=(("eagle_aux_hidden_state_layer_ids", INPUT),))
    library_name = "llama.cpp"
    hub_tags = ("llama.cpp", "gguf")
    served_by = ("llama.cpp",)
    single_file = True
    omitted = {"t2d": "llama.cpp's eagle3 format keeps no t2d (d2t alone maps draft tokens to target tokens)"}
    drops_full_vocab_maps = True
    carries_extra_config = False
    window_caveat = None
    evidence = (
        Clue(
            "a GGUF file of architecture eagle3",
            100,
            lambda c, n, k: is_gguf(k) and k.metadata.architecture() == ARCH,
        ),
    )

    def map_names(self, ckpt):
        canonical, unknown = super().map_names(ckpt)
        return canonical, [name for name in unknown if name != ROPE_FREQS]  # the rope, read into the config

    def check_writable(self, d: Drafter) -> None:
        why = refusal(d)
        if why:
            raise UnsupportedError(f"the gguf (llama.cpp eagle3) format cannot hold this drafter: {why}")

    def tensor_names(self, d: Drafter) -> dict[str, str]:
        names = {c: self.names.from_canonical(c) for c in sorted(d.tensors) if c != "t2d"}
        return names

    def stored(self, canonical: str, d: Drafter) -> tuple[str | None, bool]:
        """How a canonical tensor is stored: the value transform ("rows:H" interleaves q/k rows of H heads,
        "absolute" turns d2t offsets into target ids, None: as is) and whether it is written as float32 (every
        one-dimensional float tensor: the norms, as llama.cpp's converter writes them)."""
        if canonical.endswith("self_attn.q_proj.weight"):
            return f"rows:{d.num_heads}", False
        if canonical.endswith("self_attn.k_proj.weight"):
            return f"rows:{d.num_kv_heads}", False
        if canonical == "d2t":
            return "absolute", False
        return None, canonical.endswith("norm.weight")

    def stored_value(self, op: str, values, d: Drafter):
        """A tensor as the file stores it (``stored``'s transforms; "synth:rope_freqs": the rope's divisors)."""
        import torch

        from ..io.gguf_tensors import permute_rows

        if op == "absolute":
            return values + torch.arange(values.shape[0], dtype=values.dtype)
        if op == "synth:rope_freqs":
            return torch.tensor(self.rope_divisors(d), dtype=torch.float32)
        return permute_rows(values, int(op.split(":", 1)[1])).contiguous()

    def config_keys(self, d: Drafter) -> dict:
        """The flat config the written file's metadata states (what reading it back gives; ``metadata`` writes it)."""
        config = {
            "architectures": [written_as("vllm", "llama")],
            "model_type": "llama",
            **base_config(d),
            "draft_vocab_size": d.draft_vocab_size,
            "target_hidden_size": d.target_hidden_size,
            "norm_before_residual": d.flags.norm_before_residual,
            "norm_before_fc": d.flags.norm_before_fc,
        }
        if d.aux.ids is not None:
            config["eagle_aux_hidden_state_layer_ids"] = list(d.aux.as_input())
        return config

    def metadata(self, d: Drafter, config: dict) -> list[tuple[str, str, object]]:
        """(key, GGUF type, value) for the file, from ``config_keys``'s config: general.architecture first, then
        ``KEYS``, the rope scaling and eaglekit's provenance (the tokenizer is the target's, copied by the writer)."""
        out: list[tuple[str, str, object]] = [("general.architecture", "string", ARCH)]
        for suffix, key, kind in KEYS:
            if config.get(key) is not None:
                out.append((f"{ARCH}.{suffix}", kind, config[key]))
        if d.rope.rope_type == "linear":
            out += [
                (f"{ARCH}.{ROPE_SCALING[0]}", "string", "linear"),
                (f"{ARCH}.{ROPE_SCALING[1]}", "float32", float(d.rope.parameter("factor"))),
            ]
        out.append((PROVENANCE_KEY, "string", json.dumps(provenance_block(d, self.name))))
        return out

    # -- the one file -----------------------------------------------------------------------------------------

    def check_target(self, given: str | None, target) -> None:
        """The target must be given, as its GGUF file: llama.cpp serves it from GGUF and the drafter's tokenizer is
        copied from it."""
        if given is None or target is None:
            raise UsageError(
                "a gguf output needs the target, as its GGUF file: llama.cpp serves the target from GGUF, and the"
                " drafter takes its tokenizer from it"
            )
        if not target.gguf_file:
            raise UsageError(
                f"target {given} is not a GGUF file; a gguf output takes its tokenizer from the target's GGUF"
                " (llama.cpp serves the target from GGUF too)"
            )

    def check_output(self, out: Path, *, force: bool, protect: list[Path], appeared: bool = False) -> None:
        if out.suffix != ".gguf":
            raise UsageError(f"{out}: the {self.name} output is one file; give a name ending in .gguf")
        check_file_destination(out, force=force, protect=protect, replaceable=written_here, appeared=appeared)

    def write_file(
        self, out: Path, d: Drafter, config: dict, target, tensors, *, force, protect, progress=None
    ) -> None:
        """The file: ``metadata``'s keys, the target's tokenizer keys copied as stored, ``tensors`` ((name, dtype,
        shape, produce) each) streamed in order; written beside ``out`` and renamed over it once complete."""
        source = target.directory / target.gguf_file
        protect = [*protect, source]
        existed = out.exists()
        self.check_output(out, force=force, protect=protect)
        entries = [(key, encode_value(kind, value)) for key, kind, value in self.metadata(d, config)]
        entries += copied_entries(source, lambda key: key.startswith("tokenizer."), f"target {target.source}")
        planned = [
            GGUFTensor(name, ggml_type(dtype), shape, math.prod(shape) * dtypes.itemsize(dtype), produce)
            for name, dtype, shape, produce in tensors
        ]
        self.check_output(out, force=force, protect=protect, appeared=not existed)
        write_gguf(out, entries, planned, progress=progress)

    def rope_divisors(self, d: Drafter) -> tuple[float, ...] | None:
        """The ``rope_freqs`` tensor a llama3 rope is written as (None for the other ropes this format holds)."""
        return frequency_divisors(d.rope, d.head_dim) if d.rope.rope_type == "llama3" else None


# What llama.cpp's eagle3 drafter has no place for, each with the reason (the first that applies is said)
def refusal(d: Drafter) -> str | None:
    if d.flags.fc_norm or d.flags.norm_output:
        what = " and ".join(k for k in ("fc_norm", "norm_output") if getattr(d.flags, k))
        return (
            f"it is EAGLE 3.1 ({what}), and llama.cpp's eagle3 format has no key for fc_norm or norm_output (build"
            " b11434 runs no per-state norm before fc and feeds the pre-norm state forward): written, it would be"
            " served as another model"
        )
    if d.parallel is not None:
        return (
            "it is a P-EAGLE drafter (parallel drafting: mask_hidden and a mask token), and llama.cpp's eagle3 drafts a"
            " chain, one token per forward, with no mask_hidden tensor (build b11434 refuses the file: wrong number of"
            " tensors)"
        )
    if d.attention == "mla":
        return "it is an MLA (DeepSeek/Kimi) drafter; llama.cpp's eagle3 drafter is Llama attention only"
    if d.attention == "qwen3":
        return "it has Qwen3 attention (q_norm/k_norm), which llama.cpp's eagle3 drafter does not apply"
    if d.num_layers != 1:
        return f"it has {d.num_layers} decoder layers; llama.cpp's eagle3 drafter has exactly one"
    if d.num_aux != 3:
        return f"it fuses {d.num_aux} target states; llama.cpp's eagle3 drafter fuses exactly three"
    if not d.flags.use_aux_hidden_state:
        return "use_aux_hidden_state is false (no fc); llama.cpp's eagle3 drafter always fuses three target states"
    if d.attention_bias or d.mlp_bias:
        return "it has attention or MLP biases, which llama.cpp's eagle3 drafter does not apply"
    if d.windowed_layers:
        return "its layer uses a sliding window, which llama.cpp's eagle3 drafter does not apply"
    if d.hidden_act != "silu":
        return f"its MLP activation is {d.hidden_act}; llama.cpp's eagle3 drafter runs SiLU"
    if d.rope.rope_type not in ("default", "linear", "llama3"):
        return f"its rope is {d.rope.rope_type}; eaglekit writes default, linear and llama3 ropes to GGUF"
    return None


DIALECT = GGUFDialect()
