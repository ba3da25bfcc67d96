"""The one output layer: human text or JSON on stdout, notes and progress on stderr.

Every command builds a plain dict (the JSON result, with a schema in ``schemas/``) and a human rendering of
it; ``emit`` prints one or the other. Nothing else in the CLI writes to stdout.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence

import click

from ..findings import SEVERITIES, Finding, by_severity
from ..model.config_view import printable, terminal_safe
from ._flags import as_flags


class Output:
    def __init__(self, json_mode: bool = False, quiet: bool = False):
        self.json_mode = json_mode
        self.quiet = quiet

    def emit(self, data: dict, human: Callable[[dict], str]) -> None:
        """``data`` as JSON (the document ``eaglekit.api`` returns, its messages naming parameters), or as ``human``
        renders it, each named parameter printed as its flag."""
        if self.json_mode:
            click.echo(json.dumps(data, indent=2, default=str))
        else:
            text = human(data)
            if text:
                click.echo(terminal_safe(as_flags(text)))

    def line(self, text: str) -> None:
        """One line of a stream of results (``validate --from-file`` rows), as ``emit`` prints a document."""
        click.echo(text if self.json_mode else terminal_safe(as_flags(text)))

    def note(self, text: str) -> None:
        """A side remark for a person: stderr, and silent in JSON or quiet mode."""
        if not self.json_mode and not self.quiet:
            click.echo(terminal_safe(as_flags(text)), err=True)

    def progress(self, total: int, description: str):
        """A byte-count progress bar on stderr (shown only on a terminal and outside JSON mode)."""
        return self._bar(description, total, unit="B", unit_scale=True, unit_divisor=1024)

    def count_progress(self, description: str, total: int):
        """A progress bar counting items (prompts, chunks of chains), shown as ``progress`` is: the ``progress``
        callback verify and drift take."""
        return self._bar(description, total)

    def _bar(self, description: str, total: int, **units):
        if self.json_mode or self.quiet or not sys.stderr.isatty():
            return _NoProgress()  # what a disabled bar does, without importing tqdm (~0.1 s: asyncio, multiprocessing)
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=description, file=sys.stderr, leave=False, **units)


class _NoProgress:
    """A progress bar that shows nothing: a context manager taking ``update(n)``, and ``close()``."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc) -> None:
        pass


def table(rows: Iterable[Sequence[str]], indent: str = "") -> str:
    rows = [tuple(printable(str(c)) for c in row) for row in rows]
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    lines = []
    for row in rows:
        cells = [c.ljust(widths[i]) if i < len(row) - 1 else c for i, c in enumerate(row)]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def findings_text(findings: Iterable[Finding], *, empty: str = "") -> str:
    grouped = by_severity(findings)
    blocks = []
    for severity in SEVERITIES:
        items = grouped[severity]
        if not items:
            continue
        lines = [f"{severity}s ({len(items)}):" if len(items) != 1 else f"{severity} (1):"]
        steps = [next_step_text(f.next_step) if f.next_step else None for f in items]
        for i, f in enumerate(items):
            lines.append(f"  [{f.check}] {printable(f.line())}")
            if steps[i] and steps[i] not in steps[i + 1 :]:  # one next step shared by several: said after the last
                lines.append(f"    next: {printable(steps[i])}")
        blocks.append("\n".join(lines))
    return "\n".join(blocks) if blocks else empty


# what each command a next step names takes before its options (the reader fills them in)
_ARGUMENTS = {"convert": "SRC OUT", "verify": "DRAFTER", "validate": "DRAFTER", "inspect": "DRAFTER"}
_ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}


def next_step_text(step: dict) -> str:
    """A finding's next step (``findings.NEXT_STEP_KEYS``) in the CLI's words: ``use vLLM >= 0.25.0, or `eaglekit
    convert SRC OUT --to vllm```."""
    flags = " ".join(
        f"--{name.replace('_', '-')}" + ("" if value is True else f" {value}")
        for name, value in (step.get("options") or {}).items()
    )
    parts = []
    if step.get("release"):
        engine, _, spec = step["release"].partition(">=")
        parts.append(f"use {_ENGINES.get(engine, engine)} >= {spec}")
    if step.get("command"):
        parts.append(f"`eaglekit {step['command']} {_ARGUMENTS.get(step['command'], '')} {flags}`".replace("  ", " "))
    elif flags:
        parts.append(f"pass {flags}")
    return ", or ".join(parts)


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"
