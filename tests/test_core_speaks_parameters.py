"""The core (everything outside ``eaglekit/cli/``) names a parameter in its messages, never a CLI flag; the CLI writes
each named parameter as its flag through one table (``cli/_flags.py``). Issue: a library user of ``api.convert`` was
told "--resolve needs --target", a flag they never typed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest

from eaglekit.cli._flags import PARAMETER_FLAGS, as_flags

PACKAGE = Path(__file__).resolve().parents[1] / "eaglekit"
# a backticked span that is a command line to type (eaglekit's or another program's), where flags belong
COMMAND_LINE = re.compile(r"`(?:eaglekit|vllm|llama-server|python|pip|sglang|cmake|hf|huggingface-cli)\b[^`]*`")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w-])")


def cli_flags() -> set[str]:
    from eaglekit.cli import main

    ctx = click.Context(main)
    found: set[str] = set()

    def walk(cmd: click.Command) -> None:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name))
            return
        for param in cmd.params:
            found.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))

    walk(main)
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _joined(node: ast.JoinedStr, skip: set[int]) -> str:
    """An f-string's text, an f-string nested in one of its fields (``{f' --revision {rev}' if rev else ''}``) read
    as part of it; its parts marked seen."""
    parts = []
    for value in node.values:
        skip.add(id(value))
        if isinstance(value, ast.Constant):
            parts.append(value.value)
            continue
        nested = [n for n in ast.walk(value.value) if isinstance(n, ast.JoinedStr)]
        parts.append("".join(_joined(n, skip) for n in nested if id(n) not in skip) or "{}")
        skip.update(id(n) for n in nested)
    return "".join(parts)


def message_texts(source: str):
    """(line, text) of each string that can be a message: literals and f-strings with a space in them (an argv
    element such as "--threads" for another program is one word), docstrings left out."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and id(node) not in skip:
            text = _joined(node, skip)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        if " " in text:
            yield node.lineno, text


def flags_named(text: str, flags: set[str]) -> list[str]:
    return [f for f in FLAG.findall(COMMAND_LINE.sub("", text)) if f in flags]


def test_no_message_outside_cli_names_a_flag():
    flags = cli_flags()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cli" in path.relative_to(PACKAGE).parts:
            continue
        for line, text in message_texts(path.read_text()):
            for flag in flags_named(text, flags):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {flag} in {text[:80]!r}")
    assert found == []


def test_the_scan_finds_a_flag_in_a_message_and_passes_a_command_line():
    flags = {"--target", "--resolve"}
    source = (
        'def f():\n    """--target in a docstring is documentation."""\n'
        '    raise ValueError(f"--resolve needs {x}: see `eaglekit convert --target T`")\n'
        'ARGV = ["--target"]\n'
    )
    found = [flag for _, text in message_texts(source) for flag in flags_named(text, flags)]
    assert found == ["--resolve"]


def test_every_flag_in_the_table_is_an_option_of_a_command():
    flags = cli_flags()
    assert sorted(f for f in PARAMETER_FLAGS.values() if f not in flags) == []


def test_the_cli_writes_a_named_parameter_as_its_flag():
    assert as_flags("`resolve` needs `target`: pass one") == "--resolve needs --target: pass one"
    assert as_flags("`k` 3, `source_dialect` sglang") == "--num-speculative-tokens 3, --from sglang"
    assert as_flags("run `eaglekit validate` and `unknown_name`") == "run `eaglekit validate` and `unknown_name`"


def test_the_api_says_parameters_and_the_cli_says_flags(cli, tmp_path):
    from eaglekit import api
    from eaglekit.errors import UsageError

    from drafters import Dims, write_vllm

    src = write_vllm(tmp_path / "d", Dims())
    with pytest.raises(UsageError) as said:
        api.convert(src, tmp_path / "out", to="speculators", resolve=True)
    assert "`resolve` needs `target`" in str(said.value) and "--resolve" not in str(said.value)
    result = cli("convert", src, tmp_path / "out2", "--to", "speculators", "--resolve", expect=2)
    assert "--resolve needs --target" in result.stderr and "`resolve`" not in result.stderr
