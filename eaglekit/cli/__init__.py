"""The ``eaglekit`` command: one module per subcommand, assembled here.

A subcommand's module is imported only when that subcommand runs (or when ``--help`` lists them all), so
``eaglekit push`` does not pay for importing ``drift``'s, ``engines``' or ``verify``'s options (the lazy-group
pattern from click's documentation).
"""

from __future__ import annotations

import importlib

import click

from .. import __version__
from ._errors import EaglekitGroup

# name -> (module under eaglekit.cli, attribute), in the order --help lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("inspect", "inspect_command"),
    "convert": ("convert", "convert_command"),
    "validate": ("validate", "validate_command"),
    "verify": ("verify", "verify_command"),
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
            raise AssertionError(f"eaglekit.cli.{module}.{attribute} is named {command.name!r}, COMMANDS says {cmd_name!r}")
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="eaglekit")
def main() -> None:
    """eaglekit: convert, inspect, validate, verify and publish EAGLE 3 / 3.1 speculative-decoding drafters."""


def run() -> None:
    main(prog_name="eaglekit")
