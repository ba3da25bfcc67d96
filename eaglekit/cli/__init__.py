"""The ``eaglekit`` command: one module per subcommand, assembled here."""

from __future__ import annotations

import click

from .. import __version__
from ._errors import EaglekitGroup
from .convert import convert_command
from .drift import drift_command
from .engines import engines_group
from .inspect import inspect_command
from .push import push_command
from .validate import validate_command
from .verify import verify_command


@click.group(cls=EaglekitGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="eaglekit")
def main() -> None:
    """eaglekit: convert, inspect, validate, verify and publish EAGLE 3 / 3.1 speculative-decoding drafters."""


main.add_command(inspect_command)
main.add_command(convert_command)
main.add_command(validate_command)
main.add_command(verify_command)
main.add_command(push_command)
main.add_command(engines_group)
main.add_command(drift_command)


def run() -> None:
    main(prog_name="eaglekit")
