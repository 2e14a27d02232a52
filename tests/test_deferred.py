"""deferred: the standard-library modules the console script loads on first use, not at start-up; and typing,
which a sync does not load at all."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "envlock"

#: In a fresh interpreter, as the console script starts: the modules a sync imports, then what was loaded,
#: then the first use of each deferred module (through the stand-in bound before, and by a new import).
STARTS = """
import sys
from envlock import deferred
deferred.defer()
import envlock.cli.main, envlock.cli.sync, envlock.commands.sync, envlock.commands.realize
import envlock.install.install, envlock.install.digest, envlock.model.target
real = [name for name in ("inspect", "ast", "dis", "tokenize", "ipaddress")
        if getattr(getattr(sys.modules.get(name), "__spec__", None), "origin", None)]
print("loaded at start-up:", real)
import dataclasses, urllib.parse
print(urllib.parse.urlsplit("http://[::1]:8080/simple").hostname)  # urllib.parse checks the host with ipaddress
@dataclasses.dataclass
class Undocumented:
    size: int
print(Undocumented.__doc__)  # dataclasses makes it with its inspect, the stand-in
import inspect
print(inspect.__file__ is not None, sys.modules["inspect"] is inspect, inspect.signature(lambda a, b=2: a))
"""


def test_a_sync_loads_no_deferred_module_and_each_works_on_first_use() -> None:
    out = subprocess.run([sys.executable, "-c", STARTS], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["loaded at start-up: []", "::1", "Undocumented(size: int)", "True True (a, b=2)"]


#: In a fresh interpreter, as the console script starts: a sync's modules imported, its parser built and
#: its arguments parsed; then which of the named modules were loaded.
A_SYNCS_IMPORTS = """
import sys
from envlock import deferred
deferred.defer()
import envlock.cli.main, envlock.cli.sync, envlock.commands.sync, envlock.commands.realize
import envlock.install.install, envlock.install.digest, envlock.model.target, envlock.ui
envlock.cli.main.build_parser(only='sync').parse_known_args(['sync', 'demo', '--frozen'])
print(sorted(name for name in sys.argv[1:] if name in sys.modules))
"""


def _loaded_by_a_syncs_imports(*names: str) -> str:
    return subprocess.run([sys.executable, "-c", A_SYNCS_IMPORTS, *names], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_sync_does_not_import_typing() -> None:
    # ~2.5 ms of every sync's start-up: its modules name typing's names for mypy alone (TYPE_CHECKING = False).
    assert _loaded_by_a_syncs_imports("typing") == "[]"


def test_a_sync_does_not_import_shutil() -> None:
    # ~2 ms (shutil loads bz2, lzma and zlib): a switch copies and removes nothing, a warm sync links the
    # skeleton itself (install._new_venv). argparse's formatter would import it for the terminal's width on
    # each add_argument (cli.main._Parser gives the width).
    assert _loaded_by_a_syncs_imports("shutil", "bz2", "lzma") == "[]"
    assert _loaded_by_a_syncs_imports("argparse", "shutil") == "['argparse']"  # the probe sees what loads


def test_a_module_loaded_already_is_not_deferred() -> None:
    out = subprocess.run([sys.executable, "-c", "import sys, inspect\nfrom envlock import deferred\n"
                          "deferred.defer()\nprint(sys.modules['inspect'] is inspect)"],
                         capture_output=True, text=True, check=True).stdout
    assert out == "True\n"


def test_every_dataclass_has_a_docstring() -> None:
    # Without one, dataclasses calls inspect.signature at import to make one: the deferred inspect
    # loaded at start-up after all (~5 ms of every command), and the signature's own time on top.
    undocumented = [f"{path.relative_to(SRC.parent)}: {node.name}"
                    for path in sorted(SRC.rglob("*.py"))
                    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(node, ast.ClassDef) and not ast.get_docstring(node)
                    and any("dataclass" in ast.unparse(d) for d in node.decorator_list)]
    assert undocumented == []
