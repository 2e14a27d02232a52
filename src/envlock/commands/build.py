"""``envlock build``: an env's local builds, built into the wheelhouse and recorded in its lock.

The recipe (``build_env``): read the lock; prepare the sources the wanted builds read (fetched
or snapshotted, then patched) and gather what every build of the env reads into one
``BuildSession`` (``commands.buildsession``); plan each build (its request, with its FetchContent
inputs checked out, and its input digest); then carry the plans out and record the wheels in the
lock. ``sync`` builds what the wheelhouse lacks with ``build_spec`` (``commands.sync``); ``lock``
keeps the build records whose inputs did not move (``commands.lock``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import parse_wheel_filename

from envlock.build import builder
from envlock.build import inputs as build_inputs
from envlock.build.buildenv import UNFIXED_RISK
from envlock.commands.buildsession import BuildSession, InputsWanted, pinned_commit, prepare_inputs
from envlock.errors import BuildError, BuildRequirementsError, LockChangedError, LockError, SourceError, UsageError
from envlock.install.fetch import FetchResult
from envlock.model.jsondoc import json_doc
from envlock.model.lockchanges import line_changes
from envlock.model.lockfile import Artifact, Lock, LockedBuild, LockedPackage, LockFile, canonicalize_name
from envlock.model.mirrors import MirrorOptions, Mirrors, package_locator
from envlock.model.spec import BuildSpec, EnvSpec, load_env_spec
from envlock.progress import Progress
from envlock.resolution import resolve
from envlock.resolution.drift import drift
from envlock.store.store import Store, replace_if_unchanged
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.cache.caches import Caches

#: Under the wheelhouse: builds of an ``--override-source`` tree (never named by a lock).
OVERRIDE_WHEELHOUSE = "overrides"


@dataclass(frozen=True)
class BuildOptions:
    """How ``build_env`` builds, and whom it tells."""

    check: bool = False  # also rebuild each from scratch and compare; never write the lock
    frozen: bool = False  # rebuild what the lock records, from its build requirements; never write the lock
    overrides: Mapping[str, Path] = field(default_factory=dict)  # --override-source NAME=DIR
    progress: Progress | None = None  # of the env's wheels fetched for non-isolated builds
    on_build: Callable[[str, str], None] | None = None  # (name, input digest), before each build that runs
    caches: Caches | None = None  # binary caches asked before each build; the post-build push
    # Nothing downloaded: each build planned from the build requirements the lock records, its sources,
    # FetchContent inputs, env wheels and backend wheels from the store alone (after `envlock import`).
    offline: bool = False
    # Build again from scratch, replacing the store's build of these inputs (one the lock does not
    # vouch for: imported, or not reproducible), and the wheelhouse's copy.
    rebuild: bool = False
    # A spec of several targets: the one to build (None: this machine's); another kind of machine's is refused.
    target: str | None = None


def _open_session(ws: Workspace, spec: EnvSpec, store: Store, lock: Lock, wanted: Sequence[BuildSpec],
                  mirrors: Mirrors, options: BuildOptions) -> BuildSession:
    """The sources of ``wanted`` prepared, and the mirrors the builds read, for ``build_env``."""
    if options.offline:
        _check_offline(ws, spec, store, lock, wanted, options)
    if options.caches is not None:  # fetched sources the store lacks, from the caches (checked), before git or URLs
        from envlock.cache import buildsources

        commits = {b.source: pinned_commit(spec.sources[b.source], lock) for b in wanted
                   if b.source in spec.sources and b.source not in options.overrides}
        buildsources.sources_into_store(options.caches, store, buildsources.wanted(spec, lock, wanted, commits))
    try:
        states, inputs = prepare_inputs(ws, spec, store, InputsWanted(
            builds=wanted, names={b.source for b in wanted}, lock=lock, overrides=options.overrides, mirrors=mirrors))
    except SourceError as exc:  # what a cache was refused for is said with the failure it led to
        raise (exc.with_details(*options.caches.notes) if options.caches is not None else exc) from None
    by_package = mirrors.for_packages(lock)
    locate = package_locator(lock.packages, by_package) if by_package else None
    default_url = resolve.index_urls(spec, mirrors.indexes)[spec.default_index.name]  # as `lock` resolves against
    return BuildSession(ws, spec, store, states, lock, default_url, mirrors, options.progress, locate, inputs,
                        offline=options.offline)


def _check_offline(ws: Workspace, spec: EnvSpec, store: Store, lock: Lock, wanted: Sequence[BuildSpec],
                   options: BuildOptions) -> None:
    """``--offline``: every build of ``wanted`` recorded in the lock (its build requirements are known
    only from there), every git or URL input of them in the store; else one error naming each."""
    env, lock_name = spec.name, ws.relative(ws.lock_path(spec.name))
    if unrecorded := [b.name for b in wanted if b.name not in lock.builds]:
        raise LockError(f"{lock_name}: --offline, but the lock records no build of {', '.join(unrecorded)}, so the "
                        f"build requirements are unknown without the index; run `envlock build {env}` online")
    names = {b.source for b in wanted} - set(options.overrides)
    srcs = [spec.sources[n] for n in sorted(names) if n in spec.sources]
    if missing := build_inputs.missing_offline(srcs, wanted, store, lock, lambda src: pinned_commit(src, lock)):
        many = len(missing) != 1
        raise SourceError(f"{ws.relative(spec.path)}: --offline, but {len(missing)} git or URL input"
                          f"{'s' if many else ''} of the builds {'are' if many else 'is'} not in the store "
                          f"{store.root}; bring {'them' if many else 'it'} with `envlock export {env} --out DIR` on a "
                          "machine that built this lock, then `envlock import DIR` here", details=missing)


# -- envlock build -----------------------------------------------------------


@dataclass(frozen=True)
class BuildReport:
    """What ``build_env`` built, checked and recorded (``to_dict``: its ``--json``)."""

    env: str
    lock: Path
    builds: tuple[builder.BuiltWheel, ...]
    checks: tuple[builder.CheckResult, ...]
    notices: tuple[str, ...]
    lock_changed: bool
    new_lock: Lock  # the lock with these builds (written when lock_changed)
    downloaded: int = 0  # bytes of the env's wheels brought into the store for non-isolated builds
    fetched: int = 0  # how many of them

    @property
    def rebuilt(self) -> int:
        return sum(1 for b in self.builds if b.rebuilt)

    @property
    def reproducible(self) -> bool:
        return all(c.reproducible for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"lock_changed": "lock-changed"}, omit=("new_lock", "downloaded", "fetched"),
                        extra={"rebuilt": self.rebuilt, "reproducible": self.reproducible})


@dataclass(frozen=True)
class PlannedBuild:
    """One build of ``build_env``, planned: its request, its inputs digested, and what the lock
    records of it."""

    request: builder.BuildRequest
    plan: builder.BuildPlan
    recorded: LockedBuild | None
    overridden: bool  # its source is an --override-source tree

    @property
    def name(self) -> str:
        return self.request.spec.name

    @property
    def same_inputs(self) -> bool:
        """Whether the lock records a build of these very inputs."""
        return self.recorded is not None and self.recorded.input_digest == self.plan.input_digest


def build_env(ws: Workspace, env: str, packages: tuple[str, ...] = (), options: BuildOptions | None = None,
              asked: MirrorOptions | None = None) -> BuildReport:
    """``envlock build ENV [PKG...]``: build the env's ``[builds.*]`` (or just ``packages``) into the
    wheelhouse and record them in its lock, reading the mirrors ``asked`` and the environment name."""
    options = options or BuildOptions()
    if options.offline and asked is not None and (asked.sources or asked.indexes):
        which = "--source" if asked.sources else "--index"
        raise UsageError(f"{which}: --offline downloads nothing, so no mirror is read; drop one of the two")
    spec = load_env_spec(ws, env, check_paths=not options.overrides).on_this_machine(options.target)
    mirrors = Mirrors.of(spec, asked, read_indexes=not options.offline)
    return build_spec(ws, spec, mirrors, Store.open(), packages, options)


def build_spec(ws: Workspace, spec: EnvSpec, mirrors: Mirrors, store: Store, packages: tuple[str, ...] = (),
               options: BuildOptions | None = None) -> BuildReport:
    """Build ``spec``'s ``[builds.*]`` (or just ``packages``) into the wheelhouse and record them in its lock.

    The lock (``envlock lock``) must exist: ``isolation = false`` builds run against its
    packages. Records each source's commit and patch digests, each build's input digest
    and wheel sha256, and a PEP 751 entry pointing at the wheelhouse. ``options.check``: every
    build is also rebuilt from scratch and compared. An ``--override-source`` build is never
    recorded in the lock. ``options.frozen``: rebuild what the lock records, from its build
    requirements, and leave the lock as it is.
    """
    # The env's wheels a non-isolated build reads come from its indexes. Under the store's writer lock
    # (shared, as a sync's): a gc beside waits, and never removes an input a build reads.
    with mirrors.credentials(), store.writing():
        return _build_spec(ws, spec, mirrors, store, packages, options or BuildOptions())


def _build_spec(ws: Workspace, spec: EnvSpec, mirrors: Mirrors, store: Store, packages: tuple[str, ...],
                options: BuildOptions) -> BuildReport:
    env, check, frozen = spec.name, options.check, options.frozen
    lock_path = ws.lock_path(env)
    old = LockFile.read(lock_path)
    if old.text is None:
        raise LockError(f"{lock_path}: no lock file; create it with `envlock lock {env}` before building")
    lock = Lock.from_toml(old.text, lock_path, spec.target, whole=True)  # a one-target lock the spec moved past too
    wanted = _wanted_builds(spec, packages)
    session = _open_session(ws, spec, store, lock, wanted, mirrors, options)
    planned, fetched = plan_builds(session, wanted, frozen=frozen or options.offline)
    built, checks, moved = _carry_out(session, planned, check=check, frozen=frozen, on_build=options.on_build,
                                      caches=options.caches, rebuild=options.rebuild)
    if options.caches is not None:  # the post-build hook: each build that ran, pushed ([cache] push)
        from envlock.cache.caches import after_build

        after_build(options.caches, session.store, built)
    new = _with_builds(session, lock_path, built)
    gpu_notes: list[str] = []
    if spec.gpus and built:  # what was built, held to [env] gpus (docs/gpus.md); the wheels stay in the store
        from envlock.commands import kernels

        new, gpu_notes = kernels.check_built(spec, session.store, new, lock_path.parent, [w.name for w in built])
    if options.caches is not None:  # ... and the fetched sources those builds read
        from envlock.cache.buildsources import after_build as push_sources

        ran = {w.name for w in built if w.rebuilt}
        push_sources(options.caches, session.store, new, [b for b in wanted if b.name in ran])
    overridden = any(s.prepared.override is not None for s in session.states.values())
    # PEP 751 validity comes from the writer, as in lock_env (tests load every shape it writes).
    text = new.to_toml()
    changed = text != old.text
    written = changed and not frozen and not overridden and not check  # a check is a diagnosis: it never writes
    if written and not replace_if_unchanged(lock_path, old.data, text.encode()):
        raise LockChangedError(f"{ws.relative(lock_path)}: changed by another envlock while this build ran; "
                               f"the lock was not written. The wheels just built are in the store: "
                               f"`envlock build {env}` again records them without building")
    notices = tuple(n for s in session.states.values() if (n := s.prepared.notice)) + tuple(moved) + tuple(
        f"note: {n}" for n in gpu_notes)
    notices += tuple(f"{c.name}: checked without a fixed build path ({c.unfixed}); {UNFIXED_RISK}"
                     for c in checks if c.unfixed)
    if options.caches is not None and (said := options.caches.summary()):
        notices += (said,)
    if overridden:
        notices += (f"the lock was not updated: an overridden source is not a pin; its build is in "
                    f"{ws.relative(ws.wheelhouse / OVERRIDE_WHEELHOUSE)}/, which no sync installs (try it in "
                    f"a venv of your own: `uv pip install` it into one made from `envlock path {env}`'s python)",)
    elif changed and check and not frozen:
        notices += (f"--check does not write the lock: `envlock build {env}` records these builds in "
                    f"{ws.relative(lock_path)}",)
    return BuildReport(env, lock_path, tuple(built), tuple(checks), notices, written, new,
                       downloaded=sum(f.downloaded for f in fetched),
                       fetched=sum(1 for f in fetched for a in f.artifacts if a.source != "store"))


def _wanted_builds(spec: EnvSpec, packages: tuple[str, ...]) -> list[BuildSpec]:
    """The spec's builds named by ``packages`` (all of them when none is), each once."""
    wanted = list(spec.builds.values())
    if not packages:
        return wanted
    by_name = {canonicalize_name(b.name): b for b in wanted}  # a build's name is its table key
    unknown = [p for p in packages if canonicalize_name(p) not in by_name]
    if unknown:
        known = ", ".join(sorted(spec.builds)) or "none"
        raise UsageError(f"{spec.path}: no [builds.{unknown[0]}]; builds: {known}")
    return list({canonicalize_name(p): by_name[canonicalize_name(p)] for p in packages}.values())


def plan_builds(session: BuildSession, wanted: Sequence[BuildSpec], *,
                frozen: bool) -> tuple[tuple[PlannedBuild, ...], tuple[FetchResult, ...]]:
    """Plan each of ``wanted`` (its FetchContent inputs checked out, its inputs digested) before
    any is built; and the fetch of the env's wheels that planning needed.

    ``frozen`` (also ``--offline``): each is planned from the build requirements the lock records;
    one whose inputs moved since the lock is refused when ``session`` is not offline (a
    ``LockError`` naming what changed); offline, ``--check`` then compares two builds of the new inputs.
    """
    wanted = session.ready(wanted)
    env_packages, fetched = session.env_packages(wanted)
    planned = []
    for b in wanted:
        recorded = session.lock.builds.get(b.name)
        request = session.request(b, env_packages, recorded if frozen else None)
        try:
            planned_ = builder.plan(request, session.store)
        except BuildRequirementsError as exc:
            if recorded is None:
                raise
            raise exc.with_details(f"without the index: `envlock build {session.spec.name} --offline` builds from "
                                   "the build requirements the lock records and the store's wheels") from None
        one = PlannedBuild(request, planned_, recorded, session.states[b.source].prepared.override is not None)
        if frozen and not session.offline and one.recorded is not None and not one.same_inputs:
            raise _moved_since_the_lock(session, one)
        planned.append(one)
    return tuple(planned), fetched


def _moved_since_the_lock(session: BuildSession, one: PlannedBuild) -> LockError:
    """Inputs edited since the lock (a patch, a path source) cannot give the recorded wheel:
    said before a build is spent on it."""
    ws, env = session.ws, session.spec.name
    assert one.recorded is not None
    why = _input_drift(session, one)
    return LockError(f"{ws.relative(ws.lock_path(env))}: --frozen, but the inputs of {one.name} changed since the "
                     f"lock (input digest {one.recorded.input_digest[:19]}, now {one.plan.input_digest[:19]}), so "
                     f"the recorded wheel cannot be rebuilt; restore them, or sync without --frozen (`envlock "
                     f"sync {env}` relocks and rebuilds)", details=why)


def _input_drift(session: BuildSession, one: PlannedBuild) -> list[str]:
    """What changed since the lock in the inputs of ``one`` (``lock --check``'s reasons that name
    its build or its source, the other sources not read; and each toolchain wheel that moved)."""
    source = one.request.spec.source
    why = drift(session.ws, session.spec.name, session.spec, session.lock, sources={source}).about(one.name, source)
    if one.recorded is not None:
        why += [f"toolchain {c.name}: {c.old or 'absent'} -> {c.new or 'absent'}"
                for c in line_changes("toolchain", one.recorded.toolchain, one.plan.toolchain)]
    return why


def _carry_out(session: BuildSession, planned: Sequence[PlannedBuild], *, check: bool, frozen: bool,
               on_build: Callable[[str, str], None] | None, caches: Caches | None = None, rebuild: bool = False,
               ) -> tuple[list[builder.BuiltWheel], list[builder.CheckResult], list[str]]:
    """Build (or take) each planned wheel, and with ``check`` build it again and compare; the
    notices of ``--check`` on builds whose inputs the lock does not record. ``rebuild``: the store's
    build of each is removed first, so it is built again."""
    ws, store = session.ws, session.store
    built: list[builder.BuiltWheel] = []
    checks: list[builder.CheckResult] = []
    moved: list[str] = []  # --check: builds whose inputs are not the ones the lock records
    for one in planned:
        request, plan_, recorded = one.request, one.plan, one.recorded
        if rebuild:
            store.remove_entry("builds", plan_.key)
        held = (builder.recorded_wheel(request, plan_, ws.wheelhouse, recorded)
                if recorded is not None and not (check or frozen or one.overridden or rebuild) else None)
        # --check writes no lock and compares with the lock's sha256 itself: it may look at any build.
        if held is None and not check and one.same_inputs and (refused := _unvouched(session, one)) is not None:
            raise refused
        if caches is not None and held is None and not check and not builder.is_built(plan_, store):
            # A trusted cache's build of these inputs (of the recorded wheel, if the lock has it) into the store.
            caches.build_into_store(store, one.name, plan_.input_digest,
                                    recorded.sha256 if recorded is not None and one.same_inputs else None)
        if held is None and (check or not builder.is_built(plan_, store)):  # a build runs: its backend's wheels
            plan_ = session.with_backend(plan_)
        if on_build is not None and held is None and not builder.is_built(plan_, store):  # a stored wheel: a copy
            on_build(one.name, plan_.input_digest)
        # Into the wheelhouse only what the lock names (or will, when this build is recorded): an
        # overridden tree's build goes beside it, a check's or a frozen rebuild's stays in the store
        # until it proves to be the recorded wheel. A sync installs only what the lock names.
        if one.overridden:
            house: Path | None = ws.wheelhouse / OVERRIDE_WHEELHOUSE
        else:
            house = None if frozen or check else ws.wheelhouse
        wheel = held or builder.build_wheel(request, store, house, plan_=plan_)
        if house is None and recorded is not None and wheel.sha256 == recorded.sha256:
            wheel = builder.place(wheel, ws.wheelhouse)
        built.append(wheel)
        if not check:
            continue
        expected = recorded.sha256 if recorded is not None and one.same_inputs else None
        checks.append(builder.check(request, store, house, expected_sha256=expected, plan_=plan_, first=wheel))
        if recorded is not None and not one.same_inputs:
            what = "; ".join(_input_drift(session, one)) or "inputs changed"
            moved.append(f"{one.name}: the lock records a build of other inputs ({what}; input digest "
                         f"{recorded.input_digest[:19]}, now {plan_.input_digest[:19]}): --check compared two "
                         "builds of the inputs as they are now")
    return built, checks, moved


def _unvouched(session: BuildSession, one: PlannedBuild) -> BuildError | None:
    """The refusal of a stored build of the lock's very inputs whose wheel is not the lock's (None:
    none stored, or the lock's): taken, it would replace the lock's sha256 with a wheel nothing
    vouches for (a bundle's, or a build that is not reproducible). A rebuild is the user's call."""
    assert one.recorded is not None
    entry = session.store.path("builds", one.plan.key)
    try:
        stored = str(json.loads((entry / "wheel.json").read_text(encoding="utf-8"))["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # nothing stored for these inputs: built (or taken from a trusted cache) here
    if stored == one.recorded.sha256:
        return None
    ws, env, lock = session.ws, session.spec.name, session.ws.lock_path(session.spec.name)
    return BuildError(f"{ws.relative(lock)}: builds.{one.name}: the store holds wheel sha256 {stored} for input "
                      f"digest {one.plan.input_digest[:23]} (builds/{one.plan.key}), the lock records "
                      f"{one.recorded.sha256} for these very inputs; not taken (the store's build is not the lock's: "
                      "imported, or not reproducible)",
                      details=[f"to build it again here and replace the store's: `envlock build {env} "
                               f"{canonicalize_name(one.name)} --rebuild`"])


def _with_builds(session: BuildSession, lock_path: Path, built: Sequence[builder.BuiltWheel]) -> Lock:
    """The session's lock with ``built`` recorded: their sources' pins, their build records and a
    PEP 751 entry for each wheel (relative to the lock's folder)."""
    ws, lock = session.ws, session.lock
    pkgs = {p.name: p for p in lock.packages}
    for w in built:
        name, version = parse_wheel_filename(w.filename)[:2]
        rel = os.path.relpath(ws.wheelhouse / w.filename, lock_path.parent).replace(os.sep, "/")
        artifact = Artifact(sha256=w.sha256, path=rel, size=w.wheel.stat().st_size)
        pkgs[name] = LockedPackage(name, str(version), (artifact,))
    new = replace(
        lock,
        sources={**lock.sources, **{n: s.locked() for n, s in session.states.items()}},
        builds={**lock.builds, **{w.name: w.locked() for w in built}},
        fetchcontent={**lock.fetchcontent, **session.pins()},
        packages=tuple(sorted(pkgs.values(), key=lambda p: p.name)),
    )
    if new.install_digest() != lock.install_digest():
        new = new.with_venv_digest(None)
    return new
