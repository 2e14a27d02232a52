"""``envlock sync`` end to end. The whole chain on an SGLang-shaped env: spec -> lock -> source ->
patch -> build -> venv.

What rebuilds when: changing only a PyPI pin re-syncs with no build; moving the torch
stand-in or a kernel patch rebuilds the kernel (and only what the patch touches). And a real
sync SIGKILLed at several points leaves the previous generation current and whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envlock.commands.verify import verify_env
from envlock.install import generations
from envlock.model.lockfile import Lock, read_lock
from envlock.store.store import Store
from kit import sglike
from kit.index import IndexServer
from kit.locks import lock_for
from kit.processes import envlock, wait_for
from kit.sglike import SgLike
from kit.stores import assert_store_whole
from kit.universe import Universe
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace

TORCH_A = "2.12.0.dev20260307"
TORCH_B = "2.12.0.dev20260308"


@pytest.fixture(scope="module")
def sg(tmp_path_factory: pytest.TempPathFactory, universe: Universe, backend_index: object) -> SgLike:
    """The fixture repo, with the torch stand-in published on the universe's default index."""
    sg = sglike.make_sglike(tmp_path_factory.mktemp("sglike"))
    wheels = tmp_path_factory.mktemp("torchlike")
    universe.server.add("pypi", *(sglike.torchlike_wheel(wheels, v) for v in (TORCH_A, TORCH_B)))
    return sg


def spec(u: Universe, sg: SgLike, *, tinydep: str = "1.0", torch: str = TORCH_A) -> str:
    patches = ", ".join(f'"patches/sglike/{name}"' for name in sg.patches)
    return f"""
[env]
python = "3.11"
[indexes.pypi]
url = "{u.pypi}"
default = true
[packages]
tinydep = "=={tinydep}"
torchlike = "=={torch}"
sglike = {{ build = "sglike" }}
sglike-kernel = {{ build = "sglike-kernel" }}
[sources.sglike]
git = "{sg.url}"
rev = "{sg.pin}"
patches = [{patches}]
[builds.sglike]
source = "sglike"
subdirectory = "python"
env = {{ SETUPTOOLS_SCM_PRETEND_VERSION = "0.5.9" }}
[builds.sglike-kernel]
source = "sglike"
subdirectory = "sgl-kernel"
isolation = false
requires = ["scikit-build-core>=0.10"]
env = {{ SGLIKE_ARCH_LIST = "12.0a" }}
config-settings = {{ "cmake.define.SGLIKE_ENABLE_FA3" = "OFF" }}
[builds.sglike-kernel.fetchcontent]
{sglike.KDEP_NAME} = {{ git = "{sg.kdep_url}", rev = "{sg.kdep_commit}" }}
"""


def built_inputs(home: Path) -> set[str]:
    """Input digests the store holds a built wheel for (a new one = a build ran)."""
    folder = home / "v1" / "builds"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def sync(cli: Cli, env: str = "e") -> dict:  # type: ignore[type-arg]
    result = cli("sync", env, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)  # type: ignore[no-any-return]


def in_env(ws_root: Path, code: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "envlock.cli.main", "run", "e", "--", "python", "-c", code],
                          cwd=ws_root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.slow
def test_sglang_shaped_env_end_to_end_and_what_rebuilds(ws: ScratchWorkspace, cli: Cli, universe: Universe, sg: SgLike,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    shutil.copytree(sg.patches_dir, ws.root / "patches" / "sglike")
    ws.write_spec("e", spec(universe, sg))

    first = sync(cli)
    assert len(built_inputs(home)) == 2  # the kernel and the python package
    lock = ws.lock_text("e")
    assert f'commit = "{sg.pin}"' in lock and "[tool.envlock.builds.\"sglike-kernel\"]" in lock
    # Patched (0001: capability 12; 0002: mul), compiled against torchlike's header, fetched dep inlined.
    out = in_env(ws.root, "import sglike, sglike.comm as c, sglike_kernel as k, tinydep; "
                          "print(c.max_size(12, 4), k.mul(6, 7), tinydep.VERSION)")
    assert out.split() == [str(64 * 1024 * 1024), "42", "1.0"]

    # Only a PyPI pin moves: a new generation, no build.
    ws.write_spec("e", spec(universe, sg, tinydep="1.1"))
    before = built_inputs(home)
    second = sync(cli)
    assert built_inputs(home) == before
    assert second["generation"] == first["generation"] + 1
    assert in_env(ws.root, "import tinydep; print(tinydep.VERSION)") == "1.1"

    # The torch pin moves: the kernel (built against it) rebuilds; the python package does not.
    ws.write_spec("e", spec(universe, sg, tinydep="1.1", torch=TORCH_B))
    sync(cli)
    assert len(built_inputs(home) - before) == 1
    assert in_env(ws.root, "import torchlike; print(torchlike.__version__)") == TORCH_B

    # A kernel patch changes: the kernel rebuilds once more.
    patch_file = ws.root / "patches" / "sglike" / sg.patches[1]
    patch_file.write_text(patch_file.read_text().replace("Why:", "Why: (reworded)", 1))
    before = built_inputs(home)
    check = cli("lock", "e", "--check")
    assert check.code == 1 and f"sources.sglike.patches: patches/sglike/{sg.patches[1]} changed" in check.out
    for _ in range(2):  # frozen: nothing to do, and the edited patch the lock lacks is said
        frozen = cli("sync", "e", "--frozen")
        assert frozen.code == 0 and "up to date" in frozen.out, frozen.err
        assert (f"(sources.sglike.patches: patches/sglike/{sg.patches[1]} changed since the lock): --frozen synced "
                "the lock as it is") in frozen.out, frozen.out
    sync(cli)
    # The header is not part of the diff, so the patched tree, and so the build inputs, are unchanged.
    assert built_inputs(home) == before

    # The kernel patch's code changes: only the kernel rebuilds, and the venv has the new code.
    patch_file.write_text(patch_file.read_text().replace("+    return PyLong_FromLong(a * b);",
                                                         "+    return PyLong_FromLong(a * b + 1);"))
    sync(cli)
    assert len(built_inputs(home) - before) == 1
    assert in_env(ws.root, "import sglike_kernel as k; print(k.mul(6, 7))") == "43"

    # A relock through a mirror (--index): the build requirements resolve there too, so
    # the recorded builds carry over even though the spec's own index URL is unreachable.
    builds_before = ws.lock_text("e").split("[tool.envlock.builds.", 1)[1]
    ws.write_spec("e", spec(universe, sg, tinydep="1.1", torch=TORCH_B).replace(
        f'url = "{universe.pypi}"', 'url = "http://127.0.0.1:9/simple"'))
    relock = cli("lock", "e", "--index", f"pypi={universe.pypi}")
    assert relock.code == 0, relock.err
    assert ws.lock_text("e").split("[tool.envlock.builds.", 1)[1] == builds_before

    # A fresh machine that reaches only the mirror (the lock names the upstream): the frozen sync
    # rebuilds the kernels, the env's wheels the non-isolated build reads and its build requirements
    # come through the mirror too, and the summary counts every wheel it brought in.
    served = universe.pypi.removesuffix("/pypi/simple")
    lock_file = ws.root / "locks" / "pylock.e.toml"
    lock_file.write_text(ws.lock_text("e").replace(f'index = "{universe.pypi}"', 'index = "http://127.0.0.1:9/simple"')
                         .replace(served, "http://127.0.0.1:9"))  # the spec's index, as a lock made there says
    locked = read_lock(lock_file).packages
    remote = [p.wheels[0].filename for p in locked if p.wheels[0].url]
    shutil.rmtree(ws.root / "wheelhouse")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "cluster-home"))
    r = cli("sync", "e", "--frozen", "--index", f"pypi={universe.pypi}", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    served_size = {name: path.stat().st_size for name, path in universe.server.indexes["pypi"].files.items()}
    # Every wheel: the remote ones downloaded, the two built ones copied in from the wheelhouse.
    assert (doc["fetched"], doc["downloaded"]) == (len(locked), sum(served_size[name] for name in remote))
    assert in_env(ws.root, "import sglike_kernel as k; print(k.mul(6, 7))") == "43"
    # `envlock build` there: the env's wheels the kernel's build reads come through ENVLOCK_INDEX_* too.
    shutil.rmtree(ws.root / "wheelhouse")
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "cluster-home2"))
    monkeypatch.setenv("ENVLOCK_INDEX_PYPI", universe.pypi)
    r = cli("-q", "build", "e")
    assert r.code == 0, r.err
    # A relock on a fresh store says what it fetched to compute the kernel's input digest.
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "cluster-home3"))
    doc = json.loads(cli("lock", "e", "--json").out)
    assert doc["build_downloaded"] > 0


# -- SIGKILL a real sync: the previous generation stays current and whole ---------------------------
# SIGKILL a real ``envlock sync`` at several points: the previous generation stays current and
# whole.

@pytest.fixture
def setup(server: IndexServer, tmp_path: Path) -> tuple[IndexServer, Path, Lock, Lock, Path]:
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
    return server, ws, v1, v2, big


@pytest.mark.parametrize("point", ["download", "install", "before-flip"])
def test_sigkill_leaves_previous_generation_current(setup: tuple[IndexServer, Path, Lock, Lock, Path],
                                                    tmp_path: Path, point: str) -> None:
    server, ws, v1, v2, big = setup
    home = tmp_path / "home"
    lock1 = ws / "locks" / "pylock.demo.toml"
    lock1.write_text(v1.to_toml())
    first = envlock(ws, home, "sync", "demo", "--lock", str(lock1))
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    store = Store.open(home)
    assert out.splitlines()[-1] == str(generations.stable_path(store, "demo"))
    recorded = read_lock(lock1)
    assert recorded.venv_digest is not None

    lock2 = ws / "locks" / "v2.toml"
    lock2.write_text(v2.to_toml())
    marker = tmp_path / "paused"
    pause = {"PAUSE_MARKER": str(marker)}
    if point == "download":
        server.faults[big.name] = "slow"
        part = store.partial_dir / f"{v2.package('big').wheels[0].sha256}.part"  # type: ignore[union-attr]
        ready = lambda: part.exists() and part.stat().st_size > 100_000  # noqa: E731
    else:
        pause["PAUSE_AT"] = point
        ready = marker.exists
    proc = envlock(ws, home, "sync", "demo", "--lock", str(lock2), env=pause, paused=True)
    try:
        wait_for(ready, f"sync to reach {point}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    store = Store.open(home)  # clears the killed writer's litter
    assert generations.current_number(store, "demo") == 1
    assert verify_env(store, "demo", recorded).ok
    assert_store_whole(store)
    assert [p.name for p in store.tmp.iterdir()] == ["partial"]
    if point != "before-flip":
        assert not store.has("venvs", v2.install_digest())

    # The next sync finishes the job; a killed download resumes where it stopped.
    server.faults.clear()
    again = envlock(ws, home, "sync", "demo", "--lock", str(lock2))
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
        first = envlock(ws, home, "sync", "demo", "--lock", str(lock))
        uv: list[int] = []

        def installing() -> bool:
            uv.extend(filter(None, [_uv_installing_under(first.pid)]))
            return bool(uv)

        try:
            wait_for(installing, "the sync's uv pip install")
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
            again = envlock(ws, home, "sync", "demo", "--lock", str(lock))
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
            first = envlock(ws, home, *(gc if name == "gc" else sync))
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
            procs = [(name, envlock(ws, home, *(gc if name == "gc" else sync))) for name in names]
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
                again = envlock(ws, home, *command)
                _, err = again.communicate(timeout=60)
                assert again.returncode == 0, (name, command[0], err)
            assert verify_env(Store.open(home), "demo", read_lock(lock)).ok, name
        store = Store.open(home)
        assert_store_whole(store)
        assert _dangling_uv_entries(store) == []
        assert _running_under(home) == []  # no killed sync's uv still at work
    finally:
        server.stop()
