"""The package's layers, as docs/development.md's Layout draws them: data flows down, and no module imports one above
it (at the top of a file or inside a function: a deferred import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "eaglekit"

# Top to bottom, as docs/development.md's Layout lists them; a unit is a subpackage or a top-level module. Units of one
# layer may import each other.
LAYERS = [
    {"__main__", "cli"},
    {"api"},
    {"verify", "validate", "convert", "push", "card", "describe", "serving", "drift"},
    {"engines"},
    {"target"},
    {"reference"},
    {"dialects"},
    {"model"},
    {"io", "hub", "upload"},
    {"schemas", "findings", "errors", "__init__"},
]


def _unit(parts: list[str]) -> str:
    """The unit of module eaglekit.<parts>: its subpackage or top-level module (the package root: __init__)."""
    return parts[0] if parts else "__init__"


def _imports(path: Path) -> set[str]:
    """The eaglekit units the module at ``path`` imports, anywhere in it."""
    relative = path.relative_to(PACKAGE).with_suffix("").parts
    package = list(relative[:-1])  # the package a relative import starts from (of an __init__.py too: its directory)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = base + (node.module.split(".") if node.module else [])
            elif node.module == "eaglekit" or (node.module or "").startswith("eaglekit."):
                target = node.module.split(".")[1:]
            else:
                continue
            if not target or (
                node.level and node.module is None
            ):  # from . import x / from eaglekit import x: x may be a module
                for alias in node.names:
                    module = target + [alias.name]
                    exists = (
                        PACKAGE.joinpath(*module).is_dir()
                        or PACKAGE.joinpath(*module[:-1], alias.name + ".py").exists()
                    )
                    found.add(_unit(module if exists else target))
            else:
                found.add(_unit(target))
        elif isinstance(node, ast.Import):
            found |= {
                _unit(a.name.split(".")[1:])
                for a in node.names
                if a.name == "eaglekit" or a.name.startswith("eaglekit.")
            }
    return found


def test_no_module_imports_one_above_it():
    layer_of = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    units = {
        p.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for p in PACKAGE.glob("*")
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert units == set(layer_of), f"units docs/development.md's Layout does not place: {sorted(units ^ set(layer_of))}"
    upward = []
    for path in PACKAGE.rglob("*.py"):
        importer = _unit(list(path.relative_to(PACKAGE).with_suffix("").parts))
        for imported in _imports(path):
            if layer_of[imported] < layer_of[importer]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} imports {imported}")
    assert not upward, upward


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The test above can fail: a deferred import from a lower layer up is caught."""
    fake = tmp_path / "eaglekit" / "io"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "x.py").write_text("def f():\n    from ..api import document\n    from .. import SCHEMA_VERSION\n")
    (tmp_path / "eaglekit" / "validate").mkdir()
    (fake / "y.py").write_text("def f():\n    from eaglekit import validate\n    import eaglekit.cli\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "eaglekit")
    assert _imports(fake / "x.py") == {"api", "__init__"}
    assert _imports(fake / "y.py") == {"validate", "cli"}


def _module_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the eaglekit modules it imports anywhere in it (a package importing its own submodules left out:
    that is how a package is assembled, not a dependency of its parts)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                    target = [p for p in base if p] + (node.module.split(".") if node.module else [])
                elif node.module == "eaglekit" or (node.module or "").startswith("eaglekit."):
                    target = node.module.split(".")[1:]
                else:
                    continue
                for alias in node.names:
                    submodule = ".".join(target + [alias.name])
                    found.add(submodule if submodule in modules else ".".join(target))
            elif isinstance(node, ast.Import):
                found |= {".".join(a.name.split(".")[1:]) for a in node.names if a.name.startswith("eaglekit.")}
        graph[name] = {m for m in found if m in modules and m != name and not m.startswith(name + ".") and name != ""}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return circles


def test_no_modules_import_each_other():
    """hub imported io.locate for the Hub id rules while io.locate imported hub; io.locate read Hub ids through
    io.remote, which reads headers through io.reader, which imports io.locate. Within a layer too, no circles."""
    assert _circles(_module_graph(PACKAGE)) == []


def test_the_circle_check_sees_a_deferred_circle(tmp_path):
    fake = tmp_path / "eaglekit"
    (fake / "io").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "io" / "__init__.py").write_text("from . import a\n")  # a package importing its part: no circle
    (fake / "io" / "a.py").write_text("from .b import x\n")
    (fake / "io" / "b.py").write_text("def x():\n    from . import c\n")
    (fake / "io" / "c.py").write_text("def y():\n    from eaglekit.io import a\n")
    assert _circles(_module_graph(fake)) == [["io.a", "io.b", "io.c"]]
