"""Bytes on the device before a rename publishes them: ``fsync`` of a file, a folder or a tree
(one ``syncfs(2)`` for a big one), and the writeback of many files at once (``sync_file_range(2)``).

``envlock.store.store`` publishes its entries and writes files atomically with these; an install
(``written_back``, ``write_back``) and a generation (``sync_tree``) too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def sync_file(path: Path | str) -> None:
    """Make the bytes written to file ``path`` durable (before a rename publishes it)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path | str) -> None:
    """Make the names in folder ``path`` durable (a rename into it, a new entry)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: Up to this many files, an entry is synced file by file; above it (a venv), by one ``syncfs``.
_FSYNC_FILES = 256


#: Folders of ``new_entry`` blocks whose files' bytes the block wrote back itself (``written_back``).
_WRITTEN_BACK: set[str] = set()


def written_back(work: Path) -> None:
    """Say that every file under ``work`` (a ``new_entry`` block's folder) has its bytes on the
    device: written back with ``write_back`` by the block, or a hard link to a file of an entry
    published before (synced then). ``new_entry`` then ``fsync``s the folder alone before its rename
    (the device's cache flushed once, the folder's names with it) instead of syncing the tree: a
    ``syncfs(2)`` writes every dirty byte of the file system, other programs' too, hundreds of MB on
    a busy machine. The tree's other names and modes are metadata, which the file system's journal
    orders before the rename (ext4, XFS, btrfs)."""
    _WRITTEN_BACK.add(str(work))


def sync_before_rename(work: Path) -> None:
    """``work``'s bytes on disk before the rename that publishes it (see ``written_back``)."""
    if str(work) in _WRITTEN_BACK:
        _WRITTEN_BACK.discard(str(work))
        fsync_dir(work)
    else:
        sync_tree(work)


def forget(work: Path) -> None:
    """Drop what ``written_back`` said of ``work`` (its block ended, published or not)."""
    _WRITTEN_BACK.discard(str(work))


#: sync_file_range(2) flags: start the writeback; wait for earlier writeback, write, wait for it.
_SFR_WRITE = 2
_SFR_WAIT = 1 | 2 | 4


def write_back(paths: Sequence[str]) -> None:
    """Put the bytes of each file in ``paths`` on the device: on Linux by ``sync_file_range(2)``,
    every file's writeback started, then each waited for (no cache flush per file, as an ``fsync``
    each would send: the ``fsync`` that follows, of any file or folder of the file system, flushes
    the device's cache once); elsewhere an ``fsync`` each."""
    call = _sync_file_range()
    if call is None:
        for path in paths:
            sync_file(path)
        return
    for flags in (_SFR_WRITE, _SFR_WAIT):
        for path in paths:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                if call(fd, 0, 0, flags) != 0:
                    os.fsync(fd)  # refused (a file system without it): the sure way
            finally:
                os.close(fd)


def prepare_write_back() -> None:
    """Load what ``write_back`` calls (``ctypes`` and libc's ``sync_file_range``: 2-9 ms) now: called
    while uv installs (``runner.run``'s ``meanwhile``), a new venv's walk does not wait for it."""
    _sync_file_range()


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range``, or None (not Linux); looked up once per process."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


def sync_tree(path: Path) -> None:
    """Make everything written under ``path`` durable before a rename publishes it: an ``fsync`` of
    every file and folder, or for a big tree (a venv of 20,000 files) the file system's
    ``syncfs(2)``, one call, where there is one."""
    if _more_files_than(path, _FSYNC_FILES) and _syncfs(path):
        return
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a symlink (O_NOFOLLOW), a socket: no data to sync
                fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(folder)


def _more_files_than(path: Path, limit: int) -> bool:
    """Whether the tree holds more than ``limit`` files; stops counting there (a venv of 20,000
    files is not walked twice: the sync that follows reads no listing)."""
    seen = 0
    for _, _, files in os.walk(path):
        seen += len(files)
        if seen > limit:
            return True
    return False


def _syncfs(path: Path) -> bool:
    """``syncfs(2)`` on ``path``'s file system; False where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return bool(ctypes.CDLL(None, use_errno=True).syncfs(fd) == 0)
    except (OSError, AttributeError):
        return False
    finally:
        os.close(fd)
