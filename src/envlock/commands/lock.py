"""``envlock lock`` and ``lock --check``: a spec resolved into its lock.

``lock_env`` is the recipe: read the spec and the lock it replaces, prepare the patched
sources (built packages' metadata comes from them), resolve with the pinned uv, keep the
build records whose inputs did not move, and write the lock only if its bytes changed and
nobody else wrote it meanwhile. ``check_lock`` answers from the ``Drift`` (current or stale),
and notes each locked file its index now marks yanked (``yanks``: never a change of answer). A lock is
named to ``sync --lock``, ``verify --lock`` and ``diff`` as a path, ``PATH@GITREV`` or an env
name (``load_lock_ref``).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock import timings
from envlock.errors import (
    BuildError,
    EnvlockError,
    FetchError,
    LockChangedError,
    LockError,
    PackageIndexError,
    ResolveError,
    SpecError,
    raise_all,
)
from envlock.model import multilock
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Artifact, Lock, LockFile, canonicalize_name, read_lock, read_lock_bytes
from envlock.model.mirrors import MirrorOptions, Mirrors, missing_folder
from envlock.model.spec import load_env_spec
from envlock.model.targets import pick
from envlock.model.tomlio import load_toml
from envlock.resolution import guards, yanks
from envlock.resolution.drift import drift
from envlock.store.store import Store, replace_if_unchanged
from envlock.workspace import Workspace

if TYPE_CHECKING:
    # The build machinery (commands.buildsession: builder, patches, source and toolchain inputs, ~40 ms
    # of imports) is imported only for a spec with sources or builds.
    from envlock.build.inputs import FetchedInput
    from envlock.cache.caches import Caches
    from envlock.commands.buildsession import BuildSession, SourceState
    from envlock.install.fetch import FetchResult
    from envlock.model.spec import EnvSpec
    from envlock.net.indexes import Listings
    from envlock.progress import Progress
    from envlock.resolution.resolve import HashUnlisted, Resolution
    from envlock.resolution.uvahead import Ahead


@dataclass(frozen=True)
class LockResult:
    """What ``envlock lock`` did; doubles as its ``--json`` output."""

    env: str
    path: Path
    changed: bool  # the file's bytes changed
    packages: int  # the env's packages, those of builds not run yet included
    nightlies: Mapping[str, str] = field(default_factory=dict)  # name -> exact version
    mirrors: Mapping[str, str] = field(default_factory=dict)
    lock: Lock | None = field(default=None, repr=False)  # what the file now holds
    downloaded: int = 0  # bytes, to hash wheels an index publishes no hash for
    note: str = ""  # e.g. a mirror variable that names no index
    # The guards' notes: a dead exclude, a newly beating override, an undeclared FetchContent input.
    notes: tuple[str, ...] = ()
    # The env's wheels brought into the store to compute a non-isolated build's input digest.
    build_downloaded: int = 0  # bytes
    # Each package whose version the relock moved (an unchanged spec too: a new release on the index).
    moved: tuple[tuple[str, str | None, str | None], ...] = ()  # (name, old or None, new or None)
    build_fetched: int = 0
    # Each build of the old lock whose inputs moved -> the toolchain lines its rebuild resolves to now.
    planned_toolchains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # A spec of several targets: each target's own result (its lock, nightlies, builds pending); ``lock``
    # above is then the target asked for (``LockOptions.target``), else this machine's, else the first.
    targets: Mapping[str, LockResult] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        doc = json_doc(self, keys={"path": "lock"}, omit=("lock", "build_fetched", "planned_toolchains", "targets"),
                       extra={"unbuilt": list(self.lock.unbuilt()) if self.lock is not None else [],
                              "moved": [{"package": name, "old": a, "new": b} for name, a, b in self.moved]})
        if self.targets:
            doc["targets"] = {name: {"platform": r.lock.platform if r.lock is not None else None,
                                     "python": r.lock.python if r.lock is not None else None,
                                     "packages": r.packages, "nightlies": dict(r.nightlies),
                                     "unbuilt": list(r.lock.unbuilt()) if r.lock is not None else []}
                              for name, r in sorted(self.targets.items())}
        return doc


@dataclass(frozen=True)
class LockOptions:
    """How ``lock_spec`` locks, and whom it tells."""

    # False: the lock file is left as it is; the result's ``lock`` and ``changed`` say what it would hold
    # (an upgrade writes it with the edited spec, or not at all under --dry-run).
    write: bool = True
    progress: Progress | None = None  # of the downloads that hash wheels an index publishes no hash for
    # Asked before a wheel is downloaded to hash it (signed URL records, ``cache.urlrecords``).
    caches: Caches | None = None
    # A spec of several targets: the target whose lock the result carries (None: this machine's).
    target: str | None = None
    # uv started ahead on this lock's recorded run (``resolution.uvahead``; a lock of one target only).
    ahead: Ahead | None = None


def lock_env(ws: Workspace, env: str, asked: MirrorOptions | None = None,
             progress: Progress | None = None, *, caches: Caches | None = None, ahead: Ahead | None = None,
             ) -> LockResult:
    """``envlock lock ENV``: resolve ``envs/ENV.toml`` and write ``locks/pylock.ENV.toml`` (bytes
    unchanged if nothing changed), reading the mirrors ``asked`` and the environment names.
    ``progress``: of the downloads that hash wheels an index publishes no hash for; ``caches``:
    asked for those wheels first (signed URL records), and what was said of them in the notes;
    ``ahead``: uv started ahead for this lock (``resolution.uvahead.ahead_of_lock``), else started here."""
    from envlock.resolution import uvahead

    # uv on what it was handed last for this lock, while the spec, the old lock and the index pages are
    # read; taken only if handed the same now (ended otherwise, and at the latest here).
    with closing(ahead or uvahead.ahead_of_lock(ws.spec_path(env), ws.lock_path(env), _asked(asked))) as started:
        spec = load_env_spec(ws, env)
        mirrors = Mirrors.of(spec, asked)
        result = lock_spec(ws, env, spec, mirrors, Store.open(),
                           LockOptions(progress=progress, caches=caches, ahead=started))
    said = caches.summary() if caches is not None else ""
    return replace(result, notes=(*result.notes, said)) if said else result


def _asked(asked: MirrorOptions | None) -> Mapping[str, str]:
    return asked.indexes if asked is not None else {}


def lock_spec(ws: Workspace, env: str, spec: EnvSpec, mirrors: Mirrors, store: Store,
              options: LockOptions | None = None) -> LockResult:
    """``lock_env`` for a spec read, mirrors found and a store opened already (a sync that relocks, an
    upgrade, a bisect over nightly dates)."""
    # A private index's wheels are hashed with its password. Under the store's writer lock (shared,
    # as a sync's): a gc beside waits, and never removes a source or wheel the relock reads.
    with mirrors.credentials(), store.writing():
        if spec.targets:
            return _lock_targets(ws, env, spec, mirrors, store, replace(options or LockOptions(), ahead=None))
        return _lock_spec(ws, env, spec, mirrors, store, options or LockOptions())


def _lock_targets(ws: Workspace, env: str, spec: EnvSpec, mirrors: Mirrors, store: Store,
                  options: LockOptions) -> LockResult:
    """Every target of ``spec`` locked on its own (``_lock_spec`` of its view), checked across them
    (``resolution.multitarget``), and written as one file (``model.multilock``)."""
    from envlock.net.indexes import Listings
    from envlock.resolution import multitarget, resolve

    old_file = LockFile.read(ws.lock_path(env))
    olds = _old_targets(old_file)
    urls = resolve.index_urls(spec, mirrors.indexes)
    kept = {name: {pkg: pin.date for pkg, pin in old.nightlies.items()} for name, old in olds.items()}
    with Listings() as listings:
        multitarget.check_dates(spec, urls, listings, kept)
        # The targets at once: each is mostly uv and the index's answers (another process, the network), so
        # two targets take about the time of one where a core is free (benchmarks/lock.py --targets).
        with ThreadPoolExecutor(max_workers=len(spec.targets)) as pool:
            running = {name: pool.submit(_lock_target, ws, env, spec.for_target(name), mirrors, store, options,
                                         (old_file, olds.get(name)), listings)
                       for name in sorted(spec.targets)}
            results = {name: future.result() for name, future in running.items()}
        locks = {name: r.lock for name, r in results.items() if r.lock is not None}
        split = multitarget.cuda_traps(spec, locks, urls, listings)
    texts = {name: multilock.TargetText(lock.platform or "", lock.python, lock.target_toml())
             for name, lock in locks.items()}
    text = multilock.merge(env, texts)
    changed = old_file.text != text
    if changed and options.write and not replace_if_unchanged(old_file.path, old_file.data, text.encode()):
        raise LockChangedError(f"{ws.relative(old_file.path)}: changed by another envlock while this one resolved; "
                               f"nothing written. Run `envlock lock {env}` again")
    chosen = _chosen(spec, options.target)
    lock = replace(locks[chosen], multi=multilock.Multi(chosen, env, {n: t for n, t in texts.items() if n != chosen}))
    first = results[chosen]
    notes = [f"targets.{name}: {note}" for name, r in results.items() for note in r.notes]
    return replace(first, path=old_file.path, changed=changed, lock=lock, targets=results,
                   packages=len({(p.name, p.version) for r in results.values() if r.lock for p in r.lock.packages}),
                   nightlies={f"{name}: {pkg}": v for name, r in results.items() for pkg, v in r.nightlies.items()},
                   notes=(*dict.fromkeys(notes), *split),
                   moved=tuple(m for r in results.values() for m in r.moved),
                   downloaded=sum(r.downloaded for r in results.values()),
                   build_downloaded=sum(r.build_downloaded for r in results.values()))


def _lock_target(ws: Workspace, env: str, view: EnvSpec, mirrors: Mirrors, store: Store, options: LockOptions,
                 prior: tuple[LockFile, Lock | None], listings: Listings) -> LockResult:
    """One target's lock (``view``: the spec as it sees it), not written; an error names the target."""
    try:
        return _lock_spec(ws, env, view, mirrors, store, replace(options, write=False), prior=prior,
                          listings=listings)
    except EnvlockError as exc:
        raise exc.with_details(f"(target {view.target}: {view.platform}, python {view.python}; each target is "
                               "locked on its own)") from None


def _old_targets(old_file: LockFile) -> dict[str, Lock]:
    """Each target's lock of the file a multi-target lock replaces ({}: none, or not one of several targets)."""
    if old_file.text is None:
        return {}
    try:
        return Lock.targets_of(load_toml(old_file.text, old_file.path, LockError), old_file.path)
    except LockError:
        return {}


def _chosen(spec: EnvSpec, asked: str | None) -> str:
    """The target a multi-target lock result carries: ``asked``, else this machine's, else the first."""
    return pick({n: t.platform for n, t in spec.targets.items()}, asked, str(spec.path), whole=True)


@dataclass(frozen=True)
class _Relock:
    """What one relock reads, gathered once: for the resolution and the guards."""

    ws: Workspace
    env: str
    spec: EnvSpec
    mirrors: Mirrors
    store: Store
    old: Lock | None  # the lock it replaces: its hashes, nightlies and builds are kept where they hold
    states: Mapping[str, SourceState]  # the spec's sources, prepared and patched
    progress: Progress | None = None
    listings: Listings | None = None  # index pages shared by the targets of one lock (None: the resolution's own)
    ahead: Ahead | None = None  # uv started ahead (``LockOptions.ahead``)


def _lock_spec(ws: Workspace, env: str, spec: EnvSpec, mirrors: Mirrors, store: Store,
               options: LockOptions, prior: tuple[LockFile, Lock | None] | None = None,
               listings: Listings | None = None) -> LockResult:
    """One target's lock (``prior``: the file it replaces and the lock of this target read out of it;
    ``listings``: the index pages the targets share)."""
    from envlock.net import http
    from envlock.resolution import resolve

    urls = resolve.index_urls(spec, mirrors.indexes)
    _check_folders(spec, mirrors, urls)
    old_file = LockFile.read(ws.lock_path(env)) if prior is None else prior[0]
    old = old_file.lock if prior is None else prior[1]
    # Patched source trees: built packages' metadata (and so their dependencies) comes from them.
    # Every git or URL input (sources, FetchContent) is fetched first: an unreachable one fails
    # the lock before a wheel is downloaded, all of them named together.
    states, inputs = sources_for_lock(ws, spec, store, old, mirrors)
    timings.mark("lock: the spec, the old lock and the sources read")
    relock = _Relock(ws, env, spec, mirrors, store, old, states, options.progress, listings, options.ahead)
    hashing = None
    if options.caches is not None:  # lazy: only where a cache is named (docs/architecture.md)
        from envlock.cache.urlrecords import CachedHashing

        hashing = CachedHashing(options.caches)
    resolution = _resolve(relock, urls, hashing)
    timings.mark("lock: resolved (the nightlies, the pins, uv)")
    guarded = _guard(relock, resolution)  # an overlap fails here: nothing written
    timings.mark("lock: the guards")
    lock = Lock(
        env=env, python=spec.python, platform=spec.platform, spec_digest=spec.digest(),
        spec_keys=spec.key_digests(), packages=resolution.packages, requires_python=resolution.requires_python,
        nightlies=resolution.nightlies, sources={name: state.locked() for name, state in states.items()},
        overridden=guarded.overridden, allowed_overlaps=guarded.allowed, requires=guarded.requires,
    )
    for_builds: tuple[FetchResult, ...] = ()
    planned_toolchains: dict[str, tuple[str, ...]] = {}
    if spec.builds:  # without builds there are no FetchContent pins and no build records to carry
        from envlock.commands.buildsession import BuildSession

        # Unchanged build inputs keep their wheel (build requirements resolved on the same index URL).
        session = BuildSession(ws, spec, store, states, lock, urls[spec.default_index.name], mirrors,
                               options.progress, inputs=inputs)
        lock = replace(lock, fetchcontent=session.pins())
        lock, for_builds, planned_toolchains = carry_builds(replace(session, lock=lock), old)
    gpu_notes: list[str] = []
    if spec.gpus:  # lazy: only an env that names GPUs reads its wheels' binaries (docs/gpus.md)
        from envlock.commands import kernels

        lock, gpu_notes = kernels.check_lock(spec, store, lock, ws.lock_path(env).parent, mirrors, options.progress)
    if old is not None and old.install_digest() == lock.install_digest() and not old.venv_digest_stale:
        # Same wheels: the recorded venv digest holds (not one taken for wheels since edited away).
        lock = replace(lock, venv_digest=old.venv_digest, venv_python=old.venv_python, venv_install=old.venv_install)
    changed = _write(ws, env, old_file, lock) if options.write else old_file.text != lock.to_toml()
    timings.mark("lock: written")
    if hashing is not None:
        from envlock.cache.urlrecords import push_hashed

        push_hashed(hashing.caches, store, hashing.hashed)  # what it downloaded, for the next machine
    return LockResult(
        # A build not run yet is a package of the env too, though the lock holds no wheel of it yet.
        env=env, path=old_file.path, changed=changed,
        packages=len(lock.packages) + sum(1 for name in lock.unbuilt() if lock.package(name) is None),
        nightlies={k: v.version for k, v in sorted(resolution.nightlies.items())},
        mirrors={name: http.redact(url) for name, url in mirrors.indexes.items()},  # printed: no credentials
        lock=lock, downloaded=resolution.downloaded, note=mirrors.stray_note(ws),
        notes=(*guarded.notes, *gpu_notes,
               *(f"{replace(y, live=True).text()}; locked because pinned exactly (==), recorded "
                 "in the lock ([packages.tool.envlock] yanked)" for y in yanks.recorded(lock))),
        build_downloaded=sum(f.downloaded for f in for_builds), moved=_moved(old, lock),
        build_fetched=sum(1 for f in for_builds for a in f.artifacts if a.source != "store"),
        planned_toolchains=planned_toolchains,
    )


def _check_folders(spec: EnvSpec, mirrors: Mirrors, urls: Mapping[str, str]) -> None:
    """Every index on disk the spec names (not mirrored) is a folder: else one ``SpecError`` naming each."""
    missing = [f"indexes.{name}.url: {url!r}: no such folder ({folder}); expected an index on disk (a folder per "
               "project)" for name, url in sorted(urls.items())
               if name not in mirrors.indexes and (folder := missing_folder(url)) is not None]
    raise_all(SpecError, missing, f"{len(missing)} indexes on disk are missing", prefix=f"{spec.path}: ")


def sources_for_lock(ws: Workspace, spec: EnvSpec, store: Store, old: Lock | None,
                     mirrors: Mirrors) -> tuple[dict[str, SourceState], dict[str, dict[str, FetchedInput]]]:
    """Every source of the spec prepared for ``lock`` (the commits ``old`` pinned are kept: their trees give
    the built packages' metadata), and every FetchContent input of its builds pinned, not fetched (the
    resolution reads none of them; the tags' commits and archives' sha256 ``old`` pinned are kept): all
    before the resolution downloads anything."""
    if not spec.sources:
        return {}, {}
    from envlock.commands.buildsession import InputsWanted, prepare_inputs

    return prepare_inputs(ws, spec, store, InputsWanted(builds=list(spec.builds.values()), lock=old, mirrors=mirrors,
                                                        pin_only=True))


def _moved(old: Lock | None, new: Lock) -> tuple[tuple[str, str | None, str | None], ...]:
    """Each package whose version differs between ``old`` and ``new`` (added: old None; gone: new
    None); a build not run yet for ``new`` has not moved."""
    if old is None:
        return ()
    before = {str(p.name): str(p.version) for p in old.packages}
    after = {str(p.name): str(p.version) for p in new.packages}
    pending = set(new.unbuilt())
    return tuple((name, before.get(name), after.get(name)) for name in sorted(before.keys() | after.keys())
                 if before.get(name) != after.get(name) and not (name in pending and name not in after))


def _project_name(project: Path) -> str | None:
    """The static ``[project] name`` of ``project``'s pyproject.toml, if it has one."""
    path = project / "pyproject.toml"
    try:
        name = load_toml(path.read_text(encoding="utf-8"), path, BuildError).get("project", {}).get("name")
    except (OSError, UnicodeDecodeError, BuildError, AttributeError):
        return None  # the build backend reports what it cannot read
    return name if isinstance(name, str) and name else None


def resolve_build_inputs(
    spec: EnvSpec, states: Mapping[str, SourceState]
) -> tuple[dict[Any, Path], tuple[str, ...], dict[str, str]]:
    """For the resolver: each built package's patched source dir (its metadata), the build
    requirements of ``isolation = false`` builds (locked with the env), and the builds' env.
    ``SpecError`` naming every build whose folder is missing or whose project has another name."""
    build_sources: dict[Any, Path] = {}
    extra: set[str] = set()
    env: dict[str, str] = {}
    problems: list[str] = []
    for pkg in spec.packages.values():
        if pkg.build and pkg.build in spec.builds:
            b = spec.builds[pkg.build]
            tree = states[b.source].patched.tree
            project = tree / b.subdirectory if b.subdirectory else tree
            if not project.is_dir():  # else uv reports "Distribution not found" as a failed resolution
                problems.append(f"builds.{pkg.build}.subdirectory: expected a folder of source {b.source!r} (as "
                                f"patched), found no {b.subdirectory!r} there")
                continue
            if (named := _project_name(project)) is not None and canonicalize_name(named) != pkg.name:
                # Else uv's "metadata name does not match" reads as a failed resolution, exit 1.
                where = f"{b.subdirectory}/pyproject.toml" if b.subdirectory else "pyproject.toml"
                problems.append(f"[builds.{pkg.build}]: source {b.source!r} builds project {named!r} ({where}), "
                                f"expected {pkg.build!r}: a build makes the package of its own name; name the build "
                                f"(and its package) {named!r}: `envlock upgrade {spec.name} --fix-renames` moves its "
                                "tables and its package entry")
                continue
            build_sources[pkg.name] = project
            env.update(b.env)
            if not b.isolation:
                extra.update(b.requires)
    if len(problems) == 1:
        raise SpecError(f"{spec.path}: {problems[0]}")
    if problems:
        raise SpecError(f"{spec.path}: {len(problems)} builds do not match their sources", details=problems)
    return build_sources, tuple(sorted(extra)), env


def carry_builds(session: BuildSession, old: Lock | None
                 ) -> tuple[Lock, tuple[FetchResult, ...], dict[str, tuple[str, ...]]]:
    """The session's (new) lock with the old lock's build records (and PEP 751 entries) whose
    input digest is unchanged; the fetch of the env's wheels that computing them needed; and, of
    each old build whose inputs moved, the toolchain lines it resolves to now (what its rebuild
    will be compiled with: a loose ``cmake>=3.26`` may have moved with no spec edit).

    A relock of an unchanged spec then gives the same bytes; a build whose inputs moved
    drops out until ``envlock build`` (or ``sync``) builds it again.
    """
    spec, lock = session.spec, session.lock
    if old is None or not old.builds or not spec.builds:
        return lock, (), {}
    from envlock.build import builder

    ready = session.ready(list(spec.builds.values()))
    env_packages, fetched = session.env_packages(ready)
    kept_builds = {}
    moved: dict[str, tuple[str, ...]] = {}
    kept_packages = []
    old_packages = {p.name: p for p in old.packages}
    for b in ready:
        recorded = old.builds.get(b.name)
        package = old_packages.get(canonicalize_name(b.name))
        if recorded is None or package is None:
            continue  # nothing to keep
        request = session.request(b, env_packages, digest_only=True)  # a lock fetches no FetchContent input
        planned = builder.plan(request, session.store)
        if planned.input_digest == recorded.input_digest:
            kept_builds[b.name] = recorded
            kept_packages.append(package)
        else:
            moved[b.name] = planned.toolchain
    if not kept_builds:
        return lock, fetched, moved
    packages = sorted([*lock.packages, *kept_packages], key=lambda p: p.name)
    return replace(lock, builds=kept_builds, packages=tuple(packages)), fetched, moved


def _resolve(relock: _Relock, urls: Mapping[str, str], hashing: HashUnlisted | None = None) -> Resolution:
    """uv's resolution of the spec, checked by envlock; a failure to reach an index gets the
    mirror to read it from, and a note on a misspelt mirror variable."""
    from envlock.install import fetch
    from envlock.resolution import resolve

    ws, spec, mirrors, old = relock.ws, relock.spec, relock.mirrors, relock.old
    build_sources, build_requires, build_vars = resolve_build_inputs(spec, relock.states)
    # Hashes an index does not publish were computed from bytes now in the store.
    hashed = {a.url: a for p in old.packages for a in p.wheels if a.url} if old is not None else {}
    # Its nightlies, for dates the index may no longer list (the store keeps their wheels).
    kept = {name: (pin, pkg.wheels[0], pkg.index) for name, pin in (old.nightlies if old else {}).items()
            if old is not None and (pkg := old.package(name)) is not None and pkg.wheels and pkg.wheels[0].url}
    try:
        return resolve.resolve(spec, resolve.ResolveInputs(
            index_urls=urls, build_sources=build_sources, extra_requirements=build_requires,
            build_env=build_vars, store=relock.store, hashed=hashed, progress=relock.progress, kept_nightlies=kept,
            earlier_wheels={str(p.name): (p.wheels[0], p.index) for p in old.packages if p.wheels} if old else {},
            hash_unlisted=hashing or fetch.hash_unlisted, listings=relock.listings, ahead=relock.ahead,
        ))
    except (ResolveError, FetchError, PackageIndexError) as exc:
        # An index that cannot be read may be the one a misspelt mirror variable was meant for.
        hint = mirrors.index_hint(exc)
        note = mirrors.stray_note(ws)
        if not hint and not note:
            raise
        raise exc.with_details(*filter(None, [hint, note and f"note: {note}"])) from None


def _guard(relock: _Relock, resolution: Resolution) -> guards.GuardReport:
    """The guards on ``resolution`` (``guards.check``): ``MetadataError`` when an index served uv
    metadata that is not its wheel's own, ``OverlapError`` when two distributions install one file
    with different bytes, else the notes and the pins the overrides beat. A wheel whose index serves
    no byte ranges is read whole, into the store by its sha256 (where the sync finds it)."""
    from envlock.install import fetch

    ws, env, spec, store, old = relock.ws, relock.env, relock.spec, relock.store, relock.old
    projects, build_requires, _ = resolve_build_inputs(spec, relock.states)
    subdirectory = {pkg.name: spec.builds[pkg.build].subdirectory
                    for pkg in spec.packages.values() if pkg.build and pkg.build in spec.builds}
    base = ws.lock_path(env).parent

    def whole(artifact: Artifact) -> None:
        fetch.fetch([artifact], store, base_dir=base, progress=relock.progress, options=fetch.FetchOptions(env=env))

    inputs = guards.GuardInputs(
        packages=resolution.packages, store=store, extra_requirements=build_requires,
        projects={name: (path, subdirectory.get(name, "")) for name, path in projects.items()},
        before=old.overridden if old is not None else None, base=base, whole=whole,
    )
    return guards.check(spec, inputs)


def _write(ws: Workspace, env: str, old: LockFile, lock: Lock) -> bool:
    """Write ``lock`` over ``old`` if its bytes differ; whether they did.

    PEP 751 validity comes from the writer (tests load every shape it writes with
    packaging.pylock); re-validating here would cost ~90 ms of import and parse per lock.
    """
    text = lock.to_toml()
    if old.text == text:
        return False
    if not replace_if_unchanged(old.path, old.data, text.encode()):
        raise LockChangedError(f"{ws.relative(old.path)}: changed by another envlock while this one resolved; "
                               f"nothing written. Run `envlock lock {env}` again")
    return True


@dataclass(frozen=True)
class LockCheck:
    """What ``envlock lock --check`` says; doubles as its ``--json`` output."""

    env: str
    path: Path
    current: bool
    reasons: tuple[str, ...]
    # Locked files their index now marks yanked (PEP 592): said, never a reason to be stale.
    yanked: tuple[yanks.Yanked, ...] = ()
    notes: tuple[str, ...] = ()  # each yanked file, and what was not checked (--offline, an index down)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"path": "lock"})


def check_lock(ws: Workspace, env: str, asked: MirrorOptions | None = None, *, offline: bool = False) -> LockCheck:
    """Whether the lock matches the spec (the ``Drift``: no writes, no resolution), and each locked
    file its index now marks yanked: one page per package, on the index the spec pins it to (or the
    mirror ``asked`` or the environment names for it); ``offline``: none read, a note says so.
    ``LockError`` if there is no lock."""
    path = ws.lock_path(env)
    spec = load_env_spec(ws, env)
    locks = _target_locks(spec, path)
    # Offline, no mirror is read (nor checked); a misspelt ENVLOCK_INDEX_* is said all the same, as lock
    # and sync say it.
    mirrors = Mirrors(spec) if offline else Mirrors.of(spec, asked)
    stray = tuple(filter(None, [mirrors.stray_note(ws)]))
    given = None if offline else mirrors.indexes  # a lock made through a mirror records its URL
    reasons: list[str] = []
    for name, (view, lock) in locks.items():
        found = drift(ws, env, view, lock, mirrors=given)
        reasons += [r for r in found.spec if r not in reasons]  # the spec's keys: the same for every target
        reasons += [f"targets.{name}: {r}" if name else r for r in (*found.lock, *found.packages, *found.sources)]
    if offline:
        return LockCheck(env, path, not reasons, tuple(reasons), notes=(*stray, yanks.OFFLINE_NOTE))
    from envlock.resolution.resolve import index_urls

    # Each package's page on the index the spec pins it to (its mirror if one is named), as a lock reads it.
    urls = index_urls(spec, mirrors.indexes)
    yanked: list[yanks.Yanked] = []
    lines: list[str] = []
    with mirrors.credentials():  # a private index's pages are read with its password
        for _, lock in locks.values():
            checked = yanks.check_index(lock, read_at={p.name: urls[spec.index_of(p.name)] for p in lock.packages})
            yanked += [y for y in checked.yanked if y not in yanked]
            lines += [line for line in checked.lines() if line not in lines]
    return LockCheck(env, path, not reasons, tuple(reasons), tuple(yanked), (*stray, *lines))


def _target_locks(spec: EnvSpec, path: Path) -> dict[str, tuple[EnvSpec, Lock]]:
    """Each target's view of ``spec`` and its lock in the file at ``path`` ("" for a one-target spec and
    lock); a spec of several targets whose file holds one (or the reverse) is stale for every target."""
    if not spec.targets:
        return {"": (spec, read_lock(path))}
    one = read_lock(path, whole=True)  # a missing or malformed file is said as for any lock
    if one.multi is None:  # a one-target lock where the spec names targets: every target is stale for it
        return {name: (spec.for_target(name), one) for name in sorted(spec.targets)}
    locks = Lock.targets_of(load_toml(read_lock_bytes(path).decode("utf-8"), path, LockError), path)
    return {name: (spec.for_target(name), locks.get(name) or replace(next(iter(locks.values())), platform=None))
            for name in sorted(spec.targets)}
