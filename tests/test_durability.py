"""Data reaches the disk before a rename publishes it: a store entry, a lock (every write_atomic),
a generation and the ``current`` link. The calls are recorded as they happen (os.fsync with the
path its descriptor names, os.replace and os.rename)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlock import generations, store
from envlock.store import Store, replace_if_unchanged, write_atomic

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
    work = rename[1]
    published = calls.index(rename)
    for synced in (f"{work}/x-1.0-py3-none-any.whl", f"{work}/sub/f", f"{work}/sub", work):
        assert calls.index(("fsync", synced, "")) < published, synced
    assert calls.index(("fsync", str(final.parent), "")) > published


def test_a_big_entry_is_synced_with_one_syncfs_before_its_rename(tmp_path: Path, calls: list[Call],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(store, "_FSYNC_FILES", 2)
    real = store._syncfs
    monkeypatch.setattr(store, "_syncfs", lambda path: order.append(f"syncfs {path}") or real(path))
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
    from envlock.digest import manifest

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
