"""One set of mirror flags: every command that reads an index or a source takes ``--index NAME=URL`` and
``--source NAME=URL`` (as every command reads ``ENVLOCK_INDEX_<NAME>`` and ``ENVLOCK_SOURCE_<NAME>``), checks
them the same way, and reports name indexes by the spec's names, not by the mirror's URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.sglike import commit_all, init_repo, write
from kit.universe import Universe
from kit.workspaces import Cli, ScratchWorkspace

SPEC = """\
[env]
python = "3.11"
platform = "x86_64-manylinux_2_28"
[indexes.pypi]
url = "{pypi}"
default = true
[indexes.pytorch]
url = "https://download.pytorch.org/whl/nightly/cu130"   # not reachable from a test: read through its mirror
[packages]
torch = {{ nightly = "2026-03-05", local = "cu130", index = "pytorch" }}
pytorch-triton = {{ index = "pytorch" }}
tinydep = "==1.0"
[sources.src]   # a source of patches (no patch here): what patch status, edit and rebase read
git = "{src}"
rev = "main"
"""

#: Each command that reads an index or a source, as it is run (ENV is "e").
COMMANDS = [
    ["lock", "e"], ["nightlies", "e"], ["sync", "e"], ["sync", "e", "--lock", "locks/pylock.e.toml"],
    ["build", "e"], ["patch", "status", "e"], ["patch", "edit", "e", "src", "--dir", "x"],
    ["patch", "rebase", "e", "src", "--to", "main"], ["upgrade", "e", "--nightly", "latest"], ["diff", "e", "e"],
    ["export", "e", "--out", "bundle"], ["kernels", "e"], ["bisect", "e", "--nightly", "2026-03-01..2026-03-10"],
]


@pytest.fixture
def mirrored(ws: ScratchWorkspace, cli: Cli, universe: Universe, tmp_path: Path) -> Path:
    repo = tmp_path / "src"
    init_repo(repo)
    write(repo, {"a.txt": "a\n"})
    commit_all(repo, "a")
    spec = ws.write_spec("e", SPEC.format(pypi=universe.pypi, src=repo.as_uri()))
    r = cli("lock", "e", "--index", f"pytorch={universe.pytorch}")
    assert r.code == 0, r.err
    return spec


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_every_command_that_reads_an_index_or_a_source_takes_and_checks_both_flags(
        mirrored: Path, cli: Cli, command: list[str]) -> None:
    tail = ["--", "true"] if command[0] == "bisect" else []
    r = cli(*command, "--index", "nosuch=http://127.0.0.1:9/simple", *tail)
    assert r.code == 2, r.err
    assert f"--index nosuch=...: {mirrored} has no [indexes.nosuch]; indexes: pypi, pytorch" in r.err, r.err
    r = cli(*command, "--source", "nosuch=/x", *tail)
    assert r.code == 2, r.err
    assert f"--source nosuch=...: {mirrored} has no [sources.nosuch] nor a fetchcontent.nosuch" in r.err, r.err
    r = cli(*command, "--index", "no-equals-sign", *tail)
    assert (r.code, r.err.splitlines()[-1]) == (2, "envlock: error: --index 'no-equals-sign': expected NAME=URL (a "
                                                   "spec index name and the mirror's URL)")


def test_the_report_names_a_mirrored_index_by_the_spec_s_name(mirrored: Path, cli: Cli, universe: Universe) -> None:
    r = cli("upgrade", "e", "--nightly", "latest", "--index", f"pytorch={universe.pytorch}", "--dry-run")
    assert r.code == 0, r.err
    # The lock records the mirror's URL (it was locked through it); the report says the spec's name.
    assert "nightlies:\n  pytorch 2026-03-05 -> 2026-03-10: torch\n" in r.out
    assert universe.pytorch not in r.out.split("packages:")[0]
    r = cli("nightlies", "e", "--index", f"pytorch={universe.pytorch}", "--source", "nosuch=/x")
    assert r.code == 2  # a source checked, though nightlies reads none
    r = cli("nightlies", "e", "--index", f"pytorch={universe.pytorch}")
    assert r.code == 0 and r.out.startswith("torch: index 'pytorch' ("), r.err
