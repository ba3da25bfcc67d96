"""The model card (README.md) pushed with a drafter: YAML metadata and a body generated from the drafter itself.

Rendered as plain text (``card_metadata``, the YAML ``ModelCardData.to_yaml()`` would write, for the metadata; no
template engine). When a verify report (``eaglekit-verify.json``, written by ``eaglekit verify --report``) sits
beside the checkpoint, its acceptance length and parity checks go in too.
"""

from __future__ import annotations

from pathlib import Path

from . import __version__, dialects
from .dialects.base import Dialect, LoadedDrafter
from .io.hub_ids import looks_like_repo_id
from .model.config_view import printable
from .serving import TARGET_PLACEHOLDER, sglang_serve, vllm_serve

VERIFY_REPORT = "eaglekit-verify.json"


def _tags(dialect: Dialect, eagle_version: str) -> list[str]:
    return ["eagle3.1" if eagle_version == "3.1" else "eagle3", "speculative-decoding", "eaglekit", *dialect.hub_tags]


def hub_id(text: object) -> str | None:
    """``text`` when it names a Hub repo, not a path on the publisher's machine."""
    return text if isinstance(text, str) and looks_like_repo_id(text) and not Path(text).exists() else None


def _target_label(report_target: object, verifier: str) -> str:
    """The verify report's target as the card shows it: a Hub id as is, a local path by its file name only (a
    path on the publisher's machine means nothing to a reader and says more than it should)."""
    if not isinstance(report_target, str) or not report_target:
        return verifier
    return hub_id(report_target) or f"a local `{Path(report_target).name}`"


# The verify report's keys the card's Verification section states (every report verify has written holds them)
CARD_FIGURES = ("acceptance_length", "trajectory", "prompts", "num_speculative_tokens")


def read_verify_report(directory: Path) -> dict | None:
    """The drafter's ``eaglekit-verify.json`` (None when it has none); one the card cannot read is a CheckpointError
    naming it."""
    from .errors import CheckpointError
    from .io import jsonfile
    from .schemas import check, load, without_required

    path = directory / VERIFY_REPORT
    if not path.is_file():
        return None
    data = jsonfile.load(path)
    # typed as verify.schema.json types it; an older or partial report may lack keys (the card shows what it holds)
    violations = check(data, without_required(load("verify.schema.json")))
    # but never without the figures the card states: a report lacking them would publish a measurement never taken
    # (an empty one states nothing, and the card says nothing of it)
    violations += [f"$ has no {key}" for key in CARD_FIGURES if isinstance(data, dict) and data and key not in data]
    if violations:
        raise CheckpointError(
            f"{path}: not a verify report as `eaglekit verify --report` writes it: {violations[0]}"
            + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else "")
            + "; fix or remove it"
        )
    return data


def verify_report_misfit(report: dict, drafter) -> str | None:
    """Why ``report`` (a verify report read beside the drafter) measured another drafter than ``drafter``, or says
    another verdict than its own checks: a report left from earlier weights, or edited, would publish figures never
    measured on these. None where it fits, as far as its keys tell (an older report may lack some)."""
    version = report.get("eagle_version")
    if version is not None and str(version) != drafter.eagle_version:
        return (
            f"it measured an EAGLE {version} reading, push reads this drafter as EAGLE {drafter.eagle_version} (where"
            " verify was told `norm_output_semantics` or `source_dialect`, record that reading with `eaglekit convert`"
            " and the same option, and verify the output)"
        )
    measured = report.get("aux_layer_ids")
    if drafter.aux.ids is not None and isinstance(measured, list):
        # either reading of the recorded ids: verify settles their convention with the target's depth (or --from), which
        # push, without a target, may read the other way
        readings = [sorted(drafter.aux.ids), sorted(i + 1 for i in drafter.aux.ids)]
        if sorted(measured) not in readings:
            return f"it fused target layers {measured}, this drafter records {list(drafter.aux.ids)}"
    checks = [c for c in report.get("checks") or [] if isinstance(c, dict)]
    if (
        checks
        and isinstance(report.get("passed"), bool)
        and report["passed"] != all(c.get("passed") is True for c in checks)
    ):
        return f"its verdict (passed: {str(report['passed']).lower()}) contradicts its checks"
    return None


DRIFT_DIR = "drift"  # where push --report puts the drift report's figures in the repository
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read_drift_report(directory: Path) -> tuple[dict, list[Path]]:
    """``push --report DIR``: the drift report (DIR/report.json, as `eaglekit drift --report DIR` writes it) and its PNG
    plots, each checked to be one. Anything else: a UsageError naming the file and what was expected."""
    from .drift.report import PLOT_FILES, REPORT_JSON, REPORT_KEYS, is_drift_report
    from .errors import CheckpointError, UsageError
    from .io import jsonfile

    directory = Path(directory)
    path = directory / REPORT_JSON
    if not path.exists():
        raise UsageError(f"`report` {directory}: no {path}; expected the directory `eaglekit drift --report` wrote")
    try:
        report = jsonfile.load(path)
    except CheckpointError as exc:
        raise UsageError(f"`report` {directory}: {exc}") from None
    if not is_drift_report(report):
        raise UsageError(
            f"`report` {directory}: {path} is not a drift report (expected the keys {', '.join(REPORT_KEYS)})"
        )
    images = []
    for name in PLOT_FILES:
        image = directory / name
        if not image.exists():
            continue
        with open(image, "rb") as f:
            if f.read(8) != PNG_SIGNATURE:
                raise UsageError(f"`report` {directory}: {image} is not a PNG file (no PNG signature)")
        images.append(image)
    from .schemas import check

    violations = check(report, "drift.schema.json")  # the card reads more of it than those three keys
    not_drifts = f"`report` {directory}: {path} is not a drift report as eaglekit drift writes it"
    if violations:
        raise UsageError(
            f"{not_drifts}: {violations[0]}" + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else "")
        )
    # what no schema says: the lists its tables line up step by step (per_depth, compare's, sampling's) of one length
    try:
        drift_section(report, [])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise UsageError(f"{not_drifts}: its tables cannot be built from it ({type(exc).__name__}: {exc})") from None
    return report, images


def drift_section(report: dict, images: list[str]) -> list[str]:
    """The card's drift section: the report's own tables (drift.report.tables, as the terminal prints them) as
    Markdown, and the plots, linked from the repository (``images``: paths in the repo)."""
    from .drift.report import tables

    cmp = report.get("compare")
    lines = [
        "## Drift report",
        "",
        "`eaglekit drift` (EAGLE 3.1's attention-drift diagnosis) on"
        f" {_target_label(report.get('target'), 'its target')}: K={report.get('num_speculative_tokens')},"
        f" {report['inputs']['count']} inputs of {min(report['inputs']['tokens'])}-{max(report['inputs']['tokens'])}"
        f" tokens ({report['inputs']['source']})"
        + (
            f", compared with an EAGLE {cmp['eagle_version']} drafter (`{Path(cmp['path']).name}`; ratio = compare /"
            " this drafter)"
            if cmp
            else ""
        )
        + ". The full figures are in `"
        + f"{DRIFT_DIR}/report.json`.",
        "",
    ]
    for title, rows in tables(report):
        lines += [f"**{title}**", "", "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
        lines.append("")
    for image in images:
        lines += [f"![{Path(image).stem.replace('_', ' ')}]({image})", ""]
    return lines


def _features_31(d) -> str:
    """The EAGLE 3.1 features the drafter really uses, e.g. ' (per-aux fc_norm)'; empty for EAGLE 3."""
    used = [
        text for on, text in ((d.flags.fc_norm, "per-aux fc_norm"), (d.flags.norm_output, "post-norm feedback")) if on
    ]
    return f" ({', '.join(used)})" if used else ""


def card_metadata(**fields: object) -> str:
    """The card's YAML metadata block, as huggingface_hub's ``ModelCardData(**fields).to_yaml()`` writes it: the fields
    that are not None, in order, each tag once, through PyYAML with ``allow_unicode`` (its ``yaml_dump``). PyYAML
    directly because importing ``ModelCardData`` costs ``push --dry-run`` the Hub client's imports (httpx, filelock);
    tests/test_push.py and test_properties.py hold the two equal."""
    fields = {k: v for k, v in fields.items() if v is not None}
    if "tags" in fields:  # ModelCardData keeps each tag once, in order
        fields["tags"] = list(dict.fromkeys(fields["tags"]))
    import yaml

    return yaml.safe_dump(fields, allow_unicode=True, sort_keys=False).strip()


def render_card(
    loaded: LoadedDrafter,
    repo_id: str,
    *,
    validated: bool,
    verify_report: dict | None = None,
    drift: tuple[dict, list[str]] | None = None,
    revision: str | None = None,
) -> str:
    """``revision``: the branch the card is committed to, when not the default one: its serve and convert lines name it
    (without it they would serve the default branch's drafter)."""
    revision = None if revision in (None, "main") else revision
    d = loaded.drafter
    dialect = dialects.get(loaded.dialect)
    base_model = hub_id(d.verifier)
    metadata = card_metadata(
        base_model=base_model,
        library_name=dialect.library_name,
        pipeline_tag="text-generation",
        tags=_tags(dialect, d.eagle_version),
    )
    target = base_model or TARGET_PLACEHOLDER  # never a path on the publisher's machine
    front = ["---", metadata, "---"]  # the YAML front matter: lines of its own, all eaglekit's and a checked Hub id
    lines = _intro(loaded, repo_id, target, base_model)
    lines += _serve_section(d, dialect, target, repo_id, revision)
    lines += _drafter_table(loaded, target)
    if verify_report:
        lines += _verification_section(verify_report, target)
    if drift:
        lines += drift_section(*drift)
    lines += _provenance_section(d, validated)
    # every other entry is one line, and many quote the drafter's files (notes, its source, the verify report's checks):
    # escaped (``printable``), none can add a line or a section to the card
    return "\n".join(front + [printable(line) for line in lines])


def _intro(loaded: LoadedDrafter, repo_id: str, target: str, base_model: str | None) -> list[str]:
    """The card's title and the sentence saying what the drafter is, for which target, in which format."""
    d = loaded.drafter
    return [
        "",
        f"# {repo_id.split('/')[-1]}",
        "",
        (
            f"{'A P-EAGLE' if d.parallel is not None else 'An EAGLE'} {d.eagle_version} speculative-decoding drafter"
            " for"
            f" [{target}]({'https://huggingface.co/' + d.verifier if base_model else '#'}), in the {loaded.dialect}"
            f" format. Published with [eaglekit](https://github.com/eaglekit/eaglekit) {__version__}."
        ),
        "",
    ]


def _serve_section(d, dialect: Dialect, target: str, repo_id: str, revision: str | None) -> list[str]:
    """ "Serve it": vLLM's and SGLang's command lines where the engine reads this layout as it is, else the convert line
    that makes one it does (``revision``: the branch named, not the default one)."""
    at = f"{repo_id}@{revision}" if revision else repo_id  # eaglekit's own spelling of a Hub id at a revision
    name = repo_id.split("/")[-1]
    lines = ["## Serve it", ""]
    if "vllm" in dialect.hub_tags:  # a layout vLLM reads as it is (another, e.g. SGLang's ids, it misreads in silence)
        serve = vllm_serve(target, repo_id, revision=revision, parallel=d.parallel is not None)
        lines += ["vLLM:", "", "```bash", serve, "```", ""]
    else:
        lines += [f"For vLLM, convert it first: `eaglekit convert {at} ./{name}-vllm --to vllm`.", ""]
    if d.parallel is not None:  # P-EAGLE: no SGLang release serves it (0.5.23's source)
        lines += ["SGLang: no release serves P-EAGLE (parallel drafting) drafters yet.", ""]
    elif "sglang" in dialect.hub_tags and revision:  # the line would load the default branch: a local copy of this one
        lines += [
            (
                f"SGLang: download this revision (`hf download {repo_id} --revision {revision} --local-dir ./{name}`)"
                f" and pass `./{name}` as `--speculative-draft-model-path`."
            ),
            "",
        ]
    elif "sglang" in dialect.hub_tags:  # a layout SGLang loads as it is
        lines += [
            "SGLang:",
            "",
            "```bash",
            sglang_serve(target, repo_id),
            "```",
            "",
        ]
    else:
        lines += [f"For SGLang, convert it first: `eaglekit convert {at} ./{name}-sglang --to sglang`.", ""]
    return lines


def _attention(d) -> str:
    """The drafter's attention in one phrase: MLA with its ranks, or GQA with its heads."""
    if d.attention == "mla":
        m = d.mla
        return f"MLA (DeepSeek/Kimi): {d.num_heads} heads, q_lora_rank {m.q_lora_rank}, kv_lora_rank {m.kv_lora_rank}"
    return (
        f"{'Qwen3' if d.attention == 'qwen3' else 'Llama'} GQA: {d.num_heads} heads, {d.num_kv_heads} KV heads,"
        f" head_dim {d.head_dim}"
    )


def _drafter_table(loaded: LoadedDrafter, target: str) -> list[str]:
    """ "The drafter": its shape as a table (version, target, format, attention, sizes, aux layers, vocab, flags)."""
    d = loaded.drafter
    ids = d.aux.as_input()
    aux = (
        f"{list(ids)} (input-of-layer, vLLM's convention)"
        if ids is not None
        else "not recorded: the engine's default (2, L//2, L-3)"
    )
    flags = ", ".join(f"`{k}: {str(v).lower()}`" for k, v in d.flags.__dict__.items())
    params = sum(i.numel for i in loaded.checkpoint.tensors.values())
    return [
        "## The drafter",
        "",
        "| | |",
        "|---|---|",
        f"| EAGLE version | {d.eagle_version}{_features_31(d)} |",
        f"| verifier (target) | {target} |",
        f"| format | {loaded.dialect} |",
        f"| attention | {_attention(d)} |",
        f"| layers | {d.num_layers} |",
        f"| hidden size | {d.hidden_size} (target {d.target_hidden_size}) |",
        f"| aux layers | {aux} |",
        f"| vocabulary | {d.vocab_size} target, {d.draft_vocab_size} draft{' (d2t map)' if d.pruned_vocab else ''} |",
        f"| flags | {flags} |",
        f"| rope | theta {d.rope.theta:g}{', ' + d.rope.rope_type + ' scaling' if d.rope.scaling else ''} |",
        f"| parameters | {params:,} ({d.dtype}) |",
        "",
    ]


def _verification_section(r: dict, target: str) -> list[str]:
    """ "Verification": the verify report's acceptance length, per-position rates and parity checks."""
    traj = r.get("trajectory", {})
    rates = ", ".join(f"{x:.3f}" for x in traj.get("per_position_rate", []))
    lines = [
        "## Verification",
        "",
        (
            f"`eaglekit verify` on {_target_label(r.get('target'), target)} ({len(r.get('prompts', []))} prompts,"
            f" K={r.get('num_speculative_tokens')}, {r.get('device')} {r.get('dtype')}): mean acceptance length"
            f" **{r.get('acceptance_length', 0):.3f}** as a greedy vLLM run would count it; per-position acceptance"
            f" [{rates}]."
        ),
        "",
    ]
    for check in r.get("checks", []):
        lines.append(f"- {'passed' if check.get('passed') else 'FAILED'}: {check.get('name')} — {check.get('detail')}")
    if r.get("checks"):
        lines.append("")
    return lines


def _provenance_section(d, validated: bool) -> list[str]:
    """ "Provenance": the dialect it was read as, its conversion, its Hub source, its notes, and whether it was
    validated."""
    lines = ["## Provenance", ""]
    source = d.provenance.source_dialect
    lines.append(f"- read as the {source} dialect" + (f" ({d.provenance.framework})" if d.provenance.framework else ""))
    if d.provenance.eaglekit_version:
        origin = f" from the {d.provenance.converted_from} dialect" if d.provenance.converted_from else ""
        lines.append(f"- converted{origin} by eaglekit {d.provenance.eaglekit_version}")
    if hub_id(d.provenance.source_repo):  # a path recorded there is no Hub repo (and is never published)
        at = f" at commit `{d.provenance.source_commit}`" if d.provenance.source_commit else ""
        lines.append(f"- source: Hub repo `{d.provenance.source_repo}`{at}")
    for note in d.provenance.notes:
        lines.append(f"- {note}")
    lines.append(
        f"- validated by eaglekit {__version__} before publishing"
        if validated
        else "- **not validated**: published without eaglekit's validation"
    )
    lines.append("")
    return lines
