"""The rules about imports (docs/architecture.md), and the size of what a reader must hold.

Every ``envlock`` import counts, at the top of a file, inside a function or under
``TYPE_CHECKING``: a lazy import is still a dependency. The packages sit in layers, lowest
first; a package imports only from layers below its own (the foundations, the top-level
modules, import each other without a cycle). The module graph has no cycle either.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
SRC = ROOT / "src" / "envlock"
DOC = ROOT / "docs" / "architecture.md"

#: The layers, lowest first: a package (or a foundation module) imports only what lies below it.
#: Packages in one layer do not import each other.
LAYERS: list[set[str]] = [
    {"__init__", "errors", "runner", "netenv", "progress", "ui", "workspace", "urlcheck", "transfers",
     "interrupts", "timings", "gcpause", "deferred", "ahead"},  # foundations
    {"net"},
    {"model"},
    {"store"},
    {"resolution", "patches", "install", "gpu"},
    {"build"},
    {"cache"},
    {"commands"},
    {"cli"},
    {"__main__"},
]
FOUNDATIONS = LAYERS[0]
#: Modules of ``commands/`` that no command is named after: what several recipes share.
SHARED_RECIPES = {"realize", "lockrefs", "upgradereport", "buildsession"}
#: The only modules that start processes: envlock's own (uv, git, backends, keyring) in runner;
#: the user's command in bisect (once per candidate) and run (exec'd in the env); a fork of envlock
#: itself, for read-only work started ahead at start-up, in ahead.
STARTS_PROCESSES = {"runner", "commands.bisect", "commands.run", "ahead"}
#: The only module that speaks HTTP itself (boto3 speaks it for an s3:// cache in cache.backends).
SPEAKS_HTTP = {"net.http"}

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
LONG_ALLOWED: set[str] = set()  # functions allowed past the cap (none: argparse's table is split per command group)


def _modules() -> dict[str, Path]:
    """Every module by its dotted name under ``envlock`` (``store.noop``), package ``__init__``s aside."""
    found = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        if len(parts) > 1 and parts[-1] == "__init__":
            continue
        found[".".join(parts)] = path
    return found


def _unit(module: str) -> str:
    """The package a module is in, or the module itself at the top."""
    return module.split(".")[0]


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The envlock modules a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "envlock":
            base = node.module.removeprefix("envlock").lstrip(".")
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                found.add(full if full in modules else base)
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("envlock.") for a in node.names if a.name.startswith("envlock.")}
    return found & modules


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, set(modules)) - {name} for name, path in modules.items()}


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*path[path.index(dep):], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_every_package_and_top_module_has_a_layer() -> None:
    units = {_unit(m) for m in _modules()}
    layered = set().union(*LAYERS)
    assert units - layered == set(), "add the new package or module to LAYERS here and in docs/architecture.md"
    assert layered - units == set(), "a layer names a package or module that is gone"


def test_packages_are_empty_so_importing_one_costs_nothing() -> None:
    assert {str(p.relative_to(SRC)) for p in SRC.rglob("__init__.py") if p.parent != SRC and p.read_text()} == set()


def test_a_package_imports_only_from_the_layers_below() -> None:
    wrong = set()
    for module, deps in _graph().items():
        for dep in deps:
            a, b = _unit(module), _unit(dep)
            if a == b or (a in FOUNDATIONS and b in FOUNDATIONS):
                continue
            if _layer(b) >= _layer(a):
                wrong.add(f"{module} -> {dep}")
    assert wrong == set()


def test_no_cycle_between_packages() -> None:
    units: dict[str, set[str]] = {}
    for module, deps in _graph().items():
        units.setdefault(_unit(module), set()).update(_unit(d) for d in deps if _unit(d) != _unit(module))
    assert _cycles(units) == []


def test_no_cycle_between_modules() -> None:
    assert _cycles(_graph()) == []


def _command_names(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name
                yield from _command_names(sub)


def test_a_recipe_is_named_after_its_command() -> None:
    from envlock.cli.main import build_parser

    commands = set(_command_names(build_parser()))
    recipes = {m.split(".")[1] for m in _modules() if _unit(m) == "commands"}
    assert recipes - commands - SHARED_RECIPES == set()
    assert recipes >= SHARED_RECIPES


def _top_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_a_command_parses_with_its_groups_parser_alone_as_with_the_whole() -> None:
    """``cli.main`` builds only the parser of the command's group (the other modules of ``cli`` not
    imported): ``COMMANDS`` names every command, and each one's parser and help are the whole parser's."""
    from envlock.cli.main import COMMANDS, build_parser

    whole = _top_commands(build_parser())
    assert set(whole) == set(COMMANDS)
    for name, group in COMMANDS.items():
        alone = _top_commands(build_parser(only=name))
        assert set(alone) == {n for n, g in COMMANDS.items() if g == group}
        assert alone[name].format_help() == whole[name].format_help()
        assert set(_command_names(alone[name])) == set(_command_names(whole[name]))


@pytest.mark.parametrize(("argv", "command"), [
    (["sync", "demo"], "sync"), (["-q", "--root", "sync", "lock", "demo"], "lock"), (["--root=x", "verify"], "verify"),
    (["--keyring-provider", "subprocess", "cache", "push"], "cache"), (["--help", "sync"], None),
    (["sync", "-h"], "sync"), (["--version"], None), ([], None), (["nosuch", "demo"], None), (["--debug"], None),
])
def test_the_command_named_is_the_first_word_not_an_options_value(argv: list[str], command: str | None) -> None:
    from envlock.cli.main import command_named

    assert command_named(argv) == command


def _uses(path: Path) -> tuple[set[str], set[str]]:
    """(the standard modules a file imports, the ``os`` process calls it makes)."""
    imported, calls = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
              and re.fullmatch(r"exec\w*|spawn\w*|system|popen|fork\w*|posix_spawn\w*", node.attr)):
            calls.add(node.attr)
    return imported, calls


def test_processes_start_in_four_modules_and_http_is_spoken_in_one() -> None:
    starts, speaks = set(), set()
    for module, path in _modules().items():
        imported, calls = _uses(path)
        if "subprocess" in imported or calls:
            starts.add(module)
        if imported & {"http.client", "urllib.request", "requests", "urllib3", "httpx"}:
            speaks.add(module)
    assert (starts, speaks) == (STARTS_PROCESSES, SPEAKS_HTTP)


def _lazy_imports() -> dict[str, set[str]]:
    """Per module, the envlock modules it imports only inside a function (not at the top)."""
    modules = _modules()
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        top = set()
        for stmt in tree.body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                top |= _imports_of(stmt, set(modules))
        inner = set()
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(func):
                    if isinstance(node, ast.Import | ast.ImportFrom):
                        inner |= _imports_of(node, set(modules))
        if inner - top - {name}:
            found[name] = inner - top - {name}
    return found


def _imports_of(node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    tree = ast.Module(body=[node], type_ignores=[])
    found = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "envlock":
            base = n.module.removeprefix("envlock").lstrip(".")
            for alias in n.names:  # as _imports: ``from envlock import runner`` imports ``runner``
                full = f"{base}.{alias.name}" if base else alias.name
                found.add(full if full in modules else base)
        elif isinstance(n, ast.Import):
            found |= {a.name.removeprefix("envlock.") for a in n.names if a.name.startswith("envlock.")}
    return {f for f in found if f in modules}


def _documented_lazy_imports() -> dict[str, set[str]]:
    text = DOC.read_text().split("## Lazy imports", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            table[cells[0].strip("`")] = set(re.findall(r"`([\w.]+)`", cells[1]))
    return table


def test_the_lazy_imports_are_the_ones_the_docs_list() -> None:
    assert _documented_lazy_imports() == _lazy_imports()


@pytest.mark.parametrize("module", sorted(_modules()))
def test_modules_and_functions_fit_in_a_read(module: str) -> None:
    path = _modules()[module]
    too_long = []
    lines = len(path.read_text().splitlines())
    if lines > MAX_MODULE_LINES:
        too_long.append(f"{module}: {lines} lines")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES and f"{module}.{node.name}" not in LONG_ALLOWED:
                too_long.append(f"{module}.{node.name}: {length} lines")
    assert too_long == []
