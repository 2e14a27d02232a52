"""``envlock sync``: plan which lock to make current and what must happen first, then do it.

The plan (``plan``) reads the spec and the lock and decides, without network: the lock
to sync (the workspace's, or one named ``--lock PATH[@REV]``), whether it must be locked
anew first (missing or stale for the spec, unless ``--frozen``), whether local builds may
run (not ``--offline``, not a ``--lock`` sync), the mirrors, and what the no-op stamp may
vouch for. Doing it (``sync``) relocks, builds what the wheelhouse lacks, and hands the
lock to ``realize`` (fetch -> install -> verify -> flip).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from envlock import timings
from envlock.commands.lockrefs import load_env_lock_ref
from envlock.commands.realize import SyncResult, SyncTarget, realize
from envlock.errors import BuildError, EnvlockError, FetchError, LockError, SpecError, UsageError
from envlock.model.lockfile import Lock, canonicalize_name, read_lock
from envlock.model.mirrors import MirrorOptions, Mirrors, index_mirrors, index_vars_set, source_mirrors
from envlock.store.home import file_sha256
from envlock.store.lockdocs import EnvLockDocs
from envlock.store.store import Store
from envlock.workspace import Workspace, names_a_cache

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from envlock.cache.caches import Caches
    from envlock.commands.build import BuildOptions, BuildReport
    from envlock.model.spec import EnvSpec
    from envlock.progress import Progress


@dataclass(frozen=True)
class SyncOptions:
    """What the command line asks of a sync."""

    frozen: bool = False  # never write the lock; a missing lock is an error
    offline: bool = False  # download nothing
    lock_ref: str | None = None  # ``--lock PATH[@REV]``: sync that lock as it is
    mirrors: MirrorOptions = field(default_factory=MirrorOptions)
    trusted_keys: tuple[str, ...] = ()  # --trusted-key NAME:BASE64: build records signed by these are used
    target: str | None = None  # --target NAME: of a spec of several targets (None: this machine's)


@dataclass(frozen=True)
class SyncPlan:
    """What a sync will do, decided before any of it is done."""

    env: str
    options: SyncOptions
    mirrors: Mirrors
    lock: Lock | None  # the lock as found (None: missing, written by the relock)
    lock_path: Path | None  # where the venv digest may be written back (None: nowhere)
    relock: bool  # lock the spec anew first (the lock is missing or stale)
    builds: bool  # local builds may run first (the workspace's lock, online)
    spec: EnvSpec | None = None  # the workspace's spec (a --lock sync: read for its mirrors only)
    spec_sha: str = ""  # sha256 of the spec file's bytes
    base_dir: Path | None = None  # where the lock's relative ``path`` wheels are found
    local_wheels: Mapping[str, list[Path]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # said at the end (why no mirror was applied)
    whole: EnvSpec | None = None  # a spec of several targets: all of them, what a relock locks (``spec``: the view)


def plan(ws: Workspace, env: str, options: SyncOptions) -> SyncPlan:
    """Decide what ``sync`` does, reading the spec and the lock (no network, no writes).

    Usage and input errors come out here, before any work: an option the sync cannot use,
    another env's lock, a lock that records no build of a package it must build first."""
    if options.offline and options.mirrors.indexes:
        raise UsageError("--index: --offline downloads nothing, so no mirror is read; drop one of the two")
    return _plan_ref(ws, env, options) if options.lock_ref is not None else _plan_workspace(ws, env, options)


def sync(ws: Workspace, env: str, options: SyncOptions, *, progress: Progress | None = None,
         on_build: Callable[[str, str], None] | None = None, store: Store | None = None) -> SyncResult:
    """Make ``env`` match its lock (``options.lock_ref`` names another) and say what happened.

    Without ``lock_ref`` a missing or stale lock is locked anew first, unless ``frozen``.
    The venv digest is written back only to a lock file in the working tree, never to a
    ``PATH@REV``. ``on_build(name, input digest)`` is called before each local build this
    sync runs (minutes to hours). ``store``: the store, if the caller opened it already.
    """
    started = time.monotonic()
    todo = plan(ws, env, options)
    timings.mark("plan: the spec and the lock read")
    with todo.mirrors.credentials():  # a private index's: for a relock, the builds and the downloads
        result = _sync(ws, todo, store, progress, on_build)
    return replace(result, seconds=time.monotonic() - started)


def _sync(ws: Workspace, todo: SyncPlan, store: Store | None, progress: Progress | None,
          on_build: Callable[[str, str], None] | None) -> SyncResult:
    """Carry ``todo`` out: relock, build, realize (with the store opened once, here if not before)."""
    env, options = todo.env, todo.options
    lock, downloaded, fetched = todo.lock, 0, 0
    relocked = False
    recorded: tuple[str, ...] = ()  # the builds whose records this sync wrote into the lock
    changed = ""  # the same, as a detail of an error that comes after it
    caches = _caches(ws, todo)
    store = store if store is not None else Store.open()
    if todo.relock:
        from envlock.commands.lock import LockOptions, lock_spec  # lazy, with building below: docs/architecture.md

        assert todo.spec is not None
        locked = lock_spec(ws, env, todo.whole or todo.spec, todo.mirrors, store,
                           LockOptions(progress=progress, caches=caches, target=todo.spec.target))
        lock, relocked = locked.lock, locked.changed
        downloaded, fetched = locked.downloaded + locked.build_downloaded, locked.build_fetched
        # The relock read the workspace's specs for the stray note already; its guards' notes go along.
        stray = "; ".join(n for n in (locked.note, *locked.notes) if n)
    else:
        stray = todo.mirrors.stray_note(ws)  # "" offline: no index is read
    assert lock is not None  # frozen: read_lock raised; else lock_env returned the lock it wrote
    if todo.builds and todo.spec is not None and todo.spec.builds and todo.lock_path is not None:
        from envlock.commands import build

        # Offline, nothing is built (a build resolves its requirements against the index; `envlock
        # build --offline` rebuilds from the store): a locally built wheel then comes from the store,
        # or is named missing by fetch.
        before = lock
        lock, report = _ensure_builds(ws, todo, lock, store, build.BuildOptions(
            frozen=options.frozen, progress=progress, on_build=on_build, caches=caches))
        if report is not None:  # the env's wheels a non-isolated build needed were fetched for it
            downloaded, fetched = downloaded + report.downloaded, fetched + report.fetched
            if report.lock_changed:  # the lock file changed: said, as the venv digest's record is
                recorded = tuple(n for n, r in sorted(lock.builds.items()) if before.builds.get(n) != r)
                changed = (f"the lock file changed before this: {ws.relative(todo.lock_path)} records "
                           f"{', '.join(recorded)}'s new build")
    target, stale = _target(ws, todo, lock)
    target = replace(target, caches=caches)
    if caches is not None and options.lock_ref is not None and lock.builds:  # it builds nothing: a cache may
        from envlock.cache.refbuilds import builds_from_caches

        assert target.base_dir is not None
        target = replace(target, local_wheels=builds_from_caches(caches, store, lock, target.base_dir,
                                                                 target.local_wheels))
    try:
        result = realize(store, target, progress)
    except EnvlockError as exc:
        said = []
        if isinstance(exc, FetchError):  # what a cache was refused for says why it did not give the missing file
            said += [*filter(None, [todo.mirrors.index_hint(exc)]), *(caches.notes if caches is not None else [])]
        said += [changed] if changed else []  # the lock file changed before the failure: said all the same
        if not said:
            raise
        raise exc.with_details(*said) from None
    machine = _other_targets(todo)
    if lock.kernels:  # lazy: only a lock that records kernels ([env] gpus) asks this machine's driver
        from envlock.commands.kernels import machine_note

        machine = "; ".join(n for n in (machine, machine_note(lock)) if n)
    # The whole sync: a relock and builds come before realize's own clock starts. Wheels
    # the relock downloaded to hash them are in the store now: this sync downloaded them.
    return replace(result, downloaded=result.downloaded + downloaded, fetched=result.fetched + fetched,
                   relocked=relocked, builds_recorded=recorded,
                   note="; ".join(n for n in (result.note, *todo.notes, stale, stray,
                                              caches.summary() if caches is not None else "", machine) if n))


def _other_targets(todo: SyncPlan) -> str:
    """What a sync of one target of several says of the others ("": a spec of one target)."""
    if todo.whole is None or todo.spec is None:
        return ""
    others = [f"{n} ({t.platform})" for n, t in sorted(todo.whole.targets.items()) if n != todo.spec.target]
    return (f"synced target {todo.spec.target} ({todo.spec.platform}); the lock's other targets, "
            f"{', '.join(others)}, are made (and their builds run) on machines of their platforms")


def _ensure_builds(ws: Workspace, todo: SyncPlan, lock: Lock, store: Store,
                   options: BuildOptions) -> tuple[Lock, BuildReport | None]:
    """Before the venv: build what the spec's ``[builds.*]`` need and the wheelhouse lacks.

    Unfrozen, the lock gets the build records; ``--frozen`` rebuilds only to restore a
    recorded wheel and fails if the rebuild is not bit-identical to it. Returns the lock
    and the report of the builds run (None: none were needed).
    """
    from envlock.commands.build import build_spec

    spec, lock_path, frozen, caches = todo.spec, todo.lock_path, options.frozen, options.caches
    assert spec is not None and lock_path is not None
    env = spec.name
    missing = _unbuilt(spec, lock, lock_path)
    if not missing:
        return lock, None
    if caches is not None:  # trusted builds of the lock's very records, from a binary cache: no planning
        from envlock.cache.caches import builds_into_wheelhouse

        missing = builds_into_wheelhouse(caches, store, lock, lock_path, missing)
        if not missing:
            return lock, None
    report = build_spec(ws, spec, todo.mirrors, store, missing, options)
    if not frozen:
        return report.new_lock, report
    for w in report.builds:
        recorded = lock.builds.get(w.name)
        if recorded is None:
            raise LockError(f"{lock_path}: --frozen, but the lock has no build of {w.name}; "
                            f"run `envlock build {env}` first")
        if recorded.sha256 != w.sha256:  # same inputs (build_env refuses moved ones), other bytes
            raise BuildError(
                f"{ws.relative(lock_path)}: --frozen: rebuilt {w.filename} is not the recorded wheel (recorded "
                f"sha256 {recorded.sha256}, rebuilt {w.sha256}, input digest unchanged): the build is not "
                f"reproducible; `envlock build {env} {canonicalize_name(w.name)} --check` names the files "
                "that differ")
    return lock, report


def _unbuilt(spec: EnvSpec, lock: Lock, lock_path: Path) -> tuple[str, ...]:
    """The spec's builds whose wheel the lock does not record, or records at a path that does not
    hold it (sha256 compared)."""
    missing = []
    for b in spec.builds.values():
        recorded = lock.builds.get(b.name)
        package = lock.package(b.name)
        art = package.wheels[0] if package is not None else None
        if recorded is None or art is None or art.path is None:
            missing.append(b.name)
            continue
        # Streamed: a local build can be hundreds of MB.
        if file_sha256(str(lock_path.parent / art.path)) != art.sha256:
            missing.append(b.name)
    return tuple(missing)


def _caches(ws: Workspace, todo: SyncPlan) -> Caches | None:
    """The binary caches of ``envlock.toml`` and the environment (None: none, or ``--offline``)."""
    if todo.options.offline:
        return None
    if not names_a_cache(ws):
        return None  # its module, ~10 ms of imports, not loaded
    from envlock.cache.caches import Caches

    return Caches.configured(ws, todo.options.trusted_keys)


def _target(ws: Workspace, todo: SyncPlan, lock: Lock) -> tuple[SyncTarget, str]:
    """The ``SyncTarget`` for ``lock``, and the note of a frozen sync whose lock the spec moved past."""
    options, spec = todo.options, todo.spec
    target = SyncTarget(todo.env, lock, todo.lock_path, frozen=options.frozen or todo.lock_path is None,
                        offline=options.offline, base_dir=todo.base_dir,
                        package_mirrors=todo.mirrors.for_packages(lock), local_wheels=todo.local_wheels)
    if spec is None or todo.lock_path is None or options.lock_ref is not None:
        return target, ""
    from envlock.resolution.drift import frozen_drift, frozen_stamp_inputs, stamp_inputs  # as in _plan_workspace

    if not options.frozen:
        return replace(target, inputs=stamp_inputs(ws, spec, todo.spec_sha, lock, todo.lock_path)), ""
    moved = frozen_drift(ws, spec, lock)
    if not moved.reasons and not moved.unreadable:
        return replace(target, spec_input=frozen_stamp_inputs(ws, spec, todo.spec_sha, lock)), ""
    # Synced as it is, as asked; but the spec and the patches ask for something else now, or
    # a source tree cannot be read.
    env, lock_path = todo.env, todo.lock_path
    said = ([f"{ws.relative(lock_path)} is stale for {ws.relative(spec.path)} (" + "; ".join(moved.reasons)
             + f"): --frozen synced the lock as it is; `envlock lock {env}` locks the spec anew"]
            if moved.reasons else [])
    said += [f"{problem} (--frozen reads no source; `envlock lock {env}` and a build refuse it until it is fixed)"
             for problem in moved.unreadable]
    return target, "; ".join(said)


def _plan_ref(ws: Workspace, env: str, options: SyncOptions) -> SyncPlan:
    """A ``--lock PATH[@REV]`` sync: that lock as it is, never relocked nor built; the spec, if it
    reads, only says which packages come from which (mirrored, private) index."""
    spec_file = ws.root / "envs" / f"{env}.toml"
    given = [f"--index {n}" for n in options.mirrors.indexes] + [f"--source {n}" for n in options.mirrors.sources]
    if given and not spec_file.is_file():
        raise UsageError(f"{given[0]}=...: mirrors are named by the spec's indexes and sources, and env {env!r} has "
                         f"no spec ({ws.relative(spec_file)})")
    mirrors, notes = Mirrors(), []
    if not options.offline and spec_file.is_file():
        from envlock.model.spec import load_env_spec  # packaging's parsers: not for a --lock sync without a spec

        try:
            spec = load_env_spec(ws, env, check_paths=False)
        except SpecError:
            if options.mirrors.indexes or options.mirrors.sources:
                raise
            if index_vars_set():  # only ENVLOCK_INDEX_* asked: `--lock` syncs as it is, and says so
                notes.append(f"ENVLOCK_INDEX_* is set, but {ws.relative(spec_file)} does not read (`envlock lock "
                             f"{env} --check` says why), so no mirror was applied to this sync's downloads")
        else:
            # A --source is checked as every command checks it, and unused: this sync fetches no source.
            source_mirrors(spec, options.mirrors.sources)
            mirrors = Mirrors(spec, index_mirrors(spec, options.mirrors.indexes))
    assert options.lock_ref is not None
    ref = load_env_lock_ref(ws, options.lock_ref, env, "sync", options.target, docs=EnvLockDocs(env))
    if ref.lock.target is not None and ref.lock.platform and not _runs_here(ref.lock.platform):
        raise UsageError(f"{ref.label}: target {ref.lock.target} ({ref.lock.platform}) does not run on this machine: "
                         "its venv is made on a machine of its platform")
    if unbuilt := ref.lock.unbuilt():
        # As it is, it would make a venv without the kernel: never silently.
        how = (f"check that revision's envs/, locks/ and patches/ out and run `envlock sync {env}` there, "
               "which builds" if ref.path is None else
               f"build first, or run `envlock sync {env}`, which builds")
        raise LockError(f"{ref.label}: records no build of {', '.join(unbuilt)} (its spec declares "
                        f"{', '.join('[builds.' + n + ']' for n in unbuilt)}; the lock was written before "
                        f"`envlock build {env}`); {how}")
    # A lock copied out of locks/: its built wheels are named from there.
    local = _local_wheels(ws, ref.lock, ref.folder) if ref.path is not None else {}
    return SyncPlan(env, options, mirrors, ref.lock, ref.path if ref.writable else None, relock=False, builds=False,
                    base_dir=ref.folder, local_wheels=local, notes=tuple(notes))


def _plan_workspace(ws: Workspace, env: str, options: SyncOptions) -> SyncPlan:
    """A sync of the workspace's lock of ``env``: locked anew first when missing or stale."""
    frozen, offline = options.frozen, options.offline
    spec_path = ws.spec_path(env)  # an unknown env is a usage error before anything else
    lock_path = ws.lock_path(env)
    # One read of each file: the spec parsed is the spec hashed for the no-op stamp.
    # Frozen, the lock is synced as it is: the sources are read only if a build is missing.
    from envlock.model.spec import read_spec  # packaging's parsers: not for a --lock sync without a spec
    from envlock.resolution.drift import NO_GRAPH, drift, unvouched  # a --lock sync reads no spec's drift

    whole, spec_bytes = read_spec(spec_path, name=env, root=None if frozen else ws.root)
    spec = whole.on_this_machine(options.target)  # a spec of several targets: this machine's
    mirrors = Mirrors.of(spec, options.mirrors, read_indexes=not offline)
    # whole: a one-target lock the spec (now of targets) has moved past reads, to be relocked
    found = (read_lock(lock_path, spec.target, whole=True, docs=EnvLockDocs(env))
             if frozen or lock_path.exists() else None)
    if found is not None and found.env != env:
        # As for --lock: the env's generations would hold another env's packages.
        raise UsageError(f"{ws.relative(lock_path)}: the lock of env {found.env!r}, not {env!r}; expected "
                         f"the lock of env {env!r} there (`envlock lock {env}` writes it anew)")
    if offline and found is not None and (unbuilt := found.unbuilt()):
        raise LockError(f"{ws.relative(lock_path)}: --offline, but the lock records no build of "
                        f"{', '.join(unbuilt)} (building needs the index); run `envlock sync {env}` online")
    if frozen and found is not None and (unbuilt := found.unbuilt()):
        # Before anything is built: a frozen sync could only refuse after the build.
        raise LockError(f"{ws.relative(lock_path)}: --frozen, but the lock records no build of "
                        f"{', '.join(unbuilt)}; run `envlock build {env}` (or sync without --frozen)")
    given = mirrors.indexes if not offline else None  # offline: the variables' (no --index is read)
    unknown = unvouched(spec, found, given) if frozen and found is not None else []
    if refused := [reason for reason in unknown if reason != NO_GRAPH]:
        # Synced as it is, such a package would be installed: a frozen sync refuses what a relock would drop.
        raise LockError(f"{ws.relative(lock_path)}: --frozen, but the spec does not vouch for what it locks; "
                        f"nothing was installed. `envlock lock {env}` locks the spec anew", details=refused)
    notes = [f"{ws.relative(lock_path)} records no dependency graph (written before envlock recorded "
             "[tool.envlock.requires]): --frozen held its packages to the spec's indexes and builds only; "
             f"`envlock lock {env}` records it"] if unknown else []
    stale = None if frozen or found is None else drift(ws, env, spec, found, mirrors=given)
    relock = not frozen and (stale is None or not stale.current)
    if relock and offline:
        why = "missing" if stale is None else "stale (" + "; ".join(stale.reasons) + ")"
        raise LockError(f"{ws.relative(lock_path)}: {why}; --offline cannot lock (that needs the indexes): "
                        f"run `envlock lock {env}` where they are reachable"
                        + ("" if stale is None else ", or sync the lock as it is with --frozen --offline"))
    return SyncPlan(env, options, mirrors, found, lock_path, relock=relock, builds=not offline, spec=spec,
                    spec_sha=hashlib.sha256(spec_bytes).hexdigest(), notes=tuple(notes),
                    whole=whole if whole.targets else None)


def _local_wheels(ws: Workspace, lock: Lock, folder: Path) -> dict[str, list[Path]]:
    """sha256 -> the files to copy each relative ``path`` wheel of ``lock`` (read from ``folder``)
    from, in the order to try them: beside ``folder``, and in the workspace's ``locks/`` (`envlock
    lock` writes them relative to it: ``../wheelhouse/...``), those of the locked size first.
    Each is held to the locked sha256 as it is copied in; the first that is, is taken."""
    out = {}
    for pkg in lock.packages:
        art = pkg.wheels[0]
        if art.path is None or Path(art.path).is_absolute():
            continue
        found = []
        for base in (folder, ws.root / "locks"):
            try:
                found.append((art.size not in (None, (base / art.path).stat().st_size), base / art.path))
            except OSError:
                continue
        if found:
            out[art.sha256] = [path for _, path in sorted(found, key=lambda item: item[0])]
    return out


def _runs_here(platform: str) -> bool:
    """Whether a machine of ``platform`` is this one (packaging's parsers: only for a lock of targets)."""
    from envlock.model.targets import runs_here

    return runs_here(platform)
