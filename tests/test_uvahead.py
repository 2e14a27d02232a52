"""uv started ahead on a relock (``resolution.uvahead``): taken only when handed the same, else ended
and run as always; the lock's bytes the same either way; recorded only for runs that build nothing
from index URLs without credentials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.commands.lock import lock_env
from envlock.resolution import uvahead
from envlock.resolution.uvahead import UvCall
from envlock.store.store import Store
from envlock.workspace import Workspace
from kit.index import IndexServer
from kit.universe import TORCH, TRITON, Universe, spec_text
from kit.wheels import build_wheel
from kit.workspaces import ScratchWorkspace

TAKEN = "lock: uv's run started ahead taken"
ENDED = "lock: uv's run started ahead ended"


def _lock(ws: ScratchWorkspace, env: str = "e") -> str:
    """``envlock lock ENV`` as a user runs it, with the step timeline: its stderr and stdout (exit 0 asserted)."""
    run = subprocess.run([sys.executable, "-m", "envlock.cli.main", "lock", env], cwd=ws.root, text=True,
                         capture_output=True, env={**os.environ, "ENVLOCK_TIMINGS": "1"}, check=False)
    assert run.returncode == 0, run.stderr
    return run.stderr + run.stdout


def _records(home: Path) -> list[Path]:
    folder = home / "v1" / uvahead.RECORDS
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_a_relock_takes_the_run_started_ahead_and_writes_the_same_bytes(
        ws: ScratchWorkspace, universe: Universe, tmp_path: Path) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'otherdep = ">=1"'))
    first = _lock(ws)
    assert "started ahead" not in first  # nothing recorded yet
    (record,) = _records(tmp_path / "home")
    text = ws.lock_text("e")
    again = _lock(ws)
    assert TAKEN in again and "unchanged: locks/pylock.e.toml" in again
    (ws.root / "locks" / "pylock.e.toml").unlink()  # no old lock: the same call, the same bytes
    assert TAKEN in _lock(ws)
    assert ws.lock_text("e") == text
    assert _records(tmp_path / "home") == [record]  # one record per lock file, rewritten in place


def test_a_spec_edit_starts_nothing_ahead(ws: ScratchWorkspace, universe: Universe) -> None:
    ws.write_spec("e", spec_text(universe, TORCH + TRITON))
    _lock(ws)
    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'otherdep = ">=1"'))
    stderr = _lock(ws)
    assert "started ahead" not in stderr
    assert 'name = "otherdep"' in ws.lock_text("e")
    assert TAKEN in _lock(ws)  # the edited spec's run recorded


@pytest.fixture
def nightly_index(tmp_path: Path) -> Iterator[IndexServer]:
    """A default index and a hash-less one with one torch nightly of 2026-03-07 (a later build of that
    day is added by the test)."""
    server = IndexServer(tmp_path / "served")
    server.add_index("pt", hashes=False)
    server.add("pt", build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260307+cu130",
                                 tag="cp311-cp311-manylinux_2_28_x86_64"))
    server.add("pypi", build_wheel(tmp_path / "wheels", "otherdep", "1.0"))
    with server.start() as started:
        yield started


def test_a_pin_that_moved_ends_the_run_started_ahead(ws: ScratchWorkspace, nightly_index: IndexServer,
                                                     tmp_path: Path) -> None:
    """Same spec bytes, but the day's later nightly build published since: the run started on the old
    pin is ended, uv runs on the new one, and the lock is the one a lock without a record makes."""
    ws.write_spec("e", f"""
[env]
python = "3.11"
platform = "x86_64-manylinux_2_28"
[indexes.pypi]
url = "{nightly_index.url('pypi')}"
default = true
[indexes.pt]
url = "{nightly_index.url('pt')}"
[packages]
torch = {{ nightly = "2026-03-07", local = "cu130", index = "pt" }}
otherdep = ">=1"
""")
    _lock(ws)
    assert "2.12.0.dev20260307+cu130" in ws.lock_text("e")
    nightly_index.add("pt", build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev2026030701+cu130",
                                        tag="cp311-cp311-manylinux_2_28_x86_64"))
    stderr = _lock(ws)
    assert ENDED in stderr and TAKEN not in stderr
    moved = ws.lock_text("e")
    assert "2.12.0.dev2026030701+cu130" in moved
    for record in _records(tmp_path / "home"):
        record.unlink()
    (ws.root / "locks" / "pylock.e.toml").unlink()
    assert "started ahead" not in _lock(ws)
    assert ws.lock_text("e") == moved


def test_a_failed_run_started_ahead_is_not_taken(tmp_path: Path) -> None:
    """A recorded run that fails now (a store file gone) answers None: the resolution runs uv itself."""
    spec, lock = tmp_path / "e.toml", tmp_path / "pylock.e.toml"
    spec.write_text("[env]\n")
    records = Store.open(tmp_path / "home").root / uvahead.RECORDS
    ahead = uvahead.start(records, spec, lock)
    call = UvCall("3.11", "x86_64-manylinux_2_28", "http://127.0.0.1:9/simple",
                  '[project]\nname = "x"\nversion = "0"\ndependencies = ["gone"]\n',
                  f"gone @ {(tmp_path / 'gone-1.0-py3-none-any.whl').as_uri()}\n")
    ahead.remember(call)
    ahead = uvahead.start(records, spec, lock)
    assert ahead.take(call) is None
    assert ahead.take(call) is None  # once
    ahead.close()


def test_a_record_for_other_spec_bytes_is_not_started(tmp_path: Path) -> None:
    spec, lock = tmp_path / "e.toml", tmp_path / "pylock.e.toml"
    spec.write_text("[env]\n")
    records = Store.open(tmp_path / "home").root / uvahead.RECORDS
    call = UvCall("3.11", None, "http://127.0.0.1:9/simple", "", "")
    first = uvahead.start(records, spec, lock)
    assert not first.started  # nothing recorded
    first.remember(call)
    again = uvahead.start(records, spec, lock)
    assert again.started
    again.close()
    assert not again.started
    spec.write_text("[env]\n# edited\n")
    assert not uvahead.start(records, spec, lock).started


def test_a_run_started_from_a_record_builds_nothing_and_writes_only_its_pylock() -> None:
    """Whatever a record says, the arguments are made here: wheels only, no local build, output pylock.toml."""
    args = UvCall("3.11", "x86_64-manylinux_2_28", "http://127.0.0.1:9/simple", "", "").args()
    assert args[:3] == ["pip", "compile", "pyproject.toml"]
    assert args[args.index("-o") + 1] == "pylock.toml"
    assert args[args.index("--only-binary") + 1] == ":all:" and "--no-binary" not in args
    assert args[args.index("--override") + 1] == "overrides.txt"


@pytest.mark.parametrize(
    ("env", "extra", "urls", "recorded"),
    [({}, [], ["http://127.0.0.1:9/simple"], True),
     ({"UV_INDEX_P_PASSWORD": "s3cret"}, [], ["http://127.0.0.1:9/simple"], False),  # credentials in its env
     ({}, ["--no-binary", "mybuild"], ["http://127.0.0.1:9/simple"], False),  # a local build's source tree
     ({}, [], ["http://127.0.0.1:9/simple", "http://u:pw@127.0.0.1:9/p/simple"], False),  # a URL's password
     ({}, [], ["http://token@127.0.0.1:9/simple"], False)],
)
def test_only_a_run_that_builds_nothing_from_urls_without_credentials_is_recorded(
        env: dict[str, str], extra: list[str], urls: list[str], recorded: bool) -> None:
    call = UvCall("3.11", None, "http://127.0.0.1:9/simple", "P", "O")
    got = UvCall.recordable([*call.args(), *extra], "P", "O", env, "3.11", None, "http://127.0.0.1:9/simple", urls)
    assert (got == call) if recorded else got is None


def test_a_lock_through_a_mirror_records_nothing(ws: ScratchWorkspace, universe: Universe, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ws.write_spec("e", spec_text(universe, 'otherdep = ">=1"'))
    monkeypatch.setenv("ENVLOCK_INDEX_PYPI", universe.pypi)
    lock_env(Workspace(ws.root), "e")
    assert _records(tmp_path / "home") == []
    monkeypatch.delenv("ENVLOCK_INDEX_PYPI")
    lock_env(Workspace(ws.root), "e")
    assert len(_records(tmp_path / "home")) == 1
    # The record holds what uv was handed, no more.
    doc = json.loads(_records(tmp_path / "home")[0].read_text())
    assert sorted(doc) == ["default_index", "overrides", "platform", "pyproject", "python", "spec_sha256"]
    assert doc["default_index"] == universe.pypi


def test_a_lock_of_several_targets_records_nothing(ws: ScratchWorkspace, universe: Universe,
                                                   tmp_path: Path) -> None:
    text = spec_text(universe, 'otherdep = ">=1"').replace('platform = "x86_64-manylinux_2_28"\n', "", 1)
    ws.write_spec("e", text + '\n[targets.x86]\nplatform = "x86_64-manylinux_2_28"\n'
                              '[targets.arm]\nplatform = "aarch64-manylinux_2_28"\n')
    lock_env(Workspace(ws.root), "e")
    assert _records(tmp_path / "home") == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_the_run_started_ahead_runs_ends_it_and_its_folder(
        ws: ScratchWorkspace, universe: Universe, tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C (or SIGTERM) to envlock alone while uv runs ahead (the recipe loaded, the spec and the
    index pages being read): envlock exits 130/143, and the uv it started ahead and its temp folder are
    gone with it."""
    ws.write_spec("e", spec_text(universe, TORCH + TRITON + 'otherdep = ">=1"'))
    _lock(ws)  # recorded
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "envlock.cli.main", "lock", "e"], cwd=ws.root, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(temp), "ENVLOCK_TIMINGS": "1"})
    assert proc.stderr is not None
    said = ""
    while "imports of the lock recipe" not in said:
        line = proc.stderr.readline()
        assert line, said
        said += line
    assert "lock: uv started ahead" in said
    uvs = _uv_children(proc.pid)
    assert uvs and [p.name[:16] for p in temp.iterdir()] == ["envlock-resolve-"]
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), said + err
    assert list(temp.iterdir()) == []
    assert not [pid for pid in uvs if _alive(pid)]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for init to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _uv_children(pid: int) -> list[int]:
    """The uv processes ``pid`` started (from /proc)."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    out = []
    for child in children:
        try:
            if Path(f"/proc/{child}/exe").resolve().name == "uv":
                out.append(child)
        except OSError:
            continue
    return out


def test_a_record_written_by_someone_else_builds_nothing(tmp_path: Path, universe: Universe) -> None:
    """A record whose project names a source tree (its setup.py would write a file; the default index
    serves setuptools) starts a uv that refuses to build it (``--only-binary :all:``, the arguments
    envlock's): the file is never written."""
    tree = tmp_path / "evil"
    tree.mkdir()
    marker = tmp_path / "ran"
    (tree / "setup.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                   "from setuptools import setup\nsetup(name='evil', version='1.0')\n")
    (tree / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                         'build-backend = "setuptools.build_meta"\n')
    spec, lock = tmp_path / "e.toml", tmp_path / "pylock.e.toml"
    spec.write_text("[env]\n")
    records = Store.open(tmp_path / "home").root / uvahead.RECORDS
    call = UvCall("3.12", None, universe.pypi,
                  '[project]\nname = "x"\nversion = "0"\ndependencies = ["evil"]\n'
                  f'[tool.uv.sources]\n"evil" = {{ path = "{tree}" }}\n', "")
    uvahead.start(records, spec, lock).remember(call)
    ahead = uvahead.start(records, spec, lock)
    assert ahead.started
    assert ahead.take(call) is None  # uv failed: "Building source distributions for `evil` is disabled"
    assert not marker.exists()
