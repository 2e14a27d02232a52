"""The venv digest: a canonical walk of a venv tree, its manifest, and how two manifests differ.

Each entry of the walk is one line, ``<relative path>\\0<descriptor>``, in sorted
(byte) path order:

* ``d`` a directory; ``l <target>`` a symlink; ``f <x|-> <sha256>`` a file with its
  exec bit and the sha256 of its bytes; ``o`` anything else.
* Before hashing, the venv's own absolute prefix is replaced by ``${VENV}`` (in file
  bytes and symlink targets), and the base interpreter's folder (``home`` in
  ``pyvenv.cfg``) by ``${PYTHON_HOME}`` where uv writes it: in the top-level
  ``pyvenv.cfg`` and in symlink targets, as a whole path only. So one lock gives one
  digest wherever it lives, and a wheel's file that merely mentions, say, ``/usr/bin``
  hashes the same whichever interpreter the venv was made with.
* Left out: ``__pycache__`` folders (Python writes them on import), and top-level
  names starting with ``.envlock`` (envlock's own bookkeeping).

The digest is ``sha256:`` + sha256 over the lines. Files are hashed streaming, in a
thread pool (hashlib releases the GIL on large updates), see docs/reproducibility.md.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envlock import ahead, gcpause
from envlock.install.inodehashes import HashCache, Value
from envlock.store.durable import write_back
from envlock.store.home import MANIFEST_NAME, pyvenv_value  # defined where the no-op reads them

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    # The pool is imported when a big file needs it (concurrent.futures pulls in logging).
    from concurrent.futures import Future, ThreadPoolExecutor

VENV_PLACEHOLDER = b"${VENV}"
PYTHON_HOME_PLACEHOLDER = b"${PYTHON_HOME}"
_CHUNK = 1 << 20
_WHOLE = 4 << 20  # files up to this size are read in one go (most files in a venv)
_BIG = 256 << 10  # files from this size on are hashed on worker threads

#: A file's hash and whether its bytes were free of normalization strings (raw hash = hash).
Hashed = tuple[str, bool]
#: One entry of a walk as its lstat saw it: (path, mode, device, inode, size, mtime) for a file or a
#: symlink, (path, "d") for a folder, (path, "o") for anything else (``Snapshot``).
Row = tuple[str, int, int, int, int, int] | tuple[str, str]


@dataclass(frozen=True)
class Manifest:
    """Every entry of a venv walk (relative path -> descriptor) and the digest over them."""

    digest: str
    entries: Mapping[str, str] = field(repr=False)
    #: The stat snapshot of the walk that made it (``Snapshot``), None when it cannot vouch for it.
    stat: str | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> str:
        # Compact, so the C encoder does the work (any indent falls back to pure Python).
        return json.dumps({"digest": self.digest, "entries": dict(self.entries)}, sort_keys=True,
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        doc = json.loads(text)
        return cls(digest=str(doc["digest"]), entries=dict(doc["entries"]))


@dataclass(frozen=True)
class Difference:
    """Files that differ between an expected and an actual manifest."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def lines(self, limit: int = 50) -> list[str]:
        """Human lines: ``+ path`` added, ``- path`` removed, ``~ path`` changed (at most ``limit``)."""
        out = [f"+ {p}" for p in self.added] + [f"- {p}" for p in self.removed]
        out += [f"~ {p}" for p in self.changed]
        if len(out) > limit:
            out = [*out[:limit], f"... and {len(out) - limit} more"]
        return out


class Snapshot:
    """What a venv's walk saw of each entry's ``lstat``, as one sha256: kept beside the manifest of a
    store venv, so a later sync that reuses the venv (a switch, a rollback) needs ``lstat``s alone.

    A row per entry (``Row``): a file's or a symlink's path, mode, device, inode, size and mtime; a
    folder's path only (Python's ``__pycache__`` folders move its mtime). Equal snapshots mean no
    entry was added, removed or replaced, no mode changed and no file was written to since the walk
    that hashed it: what the inode hash cache vouches for too (``inodehashes``: nobody rewrites a file
    and sets its mtime back by hand), which is all a switch relied on before. ``envlock verify`` never
    answers from it. A file changed in the clock tick its walk began ("racy clean") is read again before
    the walk's snapshot vouches for it (``_Walk.snapshot``).
    """

    @staticmethod
    def of(rows: list[Row]) -> str:
        """The snapshot of a walk's ``rows`` (sorted here)."""
        rows.sort()
        # marshal's version 2 has no references between objects: the same rows, the same bytes.
        return hashlib.sha256(marshal.dumps(rows, 2)).hexdigest()

    @staticmethod
    def taken(venv: Path) -> str:
        """The snapshot of ``venv`` as it is now: one ``lstat`` per entry, no byte read."""
        rows: list[Row] = []
        stack = [("", str(venv.absolute()))]
        regular, folder, link = stat.S_ISREG, stat.S_ISDIR, stat.S_ISLNK
        while stack:
            rel_dir, abs_dir = stack.pop()
            for _, name, rel, st in _listing(rel_dir, abs_dir):
                mode = st.st_mode
                if folder(mode):
                    rows.append((rel, "d"))
                    stack.append((rel, f"{abs_dir}/{name}"))
                elif regular(mode) or link(mode):
                    rows.append((rel, mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
                else:
                    rows.append((rel, "o"))
        return Snapshot.of(rows)

    @staticmethod
    def ahead(venv: str) -> str:
        """``taken`` as work started ahead (``envlock.ahead``, before the venv's store lock is held): the
        folder's identity and its snapshot; "" when the folder was replaced meanwhile (renamed away, built
        anew)."""
        before = os.lstat(venv)
        snapshot = Snapshot.taken(Path(venv))
        after = os.lstat(venv)
        if (before.st_dev, before.st_ino) != (after.st_dev, after.st_ino):
            return ""
        return f"{after.st_dev}:{after.st_ino} {snapshot}"

    @staticmethod
    def taken_now(venv: Path) -> str:
        """``taken``; or the one taken ahead for this folder by the console script (``ahead``), when the
        folder is still the one it walked. The store entry's lock is held by now (``install``), so no
        envlock replaces it until the snapshot is used; a folder replaced before is another inode."""
        answer = ahead.take(venv.name)
        if answer:
            identity, _, snapshot = answer.partition(" ")
            try:
                st = os.lstat(venv)
            except OSError:
                return Snapshot.taken(venv)
            if identity == f"{st.st_dev}:{st.st_ino}":
                return snapshot
        return Snapshot.taken(venv)


def keep_snapshot(path: Path, made: Manifest) -> None:
    """Record ``made`` (a walk of a store venv, with the digest it was built with) and its stat snapshot
    in file ``path`` (``Store.stat_snapshot``), for the next ``unchanged``; nothing when the walk gave
    no snapshot.

    Not synced: a snapshot lost or torn in a crash matches nothing, and the next reuse walks in full.
    """
    if made.stat is None:
        return
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp.write_text(f"{made.digest} {made.stat}\n", encoding="utf-8")
        os.replace(temp, path)
    except OSError:  # a store we cannot write to: reuses walk in full
        temp.unlink(missing_ok=True)


def unchanged(venv: Path, snapshot_file: Path, digest: str | None = None) -> Manifest | None:
    """Store venv ``venv``'s manifest (its entries read on first use) when the stat snapshot in
    ``snapshot_file`` still holds (``snapshot_holds``), and it records ``digest`` when one is given; else
    None, and only a full walk can tell what the venv holds."""
    if not (venv / MANIFEST_NAME).is_file():
        return None
    held = snapshot_holds(venv, snapshot_file, digest)
    return None if held is None else Manifest(held[0], _StoredEntries(venv / MANIFEST_NAME, held[0]), held[1])


def snapshot_holds(tree: Path, snapshot_file: Path, digest: str | None = None) -> tuple[str, str] | None:
    """The digest and the stat snapshot kept in ``snapshot_file`` (``keep_snapshot``) when ``tree``'s
    snapshot still is that one (``Snapshot``), of ``digest`` when one is given; else None."""
    try:
        recorded, _, snapshot = snapshot_file.read_text(encoding="utf-8").strip().partition(" ")
    except (OSError, ValueError):
        return None
    if not snapshot or (digest is not None and recorded != digest) or Snapshot.taken_now(tree) != snapshot:
        return None
    return recorded, snapshot


class _StoredEntries(Mapping[str, str]):
    """A store venv's manifest entries, read from its manifest file on first use (a switch that finds
    the venv as verified needs its digest alone; the entries list the files of a difference)."""

    def __init__(self, path: Path, digest: str) -> None:
        self._path, self._digest = path, digest
        self._entries: Mapping[str, str] | None = None

    def _loaded(self) -> Mapping[str, str]:
        if self._entries is None:
            found = load_manifest(self._path)
            self._entries = found.entries if found is not None and found.digest == self._digest else {}
        return self._entries

    def __getitem__(self, name: str) -> str:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())


def _listing(rel_dir: str, abs_dir: str) -> Iterator[tuple[int, str, str, os.stat_result]]:
    """Each entry of venv folder ``abs_dir`` (``rel_dir`` in the venv) that the digest covers (not
    ``__pycache__``, not a top-level ``.envlock`` name), with its ``lstat``: the folder's open
    descriptor (each lstat resolves one name, not the whole path), the entry's name, its path in the
    venv and its lstat. Names and one ``fstatat`` each: cheaper in CPython than ``os.scandir``'s
    entries, whose file type spares only the folders' lstats (a few hundred of a venv's thousands)."""
    fd = os.open(abs_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        prefix = f"{rel_dir}/" if rel_dir else ""
        lstat = os.stat
        for name in os.listdir(fd):
            if name == "__pycache__" or (not rel_dir and name.startswith(".envlock")):
                continue
            yield fd, name, prefix + name, lstat(name, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def python_home(venv: Path) -> str | None:
    """The ``home`` key of ``venv/pyvenv.cfg`` (the base interpreter's folder), if any."""
    return pyvenv_value(venv, "home")


_WRITABLE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
_USER_EXEC = stat.S_IXUSR
_NEVER = 1 << 64  # the horizon of a walk that keeps no snapshot: no file is racy for it


def manifest(venv: Path, *, prefix: Path | None = None, jobs: int | None = None,
             cache_dir: Path | None = None, reuse: bool = True, seal: bool = False,
             flush: bool = False) -> Manifest:
    """Walk ``venv`` and return its manifest and digest.

    ``prefix`` is the absolute path the venv is known by (default: ``venv`` itself);
    it is what gets normalized to ``${VENV}``. ``jobs``: hashing threads (default:
    one per core). ``cache_dir``: the store's inode hash cache (see ``envlock.install.inodehashes``),
    answered from when ``reuse``, refreshed either way. ``seal``: make every file
    read-only on the way (a new store venv; the mode's write bits are not in the digest).
    ``flush`` (a new store venv): every file read is written back (``durable.write_back``) before
    the cache records it, so what the cache answers for is on the device (hashcache.py).
    """
    root = venv.absolute()
    cache = HashCache.open(cache_dir, reuse=reuse) if cache_dir is not None else None
    # Files are searched for the venv's own path only: the interpreter's folder can be
    # as common a string as /usr/bin, which a wheel's file may well hold.
    known_as = prefix.absolute() if prefix else root
    walk = _Walk(needles=_needles(known_as, None), where_uv_writes=_needles(known_as, python_home(root)),
                 known=cache.answers() if cache is not None else {}, seal=seal,
                 threads=jobs or os.cpu_count() or 1, horizon=cache.horizon_ns if cache is not None else _NEVER)
    try:
        stack = [("", str(root))]
        with gcpause.paused():  # a row and an entry per file, no cycle (gcpause)
            while stack:
                stack += walk.folder(*stack.pop())
        walk.hash_the_rest(cache)
        if cache is not None:
            cache.answered(walk.used)
    finally:
        if walk.pool is not None:
            walk.pool.shutdown(cancel_futures=True)
    if flush:
        write_back(walk.read)
    if cache is not None:
        cache.save()
    # One sort for the three orders after it (the digest's lines, the snapshot's rows, the manifest's JSON
    # keys), each then a sort of sorted data: the entries in path order, as their rows (one per entry).
    walk.rows.sort()
    entries = {row[0]: walk.entries[row[0]] for row in walk.rows}
    assert len(entries) == len(walk.entries)
    return Manifest(digest_of(entries), entries, walk.snapshot(root, cache) if cache is not None else None)


@dataclass
class _Walk:
    """One walk of a venv: its entries so far, and the files still to hash."""

    needles: list[tuple[bytes, bytes]]  # what is normalized in file bytes
    where_uv_writes: list[tuple[bytes, bytes]]  # what is normalized in pyvenv.cfg and link targets
    known: Mapping[int, Value]  # what the inode hash cache answers from (``HashCache.answers``)
    seal: bool  # make every file read-only on the way
    threads: int
    entries: dict[str, str] = field(default_factory=dict)
    small: list[tuple[str, str, str, os.stat_result]] = field(default_factory=list)  # (rel, abs, exec flag, lstat)
    hashed: list[tuple[str, str, os.stat_result, Future[Hashed] | Hashed]] = field(default_factory=list)
    read: list[str] = field(default_factory=list)  # files read whole (not answered from the cache)
    rows: list[Row] = field(default_factory=list)  # what each entry's lstat said (``Snapshot``)
    horizon: int = 0  # the hash cache's: a file with an mtime from then on is racy (``snapshot``)
    racy: list[Row] = field(default_factory=list)
    used: list[int] = field(default_factory=list)  # the inodes the cache answered for (``HashCache.save``)
    pool: ThreadPoolExecutor | None = None

    def folder(self, rel_dir: str, abs_dir: str) -> list[tuple[str, str]]:
        """Enter every name of one folder of the venv; the folders in it, to walk next.

        Inlined and files tested first: this runs once per file of a venv (tens of
        thousands for a CUDA stack), so every call per entry shows. Folders are read
        through a descriptor, so each lstat resolves one name, not the whole path.
        (Spreading the walk over threads or forked processes was tried: the per-file
        interpreter work holds the GIL, and forked walkers gained nothing measurable.)
        """
        entries, small, read, seal, rows = self.entries, self.small, self.read, self.seal, self.rows
        horizon, racy, used = self.horizon, self.racy, self.used
        known_get = self.known.get
        regular, is_dir, is_link = stat.S_ISREG, stat.S_ISDIR, stat.S_ISLNK
        folders: list[tuple[str, str]] = []
        for fd, name, rel, st in _listing(rel_dir, abs_dir):
            mode = st.st_mode
            if regular(mode):
                exe = "x" if mode & _USER_EXEC else "-"
                if seal and mode & _WRITABLE:
                    # chmod moves the ctime only: the hash cache's key still holds.
                    mode &= ~_WRITABLE
                    os.chmod(name, stat.S_IMODE(mode), dir_fd=fd)
                dev, ino, size, mtime = st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
                row = (rel, mode, dev, ino, size, mtime)
                rows.append(row)
                if mtime >= horizon:
                    racy.append(row)
                if rel == "pyvenv.cfg":  # the one file uv writes the interpreter's folder into
                    entries[rel] = f"f {exe} {_hash_pyvenv_cfg(f'{abs_dir}/{name}', self.where_uv_writes)}"
                    read.append(f"{abs_dir}/{name}")
                    continue
                # The inode hash cache's answer (``HashCache.get``), inlined: one per file.
                hit = known_get(ino)
                try:
                    hit = hit if hit[2] == mtime and hit[1] == size and hit[0] == dev else None  # type: ignore[index]
                except (TypeError, IndexError):  # none, or not what the cache writes: a miss
                    hit = None
                if hit is not None:
                    entries[rel] = f"f {exe} {hit[3]}"
                    used.append(ino)
                elif size >= _BIG and self.threads > 1:
                    self.hash_on_a_thread(rel, exe, st, f"{abs_dir}/{name}")
                else:
                    small.append((rel, f"{abs_dir}/{name}", exe, st))
            elif is_dir(mode):
                entries[rel] = "d"
                rows.append((rel, "d"))
                folders.append((rel, f"{abs_dir}/{name}"))
            elif is_link(mode):
                target = _normalize_paths(os.fsencode(os.readlink(name, dir_fd=fd)), self.where_uv_writes)
                entries[rel] = "l " + os.fsdecode(target)
                row = (rel, mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                rows.append(row)
                if row[5] >= horizon:
                    racy.append(row)
            else:
                entries[rel] = "o"
                rows.append((rel, "o"))
        return folders

    def hash_on_a_thread(self, rel: str, exe: str, st: os.stat_result, path: str) -> None:
        """Hash a big file on the pool at once (hashlib and os.read release the GIL on big buffers);
        the pool (and its import) only if needed."""
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(max_workers=self.threads)
        self.hashed.append((rel, exe, st, self.pool.submit(_hash_file, path, self.needles)))
        self.read.append(path)

    def snapshot(self, root: Path, cache: HashCache) -> str | None:
        """The walk's ``Snapshot``, or None when it cannot vouch for every row: a file changed in the
        clock tick the walk began ("racy": a later write in that tick keeps its mtime, as the last
        ``RECORD`` an install edits before its walk) is read again once that tick has passed, and
        vouched for only with the bytes and the ``lstat`` the walk found."""
        if self.racy:
            later = cache.now_ns()
            for row in self.racy:
                rel = row[0]
                st = os.lstat(root / rel)
                if ((st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != row[1:]
                        or st.st_mtime_ns >= later or not stat.S_ISREG(st.st_mode)):
                    return None
                path = str(root / rel)
                again = (_hash_pyvenv_cfg(path, self.where_uv_writes) if rel == "pyvenv.cfg"
                         else _hash_file(path, self.needles)[0])
                if not self.entries[rel].endswith(f" {again}"):
                    return None
        return Snapshot.of(self.rows)

    def hash_the_rest(self, cache: HashCache | None) -> None:
        """Hash the files the walk left (the small ones here, the big ones' threads waited for) into
        ``entries``; the cache learns each file that held no path to normalize."""
        # The many small files are hashed on this thread, not the pool: their cost is
        # system calls, which a pool's hand-offs would only add to.
        for rel, path, exe, st in self.small:
            self.hashed.append((rel, exe, st, _hash_small(path, st.st_size, self.needles)))
            self.read.append(path)
        for rel, exe, st, done in self.hashed:
            digest, clean = done if isinstance(done, tuple) else done.result()
            self.entries[rel] = f"f {exe} {digest}"
            if clean and cache is not None:
                cache.put(st, digest)


def digest_of(entries: Mapping[str, str]) -> str:
    """The venv digest over a manifest's entries: one line per entry, sorted by the path's bytes."""
    # UTF-8 keeps code point order, so for the usual all-ASCII-or-UTF-8 names sorting the
    # strings is sorting their bytes; names holding undecodable bytes (surrogate escapes)
    # are sorted by their bytes explicitly. (Pairs sort by their names: no two are equal.)
    items = sorted(entries.items())
    if not "".join(entries).isascii():
        items.sort(key=lambda item: os.fsencode(item[0]))
    text = "\n".join(map("\0".join, items)) + "\n" if items else ""
    if text.count("\n") != len(items):  # a name or a symlink target holds a newline (never in uv's venvs)
        text = "".join(_line(name, descriptor) for name, descriptor in items)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _line(name: str, descriptor: str) -> str:
    """One entry's line: ``name\\0descriptor\\n``, or, when either holds a newline, both length-prefixed.

    A name holds no NUL, so a line is read up to its NUL and then its newline, unless
    a newline sits inside the name or a symlink target: then one tree's lines could
    spell another's (a target's newline moved into the next name). Such an entry is
    written ``\\0<len>:<name>\\0<len>:<descriptor>\\n``; no name starts with NUL, so
    the two forms cannot be confused, and every other venv keeps its digest.
    """
    if "\n" in name or "\n" in descriptor:
        return f"\0{len(name)}:{name}\0{len(descriptor)}:{descriptor}\n"
    return f"{name}\0{descriptor}\n"


def compare(expected: Mapping[str, str], actual: Mapping[str, str]) -> Difference:
    """Which paths were added, removed or changed going from ``expected`` to ``actual``."""
    return Difference(
        added=tuple(sorted(set(actual) - set(expected))),
        removed=tuple(sorted(set(expected) - set(actual))),
        changed=tuple(sorted(p for p in set(expected) & set(actual) if expected[p] != actual[p])),
    )


def _needles(prefix: Path, home: str | None) -> list[tuple[bytes, bytes]]:
    pairs = [(os.fsencode(str(prefix)), VENV_PLACEHOLDER)]
    if home:
        pairs.append((os.fsencode(home.rstrip("/")), PYTHON_HOME_PLACEHOLDER))
    # Longest first, so a prefix nested in another is not replaced piecemeal.
    return sorted((p for p in pairs if len(p[0]) > 1), key=lambda p: -len(p[0]))


def _normalize(data: bytes, needles: Iterable[tuple[bytes, bytes]]) -> bytes:
    for needle, placeholder in needles:
        if needle in data:
            data = data.replace(needle, placeholder)
    return data


def _normalize_paths(data: bytes, needles: Iterable[tuple[bytes, bytes]]) -> bytes:
    """``data`` with each needle replaced where it is a whole path: followed by ``/``, white space or the end."""
    import re

    for needle, placeholder in needles:
        if needle in data:
            # The placeholders hold no backslash, so they are literal replacement templates.
            data = re.sub(re.escape(needle) + rb"(?=/|\s|$)", placeholder, data)
    return data


def _hash_pyvenv_cfg(path: str, needles: Iterable[tuple[bytes, bytes]]) -> str:
    """sha256 of the venv's ``pyvenv.cfg`` with its paths normalized (``home = ${PYTHON_HOME}``)."""
    with open(path, "rb") as fh:
        return hashlib.sha256(_normalize_paths(fh.read(), needles)).hexdigest()


def _hash_small(path: str, size: int, needles: list[tuple[bytes, bytes]]) -> Hashed:
    """sha256 of a small file's normalized bytes: one open, (usually) one read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, size + 1)
        if len(data) > size:  # it grew since the walk: read the rest, streaming if large
            os.close(fd)
            fd = -1
            return _hash_file(path, needles)
    finally:
        if fd >= 0:
            os.close(fd)
    normalized = _normalize(data, needles)
    return hashlib.sha256(normalized).hexdigest(), normalized is data


def _hash_file(path: str, needles: list[tuple[bytes, bytes]]) -> Hashed:
    """sha256 of a file's normalized bytes: whole up to ``_WHOLE``, else streamed.

    Reads go into one reused buffer per thread: a fresh multi-MB ``bytes`` per read
    costs a page fault per 4 KiB, which made hashing twice as slow as sha256 itself.
    """
    keep = max((len(n) for n, _ in needles), default=1) - 1
    buf = _buffer(max(_WHOLE + 1, keep + _CHUNK))
    view = memoryview(buf)
    h = hashlib.sha256()
    clean = True
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        have = os.readv(fd, [view[: _WHOLE + 1]])
        if have <= _WHOLE:
            if _found(buf, have, needles):
                h.update(_normalize(bytes(view[:have]), needles))
                clean = False
            else:
                h.update(view[:have])
            return h.hexdigest(), clean
        # Streaming: keep the last (longest needle - 1) normalized bytes back, so a
        # prefix that straddles two chunks is still seen whole.
        while True:
            if _found(buf, have, needles):
                clean = False
                data = _normalize(bytes(view[:have]), needles)
                cut = max(len(data) - keep, 0)
                h.update(data[:cut])
                have = len(data) - cut
                buf[:have] = data[cut:]
            elif have > keep:
                cut = have - keep
                h.update(view[:cut])
                buf[:keep] = buf[cut:have]
                have = keep
            n = os.readv(fd, [view[have : have + _CHUNK]])
            if not n:
                break
            have += n
        h.update(view[:have])
    finally:
        os.close(fd)
    return h.hexdigest(), clean


_local = threading.local()


def _buffer(size: int) -> bytearray:
    """This thread's read buffer, at least ``size`` bytes."""
    buf: bytearray | None = getattr(_local, "buf", None)
    if buf is None or len(buf) < size:
        buf = _local.buf = bytearray(size)
    return buf


def _found(buf: bytearray, end: int, needles: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(buf.find(needle, 0, end) >= 0 for needle, _ in needles)


def stored_manifest(venv: Path) -> Manifest | None:
    """The manifest recorded in a store venv when it was built, or None if it is not a complete entry."""
    return load_manifest(venv / MANIFEST_NAME)


def recorded_manifest(saved: Path, digest: str, venv: Path | None = None) -> Manifest | None:
    """The manifest of ``digest``: the store's copy at ``saved`` (``manifests/<digest>``), else the
    one ``venv`` keeps inside it when it has that digest; None when neither is there."""
    for found in (load_manifest(saved), stored_manifest(venv) if venv is not None else None):
        if found is not None and found.digest == digest:
            return found
    return None


def differing_lines(reference: Manifest | None, actual: Manifest, digest: str) -> list[str]:
    """The files ``actual`` changes from ``reference`` (the manifest of ``digest``), or a line saying
    no manifest of ``digest`` is at hand to list them."""
    if reference is None:
        return [f"(no manifest of {digest} in this store to list files)"]
    return compare(reference.entries, actual.entries).lines()


def load_manifest(path: Path) -> Manifest | None:
    """Read a stored manifest, or None when it is missing or unreadable."""
    try:
        return Manifest.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError):
        return None
