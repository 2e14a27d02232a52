"""ahead: read-only work started in a forked child at start-up and taken once, by its key; and the switch's
stat snapshot taken that way, used only for the very folder it walked (``digest.Snapshot.taken_now``)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from envlock import ahead
from envlock.install.digest import Snapshot


def test_work_started_ahead_is_taken_once_by_its_key() -> None:
    assert ahead.start("k", lambda: f"answered by {os.getpid()}")
    assert not ahead.start("k", lambda: "again")  # one child per key
    answer = ahead.take("k")
    assert answer is not None and answer.startswith("answered by ") and answer != f"answered by {os.getpid()}"
    assert ahead.take("k") is None and ahead.take("never started") is None


def test_work_that_fails_in_the_child_has_no_answer() -> None:
    def fails() -> str:
        raise OSError("the venv went away")

    assert ahead.start("fails", fails)
    assert ahead.take("fails") is None  # the parent then does the work itself


def _venv(root: Path) -> Path:
    venv = root / ("sha256-" + "a" * 64)
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "mod.py").write_text("x = 1\n")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return venv


def test_a_snapshot_taken_ahead_is_used_only_for_the_folder_it_walked(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    st = os.lstat(venv)
    # What the child answers is used as the snapshot while the folder is the one it walked ...
    assert ahead.start(venv.name, lambda: f"{st.st_dev}:{st.st_ino} taken-ahead")
    assert Snapshot.taken_now(venv) == "taken-ahead"
    assert Snapshot.taken_now(venv) == Snapshot.taken(venv)  # once: then the walk is this process's
    # ... never for a folder put in its place meanwhile (a rebuild renamed in: another inode).
    assert ahead.start(venv.name, lambda: f"{st.st_dev}:{st.st_ino} taken-ahead")
    shutil.copytree(venv, tmp_path / "rebuilt")
    shutil.rmtree(venv)
    (tmp_path / "rebuilt").rename(venv)
    assert Snapshot.taken_now(venv) == Snapshot.taken(venv) != "taken-ahead"


def test_the_childs_walk_is_the_snapshot_the_parent_would_take(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    assert ahead.start(venv.name, lambda: Snapshot.ahead(str(venv)))
    assert Snapshot.taken_now(venv) == Snapshot.taken(venv)


def test_the_child_holds_none_of_the_parents_output() -> None:
    # A caller reading envlock's stdout or stderr to their end is not kept waiting by a child still working.
    assert ahead.start("fds", lambda: " ".join(os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)))
    assert ahead.take("fds") == "/dev/null /dev/null /dev/null"


def test_an_answer_is_taken_only_while_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    # A command that waited on a store lock past FRESH does the work again, as of now.
    monkeypatch.setattr(ahead, "FRESH", 0.0)
    assert ahead.start("late", lambda: "answer")
    assert ahead.take("late") is None


def test_the_answer_is_taken_when_the_kernel_reaps_the_child() -> None:
    # SIGCHLD ignored (inherited from a launcher): the child is reaped without waitpid.
    was = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        assert ahead.start("reaped", lambda: "answer")
        assert ahead.take("reaped") == "answer"
        assert ahead.start("reaped and failed", lambda: str(1 / 0))
        assert ahead.take("reaped and failed") is None
    finally:
        signal.signal(signal.SIGCHLD, was)


def test_where_there_is_no_fork_nothing_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fork")  # Windows: the work is done in the process, when it is needed
    assert not ahead.start("no fork", lambda: "answer")
    assert ahead.take("no fork") is None
