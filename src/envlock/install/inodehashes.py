"""A git-index-like cache of file hashes by inode, so a new venv is not re-read byte for byte.

uv installs a wheel's files as hard links to its unpacked cache copy (when the uv
cache and the store share a file system). So most files of a new venv are inodes an
earlier walk already hashed: re-reading them (GBs for a CUDA stack) is what made a
warm sync several times slower than uv itself. The cache maps an inode to the
sha256 of its bytes, together with the size and mtime it had when it was hashed:

    st_ino -> (st_dev, st_size, st_mtime_ns, sha256 hex)

A hit needs all four to match the file's ``lstat`` now. Writing a file's content
always sets its mtime to the current time, so a changed file misses. The one way
this could be fooled is a write within the same clock tick as the hash (same
mtime), which git calls "racy clean"; it is handled like git does: an entry is kept
only when the file's mtime is strictly older than a marker file written in the
cache's folder just before the walk, whose mtime comes from the same file system
clock, at whatever granularity the file system has. What is deliberately trusted:
that nobody rewrites a file and then sets its mtime back by hand (``touch -d``).
``envlock verify`` therefore never answers from the cache (it reads every byte);
it only refreshes it.

Kept are the files shared with uv's cache (more than one link) whose bytes held none of
the walk's normalization strings, so the cached hash is both the raw and the normalized one.
A file with one link (``RECORD``, ``INSTALLER``: written for one venv alone) is not kept: no other
venv shares it, and a switch back to its venv is answered by that venv's stat snapshot
(``digest.unchanged``), not by this cache. The walk searches a file's bytes for one string only, the
venv's own path ``…/venvs/sha256-<install digest hex>``, which cannot occur in a wheel's file: that
digest hashes the lock that names the wheel's own sha256. (The interpreter's folder is normalized
in ``pyvenv.cfg`` and symlinks, which are never cached.) So one cache serves every interpreter.

An entry also vouches that the file's bytes are on the device: the walk of a new venv writes
back every file it reads before it saves the cache (``digest.manifest(flush=True)``), and the
other walks read venvs published already (synced before). So a new venv's durability needs
nothing more for the files the cache answers for (``durable.written_back``).

The cache is an optimization only: a missing, unreadable or foreign file is an empty
cache, and concurrent writers may lose each other's new entries (the next walk
re-hashes them), never corrupt them (the file is replaced atomically).
"""

from __future__ import annotations

import contextlib
import marshal
import os
from collections.abc import Container, Mapping
from pathlib import Path

#: Entries not used by the walk that saves are kept up to this many (the most recent).
KEEP_UNUSED = 200_000
_FORMAT = 2


#: What the cache holds of a file: (device, size, mtime, sha256 hex), by its inode number.
Value = tuple[int, int, int, str]


class HashCache:
    """File hashes by inode for one base interpreter; see the module docstring.

    Used from one thread (the walk's), so it takes no lock.
    """

    def __init__(self, path: Path, entries: dict[int, Value], horizon_ns: int, *, reuse: bool) -> None:
        self.path = path
        self._old = entries
        self._used: list[int] = []
        self._new: dict[int, Value] = {}
        #: "Now" on the file system's clock when the walk began: a file changed since may have
        #: changed in the same clock tick as it was read (``put``, ``digest.Snapshot``).
        self.horizon_ns = horizon_ns
        self._reuse = reuse

    @classmethod
    def open(cls, folder: Path, *, reuse: bool = True) -> HashCache:
        """Load the cache from ``folder`` (or take what ``preload`` read of it) and take the racy-clean
        horizon now.

        ``reuse=False`` (``verify``): never answer from the cache, only record.
        """
        path = folder / "inodes.marshal"
        preloaded = _PRELOADS.pop(str(folder), None)
        # Loaded also when not answered from: saving keeps the other venvs' entries. Read now when
        # nothing was preloaded, or the file was saved again since (another envlock's walk).
        entries = preloaded[1] if preloaded is not None and preloaded[0] == _version(path) else _read(path)
        return cls(path, entries, _touch(folder / f".horizon-{os.getpid()}"), reuse=reuse)

    @staticmethod
    def preload(folder: Path) -> None:
        """Read the cache of ``folder`` now, for the next ``open`` of it to take while the file is still
        the one read (saved again since, it is read again): called while uv installs (``runner.run``'s
        ``meanwhile``), a new venv's walk does not wait for it (~8 ms for 20k entries). The file is
        read, nothing more: the horizon is still taken by ``open``, just before the walk."""
        path = folder / "inodes.marshal"
        version = _version(path)
        _PRELOADS[str(folder)] = (version, _read(path) if version is not None else {})

    def now_ns(self) -> int:
        """"Now" on the file system's clock, as the horizon was taken (0 when it cannot be told)."""
        return _touch(self.path.parent / f".horizon-{os.getpid()}")

    def answers(self) -> Mapping[int, Value]:
        """What a walk answers from, by inode (as ``get``, inlined in its loop; a hit is the caller's to
        say, ``answered``): nothing when not reused. Values of another shape are the caller's to skip."""
        return self._old if self._reuse else {}

    def answered(self, inodes: list[int]) -> None:
        """Say which entries of ``answers`` a walk used (they are kept as recent)."""
        self._used += inodes

    def get(self, st: os.stat_result) -> str | None:
        """The cached sha256 of the file with this ``lstat``, or None."""
        if not self._reuse:
            return None
        found = self._old.get(st.st_ino)
        try:
            if found is None or found[0] != st.st_dev or found[1] != st.st_size or found[2] != st.st_mtime_ns:
                return None
            digest = found[3]
        except (TypeError, IndexError, KeyError):  # not what this cache writes: as good as no entry
            return None
        if type(digest) is not str:
            return None
        self._used.append(st.st_ino)
        return digest

    def put(self, st: os.stat_result, digest: str) -> None:
        """Remember ``digest`` for the file with this ``lstat`` (taken before it was read).

        Not kept when the file changed too recently to tell a later same-tick write apart, nor
        when it has one link (the module docstring).
        """
        if st.st_mtime_ns < self.horizon_ns and st.st_nlink > 1:
            value = (st.st_dev, st.st_size, st.st_mtime_ns, digest)
            if self._old.get(st.st_ino) != value:
                self._new[st.st_ino] = value

    def save(self) -> None:
        """Write the entries used or made by this walk, plus older ones up to ``KEEP_UNUSED``.

        Nothing is written when the walk made no entry the file lacks (a walk that only found
        what the cache holds, as a warm sync's of files shared with uv's cache).
        """
        if not self._new:
            return
        # Oldest first: entries are saved in the order they were last used or made, so
        # trimming the front of the unused ones keeps the most recently useful.
        used = dict.fromkeys(self._used)
        unused = [(k, v) for k, v in self._old.items() if k not in used and k not in self._new]
        merged = dict(unused[max(0, len(unused) - KEEP_UNUSED):])
        merged.update((k, self._old[k]) for k in used if k not in self._new)
        merged.update(self._new)
        from envlock.store.store import write_atomic

        # A cache that cannot be written only costs the next walk its hits.
        with contextlib.suppress(OSError):
            write_atomic(self.path, marshal.dumps((_FORMAT, merged)))


def drop_gone(folder: Path, live: Container[tuple[int, int]], *, dry_run: bool = False) -> int:
    """Drop from the cache of ``folder`` the entries of files no longer there: those whose (device,
    inode) is not in ``live`` (``envlock gc``: every file the store still holds); how many (``dry_run``:
    would go, nothing written). ``save`` keeps unused entries up to ``KEEP_UNUSED``, as they may serve
    a venv of another lock; one of a file removed since serves none, and each warm sync loads them
    all (~1 ms per 1,000 entries). The others keep their order (most recently useful last)."""
    path = folder / "inodes.marshal"
    entries = _read(path)
    kept = {ino: value for ino, value in entries.items()
            if isinstance(value, tuple) and len(value) == 4 and (value[0], ino) in live}
    if len(kept) < len(entries) and not dry_run:
        from envlock.store.store import write_atomic

        write_atomic(path, marshal.dumps((_FORMAT, kept)))
    return len(entries) - len(kept)


#: The caches ``HashCache.preload`` read, by folder: the file's version (``_version``) and its
#: entries, for the next ``open`` to take.
_PRELOADS: dict[str, tuple[tuple[int, int, int] | None, dict[int, Value]]] = {}


def _version(path: Path) -> tuple[int, int, int] | None:
    """Which file ``path`` is (inode, size, mtime): ``save`` replaces it whole (a new inode); None: none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _read(path: Path) -> dict[int, Value]:
    """The entries of the cache file ``path``; none when it is missing, unreadable or foreign."""
    try:
        data = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if isinstance(data, tuple) and len(data) == 2 and data[0] == _FORMAT and isinstance(data[1], dict):
        return data[1]
    return {}


def _touch(marker: Path) -> int:
    """Write ``marker`` and return its mtime: "now" on the file system's own clock and granularity."""
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, b"\n")
            horizon = os.fstat(fd).st_mtime_ns
        finally:
            os.close(fd)
        os.unlink(marker)
        return horizon
    except OSError:
        return 0  # nothing can be told apart: keep no entry
