"""``eaglekit convert SRC OUT --to DIALECT``: any dialect to any dialect that can hold the drafter."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING

import click

from .. import api, dialects
from ..errors import UsageError
from ..findings import Finding
from ..io import dtypes
from ..io.sources import origin_note
from ._options import (
    AUX_IDS,
    HUB_ID,
    NAMED_FILE,
    NAMED_PLACE,
    WRITABLE_DIALECT,
    dtype_option,
    force_option,
    from_option,
    json_option,
    norm_output_option,
    revision_option,
    target_option,
    threads_option,
)
from ._output import Output, findings_text, human_bytes, printable, table

if TYPE_CHECKING:  # pragma: no cover
    from ..convert import ConversionPlan


def _list() -> dict:
    return {
        "schema_version": api.SCHEMA_VERSION,
        "ok": True,
        "dialects": [
            {
                "name": d.name,
                "aliases": list(d.aliases),
                "summary": d.summary,
                "reads": d.reads,
                "writes": d.writes or None,
            }
            for d in dialects.DIALECTS.values()
        ],
    }


def _render_list(r: dict) -> str:
    lines = []
    for d in r["dialects"]:
        alias = f" (alias {', '.join(d['aliases'])})" if d["aliases"] else ""
        lines.append(f"{d['name']}{alias}: {d['summary']}")
        lines.append(f"  reads:  {d['reads']}")
        lines.append(f"  writes: {d['writes'] or '- (read only)'}")
    return "\n".join(lines)


def _value(side: dict, what: str, same_keys: bool = False) -> str:
    """One side of a change: the keys holding it (unless they are the setting's own name, or the other side's), the
    value."""
    if not side["keys"]:
        return "absent" + (f" (default {json.dumps(side['value'])})" if side["value"] is not None else "")
    keys = "" if side["keys"] == [what] or same_keys else ", ".join(side["keys"]) + " "
    convention = f" ({side['convention']}-of-layer)" if side.get("convention") else ""
    return f"{keys}{json.dumps(side['value'])}{convention}"


def _changes(changes: list[dict]) -> str:
    rows = [
        (
            f"  {c['what']}",
            f"{_value(c['old'], c['what'])} -> {_value(c['new'], c['what'], c['new']['keys'] == c['old']['keys'])}",
        )
        for c in changes
    ]
    return (
        "changes (old -> new):\n" + table(rows)
        if rows
        else "changes: none to the settings (architecture, model_type, aux ids, flags)"
    )


def _destination(d: dict) -> str:
    """What the same command without --dry-run would do to OUT."""
    what = f"its {len(d['replaces'])} entries ({', '.join(d['replaces'])})" if d["replaces"] else "it (empty)"
    if d["refusal"] and not d["needs_force"]:
        return f"output: the conversion would stop: {d['refusal']}"
    if not d["exists"]:
        return f"output: {d['path']} does not exist; the conversion creates it"
    if d["refusal"]:
        return f"output: {d['path']} exists; the conversion needs --force, which would replace {what}"
    return f"output: {d['path']} exists; --force replaces {what}"


def _render(r: dict) -> str:
    head = (
        f"{'plan' if not r['written'] else 'converted'}: {r['source']} ({r['source_dialect']}) -> {r['output']}"
        f" ({r['to']}), EAGLE {r['eagle_version']}, {len(r['tensors'])} tensors, {human_bytes(r['total_bytes'])} in"
        f" {', '.join(r['files'])}"
    )
    lines = [head]
    if not r["written"]:
        rows = []
        for t in r["tensors"]:
            src = t["source"] or f"({t['op'].split(':', 1)[1]} synthesised)"
            arrow = src if src == t["name"] else f"{src} -> {t['name']}"
            dtype = t["dtype"] if t["dtype_in"] == t["dtype"] else f"{t['dtype_in']} -> {t['dtype']}"
            rows.append((f"  {arrow}", dtype, str(t["shape"]), t["op"]))
        lines += ["tensors:", table(rows)]
        diff = r["config_diff"]
        lines.append(
            "config keys: "
            + (
                "; ".join(
                    f"{k} {', '.join(map(printable, v))}"
                    for k, v in (("added", diff["added"]), ("removed", diff["removed"]), ("changed", diff["changed"]))
                    if v
                )
                or "unchanged"
            )
        )
        lines.append(_changes(r["changes"]))
        lines.append(_destination(r["destination"]))
    for name, why in r["dropped"].items():  # said on every run: a shipped tensor left out is not a detail of the plan
        lines.append(f"  {printable(name)} dropped: {why}")
    notes = [Finding(**n) for n in r["notes"]] + [Finding(**f) for f in r["findings"]]
    if notes:
        lines.append(findings_text(notes))
    if not r["written"]:
        lines.append("nothing written (--dry-run)")
    else:
        lines += [f"serve it ({line['for']}): {printable(line['command'])}" for line in r.get("serving") or []]
    return "\n".join(lines)


@click.command("convert")
@click.argument("src", required=False, type=NAMED_PLACE)
@click.argument("out", required=False, type=NAMED_PLACE)
@click.option(
    "--to",
    "to",
    type=WRITABLE_DIALECT,
    metavar="DIALECT",
    help=(
        f"Output dialect: {', '.join(dialects.names(writable=True))} (aliases:"
        f" {', '.join(a for d in dialects.DIALECTS.values() if d.can_write for a in d.aliases)})."
    ),
)
@from_option
@norm_output_option
@target_option
@click.option(
    "--target-id",
    type=HUB_ID,
    metavar="ORG/NAME",
    help=(
        "The target's Hub id: the verifier the output names (speculators' verifier.name_or_path, which `vllm serve"
        " DRAFTER` loads) and the model the printed serve lines serve. Default: --target's Hub id when it is one, else"
        " the source's; a path on this machine is never written (the output then names none)."
    ),
)
@click.option(
    "--aux-layers",
    type=AUX_IDS,
    metavar="IDS",
    help="Aux (target) layer ids in vLLM's input-of-layer convention, e.g. 2,16,29.",
)
@click.option(
    "--resolve",
    is_flag=True,
    help=(
        "An ambiguous checkpoint: measure each aux-id reading on --target (as verify does) and convert with the one it"
        " was trained with; refuses if no reading wins by verify's margin."
    ),
)
@click.option(
    "--prompts",
    "prompts_file",
    metavar="FILE.jsonl",
    type=NAMED_FILE,
    help="With --resolve: the prompts to measure on (default: verify's built-in set).",
)
@click.option(
    "--upgrade",
    metavar="3.1",
    help="Upgrade an EAGLE 3 drafter to 3.1 for fine-tuning: fc_norm weights of ones, norm_output on.",
)
@dtype_option
@threads_option
@click.option("--max-shard-size", default="5GB", show_default=True, help="Largest output shard, e.g. 5GB, 500MB.")
@click.option("--dry-run", is_flag=True, help="Print the plan (renames, config diff, dtypes, files) and write nothing.")
@force_option
@click.option("--list", "list_dialects", is_flag=True, help="List every dialect with what it reads and writes.")
@revision_option
@json_option
def convert_command(
    src,
    out,
    to,
    source_dialect,
    norm_output_semantics,
    target,
    target_id,
    aux_layers,
    resolve,
    prompts_file,
    upgrade,
    dtype,
    threads,
    max_shard_size,
    dry_run,
    force,
    list_dialects,
    revision,
    json_mode,
):
    """Convert the drafter SRC into OUT in another dialect, keeping its math: tensors bit-identical (unless --dtype),
    aux layer ids translated between conventions, every flag written explicitly in the vllm and speculators outputs.
    Streams one tensor at a time; OUT appears only when complete.

    \b
    Examples:
      eaglekit convert ./specforge-ckpt ./for-vllm --to vllm
      eaglekit convert ./eagle3-drafter ./v31 --to speculators --upgrade 3.1
      eaglekit convert ./drafter ./out --to vllm --target ./Llama-3.1-8B --dry-run
      eaglekit convert ./ambiguous ./out --to vllm --target ./Kimi-K2 --resolve
      eaglekit convert --list
    """
    output = Output(json_mode)
    if list_dialects:
        output.emit(_list(), _render_list)
        return
    if not src or not out or not to:
        raise UsageError("convert needs SRC, OUT and --to DIALECT (or --list)")
    from ..io.writer import parse_size

    with contextlib.ExitStack() as stack:
        bar = None

        def on_plan(plan: ConversionPlan) -> None:
            nonlocal bar
            if dry_run:
                return
            # the plan's notes (the upgrade's numerics warning among them) are said once, in the result below
            bar = stack.enter_context(output.progress(plan.total_bytes, "converting"))

        result = api.convert(
            src,
            out,
            to=to,
            source_dialect=source_dialect,
            norm_output_semantics=norm_output_semantics,
            target=target,
            target_id=target_id,
            aux_layers=aux_layers,
            upgrade=upgrade,
            dtype=dtypes.parse_cast(dtype),
            max_shard_bytes=parse_size(max_shard_size) if max_shard_size is not None else None,
            force=force,
            dry_run=dry_run,
            on_plan=on_plan,
            progress=lambda n: bar.update(n),
            revision=revision,
            resolve=resolve,
            prompts=prompts_file,
            threads=threads,
        )
    note = origin_note(result.data.get("origin"))
    if note:
        output.note(note)
    output.emit(result.data, _render)
