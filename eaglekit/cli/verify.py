"""``eaglekit verify PATH --target MODEL``: acceptance length on the target's real hidden states, and parity."""

from __future__ import annotations

import json
import sys

import click

from .. import api
from ..card import VERIFY_REPORT
from ..io.atomic import check_output_file, write_file_atomically
from ..io.sources import origin_note
from ._options import (
    AGAINST,
    NAMED_FILE,
    NAMED_PLACE,
    FiniteFloat,
    batch_size_option,
    device_option,
    engine_option,
    from_option,
    json_option,
    norm_output_option,
    revision_option,
    run_dtype_option,
    threads_option,
)
from ._output import Output, printable, table


def _counters(c: dict) -> str:
    rates = ", ".join(f"{r:.3f}" for r in c["per_position_rate"])
    return f"AL {c['acceptance_length']:.3f}  per position [{rates}]  ({c['num_drafts']} drafts)"


def render(r: dict) -> str:
    lines = [
        f"verify {printable(r['drafter'])} ({r['dialect']}, EAGLE {r['eagle_version']}) on {printable(r['target'])},"
        f" {r['device']} {r['dtype']}, K={r['num_speculative_tokens']}, aux layers {r['aux_layer_ids']}"
        + ("" if r["aux_layer_ids_recorded"] else " (engine default)"),
    ]
    rows = [("prompt", "category", "tokens", "trajectory", "every position")]
    for p in r["prompts"]:
        rows.append(
            (
                p["id"],
                p["category"],
                f"{p['prompt_tokens']}+{p['new_tokens']}",
                f"{p['trajectory']['acceptance_length']:.3f}",
                f"{p['every_position']['acceptance_length']:.3f}",
            )
        )
    lines.append(table(rows, indent="  "))
    lines.append(f"acceptance, as a greedy vLLM run would count it:  {_counters(r['trajectory'])}")
    lines.append(f"acceptance, over every position:                  {_counters(r['every_position'])}")
    t = r["throughput"]
    if t["drafted_tokens_per_second"]:
        lines.append(
            f"simulation: {t['drafted_tokens']} drafted tokens in {t['seconds']:.2f}s"
            f" ({t['drafted_tokens_per_second']:.0f} tokens/s)"
        )
    if r.get("reference"):
        ref = r["reference"]
        steps = "; ".join(
            f"step {s['step']}: max|dlogit| {s['max_abs_logit_diff']:.3g}, agree {s['token_agreement']:.1%}"
            for s in ref["steps"]
        )
        lines.append(f"reference {ref['path']}: AL {ref['acceptance_length']:.3f}; {steps}")
    if r.get("engine"):
        e = r["engine"]
        if e.get("engine_acceptance_length") is not None:
            lines.append(
                f"{e['engine']}: AL {e['engine_acceptance_length']:.3f} as served vs"
                f" {e['intended_acceptance_length']:.3f} as intended"
            )
        verdicts = " ".join(c["detail"] for c in r["checks"] if not c["passed"])
        for f in e["findings"]:
            said = f"{f['message']} — {f.get('effect', '')}"
            if f["severity"] != "info" and said not in verdicts:  # a cause of a FAIL below is said there, once
                lines.append(f"  [{f['check']}] {printable(said)}")
    if r.get("against"):
        a = r["against"]
        lines.append(
            f"vLLM {a.get('vllm_version', '')}: " + (_counters(a["vllm"]) if a.get("vllm") else a.get("status", ""))
        )
    if r.get("readings"):
        lines.append("readings the files cannot tell apart, measured on these prompts:")
        for m in r["readings"]["measured"]:
            lines.append(
                f"  {m['reading']}: AL {m['acceptance_length']:.3f} (every position"
                f" {m['every_position_acceptance_length']:.3f})"
            )
        verdict = r["readings"]["trained_with"]
        lines.append(
            f"  trained with: {verdict}"
            if verdict
            else f"  no reading wins decisively ({r['readings']['rule']}): more prompts may tell"
        )
    for f in r["findings"]:
        lines.append(f"{f['severity']}: [{f['check']}] {printable(f['message'])}")
    for c in r["checks"]:
        lines.append(f"{'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {printable(c['detail'])}")
    if not r["checks"]:
        lines.append(
            "result: measured; no thresholds requested (--min-acceptance-length, --reference, --engine, --against)"
        )
    else:
        lines.append(f"result: {'PASSED' if r['passed'] else 'FAILED'}")
    return "\n".join(lines)


@click.command("verify")
@click.argument("path", type=NAMED_PLACE)
@click.option(
    "--target",
    required=True,
    metavar="MODEL",
    type=NAMED_PLACE,
    help="The target model, with its weights: a local directory, a Hub id in the local cache, or a .gguf file.",
)
@click.option(
    "--prompts",
    "prompts_file",
    metavar="FILE.jsonl",
    type=NAMED_FILE,
    help=(
        "Prompts, one JSON object per line: prompt, messages or input_ids (default: built-in"
        " chat/code/math/long-context set)."
    ),
)
@click.option("--num-prompts", type=click.IntRange(min=1), help="Use only the first N prompts.")
@click.option(
    "--max-new-tokens",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Length of each greedy continuation.",
)
@click.option(
    "--num-speculative-tokens",
    "k",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="K, the drafted chain length.",
)
@engine_option
@click.option(
    "--reference",
    metavar="SRC",
    type=NAMED_PLACE,
    help="Another checkpoint of the same drafter (e.g. a conversion's source): parity per draft step.",
)
@click.option(
    "--against",
    type=AGAINST,
    metavar="vllm|vllm==X",
    help=(
        "Also run vLLM itself and compare acceptance and logits: the vLLM installed "
        "beside eaglekit, or release X's engine environment (`eaglekit engines install vllm==X`)."
    ),
)
@click.option(
    "--vllm-python",
    metavar="PATH",
    type=NAMED_FILE,
    help="With --against: run vLLM with this Python (any environment with vLLM, e.g. CUDA vLLM).",
)
@click.option("--min-acceptance-length", type=FiniteFloat(), help="Fail (exit 1) below this acceptance length.")
@device_option
@run_dtype_option
@threads_option
@batch_size_option
@click.option("--device-map", help="transformers device_map for targets larger than one device (e.g. auto).")
@click.option(
    "--hidden-states",
    metavar="PATH",
    type=NAMED_FILE,
    help="Precomputed target hidden states and token ids instead of running the target.",
)
@click.option(
    "--atol",
    type=FiniteFloat(min=0),
    help="Logit tolerance for --reference (default: bit-identical when stored dtypes match).",
)
@click.option("--report", "report_path", metavar="FILE.json", type=NAMED_FILE, help="Also write the JSON report here.")
@from_option
@norm_output_option
@revision_option
@json_option
def verify_command(
    path,
    target,
    prompts_file,
    num_prompts,
    max_new_tokens,
    k,
    engine,
    reference,
    against,
    vllm_python,
    min_acceptance_length,
    device,
    dtype,
    threads,
    batch_size,
    device_map,
    hidden_states,
    atol,
    report_path,
    source_dialect,
    norm_output_semantics,
    revision,
    json_mode,
):
    """Run the drafter PATH on the target's real hidden states: greedy continuations, aux states, a K-step chain at
    every position, and acceptance with vLLM's definitions (AL = 1 + accepted / drafts). Exit 1 when a threshold or
    a parity check fails.

    \b
    Examples:
      eaglekit verify ./for-vllm --target ./SmolLM2-135M-Instruct.Q4_1.gguf --min-acceptance-length 1.5
      eaglekit verify ./for-vllm --target ./target --reference ./specforge-ckpt
      eaglekit verify ./drafter --target ./target --engine vllm==0.24
      eaglekit verify ./for-vllm --target ./target-dir --against vllm
    """
    output = Output(json_mode)
    if report_path:
        check_output_file(
            report_path,
            inputs=(path, target, prompts_file, reference, hidden_states),
            kept_beside=(path, VERIFY_REPORT),
        )

    result = api.verify(
        path,
        target=target,
        prompts=prompts_file,
        num_prompts=num_prompts,
        max_new_tokens=max_new_tokens,
        k=k,
        engine=engine,
        reference=reference,
        against=against,
        min_acceptance_length=min_acceptance_length,
        device=device,
        dtype=dtype,
        device_map=device_map,
        hidden_states=hidden_states,
        source_dialect=source_dialect,
        atol=atol,
        progress=output.count_progress,
        vllm_python=vllm_python,
        norm_output_semantics=norm_output_semantics,
        revision=revision,
        threads=threads,
        batch_size=batch_size,
    )
    if report_path:
        write_file_atomically(report_path, json.dumps(result.data, indent=2) + "\n")
    note = origin_note(result.data.get("origin"))
    if note:
        output.note(note)
    output.emit(result.data, render)
    if not result.passed:
        sys.exit(1)
