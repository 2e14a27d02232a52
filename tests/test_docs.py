"""The docs are tested: each doc's ```console blocks run, in order, against a fresh example world
(``kit.world``, what ``examples/world/serve.py`` serves), and print what the doc shows.

A ```console block holds commands (``$ `` lines; a line ending in ``\\`` goes on) each followed by its
output, stdout and stderr as a terminal shows them, and ``[exit N]`` when it exits N != 0. Only these
blocks run: an indented or ```sh block is prose. Each command runs in bash in the doc's one shell
session (``cd`` and ``export`` carry over), the doc's ``/tmp/world`` being the test's world folder.

Compared after normalising, on both sides, only what must differ between runs: the world's port,
times, dates of the day, hex digests and commit ids, a new signing key (the lock records the port; digests of venvs and
builds depend on the machine's python and compilers). The world's folder has the length of
``/tmp/world``, so sizes of files that name it do not move.

``ENVLOCK_DOCS_UPDATE=1 pytest tests/test_docs.py`` writes the outputs into the docs instead (review
the diff).
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.world import World, build_world

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DOC_ROOT = "/tmp/world"  # the world's folder as the docs name it
DOC_PORT = 18080  # its port as the docs show it (examples/world/serve.py's default)
FENCE = re.compile(r"^(`{3,})console\s*$")


@dataclass(frozen=True)
class Step:
    command: str
    expected: list[str]
    first: int  # 0-based line of the doc where the output starts
    end: int  # ... and ends (exclusive)
    line: int  # 1-based line of the command


def parse(text: str) -> list[Step]:
    """The commands of every ```console block, each with the output lines the doc gives it."""
    lines = text.splitlines()
    steps: list[Step] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, i = m.group(1), i + 1
        while i < len(lines) and lines[i].rstrip() != fence:
            if not lines[i].startswith("$ "):
                i += 1  # text before the first prompt, or a bare "$"
                continue
            start, command = i, lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + "\n" + lines[i]
            i += 1
            first = i
            while i < len(lines) and lines[i].rstrip() != fence and not lines[i].startswith("$"):
                i += 1
            end = i
            while end > first and not lines[end - 1].strip():
                end -= 1  # the blank lines that part one command from the next
            steps.append(Step(command, lines[first:end], first, end, start + 1))
        i += 1
    return steps


_PORT = re.compile(r"127\.0\.0\.1:\d+")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b")
_SECONDS = re.compile(r"\b\d+(\.\d+)?s\b")
_HEX = re.compile(r"\b[0-9a-f]{7,64}\b")
_PYTHON = re.compile(r"\b3\.11\.\d+\b")
_KEY = re.compile(r"\b([\w.-]+):[A-Za-z0-9+/]{43}=")  # an ed25519 public key (cache keygen: a new one each run)
#: What gc frees and keeps: uv's cache holds files of its own making (its timestamps, its lock files),
#: so the kB it frees differ by a few from one run to the next; the entry counts are compared.
_GC_BYTES = re.compile(r"((?:freeing|before: \d+ entries,|after: \d+ entries,) )[\d.]+ [kMG]?B\b")


def _hex(m: re.Match[str]) -> str:
    text = m.group(0)
    if text.isdigit() and len(text) not in (7, 12, 16, 40, 64):
        return text  # a number (a date), not a digest
    return "<hex>"


def normalise(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        line = _PORT.sub("127.0.0.1:<port>", line.rstrip())
        line = _TIME.sub("<time>", line)
        line = _SECONDS.sub("<s>", line)
        line = _PYTHON.sub("3.11.<n>", line)
        line = _KEY.sub(r"\1:<key>", line)
        line = _GC_BYTES.sub(r"\1<bytes>", line)
        out.append(_HEX.sub(_hex, line))
    return out


@pytest.fixture
def world_root() -> Iterator[Path]:
    """A new folder whose path is as long as ``/tmp/world`` (sizes of files naming it stay put)."""
    for _ in range(100):
        root = Path("/tmp") / f"w{secrets.token_hex(2)}"
        try:
            root.mkdir()
        except FileExistsError:
            continue
        assert len(str(root)) == len(DOC_ROOT)
        yield root
        shutil.rmtree(root, ignore_errors=True)
        return
    pytest.fail("no free /tmp/wXXXX folder for the world")


class Shell:
    """One shell session of a doc: each command in bash, ``cd`` and ``export`` carried to the next."""

    def __init__(self, world: World, scratch: Path) -> None:
        self.world = world
        self.state = scratch / "state.sh"
        self.cwd = scratch / "cwd"
        user = scratch / "user"
        user.mkdir()
        bindir = Path(sys.executable).parent
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ENVLOCK_", "UV_", "GIT_"))}
        env |= {"HOME": str(user), "PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}", "PYTHONUNBUFFERED": "1",
                "LC_ALL": "C.UTF-8", "COLUMNS": "120", "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_AUTHOR_NAME": "you", "GIT_AUTHOR_EMAIL": "you@example.invalid",
                "GIT_COMMITTER_NAME": "you", "GIT_COMMITTER_EMAIL": "you@example.invalid"}
        self.env = env
        self.state.write_text("")
        self.cwd.write_text(str(scratch))

    def run(self, command: str) -> list[str]:
        root = str(self.world.root)
        script = (f"cd {shlex.quote(self.cwd.read_text().strip())} || exit 97\n. {shlex.quote(str(self.state))}\n"
                  f"{command.replace(DOC_ROOT, root)}\n__rc=$?\n"
                  f"pwd > {shlex.quote(str(self.cwd))}\nexport -p > {shlex.quote(str(self.state))}\nexit $__rc\n")
        proc = subprocess.run(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=self.env, timeout=300, check=False)
        text = proc.stdout.decode("utf-8", "replace").replace(root, DOC_ROOT)
        out = text.splitlines()
        while out and not out[-1].strip():
            out.pop()
        if proc.returncode:
            out.append(f"[exit {proc.returncode}]")
        return [_PORT.sub(f"127.0.0.1:{DOC_PORT}", line) for line in out]


def _update(doc: Path, results: list[tuple[Step, list[str]]]) -> None:
    lines = doc.read_text().splitlines()
    for step, actual in reversed(results):
        if [line.rstrip() for line in actual] != [line.rstrip() for line in step.expected]:
            lines[step.first:step.end] = actual
    doc.write_text("\n".join(lines) + "\n")


RUN = [d for d in DOCS if parse(d.read_text())]


@pytest.mark.parametrize("doc", RUN, ids=[d.name for d in RUN])
def test_each_doc_runs_as_written(doc: Path, world_root: Path, tmp_path: Path) -> None:
    steps = parse(doc.read_text())
    world = build_world(world_root)
    try:
        shell = Shell(world, tmp_path)
        results = [(step, shell.run(step.command)) for step in steps]
    finally:
        world.stop()
    if os.environ.get("ENVLOCK_DOCS_UPDATE"):
        _update(doc, results)
        return
    problems = []
    for step, actual in results:
        want, got = normalise(step.expected), normalise(actual)
        if want != got:
            import difflib

            diff = "\n".join(difflib.unified_diff(want, got, "the doc", "the run", lineterm=""))
            problems.append(f"{doc.name}:{step.line}: $ {step.command}\n{diff}")
    assert not problems, "\n\n".join(problems)


def test_parse_reads_commands_outputs_and_exits() -> None:
    text = ("prose\n```console\n$ envlock lock e\nwrote it\n\n$ false \\\n  --x\n[exit 1]\n$\n```\n"
            "    $ not run\n```sh\n$ nor this\n```\n````console\n$ echo '```'\n```\n````\n")
    steps = parse(text)
    assert [(s.command, s.expected, s.line) for s in steps] == [
        ("envlock lock e", ["wrote it"], 3), ("false \n  --x", ["[exit 1]"], 6), ("echo '```'", ["```"], 16)]
    assert normalise(["in 0.6s at 2026-12-01T23:17:57Z on 127.0.0.1:4012 sha256:" + "ab" * 32 + " 20260307"]) == [
        "in <s> at <time> on 127.0.0.1:<port> sha256:<hex> 20260307"]


def test_the_world_starts_without_the_test_extras() -> None:
    # The README's tour runs serve.py in a venv made by `pip install -e .` alone: no pytest there.
    blocker = ("import runpy, sys; sys.modules['pytest'] = None; sys.argv = ['serve.py', '--help']; "
               f"runpy.run_path({str(REPO / 'examples' / 'world' / 'serve.py')!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("usage: serve.py [-h] --dir DIR")
