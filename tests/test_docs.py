"""README is the front door and docs/ the rest of the house; these tests keep the two honest.

- README stays short: at most 300 lines, none over 200 characters; benchmarks/README.md at most 15 KB.
- README's commands table has a row for every command `eaglekit --help` lists, each linking a docs page that exists,
  and names no command the CLI does not have. Each command's page names every option its `--help` lists and every key
  its JSON Schema adds, and has its Examples, Options, JSON and Exit codes sections.
- The install README tells a user is the one CI runs (`make test-user`).
- No page carries a dated log entry (the rule: `test_no_dated_log_entries`).
- Every relative link, and its #anchor, resolves; README links every page under docs/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
BENCHMARKS = ROOT / "benchmarks" / "README.md"
MARKDOWN = [README, *sorted(DOCS.glob("*.md")), BENCHMARKS]
# keys every JSON document starts with (docs/json.md); a command's page lists the ones its schema adds
COMMON_KEYS = {"schema_version", "ok", "path", "origin"}
# the sections every command's page has (a heading that contains the word, in this order)
PAGE_SECTIONS = ("Examples", "Options", "JSON", "Exit codes")


def eaglekit_help(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "eaglekit", *args, "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def help_section(text: str, title: str) -> list[str]:
    """The lines of a click help section (`Commands:`, `Options:`), up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def listed_commands(text: str) -> list[str]:
    """The commands a group's `--help` lists (its entries sit two spaces in; wrapped descriptions sit deeper)."""
    return [m.group(1) for line in help_section(text, "Commands:") if (m := re.match(r"^  ([a-z][\w-]*)\s", line))]


def listed_options(text: str) -> list[str]:
    """The long options a command's `--help` lists, `--help` itself left out."""
    found = [m.group(1) for line in help_section(text, "Options:") if (m := re.match(r"^  (?:-\w, )?(--[\w-]+)", line))]
    return [option for option in found if option != "--help"]


def without_code_blocks(markdown: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    kept, fenced = [], False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append((number, line))
    return kept


def section(markdown: str, heading: str) -> str:
    """The text under `## heading`, up to the next heading of that level."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert match, f"no '## {heading}' section"
    return match.group(1)


COMMAND_CELL = re.compile(r"`eaglekit ([a-z][\w-]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def commands_table(markdown: str) -> dict[str, str]:
    """README's commands table: command -> the page its row links ("" for a row without a link)."""
    rows = {}
    for line in section(markdown, "Commands").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and (command := COMMAND_CELL.match(cells[0])):
            link = LINK.search(cells[-1])
            rows[command.group(1)] = link.group(1) if link else ""
    return rows


def table_problems(rows: dict[str, str], commands: list[str], base: Path) -> list[str]:
    """What is wrong with a commands table, for a CLI with these commands and pages under `base`."""
    problems = [f"`eaglekit {c}` has no row" for c in commands if c not in rows]
    for command, link in rows.items():
        if command not in commands:
            problems.append(f"the row for `eaglekit {command}` names a command `eaglekit --help` does not list")
        elif not re.fullmatch(r"docs/[\w.-]+\.md", link):
            problems.append(f"the row for `eaglekit {command}` links no page under docs/ ({link!r})")
        elif not (base / link).is_file():
            problems.append(f"the row for `eaglekit {command}` links {link}, which does not exist")
    return problems


def test_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the rest to docs/"
    long = [f"line {n}: {len(line)} characters" for n, line in enumerate(lines, 1) if len(line) > 200]
    assert not long, f"README.md lines over 200 characters: {long}"


def test_benchmarks_readme_is_short():
    size = BENCHMARKS.stat().st_size
    assert size <= 15_000, f"benchmarks/README.md is {size} bytes: one table per benchmark, at most 15 KB"


@pytest.fixture(scope="module")
def commands() -> list[str]:
    found = listed_commands(eaglekit_help())
    assert {"inspect", "convert", "validate", "verify", "push", "engines", "drift"} <= set(found)
    return found


@pytest.fixture(scope="module")
def rows() -> dict[str, str]:
    return commands_table(README.read_text(encoding="utf-8"))


def test_every_command_has_a_row_and_a_page(commands, rows):
    assert table_problems(rows, commands, ROOT) == []


def test_the_table_check_fails_for_a_command_without_a_page(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "inspect.md").write_text("# inspect\n")
    table = (
        "## Commands\n\n| command | what | page |\n|---|---|---|\n"
        "| `eaglekit inspect PATH` | x | [docs/inspect.md](docs/inspect.md) |\n"
        "| `eaglekit capture PATH` | x | [docs/capture.md](docs/capture.md) |\n"
        "| `eaglekit push PATH REPO_ID` | x | |\n"
        "| `eaglekit serve PATH` | x | [docs/inspect.md](docs/inspect.md) |\n\n## Next\n"
    )
    problems = table_problems(commands_table(table), ["inspect", "capture", "push", "convert"], tmp_path)
    assert problems == [
        "`eaglekit convert` has no row",
        "the row for `eaglekit capture` links docs/capture.md, which does not exist",
        "the row for `eaglekit push` links no page under docs/ ('')",
        "the row for `eaglekit serve` names a command `eaglekit --help` does not list",
    ]


def test_every_page_is_linked_from_readme():
    """A page README does not link is a room nobody finds: each command's page is in the commands table, every other
    page in the Documentation table."""
    linked = {target.partition("#")[0] for target in LINK.findall(README.read_text(encoding="utf-8"))}
    assert sorted(f"docs/{page.name}" for page in DOCS.glob("*.md") if f"docs/{page.name}" not in linked) == []


def command_options(command: str) -> list[str]:
    """Every long option of `eaglekit COMMAND` and, for a group, of its subcommands (whose names count too)."""
    text = eaglekit_help(command)
    if "Commands:" not in text:
        return listed_options(text)
    subcommands = listed_commands(text)
    return [*subcommands, *(o for sub in subcommands for o in listed_options(eaglekit_help(command, sub)))]


def test_each_page_names_every_option_and_section(commands, rows):
    problems = []
    for command in commands:
        page = ROOT / rows[command]
        text = page.read_text(encoding="utf-8")
        for option in command_options(command):
            if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text):
                problems.append(f"{rows[command]} does not name {option} (`eaglekit {command} --help` lists it)")
        headings = [line[3:] for _, line in without_code_blocks(text) if line.startswith("## ")]
        order = [next((i for i, h in enumerate(headings) if want.lower() in h.lower()), None) for want in PAGE_SECTIONS]
        if None in order or order != sorted(order):
            problems.append(f"{rows[command]}: its sections {headings} lack {PAGE_SECTIONS} in that order")
    assert problems == []


def test_each_page_names_its_json_keys(commands, rows):
    problems = []
    for command in commands:
        text = (ROOT / rows[command]).read_text(encoding="utf-8")
        for schema in sorted((ROOT / "schemas").glob(f"{command}*.schema.json")):
            keys = json.loads(schema.read_text())["properties"].keys() - COMMON_KEYS
            problems += [
                f"{rows[command]} does not name `{k}` ({schema.name})" for k in sorted(keys) if f"`{k}`" not in text
            ]
    assert problems == []


def test_install_is_what_ci_runs():
    """README's install commands are the first of `make test-user` (CI's "as README says"), word for word after pip."""
    block = re.search(r"```bash\n(.*?)```", section(README.read_text(encoding="utf-8"), "Install"), re.S)
    told = [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert told and all(line.startswith("pip install ") for line in told), told
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test-user:\n((?:\t.*\n)+)", makefile, re.M).group(1)
    installs = [line.strip()[len("$(USER_PIP) ") :] for line in recipe.splitlines() if "$(USER_PIP) install" in line]
    assert installs[: len(told)] == [line[len("pip ") :] for line in told]


# A dated log entry is a date in a page's text: "2026-11-27, the latest, on a Zen 4 machine ...", "(until
# 2026-11-27 ...)". A reader needs what holds now; when it came to hold is git's to keep. So no date, ISO
# (2026-11-27) or written out (Nov 27, 2026 / 27 November 2026), may stand in README, docs/ or benchmarks/README.md,
# except as a fact about another program in one clear form: "released 2026-11-27". Machines are named by what they
# are (2 cores, AMD EPYC Zen 4), not by the day they were measured on.
MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
DATE = re.compile(rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b{MONTH} \d{{1,2}}, \d{{4}}\b|\b\d{{1,2}} {MONTH} \d{{4}}\b")
FACT = re.compile(r"\breleased $")


def dated_lines(text: str) -> list[tuple[int, str]]:
    """(line number, date) of each dated log entry in a page's text."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [(number, d.group(0)) for d in DATE.finditer(line) if not FACT.search(line[: d.start()])]
    return found


def test_no_dated_log_entries():
    entries = [f"{p.relative_to(ROOT)}:{n}: {d}" for p in MARKDOWN for n, d in dated_lines(p.read_text("utf-8"))]
    assert entries == []


def test_the_date_rule_keeps_a_release_date_and_catches_log_entries():
    text = (
        "vLLM 0.32.0 was released 2026-11-20.\nOn 2026-11-27, the latest run: 0.41x.\nNov 27, 2026: 1.2x (3 May 2026)\n"
    )
    assert dated_lines(text) == [(2, "2026-11-27"), (3, "Nov 27, 2026"), (3, "3 May 2026")]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (not _ and -), spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    for _, line in without_code_blocks(path.read_text(encoding="utf-8")):
        if heading := re.match(r"^#{1,6} (.*)", line):
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            seen.setdefault(f"{base}-{count}" if count else base, 1)
    return set(seen)


def test_relative_links_resolve():
    problems = []
    for path in MARKDOWN:
        for number, line in without_code_blocks(path.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue
                file, _, anchor = target.partition("#")
                resolved = (path.parent / file).resolve() if file else path
                where = f"{path.relative_to(ROOT)}:{number}: {target}"
                if not resolved.exists():
                    problems.append(f"{where}: no such file")
                elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                    problems.append(f"{where}: no heading with that anchor")
    assert problems == []
