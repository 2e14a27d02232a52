"""The garbage collector paused for start-up, a sync and a venv walk (``envlock.gcpause``): each pause
ends with collecting as it was, and a command run in process leaves nothing frozen behind."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envlock import gcpause
from envlock.cli.main import main


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    gc.unfreeze()
    if not was:
        gc.disable()


def test_a_pause_ends_as_collecting_was(collecting: None) -> None:
    with gcpause.paused():
        assert not gc.isenabled()
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause ends as the outer one had it: off
    assert gc.isenabled()
    gc.disable()
    with gcpause.paused():
        pass
    assert not gc.isenabled()  # off before, off after


def test_a_pause_ends_even_on_an_error(collecting: None) -> None:
    with pytest.raises(ValueError), gcpause.paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_command_in_process_leaves_the_collector_as_it_found_it(collecting: None, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "envs").mkdir()
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home"))
    assert main(["path", "nosuchenv", "--root", str(tmp_path)]) != 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    assert main(["path", "nosuchenv", "--root", str(tmp_path)]) != 0
    assert not gc.isenabled() and gc.get_freeze_count() == 0


def test_a_sync_in_process_runs_with_the_collector_off_and_leaves_it_as_it_found_it(
        collecting: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envlock.cli import sync as cli_sync

    seen: list[bool] = []
    real = cli_sync._noop_or_sync

    def spy(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(cli_sync, "_noop_or_sync", spy)
    (tmp_path / "envs").mkdir()
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home"))
    assert main(["sync", "nosuchenv", "--root", str(tmp_path)]) != 0  # no such env: the sync's error
    assert seen == [False] and gc.isenabled() and gc.get_freeze_count() == 0


def test_the_console_scripts_exit_leaves_the_collector_off(collecting: None) -> None:
    # Nothing the command made is scanned before the process ends with it.
    gcpause.command_ended(True, exiting=True)
    assert not gc.isenabled()
    gcpause.command_ended(True, exiting=False)
    assert gc.isenabled()


def test_the_console_script_runs_the_command_collecting_with_start_up_frozen(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m envlock``: paused for the imports, then the command runs with the collector on and
    what the imports made frozen out of its collections."""
    probe = ("import gc, sys\nfrom envlock import __main__ as entry\nimport envlock.cli.main as cli\n"
             "old = cli._main\n"
             "def spy(argv, collecting):\n"  # printed here: the console script ends the process at once after
             "    code = old(argv, collecting)\n"
             "    print([(gc.isenabled(), gc.get_freeze_count() > 1000)])\n"
             "    return code\n"
             "cli._main = spy\nsys.argv = ['envlock', 'path', 'nosuchenv', '--root', sys.argv[1]]\n"
             "entry.main()\n")
    (tmp_path / "envs").mkdir()
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home"))
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True)
    assert out.stdout.strip() == "[(True, True)]", out.stderr
