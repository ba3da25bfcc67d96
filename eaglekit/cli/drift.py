"""``eaglekit drift DRAFTER --target MODEL``: EAGLE 3.1's attention-drift diagnosis, measured on a drafter and its
target."""

from __future__ import annotations

import sys

import click

from .. import api
from ..serving import MIN_TEMPERATURE
from ._options import (
    NAMED_FILE,
    NAMED_PLACE,
    PROMPTS_HELP,
    FiniteFloat,
    batch_size_option,
    device_option,
    from_option,
    json_option,
    max_new_tokens_option,
    norm_output_option,
    num_speculative_tokens_option,
    parallel_options,
    raw_prompts_option,
    run_dtype_option,
    target_engine_option,
    threads_option,
    vllm_python_option,
)
from ._output import Output, printable, table


def render(r: dict) -> str:
    from ..drift.report import tables

    lines = [
        (
            f"drift {printable(r['drafter'])} (EAGLE {r['eagle_version']}) on {printable(r['target'])}, {r['device']}"
            f" {r['dtype']}, K={r['num_speculative_tokens']}, {r['inputs']['count']} inputs of"
            f" {min(r['inputs']['tokens'])}-{max(r['inputs']['tokens'])} tokens (max context {r['max_context']})"
        ),
        f"inputs from {r['inputs']['source']}",
    ]
    if r.get("compare"):
        lines.append(
            f"compared with {r['compare']['path']} (EAGLE {r['compare']['eagle_version']}); ratio = compare / drafter"
        )
    for title, rows in tables(r):
        lines += ["", title + ":", table(rows, indent="  ")]
    for f in r["findings"]:
        lines.append(f"{f['severity']}: [{f['check']}] {printable(f['message'])}")
    return "\n".join(lines)


@click.command("drift")
@click.argument("path", type=NAMED_PLACE)
@click.option(
    "--target",
    required=True,
    metavar="MODEL",
    type=NAMED_PLACE,
    help="The target model, with its weights: a local directory, a Hub id in the local cache, or a .gguf file.",
)
@click.option(
    "--compare",
    metavar="OTHER",
    type=NAMED_PLACE,
    help="A second drafter run on the same sequences: every figure for both, with ratios.",
)
@click.option(
    "--report",
    "report_dir",
    metavar="DIR",
    type=NAMED_FILE,
    help="Write report.json, PNG plots and a self-contained report.html here (needs matplotlib: the [report] extra).",
)
@click.option(
    "--sink-tokens",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="S: attention on the first S positions counts as on sinks.",
)
@click.option(
    "--max-context", type=click.IntRange(min=64), help="Longest input, in tokens (default: the target's window)."
)
@click.option(
    "--prompts",
    "prompts_file",
    metavar="FILE.jsonl",
    type=NAMED_FILE,
    help=f"Long inputs, {PROMPTS_HELP} (default: passages of CPython's documentation, under the chat template).",
)
@raw_prompts_option
@click.option(
    "--inputs-per-bucket",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Built-in inputs per context-length bucket.",
)
@max_new_tokens_option(default=32, help="Length of the greedy continuation judged after each input.")
@num_speculative_tokens_option()
@click.option(
    "--chunk",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Chain start positions drafted together (bounds memory).",
)
@click.option(
    "--variants",
    is_flag=True,
    help=(
        "Also run the same content under every prompt framing (chat template or none, system prompts, another"
        " template): acceptance per variant and the spread."
    ),
)
@click.option(
    "--temperature",
    type=FiniteFloat(min=MIN_TEMPERATURE),
    metavar="T",
    help=(
        "Also the expected acceptance under vLLM's rejection sampler at temperature T (exact, from both distributions);"
        f" at least {MIN_TEMPERATURE}, vLLM's floor (it raises a lower temperature to {MIN_TEMPERATURE})."
    ),
)
@click.option(
    "--top-p",
    type=FiniteFloat(min=0, max=1, min_open=True),
    default=1.0,
    show_default=True,
    metavar="P",
    help="With --temperature: the target's top-p cut, as vLLM applies it.",
)
@click.option(
    "--hidden-states",
    metavar="PATH",
    type=NAMED_FILE,
    help="The target's sequences and states from files (an `eaglekit capture` folder) instead of running the target.",
)
@target_engine_option()
@vllm_python_option
@parallel_options
@device_option
@run_dtype_option
@threads_option
@batch_size_option
@from_option
@norm_output_option
@json_option
def drift_command(
    path,
    target,
    compare,
    report_dir,
    sink_tokens,
    max_context,
    prompts_file,
    raw_prompts,
    inputs_per_bucket,
    max_new_tokens,
    k,
    chunk,
    variants,
    temperature,
    top_p,
    hidden_states,
    target_engine,
    vllm_python,
    parallel,
    device,
    dtype,
    threads,
    batch_size,
    source_dialect,
    norm_output_semantics,
    json_mode,
):
    """Measure EAGLE 3.1's diagnosis on the drafter PATH and its target: per draft step, acceptance, attention on the
    first tokens (sinks) and on the chain's own drafts, and the norm of the fed-back state; the balance of the fused
    input; acceptance by absolute position from long inputs. Exit 1 when a drafter accepts nothing.

    \b
    Examples:
      eaglekit drift ./eagle3 --target ./SmolLM2-135M-Instruct.Q4_1.gguf --max-context 4096
      eaglekit drift ./eagle3 --target ./target --compare ./eagle31 --report ./drift-report
      eaglekit drift ./eagle3 --target ./target --prompts chat.jsonl --variants --temperature 0.8 --top-p 0.95
      eaglekit drift ./eagle3 --target ./target --target-engine vllm==0.32.0 --tensor-parallel-size 2
    """
    output = Output(json_mode)

    result = api.drift(
        path,
        target=target,
        report=report_dir,
        progress=output.count_progress,
        compare=compare,
        sink_tokens=sink_tokens,
        max_context=max_context,
        prompts=prompts_file,
        raw_prompts=raw_prompts,
        inputs_per_bucket=inputs_per_bucket,
        max_new_tokens=max_new_tokens,
        k=k,
        chunk=chunk,
        variants=variants,
        temperature=temperature,
        top_p=top_p,
        hidden_states=hidden_states,
        target_engine=target_engine,
        vllm_python=vllm_python,
        parallel=parallel,
        device=device,
        dtype=dtype,
        source_dialect=source_dialect,
        norm_output_semantics=norm_output_semantics,
        threads=threads,
        batch_size=batch_size,
    )
    output.emit(result.data, render)
    if result.files:
        output.note(f"report written: {', '.join(result.files)}")
    if not result.ok:
        sys.exit(1)
