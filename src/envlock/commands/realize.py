"""A lock made current for an env: fetch -> install -> verify -> new generation -> flip.

``realize`` runs under the env's file lock. Its no-op path (the current generation
already is this lock's venv) reads one symlink and two small files and imports nothing
heavy: install and the digest walk are imported only when there is work (and the store,
for a stat of each locked wheel). Either way it ends by writing the env's no-op stamp,
which lets the next ``envlock sync`` answer before the rest of envlock is even imported
(``envlock.store.noop``). ``commands.sync`` decides which lock and how (``SyncTarget``); this module
only carries it out.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envlock import timings
from envlock.errors import FetchError, LockError, StoreError, VerifyError
from envlock.install import generations
from envlock.model.jsondoc import json_doc
from envlock.store import home, noop
from envlock.store.store import Store, replace_if_unchanged, write_atomic

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    # Type names only: importing these at run time would pull packaging onto the no-op path.
    from envlock.cache.caches import Caches
    from envlock.install.fetch import FetchResult
    from envlock.install.install import InstallResult
    from envlock.model.lockfile import Lock
    from envlock.progress import Progress


@dataclass(frozen=True)
class SyncResult:
    """What ``envlock sync`` did; doubles as its ``--json`` output."""

    env: str
    path: Path  # the stable path (``current`` symlink)
    generation: int
    install_digest: str
    venv_digest: str
    noop: bool
    downloaded: int = 0  # bytes
    fetched: int = 0  # artifacts brought into the store this run
    built: bool = False  # a new venv entry was installed (False: reused from the store)
    recorded: bool = False  # the venv digest was written into the lock
    builds_recorded: tuple[str, ...] = ()  # the local builds the sync wrote new records of into the lock
    seconds: float = 0.0
    note: str = ""  # e.g. why the recorded venv digest was not compared
    relocked: bool = False  # the lock file was stale (or missing) and was written anew first

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, extra={"seconds": round(self.seconds, 3)})


@dataclass(frozen=True)
class SyncTarget:
    """The lock a sync makes current for ``env``, and how (built by ``commands.sync.plan``)."""

    env: str
    lock: Lock
    #: Where the lock was read from: the venv digest is written back there on first sync
    #: unless ``frozen``; None: never written (read from git, a pipe, a generation's copy).
    lock_path: Path | None
    frozen: bool = False
    offline: bool = False
    #: Where the lock's relative ``path`` wheels are found (default: the lock file's folder).
    base_dir: Path | None = None
    #: Package name -> the mirror (an index URL) to download its wheel from instead of the lock's URL.
    package_mirrors: Mapping[str, str] = field(default_factory=dict)
    #: sha256 -> the files to copy a ``path`` wheel from instead of ``base_dir``'s, in order.
    local_wheels: Mapping[str, Sequence[Path]] = field(default_factory=dict)
    #: The files whose bytes made the lock current for its spec (path -> sha256), for the stamp.
    inputs: Mapping[str, str] | None = None
    #: The spec and patches a frozen sync found this lock made for, for the next frozen no-op.
    spec_input: Mapping[str, str] | None = None
    #: Binary caches asked for the wheels the store lacks, before their index (None: none).
    caches: Caches | None = None

    @property
    def write_back(self) -> Path | None:
        """The lock file the venv digest may be recorded in (None: none)."""
        return None if self.frozen else self.lock_path


def realize(store: Store, target: SyncTarget, progress: Progress | None = None) -> SyncResult:
    """Make ``target.env``'s current generation the venv of ``target.lock``, verified, and say what happened.

    Under the env's file lock: a no-op when the current generation already is this lock's
    venv; else fetch -> install -> compare the venv digest with the lock's (a difference is
    a ``VerifyError`` listing the files, and nothing is flipped) -> record the digest -> a
    new generation -> flip -> the fast no-op stamp.
    """
    started = time.monotonic()
    lock, env = target.lock, target.env
    with store.writing(), generations.env_lock(store, env):  # writing: no gc collects what this links
        cur = generations.current(store, env)
        if cur is not None and _current_is(store, cur, lock):
            return _noop(store, target, cur, started)
        timings.mark("the store opened, the env locked, its current generation read")
        wheels = _stored_wheels(store, target.lock)
        present = _all_present(wheels)
        downloaded = fetched = 0
        if present is not None:  # nothing to fetch (a stat each said so): fetch's machinery not even loaded
            timings.mark("every locked wheel in the store already")
            checked = _install_checked(store, target, present)
        elif _installs_while_fetching(store, target, wheels):
            arriving = _Arrivals(store, target, progress)
            checked = _install_checked(store, target, {}, arriving)
            downloaded, fetched = _brought(*arriving.result())
        else:
            got = _fetch(store, target, progress)
            downloaded, fetched = _brought(*got)
            timings.mark("fetch: every locked wheel in the store")
            checked = _install_checked(store, target, got[0].paths())
        # Record first, so the generation keeps the lock text as it stands after this sync.
        lock_bytes, on_disk, recorded = _record(lock, target.lock_path, checked.digest, checked.python,
                                                target.frozen)
        timings.mark("the lock file read (and the venv digest recorded in it)")
        note = "; ".join(filter(None, [_recorded_note(lock, checked.python, recorded, env, target.lock_path),
                                       checked.note]))
        # The file's text when it holds the synced lock (with the digest just recorded);
        # if it holds another lock now, the generation keeps the one it was built from.
        lock_text = lock_bytes.decode("utf-8") if lock_bytes is not None and on_disk is not None else lock.to_toml()
        gen = _new_generation(store, env, cur, checked, lock_text)
        timings.mark("the generation written (fsynced)")
        generations.flip(store, env, gen.number)
        timings.mark("the flip of `current`")
        # Switched now: nothing after this may fail the sync (it would say "nothing switched").
        lock_sha256 = _sha256_of(lock_bytes)
        unstamped = _stamp(store, target, gen.number, checked.digest, lock_sha256, on_disk)
        if lock_sha256 is not None:  # a later sync of these bytes starts this venv's check ahead (envlock.ahead)
            noop.keep_venv_of_lock(str(store.home), lock_sha256, checked.venv.name)
        timings.mark("the no-op stamp written")
        return SyncResult(
            env, generations.stable_path(store, env), gen.number, lock.install_digest(), checked.digest, noop=False,
            downloaded=downloaded, fetched=fetched, built=checked.built, recorded=recorded,
            seconds=time.monotonic() - started,
            note="; ".join(filter(None, [note, unstamped])),
        )


def _current_is(store: Store, cur: generations.Generation, lock: Lock) -> bool:
    """Whether generation ``cur`` is ``lock``'s venv, whole (a sync of it is a no-op)."""
    return (cur.install_digest == lock.install_digest()
            and lock.venv_digest_for(venv_python(cur.venv)) in (None, cur.venv_digest)
            and (cur.venv / home.MANIFEST_NAME).is_file())


def _noop(store: Store, target: SyncTarget, cur: generations.Generation, started: float) -> SyncResult:
    """The answer when the current generation is the lock's: the store's wheels still there,
    the digest recorded in the lock if it has none, the stamp written."""
    from envlock.store.store import check_stored_sizes

    lock = target.lock
    check_stored_sizes([p.wheels[0] for p in lock.packages], store)
    python = venv_python(cur.venv)
    data, on_disk, recorded = _record(lock, target.lock_path, cur.venv_digest, python, target.frozen)
    unstamped = _stamp(store, target, cur.number, cur.venv_digest, _sha256_of(data), on_disk)
    return SyncResult(target.env, generations.stable_path(store, target.env), cur.number, lock.install_digest(),
                      cur.venv_digest, noop=True, recorded=recorded, seconds=time.monotonic() - started,
                      note="; ".join(filter(None, [_recorded_note(lock, python, recorded, target.env,
                                                                  target.lock_path), unstamped])))


def _fetch(store: Store, target: SyncTarget, progress: Progress | None) -> tuple[FetchResult, int, int]:
    """Every locked wheel in the store (from mirrors where the target names them), and how many
    wheels (and bytes) of them the caches gave."""
    from envlock.install import fetch
    from envlock.model.mirrors import package_locator

    lock = target.lock
    base_dir = target.base_dir
    if base_dir is None:
        base_dir = target.lock_path.parent if target.lock_path is not None else Path.cwd()
    locate = package_locator(lock.packages, target.package_mirrors) if target.package_mirrors else None
    cached = cached_bytes = 0
    if target.caches is not None and not target.offline:  # a cache first: what it lacks comes from the index
        cached, cached_bytes = target.caches.wheels_into_store(store, [p.wheels[0] for p in lock.packages])
    got = fetch.fetch([p.wheels[0] for p in lock.packages], store, base_dir=base_dir, progress=progress,
                      options=fetch.FetchOptions(offline=target.offline, locate=locate,
                                                 local_sources=target.local_wheels, env=target.env))
    return got, cached, cached_bytes


def _brought(got: FetchResult, cached: int, cached_bytes: int) -> tuple[int, int]:
    """Bytes downloaded and wheels brought into the store by a fetch (``_fetch``'s answer): what the
    caches gave counts too (the sync's note says from where)."""
    return got.downloaded + cached_bytes, sum(1 for a in got.artifacts if a.source != "store") + cached


def _stored_wheels(store: Store, lock: Lock) -> list[tuple[str, Path, bool, bool]] | None:
    """Each locked wheel's sha256, its store file, whether the store holds that file and whether with the
    lock's size: a stat each, as ``fetch`` finds them (a file there was checked against its sha256 before
    it was published). None when a file name leads out of its entry (``fetch`` names it, first)."""
    from envlock.store.store import store_file, stored

    found = []
    try:
        for pkg in lock.packages:
            artifact = pkg.wheels[0]
            path = store_file(store, artifact)
            held, wrong = stored(artifact, path)
            found.append((artifact.sha256, path, held, wrong is None))
    except FetchError:
        return None
    return found


def _all_present(wheels: list[tuple[str, Path, bool, bool]] | None) -> dict[str, Path] | None:
    """sha256 -> store file of every locked wheel when the store holds each with the lock's size
    (``_stored_wheels``); None when one is missing or wrong (``fetch`` then brings it or says which)."""
    if wheels is None or not all(held and right for _, _, held, right in wheels):
        return None
    return {sha256: path for sha256, path, _, _ in wheels}


def _installs_while_fetching(store: Store, target: SyncTarget, wheels: list[tuple[str, Path, bool, bool]] | None
                             ) -> bool:
    """Whether the venv is to be built and the store lacks a wheel of it (``_stored_wheels``): then the
    wheels are installed in batches as they come (``_Arrivals``), not all downloads first, then all installs."""
    from envlock.install import install

    if wheels is None or (install.venv_path(store, target.lock.install_digest()) / home.MANIFEST_NAME).is_file():
        return False
    return any(not held for _, _, held, _ in wheels)


class _Arrivals:
    """``_fetch`` on a thread of its own, and the lock's wheels in batches as they come into the
    store (``install.Arrivals``): uv installs what has come while the rest downloads.

    A wheel has come when its store file is there with the lock's size: the store publishes a file
    only after its sha256 was checked (``install.fetch``, ``cache.caches``), and a sync that finds it
    there trusts it so. The last batch is the fetch's own result, once every fetch has ended; a fetch
    that failed raises its error there, and the venv built so far is discarded.
    """

    BATCHES = 4  # a batch is at least this share of the lock's wheels (the last: whatever is left)
    POLL = 0.05  # seconds between two looks at the store

    def __init__(self, store: Store, target: SyncTarget, progress: Progress | None) -> None:
        import threading

        # The fetch stage is imported here, on the main thread, not by the fetch's own: it imports typing,
        # and a typing still half-imported by one thread is what dataclasses finds in sys.modules while
        # this thread makes a dataclass (the install's modules): "partially initialized module 'typing'
        # has no attribute 'ClassVar'" (a sync imports typing nowhere else).
        from envlock.install import fetch  # noqa: F401

        self._store, self._target = store, target
        self._done = threading.Event()
        self._got: tuple[FetchResult, int, int] | None = None
        self._error: BaseException | None = None
        thread = threading.Thread(target=self._run, args=(progress,), name="envlock-fetch", daemon=True)
        thread.start()

    def _run(self, progress: Progress | None) -> None:
        try:
            self._got = _fetch(self._store, self._target, progress)
        except BaseException as exc:  # handed to the main thread: said there, as a fetch's error
            self._error = exc
        finally:
            self._done.set()

    def batches(self) -> Iterator[Mapping[str, Path]]:
        from envlock.store.store import store_file, stored

        pending = {p.wheels[0].sha256: p.wheels[0] for p in self._target.lock.packages}
        least = max(1, len(pending) // self.BATCHES)
        while pending:
            if self._done.wait(self.POLL):
                got = self.result()[0].paths()  # the fetch's error, if it failed
                ready = {sha: got[sha] for sha in pending}
            else:
                ready = {sha: path for sha, a in pending.items()
                         if stored(a, path := store_file(self._store, a)) == (True, None)}
                if len(ready) < least:
                    continue
            for sha in ready:
                del pending[sha]
            timings.mark(f"{len(ready)} wheels in the store ({len(pending)} to come)")
            yield ready

    def install(self, run: Callable[[Iterator[Mapping[str, Path]]], InstallResult]) -> InstallResult:
        """``run(self.batches())``. Should it fail while wheels still download, the fetch is waited for
        and its error, if any, is the one raised: as when every fetch ended before the install began."""
        try:
            return run(self.batches())
        except (KeyboardInterrupt, SystemExit):
            raise  # the interrupt ends the downloads (``interrupts``)
        except BaseException:
            self._done.wait()
            if self._error is not None:
                raise self._error from None
            raise

    def result(self) -> tuple[FetchResult, int, int]:
        """``_fetch``'s result, once it ended (its error, if it failed)."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._got is not None
        return self._got


@dataclass(frozen=True)
class _Checked:
    """A venv installed for the lock whose digest is the one it must have."""

    venv: Path
    install_digest: str
    digest: str
    python: str | None  # the interpreter version it was built with
    built: bool  # installed now (False: reused from the store)
    note: str  # a repair said


def _install_checked(store: Store, target: SyncTarget, wheels: Mapping[str, Path],
                     arriving: _Arrivals | None = None) -> _Checked:
    """Install the lock's venv (or reuse it from the store) and hold its digest to the lock's:
    else to this store's earlier generations' of the same lock; repaired once when uv's cache
    held an edited file. A difference that stays is a ``VerifyError``, the venv discarded.
    ``arriving``: the wheels are still being fetched (``wheels`` then empty), installed as they come."""
    from envlock.install import install, uvcache
    from envlock.install.digest import differing_lines, recorded_manifest

    lock, key = target.lock, target.lock.install_digest()
    where = target.lock_path or target.env
    # Generations pointing at the venv entry while it is missing (its folder removed to
    # rebuild it): if this sync builds it and it fails, they had no venv before either.
    entry = install.venv_path(store, key)
    stale = frozenset() if (entry / home.MANIFEST_NAME).is_file() else frozenset(generations.users(store, entry))
    if arriving is None:
        inst = install.install(store, lock, wheels)
    else:
        inst = arriving.install(lambda batches: install.install(store, lock, {}, arriving=batches))
        wheels = arriving.result()[0].paths()  # every wheel in the store by now
    actual = inst.manifest  # walked just now, whether built or reused
    built_with = venv_python(inst.venv)
    expected = lock.venv_digest_for(built_with)
    from_store = False  # ``expected`` is the newest generation's digest here, not the lock's
    if expected is None and not _holds_digest(lock) and (last := generations.digest_seen(store, key, built_with,
                                                                                          entry)):
        # Held to what this lock gave here before: an edit that reached uv's cache is not the lock's first digest.
        expected, from_store = last, True
    whose = "this store's earlier generations'" if from_store else "the lock's"
    repaired = inst.note  # uv's cache repaired on the way (``uvcache.repair_uv_cache``, ``install._build``)
    if inst.edited and actual.digest == expected:  # made again without it: a file was unlike its RECORD
        repaired = (f"the first build differed from {whose} digest; with uv's cache cleared, the rebuild matches; "
                    f"{inst.note}")
    note = ""
    if expected is not None and actual.digest != expected and inst.built:
        # uv's cache holds the venvs' files (hard links): an edit in one that no RECORD catches (``install._build``)
        # is in every venv built after. Once: without that cache, uv unpacks the store's verified wheels again.
        _discard(store, key, inst.venv, actual.digest, stale=stale)
        uvcache.clear_uv_cache(store)
        inst = install.install(store, lock, wheels)
        actual = inst.manifest
        if actual.digest == expected:
            note = (f"the first build differed from {whose} digest; with uv's cache cleared (a file "
                    "edited in a venv had reached it), the rebuild matches")
    if from_store and actual.digest != expected and inst.built:
        # Rebuilt without uv's cache: if the store's wheels still are their sha256 (read once, here), this venv is
        # what the lock gives, and the newest generation's digest was the suspect one (taken with an edit in it).
        from envlock.store.store import check_stored_bytes

        try:
            check_stored_bytes(wheels)
        except StoreError:
            _discard(store, key, inst.venv, actual.digest, stale=stale)  # built from them
            raise
        note = (f"this store's earlier generations of this lock have venv digest {expected}, but a build "
                f"without uv's cache (from the verified wheels) gives {actual.digest}: recorded that one; "
                "verify those generations")
        expected = actual.digest
    if expected is not None and actual.digest != expected:
        reference = recorded_manifest(store.path("manifests", expected), expected)
        raise VerifyError(
            f"{where}: not reproducible: {whose} venv digest is "
            f"{expected}, this sync built {actual.digest}; the env was not switched; "
            + _discard(store, key, inst.venv, actual.digest, stale=stale if inst.built else frozenset()),
            details=differing_lines(reference, actual, expected),
        )
    return _Checked(inst.venv, key, actual.digest, built_with, inst.built,
                    "; ".join(dict.fromkeys(filter(None, [repaired, note]))))


def _new_generation(store: Store, env: str, cur: generations.Generation | None, checked: _Checked,
                    lock_text: str) -> generations.Generation:
    """The generation to flip to: a new one, or the one a sync killed just before its flip
    left for this very venv and lock; refused when its venv is gone meanwhile."""
    generations.check_link(store, env)  # refused before a generation is added, not after
    newest = generations.newest(store, env)
    install_digest = checked.install_digest
    if (newest is not None and (cur is None or newest.number > cur.number)
            and (newest.install_digest, newest.venv_digest, newest.lock_sha256)
            == (install_digest, checked.digest, hashlib.sha256(lock_text.encode()).hexdigest())
            and newest.store_venv == checked.venv):  # not a venv of old
        gen = newest  # written by a sync killed just before its flip: finish its job
    else:
        gen = generations.add(store, env, venv=checked.venv, install_digest=install_digest,
                              venv_digest=checked.digest, lock_text=lock_text, venv_python=checked.python)
    try:
        _still_there(store, install_digest, checked.venv, gen.number)
    except VerifyError:
        generations.discard(store, env, gen.number)  # never to be listed with its venv gone
        raise
    return gen


def _recorded_note(lock: Lock, python: str | None, recorded: bool | None, env: str,
                   lock_path: Path | None) -> str:
    """``_other_python``'s note, saying for a digest taken for other packages whether this
    sync recorded its own in its place (``recorded`` None: not known yet), and how to."""
    note = _other_python(lock, python)
    if lock.venv_digest_stale and recorded is not None:
        if recorded:
            note += "; this venv's digest is recorded in its place"
        elif lock_path is None:
            note += ("; this lock is not written (read from git, or a generation's copy in the store), so it keeps "
                     f"it; `envlock lock {env}` locks the spec anew")
        else:
            note += (f"; the lock keeps it (`envlock sync {env} --lock {lock_path}` records this venv's; "
                     f"`envlock lock {env}` locks the spec anew)")
    return note


def _other_python(lock: Lock, python: str | None) -> str:
    """The note for a venv of another interpreter build than the one the lock's digest was
    recorded with ("" when it is the same, or none was recorded): its pyvenv.cfg differs by
    design, so the digests say nothing about each other. Or for a digest taken for other
    packages (the lock edited by hand since)."""
    if lock.venv_digest_stale:
        return (f"the lock's venv digest was taken for other packages (install digest {lock.venv_install}, the "
                f"lock's now {lock.install_digest()}: edited by hand since), so it was not compared")
    if lock.venv_digest is None or lock.venv_digest_for(python) is not None:
        return ""
    return (f"the lock's venv digest was recorded with Python {lock.venv_python}; this venv was built "
            f"with {python}, so it was not compared (the lock keeps the recorded one)")


def _discard(store: Store, key: str, venv: Path, digest: str, *,
             stale: frozenset[tuple[str, int]] = frozenset()) -> str:
    """After a reproducibility failure: remove the venv entry ``venv``, so the next sync
    builds it anew instead of reusing it and failing the same way; return what was done,
    for the message.

    It is kept, and named, when a generation uses it. Not counted as using it: the
    ``stale`` generations, given when this sync built the entry, which pointed at it
    while it was missing (its folder removed, as the repair of an edited venv asks):
    they had no venv before this sync and must not now resolve to an unverified one. A
    generation another env's sync made meanwhile, reusing this build, does count.
    """
    from envlock.install import install
    from envlock.install.digest import stored_manifest

    with store.locked(install.venv_lock(key)):
        found = stored_manifest(venv)
        if found is None:
            return "that venv was removed by another sync meanwhile"
        if found.digest != digest:
            # Another sync removed it and built it anew meanwhile: that one is not ours to judge.
            return "that venv was rebuilt by another sync meanwhile and is left to it"
        users = [u for u in generations.users(store, venv) if u not in stale]
        if not users:
            store.remove_entry("venvs", install.venv_entry(key))
            return "that venv was removed from the store, so the next sync builds it anew"
    used = ", ".join(f"env {e!r} generation {n}" for e, n in users)
    uses = "uses" if len(users) == 1 else "use"
    return (f"that venv was kept in the store, as {used} {uses} it: once the cause is fixed, "
            f"remove {venv} and sync again to build it anew")


def _still_there(store: Store, key: str, venv: Path, number: int) -> None:
    """Refuse to flip to generation ``number`` if its venv entry is gone.

    A concurrent sync of another env that found this entry not reproducible removes it
    (``_discard``) unless a generation points at it: the generation exists now, so either
    that sync saw it, or the entry is already gone and seen here.
    """
    from envlock.install import install

    with store.locked(install.venv_lock(key)):
        if (venv / home.MANIFEST_NAME).is_file():
            return
    raise VerifyError(f"{venv}: the venv for generation {number} was removed from the store meanwhile "
                      "(a concurrent sync found it not reproducible); the env was not switched")


def quick_noop(store: Store, env: str, lock_path: Path, spec_path: Path | None = None,
               frozen_spec: Path | None = None) -> SyncResult | None:
    """The no-op answer from the env's stamp (see ``envlock.store.noop``), else None.

    ``spec_path`` given: the stamp must also vouch that the lock is current for it.
    No TOML parsing and no packaging import: an up-to-date sync costs little more
    than starting Python.
    """
    started = time.monotonic()
    found = noop.check(str(store.home), env, str(lock_path), None if spec_path is None else str(spec_path),
                        None if frozen_spec is None else str(frozen_spec))
    if found is None:
        return None
    number, install_digest, venv_digest = found
    return SyncResult(env, generations.stable_path(store, env), number, install_digest, venv_digest,
                      noop=True, seconds=time.monotonic() - started)


def _read_optional(path: Path | None) -> bytes | None:
    """The lock file's bytes (None: no file, or none to read)."""
    from envlock.model.lockfile import LockFile

    return None if path is None else LockFile.read(path).data


def _record(lock: Lock, lock_path: Path | None, digest: str, python: str | None,
            frozen: bool) -> tuple[bytes | None, Lock | None, bool]:
    """Read the lock file once; write ``digest`` (taken with ``python``) into it when it has
    none yet and still holds the synced lock (not ``frozen``).

    Returns the file's bytes as they stand after, the lock they hold (None if not the
    synced one, see ``_held``) and whether the digest was recorded.
    """
    data = _read_optional(lock_path)
    on_disk = _held(lock, data, lock_path)
    if frozen or lock_path is None or on_disk is None or _holds_digest(on_disk) or _holds_digest(lock):
        return data, on_disk, False
    recorded = on_disk.with_venv_digest(digest, python)
    text = recorded.to_toml().encode()
    if not replace_if_unchanged(lock_path, data, text):  # another envlock wrote it just now: its lock stands
        data = _read_optional(lock_path)
        return data, _held(lock, data, lock_path), False
    return text, recorded, True


def _holds_digest(lock: Lock) -> bool:
    """Whether ``lock`` records a venv digest for its packages (one taken for others is replaced)."""
    return lock.venv_digest is not None and not lock.venv_digest_stale


def _held(lock: Lock, data: bytes | None, lock_path: Path | None) -> Lock | None:
    """The lock the file's ``data`` holds, if it has the synced lock's wheels, else None.

    ``envlock lock`` may have rewritten the file meanwhile. Our writer is deterministic,
    so a file holding exactly the synced lock's text needs no second parse.
    """
    from envlock.model.lockfile import Lock as _Lock

    if data is None or lock_path is None:
        return None
    if data == lock.to_toml().encode():
        return lock
    try:
        on_disk = _Lock.from_toml(data.decode("utf-8"), lock_path)
    except (LockError, UnicodeDecodeError):
        return None
    return on_disk if on_disk.install_digest() == lock.install_digest() else None


def _sha256_of(data: bytes | None) -> str | None:
    """The sha256 of the lock file's bytes as ``_record`` read them (None: not read)."""
    return hashlib.sha256(data).hexdigest() if data is not None else None


def _stamp(store: Store, target: SyncTarget, number: int, venv_digest: str, data_sha256: str | None,
           on_disk: Lock | None) -> str:
    """Write the fast no-op stamp for generation ``number`` (call under the env lock).

    Only when the lock file's bytes (their sha256 ``data_sha256``, holding ``on_disk``) still hold the
    lock just synced; otherwise the stamp is removed and the next sync takes the full path. Returns a
    note when it could not be written ("" else): the env is current by then, and a missing stamp
    costs only the next no-op its fast path."""
    lock, inputs, spec = target.lock, target.inputs, target.spec_input
    stamp = generations.env_dir(store, target.env) / noop.STAMP
    if (
        data_sha256 is None or on_disk is None
        or on_disk.venv_digest not in (None, venv_digest)
        or (on_disk.spec_digest, on_disk.sources) != (lock.spec_digest, lock.sources)
        or any("\n" in p for p in [*(inputs or {}), *(spec or ())])
    ):
        stamp.unlink(missing_ok=True)
        return ""
    text = noop.stamp_text(number, lock.install_digest(), venv_digest, data_sha256,
                            dict(inputs) if inputs is not None else None, dict(spec) if spec else None)
    try:
        write_atomic(stamp, text.encode())
    except OSError as exc:  # a full disk, say
        return f"{stamp}: not written ({exc.strerror or exc}); the next sync takes the full path, not the fast no-op"
    return ""


def venv_python(venv: Path) -> str | None:
    """The interpreter version a venv was built with (``version_info`` in its ``pyvenv.cfg``)."""
    return home.pyvenv_value(venv, "version_info")
