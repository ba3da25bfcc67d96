"""``eaglekit push PATH REPO_ID``: validated, one atomic commit to the Hugging Face Hub, with a model card."""

from __future__ import annotations

import click

from .. import api
from ..findings import Finding
from ..io.sources import origin_note
from ._options import NAMED_FILE, NAMED_PLACE
from ._output import Output, findings_text, human_bytes, table


def render(r: dict) -> str:
    t = r["target"]
    place = "a pull request against main" if t["create_pr"] else "branch " + t["revision"]
    where = f"{t['repo_id']} ({place}{', private' if t['private'] else ''})"
    lines = []
    if r["dry_run"]:
        lines.append(f"dry run: would publish to {where}, in one commit:")
    if r["findings"]:
        lines.append(findings_text([Finding(**f) for f in r["findings"]]))
    rows = [(f"  {f['path']}", human_bytes(f["size"]), f["sha256"]) for f in r["files"]]
    if r["dry_run"]:
        lines.append(table(rows))
        lines.append(
            "README.md: "
            + ("the checkpoint's own (kept; --overwrite-card replaces it)" if r["card_kept"] else "generated:")
        )
        if not r["card_kept"]:
            lines.append(r["card"])
        lines.append("nothing sent (--dry-run)")
        return "\n".join(lines)
    commit = r["commit"]
    if commit.get("unchanged"):
        lines.append(f"{t['repo_id']}: nothing changed, no commit made ({commit.get('commit_url')})")
    elif commit.get("pr_url"):
        lines.append(f"opened {commit['pr_url']} ({len(r['files'])} files)")
    else:
        lines.append(f"published {len(r['files'])} files to {where}: {commit.get('commit_url')}")
    if commit.get("deleted"):
        lines.append("removed stale files: " + ", ".join(commit["deleted"]))
    return "\n".join(lines)


@click.command("push")
@click.argument("path", type=NAMED_PLACE)
@click.argument("repo_id")
@click.option("--private", is_flag=True, help="Create the repository as private (if it does not exist).")
@click.option("--revision", metavar="BRANCH", help="Branch to commit to (created from main if new).")
@click.option("--create-pr", is_flag=True, help="Open a pull request instead of committing to the branch.")
@click.option("--commit-message", metavar="MSG", help="Commit message.")
@click.option("--token", metavar="TOKEN", help="Hub token (default: HF_TOKEN, then the stored login). Never printed.")
@click.option("--endpoint", metavar="URL", help="Hub endpoint (default: HF_ENDPOINT, then https://huggingface.co).")
@click.option(
    "--dry-run", is_flag=True, help="Show the target, each file with size and sha256, and the card; send nothing."
)
@click.option("--no-validate", "skip_validate", is_flag=True, help="Publish without validating (recorded in the card).")
@click.option("--overwrite-card", is_flag=True, help="Replace a README.md already in PATH with the generated card.")
@click.option(
    "--allow-untrained",
    is_flag=True,
    help="Publish a drafter that `convert --upgrade 3.1` produced and nobody trained since.",
)
@click.option(
    "--allow-ambiguous",
    is_flag=True,
    help="Publish a checkpoint whose files fit two readings of its aux layers (validate's *.ambiguous).",
)
@click.option(
    "--base-model",
    metavar="ID",
    help="The verifier's Hub id for the card, when the drafter records a local path or none.",
)
@click.option(
    "--report",
    "report_dir",
    metavar="DIR",
    type=NAMED_FILE,
    help=(
        "An `eaglekit drift --report DIR` directory: its tables go into the card, its plots and report.json into the"
        " same commit (under drift/)."
    ),
)
@click.option("--json", "json_mode", is_flag=True, help="Print the result as JSON (schema in schemas/).")
def push_command(
    path,
    repo_id,
    private,
    revision,
    create_pr,
    commit_message,
    token,
    endpoint,
    dry_run,
    skip_validate,
    overwrite_card,
    allow_untrained,
    allow_ambiguous,
    base_model,
    report_dir,
    json_mode,
):
    """Validate the drafter PATH and publish it to the Hub repository REPO_ID in one commit (stale shards removed in
    the same commit; a concurrent push is refused, not clobbered), with a model card generated from the drafter.

    \b
    Examples:
      eaglekit push ./for-vllm my-org/SmolLM2-135M-Instruct-eagle3 --dry-run
      eaglekit push ./for-vllm my-org/SmolLM2-135M-Instruct-eagle3 --private
      eaglekit push ./for-vllm my-org/drafter --revision v2 --create-pr
      eaglekit push ./for-vllm my-org/drafter --report ./drift-report --dry-run
    """
    published = api.push(
        path,
        repo_id,
        private=private,
        revision=revision,
        create_pr=create_pr,
        commit_message=commit_message,
        token=token,
        endpoint=endpoint,
        dry_run=dry_run,
        validate=not skip_validate,
        overwrite_card=overwrite_card,
        base_model=base_model,
        allow_untrained=allow_untrained,
        allow_ambiguous=allow_ambiguous,
        report=report_dir,
    )
    output = Output(json_mode)
    note = origin_note(published.data.get("origin"))
    if note:
        output.note(note)
    output.emit(published.data, render)
