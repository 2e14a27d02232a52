"""``envlock gc``: roots (generations, git history, pins) keep their closures; the rest goes; a killed gc
leaves a store a sync and a second gc work on."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from envlock.install import generations
from envlock.model.lockfile import Lock
from envlock.store.store import WRITER_LOCK, Store
from kit.index import IndexServer
from kit.locks import lock_for
from kit.processes import envlock, wait_for, waits_on_flock
from kit.sglike import git
from kit.stores import assert_store_whole
from kit.wheels import build_wheel
from kit.workspaces import Cli, CliResult, ScratchWorkspace
from kit.workspaces import ScratchWorkspace as Ws


@dataclass
class Setup:
    server: IndexServer
    ws: Path
    home: Path
    locks: dict[str, Path]  # name -> lock file
    unrooted_wheel: str  # sha256 of the wheel only the dropped generation's lock names


@pytest.fixture
def setup(server: IndexServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> Setup:
    w = tmp_path / "wheels"
    wheels = {name: build_wheel(w, name.split("-")[0], name.split("-")[1]) for name in
              ("alpha-1.0", "alpha-2.0", "beta-1.0", "gamma-1.0", "delta-1.0")}
    big = build_wheel(w, "big", "1.0", files={"big/blob.bin": os.urandom(300_000)})
    server.add("pypi", big, *wheels.values())
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "locks").mkdir()
    home = tmp_path / "home"
    monkeypatch.setenv("ENVLOCK_HOME", str(home))
    monkeypatch.chdir(ws)
    v1 = lock_for(server, "pypi", [wheels["alpha-1.0"], wheels["beta-1.0"]])
    v2 = lock_for(server, "pypi", [wheels["alpha-2.0"], big])
    v3 = lock_for(server, "pypi", [wheels["gamma-1.0"]])  # only in git history, pinned
    v4 = lock_for(server, "pypi", [wheels["delta-1.0"]])  # a generation gc drops: unrooted
    files = {"v2": tmp_path / "v2.toml", "v3": tmp_path / "v3.toml", "v4": tmp_path / "v4.toml",
             "v1": ws / "locks" / "pylock.demo.toml"}
    for name, lock in (("v1", v1), ("v2", v2), ("v3", v3), ("v4", v4)):
        files[name].write_text(lock.to_toml())
    # History: v3 committed, then v1 over it (HEAD).
    git(ws, "init", "-q")
    (ws / "locks" / "pylock.demo.toml").write_text(v3.to_toml())
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "v3")
    files["v1"].write_text(v1.to_toml())
    git(ws, "commit", "-qam", "v1")
    # Generations: v3, v4, then three over two locks (v1, v2, v1).
    for name in ("v3", "v4", "v1", "v2", "v1"):
        r = cli("sync", "demo", "--lock", str(files[name]))
        assert r.code == 0, r.err
    git(ws, "commit", "-qam", "v1 with its venv digest")
    delta = v4.packages[0].wheels[0].sha256
    return Setup(server, ws, home, files, delta)


def test_dry_run_then_gc_keeps_every_root_and_frees_the_rest(setup: Setup, cli: Cli) -> None:
    store = Store.open(setup.home)
    assert cli("pin", "demo", "--lock", "locks/pylock.demo.toml@HEAD~2").code == 0  # v3, from git history
    listing = json.loads(cli("pins", "--json").out)["pins"]
    assert [p["label"] for p in listing] == ["locks/pylock.demo.toml@HEAD~2"]
    before = sorted(p.name for p in (store.root / "wheels").iterdir())
    assert setup.unrooted_wheel in before

    dry = cli("gc", "--dry-run", "--keep-git", "none", "--json")
    assert dry.code == 0, dry.err
    planned = json.loads(dry.out)
    assert planned["dry_run"] is True and planned["freed"] > 0
    assert f"wheels/{setup.unrooted_wheel}" in planned["removed"]
    assert planned["generations"] == ["demo/1", "demo/2"]
    assert sorted(p.name for p in (store.root / "wheels").iterdir()) == before  # nothing removed
    kinds = sorted({r["kind"] for r in planned["roots"]})
    assert kinds == ["generation", "pin", "workspace"]

    done = cli("gc", "--keep-git", "none")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0] == "roots: 5 locks (3 generations, 1 workspace lock, 0 git locks, 1 pin)"
    assert lines[1].startswith(f"before: {planned['before']['entries']} entries, ")
    archives = sum(1 for r in planned["removed"] if r.startswith("uv-cache/"))
    entries = len(planned["removed"]) - archives
    assert archives > 0  # the old generations' venvs were the only ones linking to some
    assert lines[2].startswith(f"removed: {entries} entries and {archives} uv-cache archive"
                               f"{'s' if archives > 1 else ''}, 2 old generations, freeing ")
    # The counts add up: entries before, less those removed, are those after.
    assert lines[3].startswith(f"after: {planned['before']['entries'] - entries} entries, ")
    assert not store.has("wheels", setup.unrooted_wheel)
    assert [g.number for g in generations.list_generations(store, "demo")] == [3, 4, 5]
    assert_store_whole(store)
    # Every remaining uv-cache archive is linked from a kept venv.
    kept = {(os.lstat(p).st_dev, os.lstat(p).st_ino) for v in (store.root / "venvs").iterdir()
            for p in v.rglob("*") if p.is_file() and not p.is_symlink()}
    for archive in (store.root / "uv-cache" / "archive-v0").iterdir():
        inodes = {(os.lstat(p).st_dev, os.lstat(p).st_ino) for p in archive.rglob("*") if p.is_file()}
        assert inodes & kept, f"{archive}: kept, yet no kept venv links to it"

    # Every rooted lock still syncs offline (v3 through its pin: its venv was kept too).
    setup.server.stop()
    for name in ("v1", "v2", "v3"):
        r = cli("sync", "demo", "--lock", str(setup.locks[name]), "--offline", "--json")
        assert r.code == 0, r.err
        assert json.loads(r.out)["venv_digest"] == Lock.from_toml(setup.locks[name].read_text(), "x").venv_digest
    r = cli("sync", "demo", "--lock", str(setup.locks["v4"]), "--offline")
    assert r.code == 1 and "--offline: 1 locked artifact not in the store" in r.err


def test_git_history_and_tags_are_roots_and_an_unpinned_lock_goes(setup: Setup, cli: Cli) -> None:
    store = Store.open(setup.home)
    gamma = Lock.from_toml(setup.locks["v3"].read_text(), "v3").packages[0].wheels[0].sha256
    # History keeps v3 (HEAD~2 changed the lock).
    assert cli("gc").code == 0
    assert store.has("wheels", gamma)
    # Only tags: none holds v3, so it goes; the uv cache sheds what its venv linked to.
    assert cli("gc", "--keep-git", "tags").code == 0
    assert not store.has("wheels", gamma)
    # A pin and its unpin.
    assert cli("pin", "demo", "--lock", str(setup.locks["v2"])).code == 0
    r = cli("unpin", "demo", "--lock", str(setup.locks["v3"]))
    assert r.code == 2
    v2_sha = hashlib.sha256(setup.locks["v2"].read_bytes()).hexdigest()
    assert r.err == (f"envlock: error: {setup.locks['v3']}: not pinned for env 'demo' (pins: {setup.locks['v2']} "
                     f"({v2_sha[:12]})); `envlock pins` lists them\n")
    assert cli("unpin", "demo", "--all").out.startswith(f"unpinned {setup.locks['v2']} (")
    assert json.loads(cli("pins", "--json").out) == {"pins": []}
    # After the uv cache was trimmed, an unrooted lock syncs again (uv unpacks its wheels anew).
    r = cli("sync", "demo", "--lock", str(setup.locks["v3"]), "--json")
    assert r.code == 0, r.err


@pytest.mark.parametrize(("args", "message"), [
    (["--keep-generations", "0"], "--keep-generations 0: expected 1 or more (the current generation is always kept)"),
    (["--git-depth", "-1", "--dry-run"], "--git-depth -1: expected 0 or more"),
    (["--keep-git", "some"], "--keep-git some: expected one of all, tags, none"),
    (["--keep-generations", "-2", "--git-depth", "-1", "--keep-git", "x"],
     "--keep-git x: expected one of all, tags, none; "
     "--keep-generations -2: expected 1 or more (the current generation is always kept); "
     "--git-depth -1: expected 0 or more"),
])
def test_gc_option_errors(ws: ScratchWorkspace, cli: Cli, args: list[str], message: str) -> None:
    r = cli("gc", *args)
    assert r.code == 2
    assert r.err == f"envlock: error: {message}\n"


def test_a_gc_killed_midway_leaves_a_store_a_sync_and_a_second_gc_work_on(
        setup: Setup, tmp_path: Path, cli: Cli) -> None:
    marker = tmp_path / "paused"
    writer = Store.open(setup.home)  # before the gc starts: opening a store clears what no process holds
    proc = envlock(setup.ws, setup.home, "gc", "--keep-git", "none", paused=True,
                   env={"PAUSE_AT": "gc-remove", "PAUSE_MARKER": str(marker), "PAUSE_COUNT": "3"})
    try:
        wait_for(lambda: _alive(proc) and marker.exists(), "gc to reach its third removal", timeout=60)
        # A sync beside the paused gc waits for it (the store's writer lock), it does not race it.
        beside = envlock(setup.ws, setup.home, "sync", "demo", "--lock", str(setup.locks["v2"]))
        _waits_for_the_writer_lock(writer, beside, "the sync beside the paused gc")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    _out, err = beside.communicate(timeout=60)
    assert beside.returncode == 0, err
    store = Store.open(setup.home)  # clears the killed gc's renamed-away litter
    assert [p.name for p in store.tmp.iterdir() if not p.name.startswith(("partial", "venv-slot"))] == []
    assert_store_whole(store)
    assert generations.current_number(store, "demo") == 6
    r = cli("sync", "demo", "--lock", str(setup.locks["v1"]), "--offline")
    assert r.code == 0, r.err
    second = cli("gc", "--keep-git", "none", "--json")
    assert second.code == 0, second.err
    assert f"wheels/{setup.unrooted_wheel}" in json.loads(second.out)["removed"] or \
        not store.has("wheels", setup.unrooted_wheel)
    assert not store.has("wheels", setup.unrooted_wheel)
    assert_store_whole(store)


def test_gc_waits_for_a_running_sync_and_says_so(setup: Setup) -> None:
    store = Store.open(setup.home)
    with store.writing():  # as a sync holds it from its first fetch to its flip
        proc = envlock(setup.ws, setup.home, "gc")
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line == ("envlock: waiting for the running syncs, locks and builds to end (gc never removes what "
                        "they use)\n")
        _waits_for_the_writer_lock(store, proc, "gc")  # still waiting, on the lock this sync holds
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[2].startswith("removed: ")


WAITING = "envlock: waiting for the running syncs, locks and builds to end (gc never removes what they use)\n"


@pytest.fixture
def tiny_build(ws: ScratchWorkspace, cli: Cli, backend_index: IndexServer) -> Path:
    """A workspace whose env builds a setuptools project from a path source, locked, not built yet."""
    project = ws.root / "tiny"
    project.mkdir()
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                            '"setuptools.build_meta"\n[project]\nname = "tiny"\nversion = "1.0"\n')
    (project / "tiny.py").write_text("VALUE = 1\n")
    ws.write_spec("t", f'[env]\npython = "3.11"\n[indexes.pypi]\nurl = "{backend_index.url("pypi")}"\n'
                       'default = true\n[packages]\ntiny = { build = "tiny" }\n[sources.tiny]\npath = "tiny"\n'
                       '[builds.tiny]\nsource = "tiny"\n')
    r = cli("lock", "t")
    assert r.code == 0, r.err
    return ws.root


def test_gc_beside_a_running_build_waits_and_leaves_its_inputs(
        tiny_build: Path, tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "home"
    marker, release = tmp_path / "paused", tmp_path / "go-on"
    build = envlock(tiny_build, home, "build", "t", paused=True,
                    env={"PAUSE_AT": "build", "PAUSE_MARKER": str(marker), "PAUSE_UNTIL": str(release)})
    try:
        wait_for(lambda: _alive(build) and marker.exists(), "the build to reach its backend", timeout=120)
        # Paused with its backend's wheel in the store, which no lock names yet: a gc now would take it.
        store = Store.open(home)
        backend = [p.parent.name for p in (store.root / "wheels").glob("*/setuptools-*.whl")]
        assert len(backend) == 1
        gc = envlock(tiny_build, home, "gc", "--keep-git", "none", "--json")
        assert gc.stderr is not None
        assert gc.stderr.readline() == WAITING
        _waits_for_the_writer_lock(store, gc, "gc beside the build")  # still waiting for the build
    finally:
        release.write_text("")
    _out, err = build.communicate(timeout=120)
    assert build.returncode == 0, err
    gc_out, gc_err = gc.communicate(timeout=60)
    assert gc.returncode == 0, gc_err
    # The build recorded itself in the lock before gc looked: its wheel, record and backend are rooted.
    removed = json.loads(gc_out)["removed"]
    assert f"wheels/{backend[0]}" not in removed and store.has("wheels", backend[0])
    built = cli("build", "t", "--json")
    assert built.code == 0, built.err
    assert json.loads(built.out)["builds"][0]["rebuilt"] is False


def _alive(proc: subprocess.Popen[str]) -> bool:
    """True while ``proc`` runs; its output, as the failure, once it ended."""
    assert proc.poll() is None, proc.communicate()
    return True


def _waits_for_the_writer_lock(store: Store, proc: subprocess.Popen[str], what: str) -> None:
    """Return once ``proc`` is blocked on the store's writer lock (its ``flock`` in /proc/locks); fail
    if it ends first (done beside a gc: it never waited) or does not wait within a minute."""
    lock = store.root / "locks" / f"{WRITER_LOCK}.lock"
    wait_for(lambda: _alive(proc) and waits_on_flock(lock, proc.pid), f"{what} to wait for the store's writer lock",
             timeout=60)


def test_lock_waits_for_a_running_gc(tiny_build: Path, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    _waits_beside_gc(store, lambda: envlock(tiny_build, store.home, "lock", "t"), "the lock")


def _waits_beside_gc(store: Store, start: Callable[[], subprocess.Popen[str]], what: str) -> None:
    """``start`` (a command started while a gc holds the store's writer lock) waits for it, then succeeds."""
    with store.collecting():  # as a gc holds it while it removes entries
        proc = start()
        _waits_for_the_writer_lock(store, proc, what)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


def test_cache_push_waits_for_a_running_gc(tiny_build: Path, tmp_path: Path, cli: Cli) -> None:
    # A push reads store entries (wheels, source trees it tars): a gc beside must not remove them
    # midway, or a partial tar is uploaded under a key the cache then holds for good.
    assert cli("build", "t").code == 0
    store = Store.open()
    _waits_beside_gc(store, lambda: envlock(tiny_build, store.home, "cache", "push", "t", "--to",
                                            (tmp_path / "cache").as_uri()), "cache push")


def test_gc_drops_the_file_lists_guard_results_and_venv_hints_no_kept_lock_needs(setup: Setup, cli: Cli) -> None:
    store = Store.open(setup.home)
    kept = Lock.from_toml(setup.locks["v1"].read_text(), "v1").packages[0].wheels[0].sha256
    records = {name: store.root / name for name in
               (f"listings/{kept}.json", f"listings/{setup.unrooted_wheel}.json", "guards/" + "ab" * 32 + ".json")}
    for path in records.values():
        path.parent.mkdir(exist_ok=True)
        path.write_text('{"format": "test"}')
    # The venv each lock's bytes were synced to (store.noop's hints): one per venv there, one naming none.
    # The setup's syncs left one per lock file they synced; one more per venv there, and one naming none.
    hints = store.root / "hashes" / "venv-of-lock"
    named = {p.name: p.read_text().strip() for p in hints.iterdir()}
    venvs = sorted(p.name for p in (store.root / "venvs").iterdir())
    named |= {f"{i:064x}": venv for i, venv in enumerate([*venvs, "sha256-" + "0" * 64])}
    for sha, venv in named.items():
        (hints / sha).write_text(venv + "\n")

    dry = cli("gc", "--dry-run", "--keep-git", "none", "--json")
    assert dry.code == 0, dry.err
    said = [n for n in json.loads(dry.out)["notes"] if n.endswith(
        " wheel file lists, guard results and venv hints of no kept lock would be removed too (read again when a "
        "lock needs them)")]
    assert len(said) == 1 and int(said[0].split()[0]) > 3, json.loads(dry.out)["notes"]
    assert all(p.is_file() for p in records.values()) and len(list(hints.iterdir())) == len(named)

    done = cli("gc", "--keep-git", "none", "--json")
    assert done.code == 0, done.err
    assert [name for name, p in records.items() if p.exists()] == [f"listings/{kept}.json"]
    left = {p.name for p in hints.iterdir()}
    assert left == {sha for sha, venv in named.items() if (store.root / "venvs" / venv).is_dir()} and left
    assert f"{len(venvs):064x}" not in left  # the one naming no venv


def _dangling_uv_entries(store: Store) -> list[str]:
    """uv-cache wheel entries (``wheels-v*/…`` links) whose unpacked archive is gone."""
    cache = store.root / "uv-cache"
    return sorted(str(p.relative_to(cache)) for p in cache.glob("wheels-v*/**/*")
                  if p.is_symlink() and not p.exists())


def test_gc_after_a_failed_sync_leaves_a_uv_cache_the_next_sync_installs_from(
        ws: Ws, cli: Callable[..., CliResult], tmp_path: Path) -> None:
    # As found: a failed sync (uv unpacked the wheels into its cache, no venv kept), then
    # `gc --keep-generations 1 --keep-git none`, then a sync: "uv-cache/archive-v0/…: No such file
    # or directory" for good, because gc took the archives and left uv's entries pointing at them.
    server = IndexServer(tmp_path / "served").start()
    try:
        w = tmp_path / "wheels"
        wheels = [build_wheel(w, "alpha", "1.0"), build_wheel(w, "beta", "1.0")]
        server.add("pypi", *wheels)
        good = lock_for(server, "pypi", wheels)
        python = ".".join(map(str, sys.version_info[:3]))
        lock = ws.root / "locks" / "pylock.demo.toml"
        lock.write_text(good.with_venv_digest("sha256:" + "1" * 64, python).to_toml())  # a digest it cannot match
        failed = cli("sync", "demo", "--lock", "locks/pylock.demo.toml")
        assert failed.code == 1 and "not reproducible" in failed.err
        store = Store.open()
        assert list((store.root / "uv-cache").glob("archive-v0/*"))  # what uv unpacked stays in its cache

        collected = cli("gc", "--keep-generations", "1", "--keep-git", "none", "--json")
        assert collected.code == 0, collected.err
        assert any(r.startswith("uv-cache/archive-v0/") for r in json.loads(collected.out)["removed"])
        assert _dangling_uv_entries(store) == []  # no entry left pointing at an archive gc took

        lock.write_text(good.to_toml())
        again = cli("sync", "demo", "--lock", "locks/pylock.demo.toml")
        assert again.code == 0, again.err
        assert "uv's cache" not in again.out  # nothing to repair: gc left it whole
        assert generations.current_number(store, "demo") == 1
    finally:
        server.stop()


def _hashed_inodes(store: Store) -> set[tuple[int, int]]:
    """(device, inode) of each entry of the store's inode hash cache (``install/inodehashes.py``)."""
    import marshal

    _format, entries = marshal.loads((store.hash_cache / "inodes.marshal").read_bytes())
    return {(value[0], ino) for ino, value in entries.items()}


def test_gc_drops_the_hash_cache_entries_of_the_files_it_removed(setup: Setup, cli: Cli) -> None:
    """Each warm sync loads the whole inode hash cache: gc leaves it only the entries of files the store
    still holds, the kept venv's shared files among them (a sync of its lock reads none of them again)."""
    store = Store.open(setup.home)
    before = _hashed_inodes(store)

    dry = cli("gc", "--dry-run", "--keep-generations", "1", "--keep-git", "none", "--json")
    assert dry.code == 0, dry.err
    said = [n for n in json.loads(dry.out)["notes"] if "inode hash cache entries" in n]
    assert len(said) == 1 and said[0].endswith("of files no longer in the store would be dropped (every warm "
                                               "sync loads them)"), said
    assert _hashed_inodes(store) == before  # a dry run writes nothing

    done = cli("gc", "--keep-generations", "1", "--keep-git", "none", "--json")
    assert done.code == 0, done.err
    after = _hashed_inodes(store)
    held = {(os.lstat(p).st_dev, os.lstat(p).st_ino) for p in store.root.rglob("*")
            if p.is_file() and not p.is_symlink()}
    assert after <= held and after  # only files still there; the kept venv's stay
    assert len(before - after) == int(said[0].split()[0])  # as many as the dry run said
    assert [n for n in json.loads(done.out)["notes"] if "inode hash cache entries" in n] == [
        said[0].replace("would be", "were")]
    # The kept venv's files shared with uv's cache (all a new venv of its lock links) keep their entries.
    venv = next((store.root / "venvs").iterdir())
    shared = {(os.lstat(p).st_dev, os.lstat(p).st_ino) for p in venv.rglob("*")
              if p.is_file() and not p.is_symlink() and os.lstat(p).st_nlink > 1}
    assert shared and shared <= after
