"""The content-addressed store under ``$ENVLOCK_HOME``.

Entries are immutable: each is written under ``tmp/`` and renamed into place in
one step, so a reader sees either nothing or a complete entry, and a killed
writer leaves only litter under ``tmp/`` (cleared on the next open). The one
addition ever made to a complete entry is another name for the same bytes in a
``wheels/<sha256>/`` (a hard link: it too appears complete or not at all).

Layout (version 1)::

    $ENVLOCK_HOME/
      layout                 "1"
      v1/
        wheels/<sha256>/<filename>       downloaded artifacts, by sha256
        sources/<kind>/<digest>/         fetched or patched source trees
        builds/<input digest>/<wheel>    locally built wheels, by input digest
        venvs/sha256-<hex>/              installed venvs, by lock install digest (no ':', see install.venv_entry)
        manifests/<venv digest>          per-file manifest of a venv (to list differing files)
        hashes/inodes.marshal            inode -> sha256 of files already hashed (a cache, see install/inodehashes.py)
        hashes/snapshots/<venv entry>    a venv's stat snapshot when last verified (install/digest.py)
        hashes/snapshots/skeletons-<key> a skeleton's, likewise
        hashes/venv-of-lock/<sha256>     the venv a lock file's bytes were last synced to (store/noop.py)
        skeletons/<key>/                 the empty venv uv made for one interpreter, linked into new venvs
        envs/<name>/                     generations and the stable ``current`` link
        locks/<name>.lock                flock files serializing writers of one entry
                                         (``store-writer.lock``: held shared by every sync, exclusively by gc)
        pins/<env>/<sha256>.toml         locks kept by ``envlock pin`` (gc roots), with a ``.json`` label
        tmp/                             work in progress; never read
        listings/<wheel sha256>.json     what a wheel installs and requires, as read once (wheelfiles.py)
        kernels/<wheel sha256>.json      the ELF files of a wheel and their GPU kernels, as read once (gpu/binaries.py)
        guards/<key>.json                a set of locked wheels the lock's guards found clean (guards.py)
        uvruns/<sha256 of lock path>.json  what uv was handed last for that lock, started ahead on a relock (uvahead.py)
        urls/<sha256 of URL>             what a URL whose index publishes no hash held when last hashed,
                                         and the ETags (else Last-Modified) it answered with for it
        uv-cache/                        the uv cache venvs are installed from (their files are its files)
        tmp/partial/<sha256>.part        interrupted downloads, resumed with HTTP Range
        tmp/partial/url-<sha256 of URL>.part  a download being hashed (never resumed)
        tmp/<label>-slot<N>/             reused build folders, each held under locks/slot-<label>-<N>.lock

Work directories under ``tmp/`` carry their writer's pid; ``Store.open`` removes
those whose writer is gone (a killed sync), and keeps ``tmp/partial/`` for resuming.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import FetchError, StoreError, folder_expected, raise_all
from envlock.store import home as store_home
from envlock.store.durable import forget, fsync_dir, sync_before_rename, sync_file

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from envlock.model.lockfile import Artifact  # a type name only: the lock's parser is not needed here

LAYOUT_VERSION = 1
#: The kinds of immutable entries (``gc`` collects these, ``export`` carries them; and gc the
#: unpacked ``toolchains``, which export leaves out: they are unpacked again from their wheels).
ENTRY_KINDS = ("wheels", "builds", "sources", "git-mirrors", "venvs", "manifests")
GC_KINDS = (*ENTRY_KINDS, "toolchains")
#: Fixed mtime for store wheels and their folders: the store's bytes and metadata do not
#: depend on when (or from where: an index, a cache) an artifact was fetched.
STORE_MTIME = 1577836800  # 2020-01-01T00:00:00Z

#: The flock a sync holds shared and ``gc`` exclusively (``Store.writing``, ``Store.collecting``).
WRITER_LOCK = "store-writer"


def default_home() -> Path:
    """``$ENVLOCK_HOME``, else the platform's user data dir (one rule, shared with the fast no-op)."""
    return Path(store_home.default_home())


@dataclass(frozen=True)
class Store:
    """The content-addressed store under ``ENVLOCK_HOME`` (see ``open``)."""

    home: Path

    @classmethod
    def open(cls, home: Path | None = None, *, create: bool = True) -> Store:
        """Open (creating if needed) the store; refuse a layout this version does not know.

        ``create=False`` (commands that only read it: ``path``, ``verify``, ...): a home
        that does not exist is an empty store, and is not made (a mistyped ENVLOCK_HOME
        must not leave a folder behind).
        """
        store = cls((home or default_home()).absolute())
        if not create and not store.home.exists():
            return store
        marker = store.home / "layout"
        try:
            store.home.mkdir(parents=True, exist_ok=True)
            if marker.exists():
                found = marker.read_text().strip()
                if found != str(LAYOUT_VERSION):
                    raise StoreError(
                        f"{marker}: store layout {found!r}, this envlock reads layout {LAYOUT_VERSION}; "
                        "use another ENVLOCK_HOME or a matching envlock"
                    )
            else:
                _write_atomic(marker, f"{LAYOUT_VERSION}\n".encode())
            store.tmp.mkdir(parents=True, exist_ok=True)
            store.clean_tmp()
        except OSError as exc:
            raise StoreError(f"{store.home}: cannot use as store: {folder_expected(exc) or exc.strerror}") from None
        return store

    @property
    def root(self) -> Path:
        return self.home / f"v{LAYOUT_VERSION}"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def hash_cache(self) -> Path:
        """The folder of the inode hash cache (``envlock.install.inodehashes``): not entries, just a cache."""
        return self.root / "hashes"

    def stat_snapshot(self, kind: str, key: str) -> Path:
        """Where the stat snapshot of entry ``kind/key`` (a venv, a venv skeleton) is kept when its files
        were last hashed (``install.digest.Snapshot``): beside the hash cache, not in the entry, whose
        folder is then the same on every machine."""
        name = self.path(kind, key).name
        return self.hash_cache / "snapshots" / (name if kind == "venvs" else f"{kind}-{name}")

    def path(self, kind: str, key: str) -> Path:
        """Where the entry ``kind/key`` lives (complete or not)."""
        if not key or "/" in key or key.startswith("."):
            raise StoreError(f"store key {key!r} for {kind}: expected a digest-like name")
        return self.root / kind / key

    def has(self, kind: str, key: str) -> bool:
        return self.path(kind, key).exists()

    @contextlib.contextmanager
    def new_entry(self, kind: str, key: str, *, slot: str | None = None) -> Iterator[Path]:
        """Yield an empty temp directory; on success it becomes ``kind/key`` in one rename.

        If another writer completed the same entry first, ours is discarded: both
        were built from the same inputs, and the first complete one wins. With
        ``slot``, the directory is a reused one, ``tmp/<slot>-slot<N>``, held under a
        lock (see ``_slot``).
        """
        final = self.path(kind, key)
        with contextlib.ExitStack() as stack:
            if slot is not None:
                work = stack.enter_context(self._slot(slot))
            else:
                work = self.tmp / _work_name(f"{kind}-{key.replace(':', '-')[:24]}")
            work.mkdir(parents=True)
            try:
                yield work
                final.parent.mkdir(parents=True, exist_ok=True)
                sync_before_rename(work)  # its bytes on disk before the rename makes it an entry
                try:
                    os.rename(work, final)
                except OSError:
                    if not final.exists():
                        raise
                else:
                    fsync_dir(final.parent)
            finally:
                forget(work)
                if work.exists():
                    _rmtree(work)

    @contextlib.contextmanager
    def _slot(self, label: str) -> Iterator[Path]:
        """Hold the first free ``tmp/<label>-slot<N>`` (a non-blocking flock per N); yield its path, absent.

        A stable path lets tools that cache by path hit their cache: uv caches an
        interpreter's query by the path of ``bin/python``, and a venv built at a fresh
        path each time costs a ~50 ms interpreter probe per ``uv pip`` call. What a
        killed holder left there is removed by the next holder or by ``clean_tmp``.
        """
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        number = 0
        while True:
            fd = os.open(locks / f"slot-{label}-{number}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                number += 1
                continue
            break
        try:
            path = self.tmp / f"{label}-slot{number}"
            if path.exists() or path.is_symlink():
                self.end_orphans()  # a killed holder's uv may write there still: ended first
                _rmtree(path)
            yield path
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _unheld_slot(self, entry: Path) -> Iterator[bool]:
        """Whether ``entry`` is a slot directory no live process holds; if so, held for the block.

        Held, not just tested: between a test and the removal, another process could
        take the slot and start building in it.
        """
        label, sep, number = entry.name.rpartition("-slot")
        if not sep or not number.isdigit():
            yield False
            return
        (self.root / "locks").mkdir(exist_ok=True)
        fd = os.open(self.root / "locks" / f"slot-{label}-{number}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                held = False
            else:
                held = True
            yield held
        finally:
            os.close(fd)

    def temp_dir(self, label: str) -> Path:
        """A fresh scratch directory under ``tmp/`` (the caller removes it)."""
        path = self.tmp / _work_name(label)
        path.mkdir(parents=True)
        return path

    @property
    def partial_dir(self) -> Path:
        """Where interrupted downloads wait to be resumed (kept across runs)."""
        return self.tmp / "partial"

    @contextlib.contextmanager
    def locked(self, name: str, *, shared: bool = False) -> Iterator[None]:
        """Hold an exclusive (or ``shared``) ``flock`` on ``locks/<name>.lock`` (blocks until free).

        The kernel drops the lock when its holder dies, so a SIGKILLed sync never
        leaves a stale lock behind.
        """
        with exclusive_lock(self.root / "locks" / f"{name}.lock", shared=shared):
            yield

    def remove_tree(self, path: Path) -> None:
        """Remove ``path`` (under the store) in one step: renamed into ``tmp/``, then deleted."""
        doomed = self.tmp / _work_name(f"rm-{path.name}")
        os.rename(path, doomed)
        _rmtree(doomed)

    def end_orphans(self) -> None:
        """End what killed writers left running: the process groups (a uv working in a slot, or in
        the uv cache) named in their work directories (``runner.GROUP_SUFFIX`` records), waiting
        until each is gone; ``StoreError`` naming the record of one that cannot be ended."""
        for entry in self.tmp.iterdir():
            m = _WORK_NAME.search(entry.name)
            if m is None or _alive(int(m.group(1))) or not entry.is_dir():
                continue
            from envlock import runner  # only where a killed writer left a record (docs/architecture.md)

            for record in entry.glob(f"*{runner.GROUP_SUFFIX}"):
                if not runner.end_group(record):
                    raise StoreError(f"{record}: names process group {record.read_text().split()[0]}, which a "
                                     "killed envlock left running and which cannot be ended; expected it gone "
                                     "before its work is cleared: end it (kill -9 -PGID) and try again")

    def clean_tmp(self) -> list[Path]:
        """Remove work directories under ``tmp/`` whose writer is gone (or slots no one holds),
        and unheld partial downloads that cannot be resumed; return them. What such a writer left
        running is ended first (``end_orphans``)."""
        removed: list[Path] = []
        self.end_orphans()
        for entry in self.tmp.iterdir():
            m = _WORK_NAME.search(entry.name)
            if m is None:
                with self._unheld_slot(entry) as unheld:
                    if unheld:
                        _rmtree(entry)
                        removed.append(entry)
                continue
            if _alive(int(m.group(1))):
                continue
            _rmtree(entry)
            removed.append(entry)
        # A download being hashed has no hash to resume against: one no writer holds
        # (a killed lock's) is GBs of litter.
        for part in self.partial_dir.glob("url-*.part") if self.partial_dir.is_dir() else ():
            try:
                fh = open(part, "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:  # its writer finished meanwhile
                continue
            with fh:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                part.unlink(missing_ok=True)  # a writer that opened it meanwhile sees it gone and reopens
                removed.append(part)
        return removed

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Held (shared) by a sync from its first fetch to its flip: ``gc`` waits for it, and it
        for a running ``gc``, so no entry a sync is about to link is collected under it."""
        with self.locked(WRITER_LOCK, shared=True):
            yield

    @contextlib.contextmanager
    def collecting(self, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Held (exclusively) by ``gc`` while it removes entries (see ``writing``); ``on_wait`` is
        called first when a sync holds it (gc then waits for every running sync to end)."""
        path = self.root / "locks" / f"{WRITER_LOCK}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def entries(self, kinds: Sequence[str] = ENTRY_KINDS) -> Iterator[tuple[str, str, Path]]:
        """Every complete entry ``(kind, key, path)`` of ``kinds``, sorted (work in ``tmp/`` is none)."""
        for kind in kinds:
            folder = self.root / kind
            if not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                if not path.name.startswith("."):
                    yield kind, path.name, path

    def remove_entry(self, kind: str, key: str) -> None:
        """Delete an entry (if there) in one step, as ``remove_tree`` does."""
        final = self.path(kind, key)
        if kind in ("venvs", "skeletons"):
            self.stat_snapshot(kind, key).unlink(missing_ok=True)
        if final.exists() or final.is_symlink():
            self.remove_tree(final)


_WORK_NAME = re.compile(r"-p(\d+)-[0-9a-f]{8}$")


def _work_name(label: str) -> str:
    # The pid lets a later open() tell a killed writer's litter from live work.
    return f"{label}-p{os.getpid()}-{os.urandom(4).hex()}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rmtree(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    # A directory someone made read-only cannot be emptied; give write back first.
    for dirpath, _dirs, _files in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(dirpath, 0o755)
    import shutil  # here: a switch removes nothing (shutil and its archive modules, ~2 ms)

    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def exclusive_lock(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an exclusive (or ``shared``) ``fcntl.flock`` on ``path`` (created if needed) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)  # retried on EINTR (PEP 475)
        yield
    finally:
        os.close(fd)


# -- atomic writes: a temp name beside the file, its bytes synced, then os.replace --


def temp_beside(path: Path) -> Path:
    """The temp name a file (or folder) to become ``path`` is written under first: hidden, in the
    same folder (so ``os.replace`` is a rename), with its writer's pid and a random part (two
    writers, or two threads, never share one). Every atomic write of envlock names its temp so."""
    return path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")


@contextlib.contextmanager
def _replacing(path: Path, *, source: Path | None = None) -> Iterator[Path]:
    """Yield the temp path to fill; then its bytes synced, renamed to ``path``, the folder synced.
    Nothing is left behind on failure; an ``OSError`` is named by ``path`` (but one that names
    ``source``, the file a copy reads).

    The data reaches the disk before the rename publishes it: after a power cut the file is
    the old one or the new one, never an empty or a torn one (ext4, xfs, btrfs alike).
    """
    tmp = temp_beside(path)
    try:
        yield tmp
        sync_file(tmp)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)  # a full disk, a folder where the file belongs: no litter
        if source is not None and exc.filename is not None and os.fspath(exc.filename) == os.fspath(source):
            raise  # the source of a copy cannot be read: it is named
        # Named by the file being written: the temp file is ours, not the user's.
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_atomic(path: Path, data: bytes) -> None:
    with _replacing(path) as tmp:
        tmp.write_bytes(data)


def make_folder(path: Path) -> None:
    """``mkdir -p path``; a file standing where a folder is to be is said so ("File exists" does not)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise OSError(exc.errno, folder_expected(exc), exc.filename or str(path)) from None


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` via a temp file in the same directory and ``os.replace``."""
    make_folder(path.parent)
    _write_atomic(path, data)


def copy_atomic(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` as ``write_atomic`` writes (a wheel into the wheelhouse: a reader
    sees the old file or the whole new one, and its bytes are on disk before its name is)."""
    make_folder(dest.parent)  # the wheelhouse: a file there is said to be one
    import shutil

    with _replacing(dest, source=src) as tmp:
        shutil.copyfile(src, tmp)


def replace_if_unchanged(path: Path, expected: bytes | None, data: bytes) -> bool:
    """Write ``data`` to ``path`` (as ``write_atomic``) only if its bytes are still ``expected``
    (None: no file); False, writing nothing, if another writer changed it since to
    anything but ``data`` itself.

    For read-modify-write of a workspace file (a lock) that takes long (a resolution, an
    hour-long build): without the comparison, a lock written meanwhile by another envlock
    would silently be undone. Writers of one folder serialize on a flock of it, so the
    comparison and the write are one step; where the file system has no flock for a
    folder (NFS), the comparison still narrows the race to that step.
    """
    make_folder(path.parent)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(folder, fcntl.LOCK_EX)
        try:
            current: bytes | None = path.read_bytes()
        except FileNotFoundError:
            current = None
        if current == data:
            return True  # another envlock wrote exactly this meanwhile (two syncs of one stale lock)
        if current != expected:
            return False
        _write_atomic(path, data)
        return True
    finally:
        os.close(folder)


# -- locked wheels in the store: where each lives, and whether it is still the locked file --


def store_file(store: Store, artifact: Artifact) -> Path:
    """Where ``artifact`` lives in the store once fetched.

    ``FetchError`` for a file name that would lead out of its entry (a URL ending in
    ``..%2F..%2Fx.whl``): nothing is looked up, downloaded or written for it.
    """
    if problem := artifact.filename_problem():
        raise FetchError(problem)
    return store.path("wheels", artifact.sha256) / artifact.filename


def stored(artifact: Artifact, path: Path) -> tuple[bool, FetchError | None]:
    """Whether the store has ``artifact``'s file at ``path``, and the error if its size is not the lock's.

    A stat, not a hash: re-reading GBs of wheels on every sync is what the store saves
    us. A size other than the lock's still shows a truncated or overwritten file.
    """
    try:
        st = os.stat(path)
    except OSError:
        return False, None
    if not stat.S_ISREG(st.st_mode):
        return False, None
    if artifact.size is not None and st.st_size != artifact.size:
        return True, wrong_size_in_store(artifact, path, st.st_size)
    return True, None


def check_stored_sizes(artifacts: Sequence[Artifact], store: Store) -> None:
    """Raise the ``fetch`` error for a store file whose size is not the lock's, without fetching.

    For a sync with nothing to do: it fetches nothing, yet a lock whose sizes disagree
    with the bytes must be refused there as on a machine that has to download them. A
    stat each; a file no longer in the store is not checked (the venv was built from it).
    """
    unique = {a.sha256: a for a in artifacts if a.size is not None}.values()
    errors = [wrong for a in unique if (wrong := stored(a, store_file(store, a))[1]) is not None]
    raise_all(FetchError, errors, f"{len(errors)} locked sizes disagree with the store")


def check_stored_bytes(wheels: Mapping[str, Path]) -> None:
    """Raise ``StoreError`` naming the store wheels (sha256 -> file) whose bytes are no longer their sha256.

    A sync checks a store wheel's size, not its bytes (re-reading GBs on every sync is
    what the store saves): damage that keeps the size shows only as uv failing to unzip,
    or as a venv unlike the one the lock gave before. Read on those occasions only.
    """
    damaged = [f"{path}: sha256 {actual or 'unreadable'}, expected {sha}; remove {path.parent}"
               for sha, path in wheels.items() if (actual := store_home.file_sha256(str(path))) != sha]
    if damaged:
        raise StoreError(f"{len(damaged)} store wheel(s) damaged (their bytes changed since they were verified): "
                         "remove each folder named and sync again to fetch it anew", details=damaged)


def wrong_size_in_store(artifact: Artifact, path: Path, size: int, *, then: str = "sync again") -> FetchError:
    """The error for a store file of ``size`` bytes where the lock says ``artifact.size``.

    Rare, so the file is read once to say which is wrong. It is never removed here: store
    entries are removed by hand, and the bytes may be the only copy of a nightly its index
    no longer lists, so what is reported is what to do.
    """
    actual = store_home.file_sha256(str(path)) or "unreadable"
    if actual == artifact.sha256:
        return FetchError(
            f"{artifact.filename}: store file {path} has the locked sha256 but is {size} bytes, "
            f"the lock says {artifact.size}: the lock's size is wrong (the store file is intact)"
        )
    return FetchError(
        f"{artifact.filename}: store file {path} is {size} bytes, the lock says {artifact.size} "
        f"(its sha256 is {actual}, the lock's {artifact.sha256}): the store entry is damaged; "
        f"remove {path.parent} and {then} to fetch it anew"
    )
