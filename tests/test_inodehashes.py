"""The inode hash cache: hits only for unchanged files, never for racy or normalized ones."""

from __future__ import annotations

import hashlib
import marshal
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlock.install import digest, inodehashes, venvcheck
from envlock.install.inodehashes import HashCache

OLD = 1_600_000_000  # a file time well before any walk in these tests


def _file(path: Path, data: bytes, *, old: bool = True, links: Path | None = None) -> Path:
    """A file; as uv installs it (a second link to it in its cache) when ``links`` is given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if old:
        os.utime(path, (OLD, OLD))
    if links is not None:
        links.mkdir(exist_ok=True)
        os.link(path, links / str(len(list(links.iterdir()))))
    return path


def _venv(root: Path) -> Path:
    uv_cache = root.parent / f"{root.name}-uv-cache"
    _file(root / "pyvenv.cfg", b"home = /opt/py/bin\nversion_info = 3.11.7\n")
    _file(root / "lib" / "pkg" / "a.py", b"A = 1\n", links=uv_cache)
    _file(root / "lib" / "pkg" / "big.so", os.urandom(600_000), links=uv_cache)  # hashed on a thread
    _file(root / "lib" / "pkg" / "self.txt", f"made at {root}\n".encode(), links=uv_cache)  # names the venv
    _file(root / "lib" / "pkg" / "RECORD", b"pkg/a.py,,\n")  # written by uv for this venv: one link
    return root


def test_unchanged_file_is_answered_from_the_cache(tmp_path: Path) -> None:
    f = _file(tmp_path / "f", b"hello\n", links=tmp_path / "links")
    first = HashCache.open(tmp_path / "cache")
    assert first.get(os.lstat(f)) is None
    first.put(os.lstat(f), "digest-of-hello")
    first.save()
    again = HashCache.open(tmp_path / "cache")
    assert again.get(os.lstat(f)) == "digest-of-hello"


def test_a_rewritten_file_misses_even_at_the_same_size(tmp_path: Path) -> None:
    f = _file(tmp_path / "f", b"hello\n", links=tmp_path / "links")
    cache = HashCache.open(tmp_path / "cache")
    cache.put(os.lstat(f), "old")
    cache.save()
    with open(f, "r+b") as fh:  # same inode, same size, new bytes
        fh.write(b"HELLO\n")
    assert HashCache.open(tmp_path / "cache").get(os.lstat(f)) is None


def test_files_changed_since_the_walk_began_are_not_kept(tmp_path: Path) -> None:
    cache = HashCache.open(tmp_path / "cache")
    fresh = _file(tmp_path / "fresh", b"written during the walk\n", old=False, links=tmp_path / "links")
    # The edge: a file stamped in the very tick the walk began, so a later write in that
    # tick would keep its mtime.
    os.utime(fresh, ns=(cache.horizon_ns, cache.horizon_ns))
    cache.put(os.lstat(fresh), "racy")
    older = _file(tmp_path / "older", b"written before\n", old=False, links=tmp_path / "links")
    os.utime(older, ns=(cache.horizon_ns - 1, cache.horizon_ns - 1))
    cache.put(os.lstat(older), "kept")
    # And the horizon is the walk's start, not some later time: a file written now is racy.
    now = _file(tmp_path / "now", b"written now\n", old=False, links=tmp_path / "links")
    cache.put(os.lstat(now), "racy too")
    cache.save()
    again = HashCache.open(tmp_path / "cache")
    assert again.get(os.lstat(fresh)) is None
    assert again.get(os.lstat(older)) == "kept"
    assert again.get(os.lstat(now)) is None


def test_one_cache_file_for_every_interpreter(tmp_path: Path) -> None:
    f = _file(tmp_path / "f", b"x", links=tmp_path / "links")
    cache = HashCache.open(tmp_path / "cache")
    cache.put(os.lstat(f), "d")
    cache.save()
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")) == ["inodes.marshal"]


def test_unreadable_cache_is_an_empty_one(tmp_path: Path) -> None:
    f = _file(tmp_path / "f", b"x", links=tmp_path / "links")
    cache = HashCache.open(tmp_path / "cache")
    cache.put(os.lstat(f), "d")
    cache.save()
    (only,) = (tmp_path / "cache").glob("*.marshal")
    only.write_bytes(b"\x00garbage")
    assert HashCache.open(tmp_path / "cache").get(os.lstat(f)) is None
    # Of our format, but not our values (the first format's, another program's): empty too.
    foreigns: list[Any] = [(2, {os.lstat(f).st_ino: ("d",)}), (1, {(1, 2): (3, 4, "d")}), (2, [])]
    for foreign in foreigns:
        only.write_bytes(marshal.dumps(foreign))
        assert HashCache.open(tmp_path / "cache").get(os.lstat(f)) is None
    # A walk, which looks entries up in its own loop, takes such values as misses too.
    only.write_bytes(marshal.dumps((2, {os.lstat(f).st_ino: ("d",), 5: 7})))
    assert digest.manifest(tmp_path / "links", cache_dir=tmp_path / "cache") == digest.manifest(tmp_path / "links")


def test_walk_with_the_cache_gives_the_same_manifest(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "v")
    plain = digest.manifest(venv)
    cold = digest.manifest(venv, cache_dir=tmp_path / "cache")
    warm = digest.manifest(venv, cache_dir=tmp_path / "cache")
    assert plain == cold == warm
    # The file holding the venv's own path is normalized, so its raw hash is never kept.
    kept = HashCache.open(tmp_path / "cache")
    assert kept.get(os.lstat(venv / "lib" / "pkg" / "a.py")) is not None
    assert kept.get(os.lstat(venv / "lib" / "pkg" / "big.so")) is not None
    assert kept.get(os.lstat(venv / "lib" / "pkg" / "self.txt")) is None
    # A file with one link was written for this venv alone: not kept (a switch back to the venv is
    # answered by its stat snapshot, see test_snapshot.py).
    assert kept.get(os.lstat(venv / "lib" / "pkg" / "RECORD")) is None


def test_a_changed_file_changes_the_digest_with_a_warm_cache(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "v")
    before = digest.manifest(venv, cache_dir=tmp_path / "cache")
    target = venv / "lib" / "pkg" / "a.py"
    with open(target, "r+b") as fh:
        fh.write(b"B")  # "B = 1\n": same size, same inode
    after = digest.manifest(venv, cache_dir=tmp_path / "cache")
    assert after.digest != before.digest
    assert after.entries["lib/pkg/a.py"] == f"f - {hashlib.sha256(b'B = 1' + chr(10).encode()).hexdigest()}"
    assert after == digest.manifest(venv)


def test_verify_reads_every_byte_but_refreshes_the_cache(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "v")
    other = _file(tmp_path / "other" / "kept.py", b"kept\n", links=tmp_path / "links")
    seeded = HashCache.open(tmp_path / "cache")
    seeded.put(os.lstat(other), "entry of another venv")
    # A poisoned entry for a.py: a walk that trusts the cache would take it.
    seeded.put(os.lstat(venv / "lib" / "pkg" / "a.py"), "0" * 64)
    seeded.save()
    trusted = digest.manifest(venv, cache_dir=tmp_path / "cache")
    assert trusted.entries["lib/pkg/a.py"] == "f - " + "0" * 64
    result = venvcheck.check(venv, trusted.digest, trusted, cache_dir=tmp_path / "cache")
    assert not result.ok and result.difference is not None
    assert result.difference.changed == ("lib/pkg/a.py",)
    refreshed = HashCache.open(tmp_path / "cache")
    assert refreshed.get(os.lstat(venv / "lib" / "pkg" / "a.py")) == hashlib.sha256(b"A = 1\n").hexdigest()
    assert refreshed.get(os.lstat(other)) == "entry of another venv"


def test_save_keeps_the_most_recent_unused_entries_up_to_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("envlock.install.inodehashes.KEEP_UNUSED", 2)
    files = [_file(tmp_path / f"f{i}", f"{i}\n".encode(), links=tmp_path / "links") for i in range(5)]
    for f in files[:4]:  # saved one walk at a time: f0 is the least recently used
        cache = HashCache.open(tmp_path / "cache")
        cache.put(os.lstat(f), f"digest-{f.name}")
        cache.save()
    cache = HashCache.open(tmp_path / "cache")
    cache.put(os.lstat(files[4]), "digest-f4")
    cache.save()
    kept = HashCache.open(tmp_path / "cache")
    assert [kept.get(os.lstat(f)) for f in files] == [None, None, "digest-f2", "digest-f3", "digest-f4"]


def test_a_walk_that_finds_only_what_the_cache_holds_does_not_write_it(tmp_path: Path) -> None:
    """A warm sync's walk: the files shared with uv's cache are answered, the venv's own (``RECORD``)
    hashed but not kept, so the cache file is not written again."""
    first, second = _venv(tmp_path / "v1"), _venv(tmp_path / "v2")
    digest.manifest(first, cache_dir=tmp_path / "cache")
    cache_file = tmp_path / "cache" / "inodes.marshal"
    written = os.stat(cache_file)
    again = digest.manifest(first, cache_dir=tmp_path / "cache")
    assert os.stat(cache_file).st_ino == written.st_ino  # not replaced
    assert again == digest.manifest(first)
    digest.manifest(second, cache_dir=tmp_path / "cache")  # new shared files: written
    assert os.stat(cache_file).st_ino != written.st_ino
    kept = HashCache.open(tmp_path / "cache")
    assert kept.get(os.lstat(second / "lib" / "pkg" / "RECORD")) is None
    assert kept.get(os.lstat(first / "lib" / "pkg" / "a.py")) is not None
    assert kept.get(os.lstat(second / "lib" / "pkg" / "a.py")) is not None


def test_a_preloaded_cache_answers_as_one_read_at_open(tmp_path: Path) -> None:
    """``preload`` (while uv installs) reads the file then; the next ``open`` takes those entries
    without reading it again while it is the same file, and takes its racy-clean horizon itself, when
    it is called (after the install); the open after that reads the file again."""
    f = _file(tmp_path / "f", b"hello\n", links=tmp_path / "links")
    cache = HashCache.open(tmp_path / "cache")
    cache.put(os.lstat(f), "digest-of-hello")
    cache.save()
    HashCache.preload(tmp_path / "cache")
    # The same file (inode, size, mtime) holding other bytes: only a read at open would see them.
    saved = tmp_path / "cache" / "inodes.marshal"
    before = os.stat(saved)
    saved.write_bytes(b"\0" * before.st_size)
    os.utime(saved, ns=(before.st_atime_ns, before.st_mtime_ns))
    late = _file(tmp_path / "late", b"written after the preload\n", old=False)
    opened = HashCache.open(tmp_path / "cache")
    assert opened.get(os.lstat(f)) == "digest-of-hello"
    assert opened.horizon_ns >= os.lstat(late).st_mtime_ns  # taken at open, not at preload
    assert HashCache.open(tmp_path / "cache").get(os.lstat(f)) is None  # read again: no preload left


OTHER_WALK_SAVES = """
import os, sys
from pathlib import Path
from envlock.install.inodehashes import HashCache
cache = HashCache.open(Path(sys.argv[1]))
cache.put(os.lstat(sys.argv[2]), "digest-of-g")
cache.save()
"""


def test_a_preload_is_not_taken_once_the_file_was_saved_again(tmp_path: Path) -> None:
    """Another envlock's walk that saves the cache between the preload and the open (a new file,
    ``save``'s atomic write) is not lost: the open reads the file it left."""
    f, g = (_file(tmp_path / n, n.encode(), links=tmp_path / f"links-{n}") for n in ("f", "g"))
    first = HashCache.open(tmp_path / "cache")
    first.put(os.lstat(f), "digest-of-f")
    first.save()
    HashCache.preload(tmp_path / "cache")
    subprocess.run([sys.executable, "-c", OTHER_WALK_SAVES, str(tmp_path / "cache"), str(g)], check=True)
    opened = HashCache.open(tmp_path / "cache")
    assert (opened.get(os.lstat(f)), opened.get(os.lstat(g))) == ("digest-of-f", "digest-of-g")


def test_drop_gone_keeps_the_entries_of_files_still_there_in_their_order(tmp_path: Path) -> None:
    """``envlock gc``'s last step: the entries of files it removed go (each warm sync loads every entry),
    the others stay, most recently used last; a dry run only counts them."""
    files = [_file(tmp_path / f"f{i}", f"{i}\n".encode(), links=tmp_path / "links") for i in range(4)]
    cache = HashCache.open(tmp_path / "cache")
    for f in files:
        cache.put(os.lstat(f), f"digest-{f.name}")
    cache.save()
    saved = tmp_path / "cache" / "inodes.marshal"
    fmt, entries = marshal.loads(saved.read_bytes())
    entries[12345678] = "not this cache's shape"  # a foreign entry: never answered from, dropped too
    saved.write_bytes(marshal.dumps((fmt, entries)))
    gone = os.lstat(files[1])
    files[1].unlink()
    (tmp_path / "links" / "1").unlink()
    live = {(st.st_dev, st.st_ino) for st in map(os.lstat, [files[0], files[2], files[3]])}

    before = saved.read_bytes()
    assert inodehashes.drop_gone(tmp_path / "cache", live, dry_run=True) == 2
    assert saved.read_bytes() == before  # a dry run writes nothing
    assert inodehashes.drop_gone(tmp_path / "cache", live) == 2
    assert list(marshal.loads(saved.read_bytes())[1]) == [os.lstat(f).st_ino for f in (files[0], files[2], files[3])]
    assert gone.st_ino not in marshal.loads(saved.read_bytes())[1]
    kept = HashCache.open(tmp_path / "cache")
    assert [kept.get(os.lstat(f)) for f in (files[0], files[2], files[3])] == ["digest-f0", "digest-f2", "digest-f3"]
    assert inodehashes.drop_gone(tmp_path / "cache", live) == 0  # nothing more to drop
