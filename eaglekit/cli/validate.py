"""``eaglekit validate PATH``: everything wrong with a drafter, and what a named engine release will do with it."""

from __future__ import annotations

import sys

import click

from ..findings import Finding
from .. import api
from ._options import engine_option, from_option, json_option, norm_output_option, target_option
from ._output import Output, findings_text


def render(r: dict) -> str:
    context = [("AMBIGUOUS, read as " if r.get("ambiguous") else "") + f"{r['dialect']}" + (f", EAGLE {r['eagle_version']}" if r["eagle_version"] else "")]
    if r["engine"]:
        context.append(f"for {r['engine']}")
    if r["target"]:
        context.append(f"with target {r['target']}")
    if r["scanned"]:
        context.append("all tensors scanned")
    head = f"validate {r['source']} ({'; '.join(context)})"
    body = findings_text([Finding(**f) for f in r["findings"]])
    c = r["counts"]
    tail = f"result: {'OK' if r['ok'] else 'FAILED'} ({c['error']} error{'s' * (c['error'] != 1)}, {c['warning']} warning{'s' * (c['warning'] != 1)}, {c['info']} info)"
    return "\n".join(x for x in (head, body, tail) if x)


@click.command("validate")
@click.argument("path")
@target_option
@engine_option
@click.option("--scan", is_flag=True, help="Also read every tensor once (streamed): NaN/Inf, all-zero and uninitialised-looking tensors.")
@from_option
@norm_output_option
@json_option
def validate_command(path, target, engine, scan, source_dialect, norm_output_semantics, json_mode):
    """Check the drafter checkpoint PATH: config.json against its dialect's JSON Schema, tensor shapes and dtypes
    against the config, flags against tensors, the vocab maps, aux layer ids (in range for --target), and with
    --engine what that engine release will actually do. Exit 0 when clean, 1 on any error.

    \b
    Examples:
      eaglekit validate ./drafter
      eaglekit validate ./drafter --engine vllm==0.24 --target ./Llama-3.1-8B-Instruct
      eaglekit validate ./drafter --scan --json
    """
    report = api.validate(path, target=target, engine=engine, scan=scan, source_dialect=source_dialect,
                             norm_output_semantics=norm_output_semantics)
    Output(json_mode).emit(report.to_dict(), render)
    if not report.ok:
        sys.exit(1)
