"""The one place where failures become messages and exit codes.

0 ok; 1 ran and found problems, or the system failed it (disk full); 2 could not run (bad options or input, missing
files, missing optional dependency); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM: `kill`, `timeout`, `docker
stop`). No traceback reaches the user unless EAGLEKIT_DEBUG=1.
"""

from __future__ import annotations

import json
import os
import sys
from typing import NoReturn

import click

from ..errors import EaglekitError
from ._flags import as_flags
from ._output import printable

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
MAX_LINE = 2000  # characters of an error line


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is (``on_sigterm``) so that it unwinds as Ctrl-C does: a half-written output's
    hidden directory is removed on the way out instead of being left for the next run to sweep."""


def on_sigterm(signum, frame) -> None:
    raise Terminated()


def debugging() -> bool:
    """Whether EAGLEKIT_DEBUG asks for tracebacks (and Python's own exit: ``cli.exit_now``)."""
    return os.environ.get("EAGLEKIT_DEBUG", "") not in ("", "0")


def _traceback_if_debugging() -> None:
    """The traceback of the exception being handled, on stderr, when EAGLEKIT_DEBUG is set."""
    if debugging():
        import traceback  # only here: every command's start-up would pay for it

        traceback.print_exc()


def _cut(text: str) -> str:
    """A value quoted whole (a 100,000-item list) must not become a 500 KB line: ``MAX_LINE`` characters at most."""
    return (
        text if len(text) <= MAX_LINE else text[: MAX_LINE - 40] + f"... ({len(text) - MAX_LINE + 40} characters more)"
    )


def fail(message: str, code: int, *, json_mode: bool = False, kind: str = "EaglekitError") -> NoReturn:
    """One line on stderr; under --json also the error document (schemas/error.schema.json) on stdout."""
    line = _cut(" ".join(as_flags(str(message)).split()))  # the core names parameters; the CLI says their flags
    click.echo(f"error: {_cut(printable(line))}", err=True)  # cut again once escaped: an escape is 4 characters for 1
    if json_mode:
        from ..errors import error_document

        click.echo(json.dumps(error_document(line, kind, code)))
    sys.exit(code)


class EaglekitGroup(click.Group):
    """A click group whose commands' exceptions are mapped to one line and an exit code."""

    def invoke(self, ctx: click.Context):
        json_mode = "--json" in (*ctx.__dict__.get("_protected_args", ()), *ctx.args)  # the command line still to run
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a bad option or argument: the same one-line style as every other error
            hint = (
                f" (see `eaglekit {exc.ctx.info_name} --help`)"
                if exc.ctx is not None and exc.ctx.parent is not None
                else ""
            )
            fail(exc.format_message() + hint, EXIT_USAGE, json_mode=json_mode, kind="UsageError")
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except EaglekitError as exc:
            _traceback_if_debugging()
            fail(str(exc), exc.exit_code, json_mode=json_mode, kind=type(exc).__name__)
        except KeyboardInterrupt as exc:
            terminated = isinstance(exc, Terminated)
            click.echo("terminated" if terminated else "interrupted", err=True)
            sys.exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)
        except MemoryError:
            fail("out of memory", EXIT_FAILURE, json_mode=json_mode, kind="MemoryError")
        except OSError as exc:
            _traceback_if_debugging()
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            # the system failed the operation (disk full, ...)
            fail(f"{where}{exc.strerror or exc}", EXIT_FAILURE, json_mode=json_mode, kind=type(exc).__name__)
        except Exception as exc:  # a bug in eaglekit: still one line, with a way to see more
            _traceback_if_debugging()
            fail(
                f"internal error: {type(exc).__name__}: {exc} (set EAGLEKIT_DEBUG=1 for the traceback)",
                EXIT_FAILURE,
                json_mode=json_mode,
                kind="InternalError",
            )
