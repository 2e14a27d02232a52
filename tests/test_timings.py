"""The opt-in step timeline (``envlock.timings``): one line per step on stderr when asked, nothing else."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.model.lockfile import Lock
from kit.index import IndexServer
from kit.locks import lock_for
from kit.wheels import build_wheel

_LINE = re.compile(r"envlock-timing +\d+\.\d ms +[+-] *\d+\.\d ms wall  cpu +[+-] *\d+\.\d ms "
                   r"\(self \d+\.\d, uv & co \d+\.\d\)  (?P<step>.+)")


@pytest.fixture(scope="module")
def lock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lock]:
    root = tmp_path_factory.mktemp("timings-index")
    server = IndexServer(root / "served").start()
    wheel = build_wheel(root / "wheels", "alpha", "1.0")
    server.add("pypi", wheel)
    yield lock_for(server, "pypi", [wheel], env="demo")
    server.stop()


def _sync(lock: Lock, tmp_path: Path, timings: str | None) -> subprocess.CompletedProcess[str]:
    lock_path = tmp_path / "pylock.demo.toml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    lock_path.write_text(lock.to_toml())
    env = {k: v for k, v in os.environ.items() if k != "ENVLOCK_TIMINGS"}
    env["ENVLOCK_HOME"] = str(tmp_path / "home")
    if timings is not None:
        env["ENVLOCK_TIMINGS"] = timings
    return subprocess.run([sys.executable, "-m", "envlock", "sync", "demo", "--frozen", "--lock", str(lock_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True)


def test_a_sync_with_timings_writes_each_step_to_stderr_and_the_same_stdout(lock: Lock, tmp_path: Path) -> None:
    timed = _sync(lock, tmp_path / "a", "1")
    assert timed.returncode == 0, timed.stderr
    lines = timed.stderr.splitlines()
    steps = [m.group("step") for line in lines if (m := _LINE.fullmatch(line))]
    assert len(steps) == len(lines)  # every stderr line is a mark
    assert steps[0] == "start-up and the fast no-op check" and steps[-1] == "done"
    for step in ("the digest walk (sealed, written back)", "the generation written (fsynced)", "the flip of `current`"):
        assert step in steps
    # A cold sync: the wheel is installed as it comes into the store (one batch here: the lock has one wheel).
    assert [s for s in steps if s.startswith("uv pip install")] == ["uv pip install (1 wheels)"]
    assert "1 wheels in the store (0 to come)" in steps
    plain = _sync(lock, tmp_path / "b", None)
    assert plain.returncode == 0 and plain.stderr == ""
    # The same answer either way, but for the store's path (each run its own home) and the seconds taken.
    def said(proc: subprocess.CompletedProcess[str], home: Path) -> str:
        return re.sub(r" in \d+\.\ds", " in Ns", proc.stdout.replace(str(home), "X"))

    assert said(timed, tmp_path / "a") == said(plain, tmp_path / "b")


@pytest.mark.parametrize("value", ["", "0"])
def test_timings_off_writes_nothing(lock: Lock, tmp_path: Path, value: str) -> None:
    proc = _sync(lock, tmp_path, value)
    assert proc.returncode == 0 and proc.stderr == ""


def test_a_switch_back_says_it_took_the_stored_venvs_snapshot_and_ran_no_uv(lock: Lock, tmp_path: Path) -> None:
    assert _sync(lock, tmp_path, None).returncode == 0
    current = tmp_path / "home" / "v1" / "envs" / "demo" / "current"
    for _ in range(2):  # the first may walk in full (the build's walk raced its own writes)
        current.unlink()  # the venv stays in the store
        proc = _sync(lock, tmp_path, "1")
        assert proc.returncode == 0, proc.stderr
    steps = [m.group("step") for line in proc.stderr.splitlines() if (m := _LINE.fullmatch(line))]
    assert "the stored venv's stat snapshot taken again: as verified" in steps
    assert "the stored venv walked again" not in steps
    assert not [s for s in steps if s.startswith("uv pip install")] and "the venv skeleton copied" not in steps
