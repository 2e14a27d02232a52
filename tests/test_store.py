"""The store: layout version, atomic entries, litter of killed writers, flock."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlock.errors import FetchError, StoreError
from envlock.install import generations
from envlock.model.lockfile import Artifact
from envlock.store import store
from envlock.store.store import (
    Store,
    check_stored_bytes,
    check_stored_sizes,
    exclusive_lock,
    replace_if_unchanged,
    store_file,
    stored,
    write_atomic,
    wrong_size_in_store,
)
from kit.processes import wait_for, waits_on_flock


def test_open_writes_layout_and_refuses_unknown_layout(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    assert (tmp_path / "home" / "layout").read_text() == "1\n"
    assert store.tmp.is_dir()
    (tmp_path / "home" / "layout").write_text("7\n")
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path / "home")
    assert str(info.value) == (
        f"{tmp_path}/home/layout: store layout '7', this envlock reads layout 1; "
        "use another ENVLOCK_HOME or a matching envlock"
    )


def test_new_entry_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    with pytest.raises(RuntimeError), store.new_entry("wheels", "abc") as work:
        (work / "f").write_text("half")
        raise RuntimeError("killed")
    assert not store.has("wheels", "abc")
    assert list(store.tmp.iterdir()) == []
    with store.new_entry("wheels", "abc") as work:
        (work / "f").write_text("whole")
    assert (store.path("wheels", "abc") / "f").read_text() == "whole"


def test_first_complete_entry_wins(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    with store.new_entry("wheels", "k") as first:
        (first / "f").write_text("one")
        with store.new_entry("wheels", "k") as second:
            (second / "f").write_text("two")
    assert (store.path("wheels", "k") / "f").read_text() == "two"
    assert list(store.tmp.iterdir()) == []


@pytest.mark.parametrize("key", ["", "a/b", ".hidden"])
def test_path_rejects_non_digest_keys(tmp_path: Path, key: str) -> None:
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path).path("wheels", key)
    assert str(info.value) == f"store key {key!r} for wheels: expected a digest-like name"


def test_open_clears_litter_of_dead_writers_but_keeps_live_work_and_partials(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    litter = store.tmp / f"venvs-sha256-abc-p{dead.stdout.strip()}-0123abcd"
    (litter / "bin").mkdir(parents=True)
    (litter / "bin" / "python").write_text("x")
    os.chmod(litter / "bin", 0o555)  # even read-only folders go
    live = store.temp_dir("venv")
    store.partial_dir.mkdir()
    (store.partial_dir / "ab.part").write_bytes(b"half")
    Store.open(tmp_path)
    assert not litter.exists()
    assert live.is_dir()
    assert (store.partial_dir / "ab.part").read_bytes() == b"half"


def test_remove_entry(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    with store.new_entry("venvs", "k") as work:
        (work / "f").write_text("x")
        os.chmod(work / "f", 0o444)
    store.remove_entry("venvs", "k")
    assert not store.has("venvs", "k")
    store.remove_entry("venvs", "k")  # already gone: fine


def test_exclusive_lock_serializes_holders(tmp_path: Path) -> None:
    order: list[str] = []
    lock = tmp_path / "x.lock"

    waiting = threading.Event()

    def second() -> None:
        waiting.set()
        with exclusive_lock(lock):
            order.append("second")

    with exclusive_lock(lock):
        t = threading.Thread(target=second)
        t.start()
        assert waiting.wait(10)
        # Blocked on the flock (this process's waiter in /proc/locks): the first holder has not let go.
        wait_for(lambda: waits_on_flock(lock, os.getpid()), "the second holder to wait for the lock")
        assert t.is_alive() and order == []
        order.append("first")
    t.join()
    assert order == ["first", "second"]


def test_slot_entries_reuse_one_path_and_leftovers_of_dead_holders_are_cleared(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    with store.new_entry("venvs", "sha256:aa", slot="venv") as work:
        assert work == store.tmp / "venv-slot0"
        # A second writer at the same time gets the next slot.
        with store.new_entry("venvs", "sha256:bb", slot="venv") as other:
            assert other == store.tmp / "venv-slot1"
            (other / "f").write_text("b")
        assert Store.open(tmp_path / "home").clean_tmp() == []  # a held slot is live work
        (work / "f").write_text("a")
    assert (store.path("venvs", "sha256:aa") / "f").read_text() == "a"
    assert (store.path("venvs", "sha256:bb") / "f").read_text() == "b"
    with store.new_entry("venvs", "sha256:cc", slot="venv") as again:
        assert again == store.tmp / "venv-slot0"  # the path comes back: uv's caches by path hit
    # What a killed holder left behind (no one holds its lock) goes on the next open.
    (store.tmp / "venv-slot0" / "bin").mkdir(parents=True)
    assert store.clean_tmp() == [store.tmp / "venv-slot0"]
    assert list(store.tmp.iterdir()) == []


def test_a_slot_taken_while_clean_tmp_removes_its_leftover_is_never_removed(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from envlock.store import store as store_module

    store = Store.open(tmp_path / "home")
    leftover = store.tmp / "venv-slot0"
    (leftover / "bin").mkdir(parents=True)  # a killed sync's
    taken: list[Path] = []
    real_rmtree = store_module._rmtree

    def another_sync_starts(path: Path) -> None:
        # Another process takes a venv slot just as the cleaner removes the leftover.
        if path == leftover and not taken:
            taken.append(Path())
            slot = stack.enter_context(store.new_entry("venvs", "sha256:dd", slot="venv"))
            (slot / "building").write_text("uv is installing here")
            taken[0] = slot
        real_rmtree(path)

    monkeypatch.setattr(store_module, "_rmtree", another_sync_starts)
    with contextlib.ExitStack() as stack:
        assert store.clean_tmp() == [leftover]
        assert (taken[0] / "building").read_text() == "uv is installing here"


def test_unresumable_partial_downloads_no_one_holds_are_cleared(tmp_path: Path) -> None:
    import fcntl

    store = Store.open(tmp_path / "home")
    store.partial_dir.mkdir(parents=True)
    killed = store.partial_dir / f"url-{'a' * 64}.part"  # a killed lock's hashing download
    live = store.partial_dir / f"url-{'b' * 64}.part"
    resumable = store.partial_dir / f"{'c' * 64}.part"  # hash known: the next fetch resumes it
    for part in (killed, live, resumable):
        part.write_bytes(b"x" * 10)
    with open(live, "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as fetch_unhashed holds the one it writes
        assert store.clean_tmp() == [killed]
    assert sorted(store.partial_dir.iterdir()) == [resumable, live]


def test_default_home_follows_envlock_home_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from envlock.store import home
    from envlock.store.store import LAYOUT_VERSION, default_home

    assert f"v{LAYOUT_VERSION}" == home.LAYOUT_DIR
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "h"))
    assert default_home() == tmp_path / "h"
    if sys.platform.startswith("linux"):
        monkeypatch.delenv("ENVLOCK_HOME")
        from platformdirs import user_data_dir

        # The fast no-op computes the home without importing platformdirs: same answer.
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
        assert default_home() == tmp_path / "xdg" / "envlock" == Path(user_data_dir("envlock", appauthor=False))
        monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
        monkeypatch.setenv("HOME", str(tmp_path / "user"))
        assert default_home() == tmp_path / "user" / ".local" / "share" / "envlock"
        assert default_home() == Path(user_data_dir("envlock", appauthor=False))


def test_a_failed_atomic_write_names_the_file_and_leaves_no_temp_file(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    from envlock.store.store import write_atomic

    target = tmp_path / "locks" / "pylock.e.toml"

    def full_disk(fd: int) -> None:  # the data written, its fsync fails: as a full disk or NFS reports it
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError) as info:
        write_atomic(target, b"lock text")
    assert (info.value.errno, info.value.filename) == (errno.ENOSPC, str(target))
    assert list(target.parent.iterdir()) == []


def test_replace_if_unchanged_writes_only_over_the_bytes_it_was_given(tmp_path: Path) -> None:
    from envlock.store.store import replace_if_unchanged

    lock = tmp_path / "locks" / "pylock.e.toml"
    assert replace_if_unchanged(lock, None, b"first\n")  # no file yet, as expected
    assert not replace_if_unchanged(lock, None, b"second\n")  # someone made it meanwhile
    assert not replace_if_unchanged(lock, b"stale\n", b"second\n")
    assert lock.read_bytes() == b"first\n"
    assert replace_if_unchanged(lock, b"first\n", b"second\n")
    assert lock.read_bytes() == b"second\n"
    # Another envlock wrote exactly these bytes meanwhile (two syncs relocking one stale lock): done.
    assert replace_if_unchanged(lock, b"first\n", b"second\n")
    assert sorted(p.name for p in lock.parent.iterdir()) == ["pylock.e.toml"]  # no temp file left


# -- locked wheels in the store ------------------------------------------------------------

def _wheel(store: Store, data: bytes, name: str = "x-1.0-py3-none-any.whl") -> tuple[Artifact, Path]:
    """A wheel of ``data`` put in the store as ``fetch`` leaves it; its artifact and store file."""
    art = Artifact(sha256=hashlib.sha256(data).hexdigest(), url=f"https://example.org/{name}", size=len(data))
    path = store_file(store, art)
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return art, path


def test_store_file_is_the_artifacts_name_in_its_sha256_entry_and_never_outside(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    art = Artifact(sha256="a" * 64, url="https://example.org/x-1.0-py3-none-any.whl")
    assert store_file(store, art) == store.root / "wheels" / ("a" * 64) / "x-1.0-py3-none-any.whl"
    with pytest.raises(FetchError, match=r"expected a plain \*\.whl file name"):
        store_file(store, Artifact(sha256="a" * 64, url="https://example.org/..%2F..%2Fx.whl"))


def test_a_stored_wheel_is_judged_by_its_size_and_a_wrong_one_says_which_is_wrong(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    art, path = _wheel(store, b"wheel bytes")
    assert stored(art, path) == (True, None)
    assert stored(art, path.with_name("other.whl")) == (False, None)
    assert stored(art, path.parent) == (False, None)  # not a regular file
    longer = Artifact(sha256=art.sha256, url=art.url, size=12)  # the lock's size is wrong
    present, wrong = stored(longer, path)
    assert present and wrong is not None and wrong.message == (
        f"x-1.0-py3-none-any.whl: store file {path} has the locked sha256 but is 11 bytes, "
        "the lock says 12: the lock's size is wrong (the store file is intact)")
    path.write_bytes(b"cut")  # the store file is wrong
    cut = hashlib.sha256(b"cut").hexdigest()
    assert wrong_size_in_store(art, path, 3, then="lock again").message == (
        f"x-1.0-py3-none-any.whl: store file {path} is 3 bytes, the lock says 11 (its sha256 is {cut}, "
        f"the lock's {art.sha256}): the store entry is damaged; remove {path.parent} and lock again to fetch it anew")
    with pytest.raises(FetchError) as info:
        check_stored_sizes([art, Artifact(sha256="b" * 64, url=art.url, size=5)], store)
    assert info.value.message == wrong_size_in_store(art, path, 3).message  # one: said as it is; absent: unchecked


def test_check_stored_bytes_names_every_wheel_whose_bytes_changed(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    good, good_path = _wheel(store, b"good")
    bad, bad_path = _wheel(store, b"bad", "y-1.0-py3-none-any.whl")
    check_stored_bytes({good.sha256: good_path, bad.sha256: bad_path})
    bad_path.write_bytes(b"BAD")
    with pytest.raises(StoreError) as info:
        check_stored_bytes({good.sha256: good_path, bad.sha256: bad_path})
    assert info.value.message == ("1 store wheel(s) damaged (their bytes changed since they were verified): "
                                  "remove each folder named and sync again to fetch it anew")
    assert info.value.details == (f"{bad_path}: sha256 {hashlib.sha256(b'BAD').hexdigest()}, expected "
                                  f"{bad.sha256}; remove {bad_path.parent}",)


# -- durability: data on disk before a rename publishes it ------------------------------------------
# Data reaches the disk before a rename publishes it: a store entry, a lock (every write_atomic), a
# generation and the ``current`` link. The calls are recorded as they happen (os.fsync with the path
# its descriptor names, os.replace and os.rename).

Call = tuple[str, str, str]  # ("fsync", path, "") or ("rename", src, dst)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    seen: list[Call] = []
    real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

    def fsync(fd: int) -> None:
        seen.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), ""))
        real_fsync(fd)

    def renamer(real: Callable[..., Any]) -> Callable[..., Any]:
        def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(("rename", os.fspath(src), os.fspath(dst)))
            return real(src, dst, *args, **kwargs)
        return rename

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", renamer(real_replace))
    monkeypatch.setattr(os, "rename", renamer(real_rename))
    monkeypatch.setattr(store, "_FSYNC_FILES", 10_000)  # file by file here (a venv's size takes syncfs)
    return seen


def _index(seen: list[Call], call: Call) -> int:
    return seen.index(call)


def test_write_atomic_syncs_the_data_then_renames_then_syncs_the_folder(tmp_path: Path, calls: list[Call]) -> None:
    lock = tmp_path / "locks" / "pylock.e.toml"
    write_atomic(lock, b"lock-version = \"1.0\"\n")
    (rename,) = [c for c in calls if c[0] == "rename"]
    tmp = rename[1]
    assert rename[2] == str(lock)
    assert calls == [("fsync", tmp, ""), rename, ("fsync", str(lock.parent), "")]


def test_replace_if_unchanged_syncs_before_its_rename(tmp_path: Path, calls: list[Call]) -> None:
    lock = tmp_path / "pylock.e.toml"
    lock.write_bytes(b"old\n")
    assert replace_if_unchanged(lock, b"old\n", b"new\n")
    (rename,) = [c for c in calls if c[0] == "rename"]
    assert calls.index(("fsync", rename[1], "")) < calls.index(rename) < calls.index(("fsync", str(tmp_path), ""))
    assert lock.read_bytes() == b"new\n"


def test_a_store_entry_is_synced_file_by_file_before_its_rename(tmp_path: Path, calls: list[Call]) -> None:
    s = Store.open(tmp_path / "home")
    del calls[:]  # opening it wrote its layout file
    with s.new_entry("wheels", "a" * 64) as work:
        (work / "x-1.0-py3-none-any.whl").write_bytes(b"wheel")
        (work / "sub").mkdir()
        (work / "sub" / "f").write_bytes(b"f")
    final = s.path("wheels", "a" * 64)
    (rename,) = [c for c in calls if c[0] == "rename"]
    assert rename[2] == str(final)
    folder = rename[1]
    published = calls.index(rename)
    for synced in (f"{folder}/x-1.0-py3-none-any.whl", f"{folder}/sub/f", f"{folder}/sub", folder):
        assert calls.index(("fsync", synced, "")) < published, synced
    assert calls.index(("fsync", str(final.parent), "")) > published


def test_a_big_entry_is_synced_with_one_syncfs_before_its_rename(tmp_path: Path, calls: list[Call],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(store, "_FSYNC_FILES", 2)
    real = store._syncfs

    def syncfs(path: Path) -> bool:
        order.append(f"syncfs {path}")
        return real(path)

    monkeypatch.setattr(store, "_syncfs", syncfs)
    s = Store.open(tmp_path / "home")
    del calls[:]  # opening it wrote its layout file
    with s.new_entry("venvs", "b" * 64) as work:
        for i in range(3):
            (work / f"f{i}").write_bytes(b"x")
    (rename,) = [c for c in calls if c[0] == "rename"]
    assert order == [f"syncfs {rename[1]}"]
    assert not [c for c in calls if c[0] == "fsync" and c[1].startswith(rename[1] + "/")]  # no file by file


def test_a_generation_and_its_current_link_are_synced_before_they_are_published(
        tmp_path: Path, calls: list[Call]) -> None:
    s = Store.open(tmp_path / "home")
    venv = s.path("venvs", "c" * 64)
    venv.mkdir(parents=True)
    gen = generations.add(s, "e", venv=venv, lock_text="lock-version = \"1.0\"\n", install_digest="sha256:i",
                          venv_digest="sha256:v", venv_python="3.12.1")
    folder = generations.env_dir(s, "e")
    (new,) = [c for c in calls if c[0] == "rename" and c[2] == str(gen.path)]
    work = new[1]
    assert calls.index(("fsync", work, "")) < calls.index(new) < calls.index(("fsync", str(folder), ""))
    del calls[:]
    generations.flip(s, "e", gen.number)
    (flip,) = [c for c in calls if c[0] == "rename"]
    assert flip[2] == str(folder / "current")
    at = calls.index(flip)
    assert ("fsync", str(gen.path), "") in calls[:at]  # its pending mark removed, on disk
    assert ("fsync", str(folder), "") in calls[:at]  # the new link, on disk before the rename
    assert calls[at + 1:] == [("fsync", str(folder), "")]  # the rename itself



def test_a_tree_whose_files_were_written_back_is_published_after_one_fsync_of_its_folder(
        tmp_path: Path, calls: list[Call], monkeypatch: pytest.MonkeyPatch) -> None:
    """A new venv: its walk writes back every file it reads (sync_file_range: write, then wait), and
    the rename waits for one fsync of its folder (the device's cache flushed once), not for a syncfs
    of the whole file system; a file the hash cache answers for is not read, so not written back."""
    written: list[tuple[str, int]] = []
    real = store._sync_file_range()
    assert real is not None  # Linux

    def sfr(fd: int, offset: int, nbytes: int, flags: int) -> int:
        written.append((os.readlink(f"/proc/self/fd/{fd}"), flags))
        return real(fd, offset, nbytes, flags)

    monkeypatch.setattr(store, "_sync_file_range", lambda: sfr)
    monkeypatch.setattr(store, "_syncfs", lambda path: pytest.fail("no syncfs for a written-back tree"))
    monkeypatch.setattr(store, "_FSYNC_FILES", 2)
    s = Store.open(tmp_path / "home")
    shared = tmp_path / "uv-cache-file"  # a file of uv's cache, hashed before (linked into the venv)
    shared.write_bytes(b"shared")
    os.utime(shared, ns=(1, 1))  # older than the walk: the cache may keep it
    (tmp_path / "other-link").hardlink_to(shared)
    from envlock.install.digest import manifest

    first = tmp_path / "published"
    first.mkdir()
    (first / "lib.py").hardlink_to(shared)
    manifest(first, cache_dir=s.hash_cache)  # a published venv's walk: the cache now knows its inode
    del calls[:]
    with s.new_entry("venvs", "d" * 64) as work:
        (work / "lib.py").hardlink_to(shared)
        for name in ("RECORD", "INSTALLER", "pyvenv.cfg"):
            (work / name).write_bytes(name.encode())
        manifest(work, cache_dir=s.hash_cache, seal=True, flush=True)
        write_atomic(work / "MANIFEST", b"m")
        store.written_back(work)
    final, folder = s.path("venvs", "d" * 64), str(work)
    (rename,) = [c for c in calls if c[0] == "rename" and c[2] == str(final)]
    files = sorted(f"{folder}/{name}" for name in ("INSTALLER", "RECORD", "pyvenv.cfg"))
    assert sorted(p for p, flags in written if flags == store._SFR_WRITE) == files  # not lib.py
    assert sorted(p for p, flags in written if flags == store._SFR_WAIT) == files
    assert [c for c in calls if c[0] == "fsync" and c[1].startswith(folder)][-1] == ("fsync", folder, "")
    assert calls.index(("fsync", folder, "")) < calls.index(rename)
    (manifest_written,) = [c for c in calls if c[0] == "rename" and c[2] == f"{folder}/MANIFEST"]
    assert calls.index(("fsync", manifest_written[1], "")) < calls.index(manifest_written) < calls.index(rename)
    assert not store._WRITTEN_BACK


def test_a_block_that_fails_after_saying_written_back_leaves_nothing_behind(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "home")
    with pytest.raises(RuntimeError, match=r"^the walk failed$"), s.new_entry("venvs", "e" * 64) as work:
        (work / "f").write_bytes(b"x")
        store.written_back(work)
        raise RuntimeError("the walk failed")
    assert not s.has("venvs", "e" * 64) and not store._WRITTEN_BACK
