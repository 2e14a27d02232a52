"""Install: build ``venvs/sha256-<hex>/`` (the install digest) from store wheels with the pinned uv.

No index, no resolution: ``uv pip install --no-index --offline --no-deps`` of
exactly the locked wheels, given as their store files (``wheels/<sha256>/<file>``).
The venv starts as a copy of the empty venv uv made once for this interpreter
(``venv_skeleton``), created ``--relocatable``, so nothing in it names the folder
it was built in: it is built under ``tmp/`` (in a reused, locked slot folder) and
renamed into place in one step, like every other store entry, and a killed install
leaves only litter under ``tmp/``.

What would make two installs differ, and what is done about it, is listed in
docs/reproducibility.md.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from envlock import timings
from envlock.errors import InstallError, VerifyError
from envlock.install.digest import (
    Manifest,
    compare,
    keep_snapshot,
    manifest,
    snapshot_holds,
    stored_manifest,
    unchanged,
)
from envlock.install.generations import users
from envlock.install.inodehashes import HashCache
from envlock.install.uvcache import (
    UV_CACHE_LOCK,
    RecordHashes,
    clear_uv_cache,
    record_lies,
    repair_uv_cache,
    uv_cache_dir,
    wheels_listing,
)
from envlock.model.lockfile import Artifact, Lock, canonicalize_name
from envlock.store.durable import prepare_write_back, written_back
from envlock.store.home import MANIFEST_NAME  # defined where the fast no-op reads it
from envlock.store.store import Store, check_stored_bytes, write_atomic

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True)
class InstallResult:
    """A complete venv entry; ``built`` is False when the store already had it."""

    venv: Path
    install_digest: str
    manifest: Manifest
    built: bool
    seconds: float
    note: str = ""  # a repair of uv's cache this install made (``repair_uv_cache``, ``_build``)
    #: Files uv's cache gave unlike their wheel's RECORD (edited there): the venv was made again without it.
    edited: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "venv": str(self.venv),
            "install_digest": self.install_digest,
            "venv_digest": self.manifest.digest,
            "built": self.built,
            "seconds": round(self.seconds, 3),
        }


def venv_key(lock: Lock) -> str:
    """The store key of a lock's venv (its install digest)."""
    return lock.install_digest()


def venv_entry(key: str) -> str:
    """The ``venvs/`` folder name of the venv with install digest ``key``: ``sha256-<hex>``.

    Not the digest as written (``sha256:<hex>``): a venv's real path ends up in PATH
    (its relocatable ``activate`` resolves its own folder), LD_LIBRARY_PATH and the
    like, where a colon splits it in two.
    """
    return key.replace(":", "-")


def venv_path(store: Store, key: str) -> Path:
    """Where the venv with install digest ``key`` lives in the store."""
    return store.path("venvs", venv_entry(key))


def venv_lock(key: str) -> str:
    """The store lock held while the venv entry ``key`` is built, re-walked or removed."""
    return f"venv-{venv_entry(key)}"


#: The lock's wheels in batches (sha256 -> store file) as they come into the store while the venv is
#: built: each batch is installed as it comes, while the next downloads. The iterator ends once every
#: fetch has ended, or raises the fetch's error (the venv is then discarded).
Arrivals = Iterator[Mapping[str, Path]]


def install(
    store: Store,
    lock: Lock,
    wheels: Mapping[str, Path],
    *,
    arriving: Arrivals | None = None,
) -> InstallResult:
    """Make the store hold the lock's venv, built from ``wheels`` (sha256 -> store file), or from
    the batches ``arriving`` gives (``wheels`` then unused).

    Concurrent installs of one lock serialize on the store; the second reuses the
    first's entry. Either way the result's manifest is a walk taken now: a reused
    entry is checked again (its stat snapshot, else a full walk), and one someone edited since it was built is a
    ``VerifyError`` naming the files (it must not become current).
    """
    started = time.monotonic()
    key = venv_key(lock)
    final = venv_path(store, key)
    with store.locked(venv_lock(key)):
        snapshot = store.stat_snapshot("venvs", venv_entry(key))
        if (as_verified := unchanged(final, snapshot)) is not None:
            timings.mark("the stored venv's stat snapshot taken again: as verified")
            return InstallResult(final, key, as_verified, False, time.monotonic() - started)
        existing = stored_manifest(final)
        if existing is not None:
            actual = manifest(final, cache_dir=store.hash_cache)
            timings.mark("the stored venv walked again")
            if actual.digest != existing.digest:
                raise VerifyError(
                    f"{final}: store venv was modified after it was built (recorded {existing.digest}, found "
                    f"{actual.digest}); {_repair_of(store, final)}",
                    details=compare(existing.entries, actual.entries).lines(),
                )
            keep_snapshot(snapshot, actual)
            return InstallResult(final, key, actual, False, time.monotonic() - started)
        if final.exists():
            # Only a venv from a foreign writer could lack its manifest: not ours to trust.
            store.remove_tree(final)
        for pkg in lock.packages:
            artifact = pkg.wheels[0]
            if arriving is None:
                _fetched(artifact, wheels)
            # uv installs what the file is, so the file must be what the lock says it is.
            if not _wheel_is(artifact.filename, pkg.name, pkg.version):
                raise InstallError(
                    f"{artifact.filename}: locked as {pkg.name} {pkg.version}, but that is not this "
                    "wheel's name and version; expected the lock's [[packages]] entry to point at its own wheel"
                )
        from envlock.model.target import find_python  # here: not for a reused venv (above)

        python = find_python(lock.python)
        timings.mark("the wheels checked, the interpreter found")
        # In a pid-named temp folder: a killed install's log goes with its other litter.
        log = store.temp_dir("install-log") / "uv.log"
        # Built in a reused slot folder (tmp/venv-slotN), not a fresh temp path: uv then
        # finds its cached probe of the venv's interpreter instead of running it again.
        with _keep_log_on_failure(store, log, key), store.new_entry("venvs", venv_entry(key), slot="venv") as work:
            note, built, edited = _build(store, work, final, python, lock,
                                         iter([wheels]) if arriving is None else arriving, log)
            text = built.to_json().encode()
            write_atomic(work / MANIFEST_NAME, text)
            os.chmod(work / MANIFEST_NAME, 0o444)  # sealed like the rest
            written_back(work)  # so the rename waits for one fsync, not a syncfs of the file system
        keep_snapshot(snapshot, built)  # the next reuse of this venv: lstats alone (digest.Snapshot)
        timings.mark("the manifest written, the venv folder fsynced and renamed")
        _remove_log(log)
        save_manifest(store, built, text)
    return InstallResult(final, key, built, True, time.monotonic() - started, note, edited)


def _repair_of(store: Store, venv: Path) -> str:
    """What to do about the store venv ``venv``, modified since it was built: the repair of an env whose
    generation uses it (removing it would take their venv from those generations), else its removal."""
    used = users(store, venv)
    if not used:
        return "no generation uses it: remove that folder and sync again"
    return (f"it is the venv of generation{'s' if len(used) > 1 else ''} {', '.join(f'{e}/{n}' for e, n in used)}: "
            f"`envlock verify {used[0][0]} --repair` builds it anew (and every venv sharing its modified files), "
            "then sync again")


def _build(store: Store, work: Path, final: Path, python: Path, lock: Lock, batches: Arrivals,
           log: Path) -> tuple[str, Manifest, tuple[str, ...]]:
    """Make the venv in ``work`` (``_populate``) and walk it, its digest taken as at ``final``; returns the
    repairs made ("" when none), the walk and the files uv's cache gave edited. Every file a RECORD gives a
    sha256 for is held to it (``uvcache.RecordHashes``): one that differs came from uv's cache, edited there,
    so the cache is cleared and the venv made once more; one that differs still is a ``VerifyError``."""
    notes: list[str] = []
    edited: tuple[str, ...] = ()
    while True:
        note, wheels = _populate(store, work, python, lock, batches, log)
        records = _drop_install_records(work)
        _keep_allowed_overlaps(work, lock, wheels)
        timings.mark("uv's install dropped from the RECORDs")
        # The digest is taken where it will be read from, so ${VENV} means the final path.
        # Sealed read-only: a file edited in one venv is edited in every venv sharing
        # its inode (and in uv's cache, so in every venv built after). Flushed: what the
        # walk reads (what uv and this install wrote now) is written back to the device;
        # what it does not read is a file an earlier walk read and wrote back.
        built = manifest(work, prefix=final, cache_dir=store.hash_cache, seal=True, flush=True)
        timings.mark("the digest walk (sealed, written back)")
        unlike = records.unlike(built.entries)
        timings.mark("every file held to the sha256 its wheel's RECORD gives")
        notes.append(note)
        if not unlike:
            return "; ".join(filter(None, notes)), built, edited
        if len(notes) > 1 or record_lies(work, lock, wheels, unlike):  # the wheel's own file is unlike it too
            check_stored_bytes(wheels)  # a store wheel damaged since it was fetched is named as such
            _remove_log(log)
            how = ("with uv's cache cleared and the venv made again from the store's wheels" if len(notes) > 1
                   else "as in the store's wheel itself")
            raise VerifyError(
                f"{wheels_listing(work, lock, [u[0] for u in unlike])}: {len(unlike)} installed file(s) differ "
                f"from the sha256 their wheel's RECORD gives, {how} (each wheel its locked sha256): the wheel's "
                "RECORD is not true to its files; expected "
                "a wheel whose RECORD gives its files' sha256: rebuild or republish it, or lock another; the venv "
                "was not kept", details=[f"{path}: its RECORD gives {given}, the file has {found}"
                                         for path, given, found in unlike])
        clear_uv_cache(store)
        edited = tuple(path for path, _, _ in unlike)
        more = f" and {len(unlike) - 1} more" if len(unlike) > 1 else ""
        notes.append(f"a file of uv's cache differed from its wheel's RECORD ({unlike[0][0]}{more}; edited through "
                     "a venv that links it?): uv's cache cleared, the venv made again")
        import shutil

        shutil.rmtree(work)  # made again from scratch, as after uv's failure on its cache (``_populate``)
        work.mkdir()
        batches = iter([wheels])


def _fetched(artifact: Artifact, wheels: Mapping[str, Path]) -> Path:
    """The store file of ``artifact`` among ``wheels``, else the ``InstallError`` naming it."""
    wheel = wheels.get(artifact.sha256)
    if wheel is None:
        raise InstallError(f"{artifact.filename}: not fetched into the store (sha256 {artifact.sha256}); "
                           "expected every locked wheel before install")
    return wheel


def _populate(store: Store, work: Path, python: Path, lock: Lock, batches: Arrivals,
              log: Path) -> tuple[str, dict[str, Path]]:
    """Make the venv in ``work``: the skeleton (or ``uv venv``), then the locked wheels, a uv run per
    batch as they come (``Arrivals``). Once, when uv fails on its own cache (``repair_uv_cache``),
    the venv is made again from scratch; returns what that repair said ("" when none was needed) and
    every locked wheel's store file (sha256 -> path)."""
    note = ""
    while True:
        _new_venv(store, work, python, log)
        timings.mark("the venv skeleton copied")
        # What the digest walk after uv needs, loaded while uv installs its first batch.
        meanwhile: Callable[[], None] | None = functools.partial(_ready_the_walk, store)
        got: dict[str, Path] = {}
        try:
            for batch in batches:
                got.update(batch)
                # In the lock's order, each locked wheel once.
                files = list(dict.fromkeys(str(batch[p.wheels[0].sha256]) for p in lock.packages
                                           if p.wheels[0].sha256 in batch))
                if files:
                    _uv_install(store, work, files, log, meanwhile=meanwhile)
                    meanwhile = None
            for pkg in lock.packages:
                _fetched(pkg.wheels[0], got)
            return note, got
        except InstallError as exc:
            # uv's "Bad CRC" does not say what to do: name a store wheel whose bytes changed.
            check_stored_bytes(got)
            if note or not (note := repair_uv_cache(store, exc)):
                raise
        import shutil

        shutil.rmtree(work)  # what the failed run installed goes: the venv is made again
        work.mkdir()
        batches = itertools.chain([dict(got)], batches)  # what came so far, then the rest as it comes


def _ready_the_walk(store: Store) -> None:
    """Load what the digest walk after uv needs (the inode hash cache, ``write_back``'s libc call)."""
    HashCache.preload(store.hash_cache)
    prepare_write_back()


def _uv_install(store: Store, work: Path, files: list[str], log: Path,
                meanwhile: Callable[[], None] | None = None) -> None:
    """``uv pip install`` of the store wheel ``files`` into the venv ``work`` (``meanwhile``: done
    on this thread while uv runs, ``runner.run``)."""
    # The store files themselves, not name==version from a find-links folder
    # per wheel: uv then neither lists 158 folders nor resolves. Not one shared
    # find-links folder either, though uv installs from one ~15% faster: uv caches
    # such a wheel by folder and file name, so a rebuild under the same file name
    # (a re-patched local build) got the first build's bytes. Hard links, not
    # uv's default clone: on XFS or btrfs a clone is a new inode per sync, which
    # the hash cache cannot vouch for, so every sync would re-read GBs. Links
    # into the store's own uv cache (uv_cache_dir), never the user's.
    with store.locked(UV_CACHE_LOCK, shared=True):  # clear_uv_cache waits for installs
        _uv(["pip", "install", "--python", str(work / "bin" / "python"), "--link-mode", "hardlink",
             "--no-index", "--offline", "--no-deps", "--no-build", *files],
            what="install the locked wheels", log=log, cache=uv_cache_dir(store), meanwhile=meanwhile)
    timings.mark(f"uv pip install ({len(files)} wheels)")


def _new_venv(store: Store, work: Path, python: Path, log: Path) -> None:
    """The empty venv in ``work``: a copy of the skeleton, else made by ``uv venv`` there."""
    skeleton = venv_skeleton(store, python, log)
    if skeleton is None:
        _make_venv(python, work, log)
        return
    # Hard links, as uv links a wheel's files from its cache: no bytes copied, and the walk finds
    # inodes the hash cache knows. Sealed read-only like the rest; a skeleton edited through one of
    # its venvs fails its check (``_intact``) and is made again. Not shutil's copytree: a warm sync
    # then imports no shutil (~2 ms), and the first failure is the message.
    root = str(skeleton)
    for folder, dirs, files in os.walk(root):
        here = work / folder[len(root) + 1:] if folder != root else work
        for name in [*dirs, *files]:
            source, made = os.path.join(folder, name), here / name
            try:
                if os.path.islink(source):  # bin/python, lib64: links as they are (not followed by walk)
                    os.symlink(os.readlink(source), made)
                elif name in dirs:
                    made.mkdir()
                elif folder != root or name != _SKELETON_DIGEST:
                    _link_or_copy(source, made)
            except OSError as exc:
                raise InstallError(f"{made}: cannot copy the venv skeleton there: {exc}") from None


def _link_or_copy(source: str, made: Path) -> None:
    """A hard link ``made`` to ``source``; a copy for ``pyvenv.cfg`` (the file users edit: read whole by
    every walk anyway, and an edit stays in its venv) and where the file system will not link (too
    many links to one file, another file system, links not allowed)."""
    if made.name != "pyvenv.cfg":
        try:
            os.link(source, made)
            return
        except OSError as exc:
            if exc.errno not in (errno.EMLINK, errno.EXDEV, errno.EPERM, errno.ENOTSUP):
                raise
    # As shutil.copy2 copies a small file (its bytes, mode and times), without importing shutil.
    st = os.stat(source)
    with open(source, "rb") as src, open(made, "xb") as out:
        out.write(src.read())
    os.chmod(made, stat.S_IMODE(st.st_mode))
    os.utime(made, ns=(st.st_atime_ns, st.st_mtime_ns))


def _wheel_is(filename: str, name: str, version: str) -> bool:
    """Whether wheel ``filename`` is distribution ``name`` (canonical) at ``version``."""
    parts = filename[:-4].split("-") if filename.endswith(".whl") else []
    if len(parts) not in (5, 6) or canonicalize_name(parts[0]) != name:
        return False
    if parts[1] == version:
        return True
    from packaging.version import InvalidVersion, Version  # only for spellings that differ

    try:
        return Version(parts[1]) == Version(version)
    except InvalidVersion:
        return False


#: How every venv is created. The prompt is the same for all: the skeleton below is shared.
_VENV_ARGS = ["venv", "--relocatable", "--prompt", "envlock"]


def _make_venv(python: Path, dest: Path, log: Path) -> None:
    _uv([*_VENV_ARGS, "--python", str(python), str(dest)], what="create the venv", log=log)


def venv_skeleton(store: Store, python: Path, log: Path) -> Path | None:
    """The empty venv ``uv venv`` makes for ``python``, kept in the store and copied into each new venv.

    A relocatable venv names no folder of its own, so uv's output for one interpreter
    and one uv is the same wherever it is made: copying it saves a uv run (~25 ms)
    per sync. The key covers the interpreter's path and file identity (an upgrade in
    place makes a new skeleton) and the uv binary's. None, and every venv is made by
    ``uv venv`` in place, if the skeleton turns out to name its own folder after all.
    Its digest is kept in it and checked before every use (``_intact``: its stat snapshot, else
    its bytes): a skeleton someone changed is made again, not copied into every later venv.
    """
    import hashlib

    from envlock import runner  # subprocess: only a venv to build

    ident = []
    for path in (python, Path(runner.uv_bin())):
        st = path.stat()
        ident.append(f"{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}")
    key = hashlib.sha256("\0".join([*_VENV_ARGS, *ident]).encode("utf-8", "surrogateescape")).hexdigest()
    final = store.path("skeletons", key)
    with store.locked(f"skeleton-{key[:16]}"):
        if _intact(store, key):
            return final
        if final.exists():
            store.remove_entry("skeletons", key)
        try:
            with store.new_entry("skeletons", key) as work:
                _make_venv(python, work, log)
                if _names_folder(work):
                    raise _NotRelocatableError  # leaves the with block without the rename
                write_atomic(work / _SKELETON_DIGEST, manifest(work).digest.encode())
        except _NotRelocatableError:
            return None  # this interpreter's venvs are made in place, by uv, each time
    return final


#: Inside a skeleton: the digest of the rest (a top-level .envlock name, so not part of it).
_SKELETON_DIGEST = ".envlock-skeleton-digest"


def _intact(store: Store, key: str) -> bool:
    """Whether skeleton ``key`` holds what it was made with: its stat snapshot as kept when its files last
    matched the digest recorded in it (lstats alone, as a switch checks a venv: ``digest.Snapshot``), else
    its files hashed again, and their snapshot kept for the next use when they match."""
    skeleton, snapshot = store.path("skeletons", key), store.stat_snapshot("skeletons", key)
    try:
        recorded = (skeleton / _SKELETON_DIGEST).read_text().strip()
    except OSError:
        return False
    if snapshot_holds(skeleton, snapshot, recorded) is not None:
        return True
    # Every byte read (reuse=False: the cache's answers are lstats too); the cache for the snapshot's clock tick.
    made = manifest(skeleton, cache_dir=store.hash_cache, reuse=False)
    if made.digest != recorded:
        return False
    keep_snapshot(snapshot, made)
    return True


class _NotRelocatableError(Exception):
    pass


def _names_folder(venv: Path) -> bool:
    """Whether any file or link in ``venv`` holds ``venv``'s own absolute path."""
    needle = os.fsencode(str(venv.absolute()))
    for folder, dirs, files in os.walk(venv):
        for name in dirs + files:  # links to folders (lib64) are listed with the folders
            path = os.path.join(folder, name)
            if os.path.islink(path):
                if needle in os.fsencode(os.readlink(path)):
                    return True
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    if needle in fh.read():
                        return True
    return False


def save_manifest(store: Store, m: Manifest, text: bytes | None = None) -> Path:
    """Keep ``m`` under ``manifests/<digest>`` so a later verify can name differing files.

    ``text``: ``m.to_json()`` encoded, when the caller has it already.
    """
    path = store.path("manifests", m.digest)
    if not path.exists():
        write_atomic(path, text if text is not None else m.to_json().encode())
    return path


#: What uv writes into a dist-info that names this store or this moment, not the wheel.
_LOCAL_RECORDS = ("uv_cache.json", "direct_url.json")


def _drop_install_records(venv: Path) -> RecordHashes:
    """Remove ``uv_cache.json`` and ``direct_url.json`` (and their RECORD lines) from every dist; the
    sha256 every RECORD gives its files, read on the way (``RecordHashes``).

    ``uv_cache.json`` holds the ctime of the wheel installed from (a ctime cannot be
    set), ``direct_url.json`` the wheel's path in this store: both differ on every
    machine and store. Only uv's own freshness check for ``uv pip`` on path sources
    reads the first, and nothing installs into a store venv again; without the
    second a dist reads as installed from an index, which it was, through the lock.
    """
    records = RecordHashes()
    for site in venv.glob("lib/python*/site-packages"):
        with os.scandir(site) as it:
            dists = [e.path for e in it if e.name.endswith(".dist-info")]
        prefix = f"{site.relative_to(venv)}/"
        for dist in dists:
            dropped = []
            for name in _LOCAL_RECORDS:
                try:
                    os.unlink(os.path.join(dist, name))
                except FileNotFoundError:
                    continue
                dropped.append(f"{os.path.basename(dist)}/{name},".encode())
            # Rewritten in place and cut to length: truncating to zero and writing again
            # makes ext4 flush the file on close (auto_da_alloc), ~0.2 ms per dist.
            try:
                fd = os.open(os.path.join(dist, "RECORD"), (os.O_RDWR if dropped else os.O_RDONLY) | os.O_CLOEXEC)
            except FileNotFoundError:  # not a wheel's dist (none in a store venv): nothing recorded to hold it to
                continue
            try:
                data = _read_all(fd)
                if dropped:
                    prefixes = tuple(dropped)
                    data = b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(prefixes))
                    os.pwrite(fd, data, 0)
                    os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
            records.add(prefix, os.path.basename(dist), data)
    return records


def _keep_allowed_overlaps(venv: Path, lock: Lock, wheels: Mapping[str, Path]) -> None:
    """Each path the lock allows two distributions to install (``allowed-overlaps``) holds the
    bytes of the first one named, whatever order uv wrote the two in (it installs in parallel):
    so the venv digest does not depend on it. A new file, not a write through uv's hard link."""
    if not lock.allowed_overlaps:
        return
    import zipfile

    by_name = {p.name: p for p in lock.packages}
    for allowed in lock.allowed_overlaps:
        pkg = by_name.get(canonicalize_name(allowed.packages[0]))
        wheel = wheels.get(pkg.wheels[0].sha256) if pkg is not None else None
        if wheel is None:
            continue
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            # At the wheel's root, or in its .data purelib/platlib (both install into site-packages).
            data_dirs = sorted({n.split("/")[0] for n in names if n.split("/")[0].endswith(".data")})
            where = [allowed.path, *(f"{d}/{scheme}/{allowed.path}" for d in data_dirs for scheme in ("purelib",
                                                                                                     "platlib"))]
            member = next((n for n in where if n in names), None)
            data = zf.read(member) if member is not None else None
        for site in venv.glob("lib/python*/site-packages"):
            target = site / allowed.path
            if data is not None and target.is_file():
                mode = target.stat().st_mode & 0o777
                target.unlink()
                target.write_bytes(data)
                target.chmod(mode)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def _keep_log_on_failure(store: Store, log: Path, key: str) -> Iterator[None]:
    """On an ``InstallError``, move the uv log to ``logs/`` (out of ``tmp/``) and name it."""
    try:
        yield
    except InstallError as exc:
        from envlock import runner  # subprocess: only a venv to build

        if not log.exists():
            _remove_log(log)
            raise
        kept = runner.keep_log(log, store.root / "logs" / f"install-{key[7:19]}-{time.strftime('%Y%m%dT%H%M%S')}.log")
        _remove_log(log)
        raise InstallError(f"{exc.message}; full log in {kept}", details=exc.details) from None


def _remove_log(log: Path) -> None:
    """Remove an install's uv ``log`` (if it was not moved to ``logs/``) and its folder (``store.temp_dir``);
    what else is there stays, litter of ``tmp/`` (not shutil's ``rmtree``: a switch imports no shutil)."""
    with contextlib.suppress(OSError):
        log.unlink(missing_ok=True)
        log.parent.rmdir()


def _uv(args: list[str], *, what: str, log: Path, cache: Path | None = None,
        meanwhile: Callable[[], None] | None = None) -> None:
    # In a process group of its own, named beside its log (a pid-named folder under tmp/): a uv that
    # outlives a SIGKILLed envlock is ended by the next store open before its slot is used again.
    from envlock import runner  # subprocess: only a venv to build

    # No build runs under it (``uv venv``; ``--no-build``): nothing for envlock to adopt (``runner.uv``).
    result = runner.uv(args, log=log, env={"UV_CACHE_DIR": str(cache)} if cache is not None else None,
                       group=log.with_name(f"uv{runner.GROUP_SUFFIX}"), meanwhile=meanwhile, builds=False)
    if not result.ok:
        raise InstallError(
            f"uv could not {what} (exit {result.returncode}): uv {' '.join(args[:2])} ...",
            details=result.tail(15).splitlines(),
        )
