"""Options shared by several commands, defined once so every command spells and documents them alike."""

from __future__ import annotations

import click

from .. import dialects
from ..errors import UsageError
from ..io import dtypes

json_option = click.option("--json", "json_mode", is_flag=True, help="Print the result as JSON (schema in schemas/).")
force_option = click.option("--force", is_flag=True, help="Replace OUT if it is empty or an earlier eaglekit output (never a directory with other files).")
target_option = click.option(
    "--target",
    metavar="MODEL",
    help="The target (verifier) model: a local directory, a Hub id in the local cache, or a .gguf file.",
)
engine_option = click.option(
    "--engine",
    metavar="ENGINE==VERSION",
    help="Judge the drafter as this engine release would load and run it, e.g. vllm==0.24.",
)
dtype_option = click.option(
    "--dtype",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", *dtypes.CAST_TARGETS]),
    help="Cast floating tensors (never d2t/t2d); auto keeps each tensor's own dtype.",
)


def from_option(func):
    return click.option(
        "--from",
        "source_dialect",
        default="auto",
        show_default=True,
        metavar="DIALECT",
        help=f"Source dialect ({', '.join(dialects.names())}); auto detects it.",
    )(func)


def parse_ids(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        ids = tuple(int(p) for p in text.replace(" ", "").split(",") if p != "")
    except ValueError:
        raise UsageError(f"--aux-layers {text!r}: expected comma-separated integers like 2,16,29") from None
    if not ids:
        raise UsageError("--aux-layers: no layer ids given")
    return ids
