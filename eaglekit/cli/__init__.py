"""The ``eaglekit`` command: one module per subcommand, assembled here.

A subcommand's module is imported only when that subcommand runs (or when ``--help`` lists them all), so
``eaglekit push`` does not pay for importing ``drift``'s, ``engines``' or ``verify``'s options (the lazy-group
pattern from click's documentation).
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading

import click

from .. import __version__
from ._errors import EaglekitGroup, debugging

# name -> (module under eaglekit.cli, attribute), in the order --help lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("inspect", "inspect_command"),
    "convert": ("convert", "convert_command"),
    "validate": ("validate", "validate_command"),
    "verify": ("verify", "verify_command"),
    "capture": ("capture", "capture_command"),
    "push": ("push", "push_command"),
    "engines": ("engines", "engines_group"),
    "drift": ("drift", "drift_command"),
}


class LazyGroup(EaglekitGroup):
    """``EaglekitGroup`` whose subcommands are looked up in ``COMMANDS`` and imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
        if command.name != cmd_name:
            raise AssertionError(
                f"eaglekit.cli.{module}.{attribute} is named {command.name!r}, COMMANDS says {cmd_name!r}"
            )
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """An unknown command with the closest names, as click words it for an unknown option ("Did you mean
        'inspect'?"): click's own suggestion looks among ``self.commands``, which a lazy group leaves empty."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            name = args[0] if args else ""
            if name in COMMANDS or name.startswith("-") or "Did you mean" in exc.format_message():
                raise
            from difflib import get_close_matches  # the matcher click uses for options

            close = sorted(get_close_matches(name, list(COMMANDS)))
            if not close:
                raise
            did_you_mean = (
                f"Did you mean {close[0]!r}?"
                if len(close) == 1
                else f"(Did you mean one of: {', '.join(repr(c) for c in close)}?)"
            )
            raise click.UsageError(f"No such command {name!r}. {did_you_mean}", ctx) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="eaglekit")
def main() -> None:
    """eaglekit: convert, inspect, validate, verify and publish EAGLE 3 / 3.1 speculative-decoding drafters."""


def run() -> None:
    """The ``eaglekit`` console script and ``python -m eaglekit``."""
    import signal

    from ._errors import on_sigterm

    signal.signal(signal.SIGTERM, on_sigterm)  # unwind as Ctrl-C does (Terminated): outputs in progress are cleaned up
    code: object = 0
    try:
        main(prog_name="eaglekit")  # click's standalone mode: always ends in SystemExit
    except SystemExit as done:
        code = done.code
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the command is over: a SIGTERM now ends the process, no traceback
    exit_now(code)


def exit_now(code: object) -> None:
    """Exit with ``code`` as Python's own exit would, less the interpreter's teardown.

    Tearing the interpreter down (every module and object freed one by one) takes ~15 ms after a header-only command,
    a tenth of its whole run, and ~0.6 s after ``verify`` (torch, transformers and a model in memory); a process about
    to end gains nothing from it. mypy ends with ``os._exit`` after flushing stdout and stderr too (``mypy/util.py``
    ``hard_exit``, read in its source; it does not run the exit handlers first, this does). What Python's exit does
    before that teardown still happens, in its order: no other non-daemon thread may be running (else this is Python's
    own exit, which waits for it), the ``atexit`` handlers run (torch's, logging's flush, multiprocessing's, tempfile's
    finalizers), then stdout and stderr are flushed. Every file eaglekit writes is closed before this.

    Python's own exit is kept where something may still want the process: a profiler or tracer is running eaglekit
    in-process (``python -m cProfile -m eaglekit ...``, pdb; they write their results after ``run`` returns), or
    ``EAGLEKIT_DEBUG`` is set. Only the entry points call this (``eaglekit``, ``python -m eaglekit``); a program that
    runs the CLI in-process calls ``main``.
    """
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's, what its own exit calls
    waited_for = [
        t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()
    ]
    watched = sys.getprofile() is not None or sys.gettrace() is not None or debugging()
    if code is None:
        code = 0
    if not isinstance(code, int) or waited_for or watched or run_exit_handlers is None:
        sys.exit(code)
    run_exit_handlers()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe (`| head`): Python's own exit reports it as usual
        sys.exit(code)
    os._exit(code)
