"""SIGKILL a real ``envlock sync`` at several points: the previous generation stays current and whole."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envlock import generations
from envlock.digest import stored_manifest
from envlock.lockfile import Lock, read_lock
from envlock.store import Store
from envlock.verifying import verify_env
from kit.index import IndexServer
from kit.locks import lock_for, sha256_of
from kit.wheels import build_wheel


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[IndexServer, Path, Lock, Lock, Path]]:
    server = IndexServer(tmp_path / "served").start()
    server.slow_chunk, server.slow_delay = 8 * 1024, 0.02
    w = tmp_path / "wheels"
    alpha1 = build_wheel(w, "alpha", "1.0")
    alpha2 = build_wheel(w, "alpha", "2.0")
    big = build_wheel(w, "big", "1.0", files={"big/blob.bin": os.urandom(2_000_000)})
    server.add("pypi", alpha1, alpha2, big)
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "locks").mkdir()
    v1 = lock_for(server, "pypi", [alpha1])
    v2 = lock_for(server, "pypi", [alpha2, big])
    yield server, ws, v1, v2, big
    server.stop()


def _envlock(ws: Path, home: Path, *args: str, extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    tests = str(Path(__file__).parent)  # kit.pause: the CLI with pauses where the test kills it
    env = dict(os.environ, ENVLOCK_HOME=str(home), PYTHONPATH=os.pathsep.join(filter(None, [tests, os.environ.get(
        "PYTHONPATH")])), **(extra or {}))
    return subprocess.Popen([sys.executable, "-c", "import kit.pause; kit.pause.main()", *args], cwd=ws, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _assert_store_whole(store: Store) -> None:
    for entry in (store.root / "wheels").iterdir():
        (wheel,) = entry.iterdir()
        assert sha256_of(wheel) == entry.name
    for venv in (store.root / "venvs").iterdir():
        assert stored_manifest(venv) is not None, f"{venv}: incomplete venv entry"


@pytest.mark.parametrize("point", ["download", "install", "before-flip"])
def test_sigkill_leaves_previous_generation_current(setup: tuple[IndexServer, Path, Lock, Lock, Path],
                                                    tmp_path: Path, point: str) -> None:
    server, ws, v1, v2, big = setup
    home = tmp_path / "home"
    lock1 = ws / "locks" / "pylock.demo.toml"
    lock1.write_text(v1.to_toml())
    first = _envlock(ws, home, "sync", "demo", "--lock", str(lock1))
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    store = Store.open(home)
    assert out.splitlines()[-1] == str(generations.stable_path(store, "demo"))
    recorded = read_lock(lock1)
    assert recorded.venv_digest is not None

    lock2 = ws / "locks" / "v2.toml"
    lock2.write_text(v2.to_toml())
    marker = tmp_path / "paused"
    extra = {"PAUSE_MARKER": str(marker)}
    if point == "download":
        server.faults[big.name] = "slow"
        part = store.partial_dir / f"{v2.package('big').wheels[0].sha256}.part"  # type: ignore[union-attr]
        ready = lambda: part.exists() and part.stat().st_size > 100_000  # noqa: E731
    else:
        extra["PAUSE_AT"] = point
        ready = marker.exists
    proc = _envlock(ws, home, "sync", "demo", "--lock", str(lock2), extra=extra)
    try:
        _wait_for(ready, f"sync to reach {point}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    store = Store.open(home)  # clears the killed writer's litter
    assert generations.current_number(store, "demo") == 1
    assert verify_env(store, "demo", recorded).ok
    _assert_store_whole(store)
    assert [p.name for p in store.tmp.iterdir()] == ["partial"]
    if point != "before-flip":
        assert not store.has("venvs", v2.install_digest())

    # The next sync finishes the job; a killed download resumes where it stopped.
    server.faults.clear()
    again = _envlock(ws, home, "sync", "demo", "--lock", str(lock2))
    _, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert generations.current_number(store, "demo") == 2
    assert verify_env(store, "demo", read_lock(lock2)).ok
    if point == "download":
        last = [r for p, r in server.requests if p.endswith(big.name)][-1]
        assert last.startswith("bytes=") and last != "bytes=0-"


def _uv_installing_under(pid: int) -> int | None:
    """The pid of a ``uv pip install`` started by process ``pid`` (its child), or None."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"pip" in argv and b"install" in argv:
            return int(entry.name)
    return None


def _alive_not_zombie(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_a_sync_killed_while_its_uv_lives_on_leaves_a_slot_the_next_sync_takes(tmp_path: Path) -> None:
    # As found: SIGKILL envlock during its install, its uv child lives on writing into tmp/venv-slot0,
    # and the next sync failed once with "tmp/venv-slot0: File exists". The orphan runs here in slow
    # motion (stopped, and let run 10 ms in every 100) so that it is still writing while the next sync
    # starts: that sync must end it (its own process group) before it frees the slot, and succeed.
    import threading

    server = IndexServer(tmp_path / "served").start()
    try:
        many = build_wheel(tmp_path / "wheels", "many", "1.0",
                           files={f"many/d{i // 50}/f{i}.py": f"X = {i}\n" for i in range(3000)})
        server.add("pypi", many)
        lock = tmp_path / "v.toml"
        lock.write_text(lock_for(server, "pypi", [many]).to_toml())
        ws, home = tmp_path / "ws", tmp_path / "home"
        (ws / "envs").mkdir(parents=True)
        first = _envlock(ws, home, "sync", "demo", "--lock", str(lock))
        uv: list[int] = []

        def installing() -> bool:
            uv.extend(filter(None, [_uv_installing_under(first.pid)]))
            return bool(uv)

        try:
            _wait_for(installing, "the sync's uv pip install")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        orphan = uv[0]
        # Stopped only now: a process group (uv's own) left without a parent in the session while
        # one of it is stopped gets SIGHUP from the kernel (POSIX orphaned process groups).
        os.kill(orphan, signal.SIGSTOP)
        assert _alive_not_zombie(orphan)  # the uv lives on after envlock

        done = threading.Event()

        def slow_motion() -> None:
            while not done.is_set():
                try:
                    os.kill(orphan, signal.SIGCONT)
                    time.sleep(0.01)
                    os.kill(orphan, signal.SIGSTOP)
                except ProcessLookupError:
                    return
                time.sleep(0.09)

        mover = threading.Thread(target=slow_motion)
        mover.start()
        try:
            again = _envlock(ws, home, "sync", "demo", "--lock", str(lock))
            _, err = again.communicate(timeout=120)
            assert again.returncode == 0, err
            assert not _alive_not_zombie(orphan), "the killed sync's uv still runs"
        finally:
            done.set()
            mover.join()
            with contextlib.suppress(ProcessLookupError):
                os.kill(orphan, signal.SIGKILL)
        store = Store.open(home)
        assert verify_env(store, "demo", read_lock(lock)).ok
        assert [p.name for p in store.tmp.iterdir() if p.name != "partial"] == []  # the orphan's litter too
    finally:
        server.stop()


def _dangling_uv_entries(store: Store) -> list[Path]:
    cache = store.root / "uv-cache"
    return [p for p in cache.glob("wheels-v*/**/*") if p.is_symlink() and not p.exists()]


def _running_under(home: Path) -> list[str]:
    """Processes (other than zombies) whose command line names ``home``: what a killed envlock left."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _alive_not_zombie(int(entry.name)):
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(home).encode() in argv:
                shown = argv.replace(b"\0", b" ").decode(errors="replace")[:200]
                found.append(f"{entry.name}: {shown}")
    return found


def test_soak_24_random_sigkills_of_sync_and_gc_then_every_kept_lock_syncs(tmp_path: Path) -> None:
    # The workspace's lock moves between three revisions (as checkouts would); each round syncs it,
    # or runs `gc --keep-generations 1 --keep-git none` (which takes all it can), or both side by
    # side, and SIGKILLs one of them at a seeded random moment of its run (as an OOM killer or a
    # `kill -9` would: envlock alone, its uv lives on), until 24 kills landed. Every run not killed
    # must succeed; then each lock is checked out, collected for and synced, with no manual step, its
    # env verifies, and the store is whole.
    import random
    from collections import deque

    rng = random.Random(int(os.environ.get("ENVLOCK_SOAK_SEED", "23")))
    server = IndexServer(tmp_path / "served").start()
    try:
        w = tmp_path / "wheels"
        many = build_wheel(w, "many", "1.0", files={f"many/d{i // 40}/f{i}.py": f"X = {i}\n" for i in range(800)})
        blob = build_wheel(w, "blob", "1.0", files={"blob/data.bin": os.urandom(3_000_000)})
        alpha1, alpha2 = build_wheel(w, "alpha", "1.0"), build_wheel(w, "alpha", "2.0")
        beta = build_wheel(w, "beta", "1.0")
        server.add("pypi", many, blob, alpha1, alpha2, beta)
        ws, home = tmp_path / "ws", tmp_path / "home"
        (ws / "locks").mkdir(parents=True)
        (ws / "envs").mkdir()
        texts = {"a": lock_for(server, "pypi", [alpha1, many]).to_toml(),
                 "b": lock_for(server, "pypi", [alpha2, beta, many]).to_toml(),
                 "c": lock_for(server, "pypi", [alpha2, blob]).to_toml()}
        lock = ws / "locks" / "pylock.demo.toml"  # the workspace's: a root of gc
        sync = ["sync", "demo", "--lock", "locks/pylock.demo.toml"]
        gc = ["gc", "--keep-generations", "1", "--keep-git", "none"]

        # The last runs of each command that were not killed: a kill lands within the shortest (on a
        # loaded machine a run takes seconds, on an idle one a fraction: the kills follow).
        took: dict[str, deque[float]] = {"sync": deque(maxlen=4), "gc": deque(maxlen=4)}
        for name in (*texts, "gc"):
            if name in texts:
                lock.write_text(texts[name])
            started = time.monotonic()
            first = _envlock(ws, home, *(gc if name == "gc" else sync))
            _, err = first.communicate(timeout=60)
            assert first.returncode == 0, err
            took["gc" if name == "gc" else "sync"].append(time.monotonic() - started)

        kills, rounds, deadline = 0, 0, time.monotonic() + 90
        while kills < 24:
            assert time.monotonic() < deadline, f"only {kills} kills landed in {rounds} rounds"
            rounds += 1
            if rng.random() < 0.35:
                lock.write_text(texts[rng.choice("abc")])  # a checkout of another revision
            names = rng.choice([["sync"], ["sync"], ["gc"], ["sync", "gc"], ["gc", "sync"]])
            started = time.monotonic()
            procs = [(name, _envlock(ws, home, *(gc if name == "gc" else sync))) for name in names]
            victim, proc = rng.choice(procs)
            if victim == "sync" and rng.random() < 0.5:  # while its uv installs (the kill points)
                until = time.monotonic() + 2 * min(took[victim])
                while proc.poll() is None and _uv_installing_under(proc.pid) is None and time.monotonic() < until:
                    time.sleep(0.01)
                time.sleep(rng.uniform(0, 0.2))
            else:
                time.sleep(rng.uniform(0.15, 0.95) * min(took[victim]))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            for name, p in procs:
                _, err = p.communicate(timeout=60)
                # A run that was not killed succeeds: it cleans up after those that were.
                assert (p is proc and p.returncode == -signal.SIGKILL) or p.returncode == 0, (rounds, name, err)
                if p.returncode == 0 and len(procs) == 1:
                    took[name].append(time.monotonic() - started)

        for name, text in texts.items():  # each revision checked out, collected for, and synced
            lock.write_text(text)
            for command in (gc, sync):
                again = _envlock(ws, home, *command)
                _, err = again.communicate(timeout=60)
                assert again.returncode == 0, (name, command[0], err)
            assert verify_env(Store.open(home), "demo", read_lock(lock)).ok, name
        store = Store.open(home)
        _assert_store_whole(store)
        assert _dangling_uv_entries(store) == []
        assert _running_under(home) == []  # no killed sync's uv still at work
    finally:
        server.stop()
