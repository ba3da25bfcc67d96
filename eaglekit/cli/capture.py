"""``eaglekit capture TARGET OUT``: the target served by vLLM, its greedy continuations and aux states written for
``verify --hidden-states`` and ``drift``, once, however large the target."""

from __future__ import annotations

import click

from .. import api
from ._options import (
    AUX_IDS,
    NAMED_FILE,
    NAMED_PLACE,
    force_option,
    json_option,
    max_new_tokens_option,
    num_prompts_option,
    num_speculative_tokens_option,
    parallel_options,
    run_dtype_option,
    target_engine_option,
    vllm_python_option,
)
from ._output import Output, human_bytes


def render(r: dict) -> str:
    lines = [
        f"captured {r['sequences']} sequences of {r['target']} into {r['output']}"
        + (f" ({r['resumed']} were there from an earlier run)" if r["resumed"] else ""),
        f"  aux layers {r['aux_layer_ids']} (input-of-layer), {r['dtype']}, {human_bytes(r['bytes'])}",
        f"  vLLM {r['vllm_version'] or r['engine']}"
        + "".join(
            f", {name} {r['parallel'][key]}"
            for name, key in (
                ("TP", "tensor_parallel_size"),
                ("PP", "pipeline_parallel_size"),
                ("DP", "data_parallel_size"),
            )
            if r["parallel"][key] > 1
        ),
    ]
    lines += [f"  {w}" for w in r["workarounds"]]
    lines.append(f"verify with: eaglekit verify DRAFTER --target {r['target']} --hidden-states {r['output']}")
    return "\n".join(lines)


def _plan_note(output: Output):
    def said(plan) -> None:
        total = len(plan.prompts)
        output.note(
            f"capture: {len(plan.pending)} of {total} sequences to capture"
            + (f" ({total - len(plan.pending)} already in the folder)" if total > len(plan.pending) else "")
            + f" with {plan.served.label}; their states take up to {human_bytes(plan.bytes_needed)}"
            + (f" ({human_bytes(plan.free_bytes)} free)" if plan.free_bytes is not None else "")
        )

    return said


@click.command("capture")
@click.argument("target", type=NAMED_PLACE)
@click.argument("out", type=NAMED_FILE)
@click.option(
    "--aux-layers",
    type=AUX_IDS,
    metavar="IDS",
    help="Target layers to capture, input-of-layer ids (vLLM's), e.g. 2,16,29 (default vLLM's 2, L//2, L-3).",
)
@click.option(
    "--prompts",
    "prompts_file",
    metavar="FILE.jsonl",
    type=NAMED_FILE,
    help="Prompts, one JSON object per line: prompt, messages or input_ids (default: the built-in set verify uses).",
)
@num_prompts_option
@max_new_tokens_option(default=64, help="Length of each greedy continuation, as verify's --max-new-tokens.")
@num_speculative_tokens_option(
    "The largest K the capture will be verified with: the continuation runs K - 1 tokens further."
)
@run_dtype_option
@target_engine_option(default="vllm")
@vllm_python_option
@parallel_options
@force_option
@json_option
def capture_command(
    target,
    out,
    aux_layers,
    prompts_file,
    num_prompts,
    max_new_tokens,
    k,
    dtype,
    target_engine,
    vllm_python,
    parallel,
    force,
    json_mode,
):
    """Run the target TARGET in vLLM, as it is served (tensor, pipeline and data parallel, on one machine or a Ray
    cluster), and write into OUT each prompt's greedy continuation and the target's aux states at every position,
    captured by vLLM's own extract_hidden_states, in the dtype the target runs in. eaglekit's process never loads
    the target's weights. Run it again with the same settings to resume an interrupted capture.

    \b
    Examples:
      eaglekit capture ./target ./states --aux-layers 2,16,29 --prompts chat.jsonl
      eaglekit capture ./target ./states --target-engine vllm==0.32.0 --tensor-parallel-size 2
      eaglekit verify ./drafter --target ./target --hidden-states ./states
    """
    output = Output(json_mode)
    result = api.capture(
        target,
        out,
        prompts=prompts_file,
        num_prompts=num_prompts,
        max_new_tokens=max_new_tokens,
        k=k,
        aux_layers=aux_layers,
        dtype=dtype,
        target_engine=target_engine,
        vllm_python=vllm_python,
        parallel=parallel,
        force=force,
        on_plan=_plan_note(output),
        progress=output.count_progress,
    )
    output.emit(result.data, render)
