"""``eaglekit validate PATH``: everything wrong with a drafter, and what a named engine release will do with it."""

from __future__ import annotations

import json
import sys

import click

from .. import api
from ..errors import UsageError
from ..findings import Finding
from ..io.sources import origin_note
from ._options import (
    NAMED_FILE,
    NAMED_PLACE,
    download_option,
    engine_option,
    from_option,
    json_option,
    norm_output_option,
    revision_option,
    target_option,
)
from ._output import Output, findings_text, table


def render(r: dict) -> str:
    context = [
        ("AMBIGUOUS, read as " if r.get("ambiguous") else "")
        + f"{r['dialect']}"
        + (f", EAGLE {r['eagle_version']}" if r["eagle_version"] else "")
    ]
    if r["engine"]:
        # where the engine has nothing to say, what its silence rests on (its findings each say their own)
        view = r.get("engine_view") or {}
        silent = view.get("evidence") and not any(f.get("engine") == r["engine"] for f in r["findings"])
        ref = f" ({view['evidence_ref']})" if view.get("evidence_ref") else ""
        context.append(f"for {r['engine']}" + (f" [evidence: {view['evidence']}{ref}]" if silent else ""))
    if r["target"]:
        context.append(f"with target {r['target']}")
    if r["scanned"]:
        context.append("all tensors scanned")
    head = f"validate {r['source']} ({'; '.join(context)})"
    body = findings_text([Finding(**f) for f in r["findings"]])
    c = r["counts"]
    tail = (
        f"result: {'OK' if r['ok'] else 'FAILED'} ({c['error']} error{'s' * (c['error'] != 1)}, {c['warning']}"
        f" warning{'s' * (c['warning'] != 1)}, {c['info']} info)"
    )
    return "\n".join(x for x in (head, body, tail) if x)


def _first_error(row) -> str:
    if row.report is None:
        return f"could not run: {row.error}"
    first = next((f for f in row.report.findings if f.severity == "error"), None)
    return f"[{first.check}] {first.message}" if first else ""


def render_survey(rows) -> str:
    lines = [("DRAFTER", "COMMIT", "DIALECT", "EAGLE", "VERDICT", "FIRST ERROR")]
    for row in rows:
        r = row.report
        origin = (r.origin if r is not None else None) or {}
        commit = (origin.get("commit") or "")[:12] or ("local" if origin.get("kind") == "local" else "-")
        verdict = "ERROR" if r is None else ("OK" if r.ok else "FAILED")
        lines.append(
            (
                row.path,
                commit,
                (r.dialect if r else None) or "-",
                (r.eagle_version if r else None) or "-",
                verdict,
                _first_error(row),
            )
        )
    failed = sum(1 for row in rows if row.report is not None and not row.ok)
    errored = sum(1 for row in rows if row.report is None)
    tail = f"{len(rows)} drafters: {len(rows) - failed - errored} OK, {failed} FAILED, {errored} could not be read"
    return table(lines) + "\n" + tail


def _read_list(from_file: str | None) -> list[str]:
    if from_file is None:
        return []
    try:
        with click.open_file(from_file, encoding="utf-8") as f:  # "-": stdin, left open by click
            text = f.read()
    except OSError as exc:
        raise UsageError(f"--from-file {from_file}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"--from-file {from_file}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "expected one drafter path or Hub id a line"
        ) from None
    items = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [item for item in items if item]


@click.command("validate")
@click.argument("paths", nargs=-1, type=NAMED_PLACE)
@click.option(
    "--from-file",
    "from_file",
    metavar="FILE",
    type=NAMED_FILE,
    help="Also validate the drafters listed in FILE (one path or Hub id a line; # comments; - for stdin).",
)
@click.option(
    "--jobs", default=8, show_default=True, type=click.IntRange(1, 64), help="How many drafters a survey reads at once."
)
@target_option
@engine_option
@click.option(
    "--scan",
    is_flag=True,
    help="Also read every tensor once (streamed): NaN/Inf, all-zero and uninitialised-looking tensors.",
)
@from_option
@norm_output_option
@revision_option
@download_option
@json_option
def validate_command(
    paths, from_file, jobs, target, engine, scan, source_dialect, norm_output_semantics, revision, download, json_mode
):
    """Check the drafter checkpoint PATH: config.json against its dialect's JSON Schema, tensor shapes and dtypes
    against the config, flags against tensors, the vocab maps, aux layer ids (in range for --target), and with
    --engine what that engine release will actually do. Exit 0 when clean, 1 on any error.

    Each PATH may be a Hub id (org/name[@REV]), read by headers only (--download to fetch the files). Several
    PATHs (or --from-file) make a survey: one table row per drafter (with --json one JSON line each), read
    concurrently; one that cannot be read does not stop the rest; exit 1 if any fails.

    \b
    Examples:
      eaglekit validate ./drafter
      eaglekit validate ./drafter --engine vllm==0.24 --target ./Llama-3.1-8B-Instruct
      eaglekit validate ./drafter --scan --json
      eaglekit validate org/drafter-a org/drafter-b@v2 --from-file more.txt --engine vllm==0.31
    """
    paths = [*paths, *_read_list(from_file)]
    if not paths:
        raise UsageError("validate: give a drafter PATH or Hub id (or --from-file FILE)")
    options = dict(
        target=target,
        engine=engine,
        scan=scan,
        source_dialect=source_dialect,
        norm_output_semantics=norm_output_semantics,
        revision=revision,
        download=download,
    )
    out = Output(json_mode)
    if len(paths) == 1 and from_file is None:
        report = api.validate(paths[0], **options)
        note = origin_note(report.origin)
        if note:
            out.note(note)
        out.emit(report.to_dict(), render)
        if not report.ok:
            sys.exit(1)
        return
    rows = api.survey(paths, max_workers=jobs, **options)
    if json_mode:
        for row in rows:
            out.line(json.dumps(row.to_dict(), default=str))
    else:
        out.line(render_survey(rows))
    if not all(row.ok for row in rows):
        sys.exit(1)
