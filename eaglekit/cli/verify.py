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
    PROMPTS_HELP,
    FiniteFloat,
    batch_size_option,
    device_option,
    engine_option,
    from_option,
    json_option,
    max_new_tokens_option,
    norm_output_option,
    num_prompts_option,
    num_speculative_tokens_option,
    parallel_options,
    raw_prompts_option,
    revision_option,
    run_dtype_option,
    target_engine_option,
    threads_option,
    vllm_python_option,
)
from ._output import Output, printable, table


def _counters(c: dict) -> str:
    rates = ", ".join(f"{r:.3f}" for r in c["per_position_rate"])
    return f"AL {c['acceptance_length']:.3f}  per position [{rates}]  ({c['num_drafts']} drafts)"


def _layout(parallel: dict) -> str:
    sizes = [
        f"{name} {parallel[key]}"
        for name, key in (
            ("TP", "tensor_parallel_size"),
            ("PP", "pipeline_parallel_size"),
            ("DP", "data_parallel_size"),
        )
        if parallel[key] > 1
    ]
    backend = parallel.get("distributed_executor_backend")
    return (", ".join(sizes) or "one worker") + (f", {backend} executor" if backend else "")


def _llamacpp_lines(a: dict) -> list[str]:
    """llama-server beside the simulation, per prompt: drafted/accepted, where its tokens leave verify's, flips."""
    if "prompts" not in a:
        return [f"{a['build']}: {a.get('status', '')}"]
    pair = lambda c: f"{c['num_accepted_tokens']}/{c['num_draft_tokens']}"
    rows = [
        ("  prompt", "llama.cpp", "sim. on its tokens", "sim. on verify's", "tokens vs verify's", "quantised flips")
    ]
    for p in a["prompts"]:
        same = "same" if p["diverges_at"] is None else f"differ from new token {p['diverges_at']}"
        rows.append(
            (
                f"  {p['id']}",
                pair(p["llamacpp"]),
                pair(p["simulated_on_llamacpp_sequence"]),
                pair(p["simulated_on_verify_sequence"]),
                same,
                ", ".join(map(str, p["flips"][:6])) + (" ..." if len(p["flips"]) > 6 else "") or "none",
            )
        )
    lines = [f"{a['build']} (accepted/drafted):", table(rows)]
    if a.get("note"):
        lines.append(f"  note: {a['note']}")
    for p in a["prompts"]:
        for diff in p["step_differences"] or []:
            lines.append(
                f"  {p['id']} step {diff['step']} at position {diff['position']}: llama.cpp drafted"
                f" {diff['llamacpp']['drafts']} (accepted {diff['llamacpp']['accepted']}), eaglekit"
                f" {diff['eaglekit']['drafts']} (accepted {diff['eaglekit']['accepted']})"
                + (f", eaglekit's logit margin {diff['margin']:.3g}" if diff.get("margin") is not None else "")
            )
    return lines


def _header_lines(r: dict) -> list[str]:
    """What ran: the drafter on the target, device, dtype, K, aux layers; the vLLM that ran the target, if one did."""
    lines = [
        f"verify {printable(r['drafter'])} ({r['dialect']}, EAGLE {r['eagle_version']}) on {printable(r['target'])},"
        f" {r['device']} {r['dtype']}, K={r['num_speculative_tokens']}, aux layers {r['aux_layer_ids']}"
        + ("" if r["aux_layer_ids_recorded"] else " (engine default)"),
    ]
    if r.get("target_engine"):
        e = r["target_engine"]
        lines.append(
            f"  target run by vLLM {e['vllm_version'] or e['engine']} ({_layout(e['parallel'])}), states captured by"
            " its extract_hidden_states" + "".join(f"; {w}" for w in e["workarounds"])
        )
    return lines


def _acceptance_lines(r: dict) -> list[str]:
    """Acceptance per prompt (a table), then over all prompts both ways, then the simulation's pace."""
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
    lines = [table(rows, indent="  ")]
    lines.append(f"acceptance, as a greedy vLLM run would count it:  {_counters(r['trajectory'])}")
    lines.append(f"acceptance, over every position:                  {_counters(r['every_position'])}")
    t = r["throughput"]
    if t["drafted_tokens_per_second"]:
        lines.append(
            f"simulation: {t['drafted_tokens']} drafted tokens in {t['seconds']:.2f}s"
            f" ({t['drafted_tokens_per_second']:.0f} tokens/s)"
        )
    return lines


def _reference_lines(r: dict) -> list[str]:
    """``--reference``: the other checkpoint's acceptance and its logit parity per draft step."""
    if not r.get("reference"):
        return []
    ref = r["reference"]
    steps = "; ".join(
        f"step {s['step']}: max|dlogit| {s['max_abs_logit_diff']:.3g}, agree {s['token_agreement']:.1%}"
        for s in ref["steps"]
    )
    return [f"reference {ref['path']}: AL {ref['acceptance_length']:.3f}; {steps}"]


def _engine_lines(r: dict) -> list[str]:
    """``--engine``: acceptance as served beside as intended, and the engine's findings not said by a FAIL below."""
    if not r.get("engine"):
        return []
    e = r["engine"]
    lines = []
    if e.get("engine_acceptance_length") is not None:
        agreement = ", ".join(f"{a:.1%}" for a in e["token_agreement"])
        lines.append(
            f"{e['engine']}: AL {e['engine_acceptance_length']:.3f} as served vs"
            f" {e['intended_acceptance_length']:.3f} as intended; the same draft token at {agreement} of"
            " positions (step 1..K)"
        )
    verdicts = " ".join(c["detail"] for c in r["checks"] if not c["passed"])
    for f in e["findings"]:
        said = f"{f['message']} — {f.get('effect', '')}"
        if f["severity"] != "info" and said not in verdicts:  # a cause of a FAIL below is said there, once
            lines.append(f"  [{f['check']}] {printable(said)}")
    return lines


def _vllm_lines(a: dict) -> list[str]:
    """``--against vllm``: vLLM's own counters, and for a P-EAGLE drafter each reading simulated beside them."""
    lines = [f"vLLM {a.get('vllm_version', '')}: " + (_counters(a["vllm"]) if a.get("vllm") else a.get("status", ""))]
    if a.get("readings"):  # a P-EAGLE drafter: each reading vLLM can take, beside the trained one
        lines.append(f"  simulated, vLLM's parallel reading:  {_counters(a['readings']['vllm_parallel'])}")
        lines.append(f"  simulated, the trained reading:      {_counters(a['readings']['trained'])}")
        chain = a.get("chain") or {}
        if chain.get("vllm"):
            lines.append(f"vLLM {a.get('vllm_version', '')} without parallel_drafting: {_counters(chain['vllm'])}")
            lines.append(f"  simulated, vLLM's chain reading:     {_counters(a['readings']['vllm_chain'])}")
        elif chain.get("status"):
            lines.append(chain["status"])
    if a.get("batched"):
        lines.append(f"vLLM, the prompts served together: {_counters(a['batched']['vllm'])}")
    return lines


def _against_lines(r: dict) -> list[str]:
    """``--against``: llama-server's lines or vLLM's."""
    if r.get("against") and "build" in r["against"]:
        return _llamacpp_lines(r["against"])
    if r.get("against"):
        return _vllm_lines(r["against"])
    return []


def _readings_lines(r: dict) -> list[str]:
    """The readings the files cannot tell apart, each measured, and which one the drafter was trained with."""
    if not r.get("readings"):
        return []
    lines = ["readings the files cannot tell apart, measured on these prompts:"]
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
    return lines


def _verdict_lines(r: dict) -> list[str]:
    """The findings, each check's PASS or FAIL, and the result."""
    lines = [f"{f['severity']}: [{f['check']}] {printable(f['message'])}" for f in r["findings"]]
    for c in r["checks"]:
        lines.append(f"{'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {printable(c['detail'])}")
    if not r["checks"]:
        lines.append(
            "result: measured; no thresholds requested (--min-acceptance-length, --reference, --engine, --against)"
        )
    else:
        lines.append(f"result: {'PASSED' if r['passed'] else 'FAILED'}")
    return lines


def render(r: dict) -> str:
    """The verify report as text: what ran, acceptance, each parity asked for, the readings, then the verdict."""
    return "\n".join(
        [
            *_header_lines(r),
            *_acceptance_lines(r),
            *_reference_lines(r),
            *_engine_lines(r),
            *_against_lines(r),
            *_readings_lines(r),
            *_verdict_lines(r),
        ]
    )


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
    help=f"Prompts, {PROMPTS_HELP} (default: a built-in chat/code/math/long-context set).",
)
@raw_prompts_option
@num_prompts_option
@max_new_tokens_option(default=64, help="Length of each greedy continuation.")
@num_speculative_tokens_option()
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
    metavar="vllm|vllm==X|llama.cpp==bN",
    help=(
        "Also run the engine itself and compare: vLLM (acceptance and logits; the vLLM installed beside eaglekit, or"
        " release X's engine environment: `eaglekit engines install vllm==X`), or llama-server of llama.cpp build N"
        " (its draft counters and steps; `eaglekit engines install llama.cpp==bN`, --target a .gguf)."
    ),
)
@target_engine_option()
@vllm_python_option
@parallel_options
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
def verify_command(path, target, prompts_file, report_path, json_mode, **options):
    """Run the drafter PATH on the target's real hidden states: greedy continuations, aux states, a K-step chain at
    every position, and acceptance with vLLM's definitions (AL = 1 + accepted / drafts). Exit 1 when a threshold or
    a parity check fails.

    \b
    Examples:
      eaglekit verify ./for-vllm --target ./SmolLM2-135M-Instruct.Q4_1.gguf --min-acceptance-length 1.5
      eaglekit verify ./for-vllm --target ./target --reference ./specforge-ckpt
      eaglekit verify ./drafter --target ./target --engine vllm==0.24
      eaglekit verify ./for-vllm --target ./target-dir --against vllm
      eaglekit verify ./for-vllm --target ./target-dir --target-engine vllm==0.32.0 --tensor-parallel-size 2
    """
    output = Output(json_mode)
    _refuse_before_running(path, target, prompts_file, report_path, options)
    # every other option is the api.verify (VerifyOptions) argument of the same name, passed through as it is
    result = api.verify(path, target=target, prompts=prompts_file, progress=output.count_progress, **options)
    _emit(output, result, report_path)


def _refuse_before_running(path, target, prompts_file, report_path, options: dict) -> None:
    """What the command line alone can refuse: --vllm-python without --against, a --report that would overwrite an
    input."""
    if options["vllm_python"] and not options["against"]:
        raise click.UsageError("--vllm-python runs vLLM for --against: give --against vllm (or vllm==X) too")
    if report_path:
        check_output_file(
            report_path,
            inputs=(path, target, prompts_file, options["reference"], options["hidden_states"]),
            kept_beside=(path, VERIFY_REPORT),
        )


def _emit(output: Output, result, report_path) -> None:
    """The report written to --report, the Hub origin noted, the report shown; exit 1 when a check failed."""
    if report_path:
        write_file_atomically(report_path, json.dumps(result.data, indent=2) + "\n")
    note = origin_note(result.data.get("origin"))
    if note:
        output.note(note)
    output.emit(result.data, render)
    if not result.passed:
        sys.exit(1)
