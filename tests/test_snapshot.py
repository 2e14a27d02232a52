"""A store venv's stat snapshot: a reuse (a switch, a rollback) answered by lstats alone, and every
change a full walk would find still found."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from envlock.install import digest
from envlock.install.digest import Snapshot, keep_snapshot, unchanged
from envlock.install.inodehashes import HashCache

OLD = 1_600_000_000  # a file time well before any walk in these tests


def _file(path: Path, data: bytes, *, mode: int = 0o444) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (OLD, OLD))
    path.chmod(mode)
    return path


def _store_venv(root: Path, cache: Path) -> tuple[Path, digest.Manifest]:
    """A small sealed venv, walked as an install walks a new one, its snapshot kept."""
    _file(root / "pyvenv.cfg", b"home = /opt/py/bin\n")
    _file(root / "lib" / "pkg" / "a.py", b"A = 1\n")
    _file(root / "lib" / "pkg" / "RECORD", b"pkg/a.py,,\n")
    _file(root / "bin" / "tool", b"#!/bin/sh\n", mode=0o555)
    (root / "bin" / "python").symlink_to("/opt/py/bin/python3")
    _file(root / ".envlock-manifest.json", b"")
    made = digest.manifest(root, cache_dir=cache)
    (root / ".envlock-manifest.json").chmod(0o644)
    (root / ".envlock-manifest.json").write_text(made.to_json())
    keep_snapshot(_kept(root), made)
    return root, made


def _kept(venv: Path) -> Path:
    """Where these tests keep a venv's snapshot (the store keeps it under ``hashes/snapshots/``)."""
    return venv.parent / "snapshots" / venv.name


def test_an_unchanged_venv_is_answered_by_its_snapshot_with_the_manifest_it_was_built_with(tmp_path: Path) -> None:
    venv, made = _store_venv(tmp_path / "v", tmp_path / "cache")
    assert made.stat is not None
    found = unchanged(venv, _kept(venv))
    assert found is not None and found.digest == made.digest and found.stat == made.stat
    assert dict(found.entries) == dict(made.entries)  # read from the manifest file when asked
    assert unchanged(venv, _kept(venv), made.digest) is not None
    assert unchanged(venv, _kept(venv), "sha256:" + "0" * 64) is None  # the snapshot records another digest
    # Python's byte-code folders come and go: not an edit of the venv.
    (venv / "lib" / "pkg" / "__pycache__").mkdir()
    (venv / "lib" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert unchanged(venv, _kept(venv)) is not None


@pytest.mark.parametrize("change", ["content", "mode", "added", "removed", "replaced", "symlink"])
def test_every_change_a_full_walk_finds_makes_the_snapshot_differ(tmp_path: Path, change: str) -> None:
    venv, made = _store_venv(tmp_path / "v", tmp_path / "cache")
    target = venv / "lib" / "pkg" / "a.py"
    if change == "content":  # same size, written in place (root writes a read-only file)
        with open(target, "r+b") as fh:
            fh.write(b"B")
    elif change == "mode":
        target.chmod(0o555)
    elif change == "added":
        _file(venv / "lib" / "pkg" / "b.py", b"")
    elif change == "removed":
        (venv / "lib" / "pkg" / "RECORD").unlink()
    elif change == "replaced":  # same bytes and times, another file (inode)
        _file(venv / "lib" / "pkg" / "new", b"B = 1\n")
        os.replace(venv / "lib" / "pkg" / "new", target)
    else:
        (venv / "bin" / "python").unlink()
        (venv / "bin" / "python").symlink_to("/elsewhere/python3")
    assert unchanged(venv, _kept(venv)) is None
    assert digest.manifest(venv).digest != made.digest  # and the full walk says what changed


def test_a_file_written_in_the_walks_own_clock_tick_is_read_again_before_it_is_vouched_for(tmp_path: Path) -> None:
    """An install edits ``RECORD``s right before its walk: those are racy (a later write in the same
    tick keeps the mtime), read again once the tick has passed, then in the snapshot."""
    venv, _ = _store_venv(tmp_path / "v", tmp_path / "cache")
    _file(venv / "lib" / "pkg" / "big.so", os.urandom(64 << 20))  # a walk of 0.1 s or more: past the tick
    record = venv / "lib" / "pkg" / "RECORD"
    soon = time.time_ns() + 20_000_000  # after the walk's horizon, before its end: racy
    os.utime(record, ns=(soon, soon))
    os.link(record, tmp_path / "uv-cache-link")  # shared, so only its being racy keeps it out of the cache
    made = digest.manifest(venv, cache_dir=tmp_path / "cache", jobs=1)
    assert HashCache.open(tmp_path / "cache").get(os.lstat(record)) is None  # it was racy
    assert made.stat is not None and made.stat == Snapshot.taken(venv)  # and read again, vouched for
    # A file stamped later than the walk's end is still in (or after) the tick: no snapshot at all.
    os.utime(record, ns=(time.time_ns() + 10**10, time.time_ns() + 10**10))
    assert digest.manifest(venv, cache_dir=tmp_path / "cache").stat is None
    assert digest.manifest(venv).stat is None  # a walk without the store's cache keeps none


def test_a_torn_snapshot_matches_nothing(tmp_path: Path) -> None:
    venv, made = _store_venv(tmp_path / "v", tmp_path / "cache")
    for torn in ["", made.digest, f"{made.digest} {'0' * 64}", "\0\0"]:
        _kept(venv).write_text(torn)
        assert unchanged(venv, _kept(venv)) is None


def test_without_its_manifest_a_venv_is_not_taken_as_verified(tmp_path: Path) -> None:
    venv, _ = _store_venv(tmp_path / "v", tmp_path / "cache")
    (venv / ".envlock-manifest.json").unlink()
    assert unchanged(venv, _kept(venv)) is None


def test_an_edit_with_its_mtime_set_back_by_hand_is_left_to_verify(tmp_path: Path) -> None:
    """What the snapshot, like the inode hash cache, deliberately trusts; ``envlock verify`` reads
    every byte and finds it."""
    venv, made = _store_venv(tmp_path / "v", tmp_path / "cache")
    target = venv / "lib" / "pkg" / "a.py"
    with open(target, "r+b") as fh:
        fh.write(b"B")
    os.utime(target, (OLD, OLD))
    assert unchanged(venv, _kept(venv)) is not None
    assert digest.manifest(venv, cache_dir=tmp_path / "cache", reuse=False).digest != made.digest


def test_the_store_keeps_a_venvs_snapshot_outside_it_and_drops_it_with_the_venv(tmp_path: Path) -> None:
    from envlock.store.store import Store

    store = Store.open(tmp_path / "home")
    key = "sha256-" + "a" * 64
    venv, made = _store_venv(store.root / "venvs" / key, store.hash_cache)
    keep_snapshot(store.stat_snapshot("venvs", key), made)
    assert store.stat_snapshot("venvs", key).parent == store.hash_cache / "snapshots"
    assert unchanged(venv, store.stat_snapshot("venvs", key)) is not None
    store.remove_entry("venvs", key)
    assert not venv.exists() and not store.stat_snapshot("venvs", key).exists()
