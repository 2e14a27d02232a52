"""The one rule about imports (docs/architecture.md), and the size of what a reader must hold.

Every ``envlock`` import counts, at the top of a file or inside a function: a lazy import
is still a dependency. Layers, lowest first: a module may import its own layer's lower
neighbours only where the table says so.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "envlock"

#: Pieces every layer may use: data, errors, the store, the runners, the target model.
FOUNDATIONS = {
    "__init__", "errors", "quick", "workspace", "lockfile", "spec", "store", "http", "runner", "hashcache",
    "indexes", "nightly", "target", "progress", "digest", "trees", "urlrecords", "patchfile", "tomlio", "netenv",
    "wheelfiles", "cmakefetch", "closure", "bundle", "netauth", "archives", "specedit", "signing", "cachestore",
    "toolchain", "buildenv", "urlcheck", "transfers", "interrupts", "overlaps", "buildsystem",
}
#: One job each (fetch, resolve, build, install, ...); they import foundations only, never each other.
STAGES = {"resolve", "guards", "fetch", "sources", "patchapply", "build", "install", "verify", "generations", "diff",
          "ui", "upstream", "yanks"}
#: A command's recipe each; they call stages and foundations, and each other without a cycle.
ORCHESTRATION = {"mirrors", "drift", "buildinputs", "locking", "lockrefs", "building", "patching", "patchedit",
                 "syncing", "realize", "listing", "running", "verifying", "exporting", "collecting", "pinning",
                 "bisecting", "reporting", "rebasing", "upgrading", "caching", "cachesources", "cacheurls",
                 "refbuilds", "kernels", "doctor"}
ENTRY = {"cli", "clirender", "cliregress", "clipatch", "cliupgrade", "clicache", "cligpu", "__main__"}
#: Subpackages, by their modules' dotted names: each imports foundations and its own modules only.
GPU = {"gpu.__init__", "gpu.fatbin", "gpu.elf", "gpu.binaries", "gpu.coverage", "gpu.drivers", "gpu.nvml"}
SUBPACKAGES = {"gpu"}

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100
LONG_ALLOWED = {"cli.build_parser"}  # argparse's table of every command and option


def _name(dotted: str) -> str:
    """A module's name in the graph: ``spec`` for ``envlock.model.spec``, ``gpu.elf`` for ``envlock.gpu.elf``."""
    parts = dotted.split(".")[1:]
    return ".".join(parts[:2]) if parts[0] in SUBPACKAGES and len(parts) > 1 else parts[0]


def _imports(path: Path, own: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in ("envlock", *(f"envlock.{p}" for p in SUBPACKAGES)):
            found |= {_name(f"{node.module}.{alias.name}") for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("envlock."):
            found.add(_name(node.module))
        elif isinstance(node, ast.Import):
            found |= {_name(alias.name) for alias in node.names if alias.name.startswith("envlock.")}
    return found - {own}


def _modules() -> dict[str, Path]:
    """Every module, by its name in the graph (a subpackage's as ``gpu.elf``)."""
    found = {p.stem: p for p in SRC.glob("*.py")}
    for package in SUBPACKAGES:
        found |= {f"{package}.{p.stem}": p for p in (SRC / package).glob("*.py")}
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name) & set(modules) for name, path in modules.items()}


def test_every_module_has_a_layer() -> None:
    layered = FOUNDATIONS | STAGES | ORCHESTRATION | ENTRY | GPU
    assert set(_graph()) - layered == set(), "add the new module to a layer here and in docs/architecture.md"
    assert layered - set(_graph()) == set(), "a layer names a module that is gone"


@pytest.mark.parametrize(("layer", "allowed"), [
    (FOUNDATIONS, FOUNDATIONS),
    (STAGES, FOUNDATIONS),
    (GPU, FOUNDATIONS | GPU),
    (ORCHESTRATION, FOUNDATIONS | STAGES | ORCHESTRATION | GPU),
], ids=["foundations", "stages", "gpu", "orchestration"])
def test_a_module_imports_only_what_its_layer_may(layer: set[str], allowed: set[str]) -> None:
    wrong = {f"{name} -> {dep}" for name, deps in _graph().items() if name in layer for dep in deps - allowed}
    assert wrong == set()


def test_no_import_cycle() -> None:
    graph = _graph()
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
    assert cycles == []


def test_modules_and_functions_fit_in_a_read() -> None:
    too_long = []
    for name, path in sorted(_modules().items()):
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES and f"{name}.{node.name}" not in LONG_ALLOWED:
                    too_long.append(f"{name}.{node.name}: {length} lines")
    assert too_long == []
