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


def test_a_sync_begun_early_runs_beside_the_block_and_is_waited_for_before_the_rename(
        tmp_path: Path, calls: list[Call], monkeypatch: pytest.MonkeyPatch) -> None:
    """``sync_soon``: a venv's bytes go to the disk while its digest walk reads them; new_entry waits
    for that one syncfs before its rename and syncs nothing twice; what the block writes after it
    (the manifest) is synced by its own write."""
    import threading

    monkeypatch.setattr(store, "_FSYNC_FILES", 2)
    real = store._syncfs
    walked = threading.Event()

    def syncfs(path: Path) -> bool:
        assert walked.wait(10)  # the block went on while this ran
        calls.append(("syncfs", str(path), ""))
        return real(path)

    monkeypatch.setattr(store, "_syncfs", syncfs)
    s = Store.open(tmp_path / "home")
    del calls[:]  # opening it wrote its layout file
    with s.new_entry("venvs", "d" * 64) as work:
        for i in range(3):
            (work / f"f{i}").write_bytes(b"x")
        store.sync_soon(work)
        walked.set()
        write_atomic(work / "MANIFEST", b"m")
    final = s.path("venvs", "d" * 64)
    (rename,) = [c for c in calls if c[0] == "rename" and c[2] == str(final)]
    assert [c for c in calls if c[0] == "syncfs"] == [("syncfs", str(work), "")]
    assert calls.index(("syncfs", str(work), "")) < calls.index(rename)
    (written,) = [c for c in calls if c[0] == "rename" and c[2] == f"{work}/MANIFEST"]
    assert calls.index(("fsync", written[1], "")) < calls.index(written) < calls.index(rename)
    assert (final / "MANIFEST").read_bytes() == b"m"


def test_a_block_that_fails_after_an_early_sync_says_its_own_error_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "_FSYNC_FILES", 2)
    monkeypatch.setattr(store, "_syncfs", lambda path: (_ for _ in ()).throw(OSError(5, "I/O error")))
    s = Store.open(tmp_path / "home")
    with pytest.raises(RuntimeError, match="^the walk failed$"), s.new_entry("venvs", "e" * 64) as work:
        for i in range(3):
            (work / f"f{i}").write_bytes(b"x")
        store.sync_soon(work)
        raise RuntimeError("the walk failed")
    assert not s.has("venvs", "e" * 64) and store._SYNCING == {}
    with pytest.raises(OSError, match="I/O error"), s.new_entry("venvs", "e" * 64) as work:  # a failed sync fails
        for i in range(3):
            (work / f"f{i}").write_bytes(b"x")
        store.sync_soon(work)
    assert not s.has("venvs", "e" * 64) and list(s.tmp.iterdir()) == []
