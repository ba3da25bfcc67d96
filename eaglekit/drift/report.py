"""The drift report's presentation: the tables (one definition, printed by the CLI and written into report.html),
the PNG plots (``plots``: matplotlib, imported only when plotting) and the self-contained report.html (images
embedded as data URIs, each with its caption; no network)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from ..errors import CheckpointError, MissingDependencyError, install_line
from ..io import jsonfile
from ..io.atomic import atomic_directory, check_destination
from .plots import BY_CONTEXT, CAPTIONS, FC_INPUT, PER_DEPTH, SAMPLING, VARIANTS

PLOTS = (PER_DEPTH, BY_CONTEXT, FC_INPUT)  # always written
VARIANTS_PLOT, SAMPLING_PLOT = VARIANTS, SAMPLING  # with --variants, --temperature
PLOT_FILES = (*PLOTS, VARIANTS_PLOT, SAMPLING_PLOT)
REPORT_JSON, REPORT_HTML = "report.json", "report.html"
# every file a report folder may hold: a folder of these alone (report.json a drift report) is an earlier report
REPORT_FILES = (REPORT_JSON, REPORT_HTML, *PLOT_FILES)
REPORT_KEYS = ("per_depth", "by_context_length", "acceptance")  # what tells a drift report.json from another one


def is_drift_report(data: object) -> bool:
    return isinstance(data, dict) and all(k in data for k in REPORT_KEYS)


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def tables(r: dict) -> list[tuple[str, list[tuple[str, ...]]]]:
    """(title, rows with a header row first) for every table of the report."""
    out = [_acceptance_table(r), _depth_table(r), _context_table(r)]
    if r.get("fc_input"):
        out.append(_fc_input_table(r))
    if r.get("sampling"):
        out.append(_sampling_table(r))
    if r.get("variants"):
        out.append(_variants_table(r))
    return out


def _acceptance_table(r: dict) -> tuple[str, list[tuple[str, ...]]]:
    """Acceptance length as a greedy vLLM run counts it and over every position, with --compare's and the ratio."""
    other = r.get("compare")
    names = ["drafter"] + (["compare", "ratio"] if other else [])
    rows = [("", *names)]
    mine_acc = r["acceptance"]
    for key, label in (("trajectory", "AL, as a greedy vLLM run counts it"), ("every_position", "AL, every position")):
        row = [label, _f(mine_acc[key]["acceptance_length"])]
        if other:
            row += [
                _f(other["acceptance"][key]["acceptance_length"]),
                _f(other["ratios"]["acceptance_length" if key == "trajectory" else "every_position_acceptance_length"]),
            ]
        rows.append(tuple(row))
    return ("Acceptance length (AL = 1 + accepted / drafts)", rows)


def _depth_table(r: dict) -> tuple[str, list[tuple[str, ...]]]:
    """Per draft step: acceptance, attention on the sinks and on the chain's own drafts, the fed-back norm."""
    other = r.get("compare")
    return (
        (
            f"Per draft step (attention on the first {r['sink_tokens']} positions and on the chain's own drafts,"
            " over heads, layers and chains)"
        ),
        _depth_rows(r["per_depth"], other and other["per_depth"], other and other["ratios"]["per_depth"]),
    )


def _depth_rows(mine: list[dict], theirs: list[dict] | None, ratio: list[dict] | None) -> list[tuple[str, ...]]:
    head = ["step", "accept", "accept|prev", "sink attn", "own attn", "feedback |h|", "|h|/|h1|"]
    if theirs:
        head += ["cmp accept", "cmp sink", "cmp own", "cmp |h|/|h1|", "ratio accept", "ratio sink", "ratio own"]
    rows = [tuple(head)]
    for i, m in enumerate(mine):
        row = [
            str(m["step"]),
            _f(m["acceptance_rate"]),
            _f(m["conditional_acceptance_rate"]),
            _f(m["sink_attention"]),
            _f(m["own_draft_attention"]),
            _f(m["feedback_norm"], 2),
            _f(m["feedback_norm_relative"]),
        ]
        if theirs:
            t, q = theirs[i], ratio[i]
            row += [
                _f(t["acceptance_rate"]),
                _f(t["sink_attention"]),
                _f(t["own_draft_attention"]),
                _f(t["feedback_norm_relative"]),
                _f(q["acceptance_rate"]),
                _f(q["sink_attention"]),
                _f(q["own_draft_attention"]),
            ]
        rows.append(tuple(row))
    return rows


def _context_table(r: dict) -> tuple[str, list[tuple[str, ...]]]:
    """Acceptance per context bucket (where the chain starts), with the last step's attention."""
    other = r.get("compare")
    rows = [("context", "chains", "AL", *(["cmp AL", "ratio"] if other else []), "sink attn @K", "own attn @K")]
    theirs = {b["bucket"]: b for b in other["by_context_length"]} if other else {}
    ratio_b = {b["bucket"]: b for b in other["ratios"]["by_context_length"]} if other else {}
    for b in r["by_context_length"]:
        last = b["per_depth"][-1]
        row = [b["bucket"], str(b["every_position"]["num_drafts"]), _f(b["acceptance_length"])]
        if other:
            row += [
                _f(theirs.get(b["bucket"], {}).get("acceptance_length")),
                _f(ratio_b.get(b["bucket"], {}).get("acceptance_length")),
            ]
        row += [_f(last["sink_attention"]), _f(last["own_draft_attention"])]
        rows.append(tuple(row))
    return ("Acceptance by absolute position of the chain's start (every position)", rows)


def _fc_input_table(r: dict) -> tuple[str, list[tuple[str, ...]]]:
    """Each aux chunk's norm as it enters fc, and its share, for each drafter."""
    other = r.get("compare")
    n = len(r["fc_input"]["chunk_norms"])
    rows = [("", *[f"aux {i}" for i in range(n)], "max/min")]
    for label, side in (("drafter", r), ("compare", other)):
        if side and side.get("fc_input"):
            fc = side["fc_input"]
            rows.append((f"{label} |chunk|", *[_f(x, 2) for x in fc["chunk_norms"]], _f(fc["max_over_min"], 2)))
            rows.append((f"{label} share", *[_f(x) for x in fc["chunk_shares"]], ""))
    return ("Fused input balance: each aux chunk's norm as it enters fc (after input_norm / fc_norm)", rows)


def _sampling_table(r: dict) -> tuple[str, list[tuple[str, ...]]]:
    """--temperature: the expected acceptance beside the greedy one on the same chains, and per step."""
    other = r.get("compare")
    s = r["sampling"]
    cmp = other.get("sampling") if other else None
    rows = [("", "drafter", *(["compare", "ratio"] if cmp else []))]
    for label, key in (
        ("expected AL", "acceptance_length"),
        ("greedy AL, same chains", "greedy_acceptance_length"),
    ):
        rows.append((label, _f(s[key]), *([_f(cmp[key]), _f(_ratio(s[key], cmp[key]))] if cmp else [])))
    for i, rate in enumerate(s["per_position_rate"]):
        rows.append(
            (
                f"P(step {i + 1} accepted)",
                _f(rate),
                *([_f(cmp["per_position_rate"][i]), _f(_ratio(rate, cmp["per_position_rate"][i]))] if cmp else []),
            )
        )
    return (
        (
            f"Sampling (temperature {s['temperature']:g}, top-p {s['top_p']:g}): expected acceptance under"
            f" vLLM's rejection sampler, every position, {s['num_drafts']} drafts"
        ),
        rows,
    )


def _variants_table(r: dict) -> tuple[str, list[tuple[str, ...]]]:
    """--variants: acceptance per prompt framing, and its spread across them."""
    other = r.get("compare")
    v = r["variants"]
    rows = [("variant", "tokens", "AL", "AL every pos", *(["cmp AL", "cmp every pos", "ratio"] if other else []))]
    for row in v["variants"]:
        line = [
            row["name"],
            f"{min(row['tokens'])}-{max(row['tokens'])}",
            _f(row["acceptance_length"]),
            _f(row["every_position_acceptance_length"]),
        ]
        if other:
            c = row["compare"]
            line += [
                _f(c["acceptance_length"]),
                _f(c["every_position_acceptance_length"]),
                _f(_ratio(row["acceptance_length"], c["acceptance_length"])),
            ]
        rows.append(tuple(line))
    for label, key in (("spread (max-min)", "range"), ("range / mean", "relative_range"), ("std", "std")):
        line = [
            label,
            "",
            _f(v["spread"]["acceptance_length"][key]),
            _f(v["spread"]["every_position_acceptance_length"][key]),
        ]
        if other:
            line += [
                _f(v["compare_spread"]["acceptance_length"][key]),
                _f(v["compare_spread"]["every_position_acceptance_length"][key]),
                "",
            ]
        rows.append(tuple(line))
    return (
        (
            f"Acceptance per prompt variant (the same {v['inputs']} inputs, each framing with its own greedy"
            " continuation)"
        ),
        rows,
    )


def _ratio(a, b):
    return None if a is None or b is None or not a else b / a


# -- plots -----------------------------------------------------------------------------------------------


def require_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError(
            f"`report` needs matplotlib for its plots (eaglekit's [report] extra): {install_line('report')}"
        ) from None
    return plt


def _save(plt, fig, path: Path) -> Path:
    """One figure written as a PNG and closed (into the report's hidden folder: ``write_report``)."""
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)
    return path


def plot(r: dict, directory: Path) -> list[Path]:
    """Every plot of the report (``plots``), written into ``directory``."""
    from .plots import figures

    plt = require_matplotlib()
    return [_save(plt, fig, directory / name) for name, fig in figures(r, plt)]


def _html_table(title: str, rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows[1:])
    return f"<h2>{html.escape(title)}</h2>\n<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"


def write_html(r: dict, images: list[Path], path: Path) -> None:
    parts = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>eaglekit drift report</title>\n',
        (
            "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px"
            " solid #ccc;padding:2px"
            " 8px;text-align:right}th{background:#eee}img{max-width:100%}</style>\n</head>\n<body>\n"
        ),
        f"<h1>Drift report: {html.escape(r['drafter'])}</h1>\n",
        f"<p>EAGLE {html.escape(r['eagle_version'])} on {html.escape(r['target'])}, K={r['num_speculative_tokens']}, "
        f"{r['inputs']['count']} inputs of {min(r['inputs']['tokens'])}-{max(r['inputs']['tokens'])} tokens from "
        f"{html.escape(r['inputs']['source'])}"
        + (
            f"; compared with {html.escape(r['compare']['path'])} (EAGLE {html.escape(r['compare']['eagle_version'])})"
            if r.get("compare")
            else ""
        )
        + ".</p>\n",
    ]
    for title, rows in tables(r):
        parts.append(_html_table(title, rows))
    for image in images:
        data = base64.b64encode(image.read_bytes()).decode("ascii")
        caption = html.escape(CAPTIONS.get(image.name, image.stem))
        parts.append(
            f'<figure><img alt="{caption}" src="data:image/png;base64,{data}"><figcaption>{caption}</figcaption>'
            "</figure>\n"
        )
    parts.append("</body>\n</html>\n")
    path.write_text("".join(parts), encoding="utf-8")


def _not_an_earlier_report(directory: Path) -> list[str]:
    """The entries that keep ``directory`` from being an earlier ``drift --report`` folder, which a new report replaces
    as a whole: anything but the report's own files, and a report.json that is not a drift report."""
    foreign = sorted(
        p.name + ("/" if p.is_dir() else "")
        for p in directory.iterdir()
        if p.name not in REPORT_FILES or not p.is_file()
    )
    earlier = directory / REPORT_JSON
    if earlier.is_file():
        try:
            data = jsonfile.load(earlier)
        except CheckpointError:  # not JSON, too large, not text
            data = None
        if not is_drift_report(data):
            foreign.append(f"{REPORT_JSON} (not a drift report)")
    return foreign


def check_report_destination(directory: str | Path, inputs: tuple[str | Path | None, ...] = ()) -> Path:
    """Refuse, before the run, a ``--report`` folder the report could not replace: a file, a folder holding anything
    but an earlier report (a checkpoint, a user's files), one inside an input or holding one (the drafter, the
    compared drafter, the target, the prompts)."""
    return check_destination(
        Path(directory), force=True, protect=_local(inputs), replaceable=_not_an_earlier_report, force_flag=None
    )


def _local(inputs: tuple[str | Path | None, ...]) -> list[Path]:
    return [Path(i) for i in inputs if i is not None and Path(i).exists()]  # a Hub id names no folder here


def write_report(r: dict, directory: str | Path, inputs: tuple[str | Path | None, ...] = ()) -> list[str]:
    """report.json, the plots and report.html written as one folder, ``directory``, which replaces an earlier report
    there as a whole (its plots of options not given this time included), or nothing if the run fails; the files
    written. ``inputs``: the run's local inputs, never written into nor replaced (``check_report_destination``)."""
    directory = Path(directory)
    with atomic_directory(
        directory, force=True, protect=_local(inputs), replaceable=_not_an_earlier_report, force_flag=None
    ) as tmp:
        images = plot(r, tmp)
        # each file written plainly: the folder is renamed into place only once all of them are, and synced
        (tmp / REPORT_JSON).write_text(json.dumps(r, indent=2) + "\n", encoding="utf-8")
        write_html(r, images, tmp / REPORT_HTML)
    return [
        str(directory / REPORT_JSON),
        *(str(directory / image.name) for image in images),
        str(directory / REPORT_HTML),
    ]
