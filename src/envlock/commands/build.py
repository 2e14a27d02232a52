"""Local builds, as ``envlock build`` runs them and as ``lock`` and ``sync`` need them.

The recipe (``build_env``): read the lock; prepare the sources the wanted builds read (fetched
or snapshotted, then patched) and gather what every build of the env reads into one
``BuildSession``; plan each build (its request, with its FetchContent inputs checked out, and
its input digest); then carry the plans out and record the wheels in the lock. ``lock`` keeps
the build records whose inputs did not move (``carry_builds``); ``sync`` builds what the
wheelhouse lacks (``ensure_builds``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import parse_wheel_filename

from envlock.build import builder, requirements, sources
from envlock.build import inputs as build_inputs
from envlock.build.buildenv import UNFIXED_RISK
from envlock.build.inputs import FetchedInput, Unreachable
from envlock.errors import (
    BuildError,
    BuildRequirementsError,
    LockChangedError,
    LockError,
    PatchError,
    SourceError,
    SourceTreeError,
    SpecError,
    UsageError,
    redact,
)
from envlock.install import fetch
from envlock.install.fetch import FetchResult, Locate
from envlock.model.lockchanges import line_changes
from envlock.model.lockfile import (
    Artifact,
    Lock,
    LockedBuild,
    LockedFetchContent,
    LockedPackage,
    LockedSource,
    LockFile,
    canonicalize_name,
)
from envlock.model.mirrors import MirrorOptions, Mirrors, package_locator, source_mirror_how
from envlock.model.spec import COMMIT_ID, BuildSpec, EnvSpec, SourceSpec, load_env_spec
from envlock.model.tomlio import load_toml
from envlock.patches.patchapply import PatchedTree, apply_all
from envlock.patches.patchfile import load_patches
from envlock.progress import Progress
from envlock.resolution import resolve
from envlock.resolution.drift import drift
from envlock.store.home import file_sha256
from envlock.store.store import Store, replace_if_unchanged
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.cache.caches import Caches

#: Under the wheelhouse: builds of an ``--override-source`` tree (never named by a lock).
OVERRIDE_WHEELHOUSE = "overrides"

# -- sources -----------------------------------------------------------------


@dataclass(frozen=True)
class SourceState:
    """A source fetched (or snapshotted) into the store, and its patched tree."""

    prepared: sources.PreparedSource
    patched: PatchedTree

    def locked(self) -> LockedSource:
        return self.prepared.locked(self.patched.patches)


def pinned_commit(src: SourceSpec, lock: Lock | None) -> str | None:
    """The commit to use for a git source: the spec's full hash, else the one the lock resolved
    from this very URL and branch or tag (a branch is followed only when asked to relock)."""
    if src.git is None:
        return None
    if src.rev and COMMIT_ID.fullmatch(src.rev):
        return src.rev
    locked = lock.sources.get(src.name) if lock is not None else None
    # An earlier lock may have recorded the URL with its token: the same repository.
    if (locked is not None and locked.kind == "git" and locked.location in (redact(src.git), src.git) and locked.commit
            and locked.rev == (src.rev or "HEAD")):
        return locked.commit
    return None  # resolved now (``git ls-remote``); the lock then records it


def prepare_inputs(
    ws: Workspace,
    spec: EnvSpec,
    store: Store,
    *,
    lock: Lock | None = None,
    overrides: Mapping[str, Path] | None = None,
    names: set[str] | None = None,
    builds: Sequence[BuildSpec] = (),
    mirrors: Mirrors | None = None,
    pin_only: bool = False,
) -> tuple[dict[str, SourceState], dict[str, dict[str, FetchedInput]]]:
    """Every git or URL input first -- the sources (only ``names``, if given) and the FetchContent
    inputs of ``builds`` (``pin_only``: pinned, not fetched) -- each tried, those that cannot be fetched
    named together in one error (before any wheel is downloaded); then each source's patches applied."""
    mirrors = mirrors or Mirrors()
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(spec.sources))
    if unknown:
        known = ", ".join(sorted(spec.sources)) or "none"
        raise UsageError(f"--override-source {unknown[0]}=...: {spec.path} has no [sources.{unknown[0]}]; "
                         f"sources: {known}")
    prepared: dict[str, sources.PreparedSource] = {}
    failed: list[Unreachable] = []
    for name, src in sorted(spec.sources.items()):
        if names is not None and name not in names:
            continue
        try:
            prepared[name] = sources.prepare(src, store, ws.root, commit=pinned_commit(src, lock),
                                             override=overrides.get(name), fetch_from=mirrors.sources.get(name))
        except SourceError as exc:
            if src.git is None or isinstance(exc, SourceTreeError):
                raise
            failed.append(Unreachable(f"sources.{name}", name, exc, name in mirrors.sources))
    fetched, fc_failed = build_inputs.fetch_fetchcontent(builds, store, mirrors.sources, lock, pin_only=pin_only)
    deps = {f"builds.{b.name}.fetchcontent.{d.name}": (b.name, d) for b in builds for d in b.fetchcontent}

    def single(f: Unreachable) -> Exception:
        if f.key in deps:
            return build_inputs.fetchcontent_error(deps[f.key][0], f, deps[f.key][1])
        if f.mirrored:
            return f.error
        return f.error.with_details(f"no access to {spec.sources[f.name].git}? fetch the pinned commit from a "
                                    f"clone or mirror: {source_mirror_how(f.name)}")

    build_inputs.raise_unreachable([*failed, *fc_failed], ws.relative(spec.path), single)
    states = {name: SourceState(p, _patched(ws, store, spec.sources[name], p, overrides))
              for name, p in prepared.items()}
    return states, fetched


def _patched(ws: Workspace, store: Store, src: SourceSpec, prepared: sources.PreparedSource,
             overrides: Mapping[str, Path]) -> PatchedTree:
    """``prepared`` with the spec's patches of source ``src`` applied."""
    name = src.name
    patches = load_patches(ws.root, src.patches)
    try:
        return apply_all(name, prepared.tree, prepared.tree_digest, patches, store)
    except PatchError as exc:
        if name not in overrides:
            raise
        raise PatchError(exc.message, details=[
            *exc.details, f"--override-source {name}=...: the spec's patches are applied to that tree, so it "
            "must be unpatched (a `patch edit` work dir has them applied already)"]) from None


def sources_for_lock(ws: Workspace, spec: EnvSpec, store: Store, old: Lock | None,
                     mirrors: Mirrors) -> tuple[dict[str, SourceState], dict[str, dict[str, FetchedInput]]]:
    """Every source of the spec prepared for ``lock`` (the commits ``old`` pinned are kept: their trees give
    the built packages' metadata), and every FetchContent input of its builds pinned, not fetched (the
    resolution reads none of them; the tags' commits and archives' sha256 ``old`` pinned are kept): all
    before the resolution downloads anything."""
    if not spec.sources:
        return {}, {}
    return prepare_inputs(ws, spec, store, lock=old, builds=list(spec.builds.values()), mirrors=mirrors,
                          pin_only=True)


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


# -- the session: what every build of one env reads --------------------------


@dataclass(frozen=True)
class BuildSession:
    """What the builds of one env read, gathered once: its prepared sources, the lock whose
    packages a non-isolated build runs against, the index its build requirements resolve on,
    and where git repositories and the env's wheels are fetched from.

    ``build_env`` and ``carry_builds`` make their requests here, so that a digest computed
    by one is the digest the other computes.
    """

    ws: Workspace
    spec: EnvSpec
    store: Store
    states: Mapping[str, SourceState]
    lock: Lock
    index_url: str  # the default index, as ``lock`` resolves against it
    mirrors: Mirrors  # where git repositories (sources, FetchContent inputs) and indexes are read
    progress: Progress | None = None  # of the env's wheels fetched for non-isolated builds
    locate: Locate | None = None  # where those wheels are downloaded from (a sync's --index)
    # Build name -> its FetchContent inputs, fetched with the sources (before any wheel).
    inputs: Mapping[str, Mapping[str, FetchedInput]] = field(default_factory=dict)
    offline: bool = False  # nothing downloaded: the env's wheels and the backends' from the store alone

    def ready(self, builds: Sequence[BuildSpec]) -> list[BuildSpec]:
        """Those of ``builds`` whose source is prepared."""
        return [b for b in builds if b.source in self.states]

    def env_packages(self, builds: Sequence[BuildSpec]) -> tuple[tuple[requirements.BuildEnvPackage, ...],
                                                                  tuple[FetchResult, ...]]:
        """The env's locked wheels that ``isolation = false`` builds among ``builds`` run against,
        and the fetches that brought them into the store (none if every build is isolated).

        Only the closure of those builds' requirements among the locked packages is fetched
        (``buildinputs.closure_packages``): a runtime wheel no build can import is not.
        """
        reading = [b for b in builds if not b.isolation]
        if not reading:
            return (), ()
        local = {str(canonicalize_name(n)) for n in self.spec.builds}
        roots = set().union(*(requirements.build_roots(b, self.states[b.source].patched.tree) for b in reading))
        base_dir = self.ws.lock_path(self.spec.name).parent

        def fetch_wheels(packages: list[LockedPackage]) -> FetchResult:
            return fetch.fetch([p.wheels[0] for p in packages], self.store, base_dir=base_dir, progress=self.progress,
                               options=fetch.FetchOptions(offline=self.offline, locate=self.locate, env=self.spec.name))

        packages, got = build_inputs.closure_packages(self.lock, roots, python=self.spec.python,
                                                     platform=self.spec.platform, exclude=local,
                                                     fetch_wheels=fetch_wheels)
        return requirements.env_packages_from_lock(replace(self.lock, packages=packages), self.store), got

    def fetched(self, b: BuildSpec) -> dict[str, FetchedInput]:
        """``b``'s FetchContent inputs in the store: those fetched with the session's sources, else now."""
        if b.name in self.inputs and all(f.tree is not None for f in self.inputs[b.name].values()):
            return dict(self.inputs[b.name])
        got, failed = build_inputs.fetch_fetchcontent([b], self.store, self.mirrors.sources, self.lock)
        deps = {f"builds.{b.name}.fetchcontent.{d.name}": d for d in b.fetchcontent}
        build_inputs.raise_unreachable(failed, self.ws.relative(self.spec.path),
                                      lambda f: build_inputs.fetchcontent_error(b.name, f, deps[f.key]))
        return got[b.name]

    def request(self, b: BuildSpec, env_packages: tuple[requirements.BuildEnvPackage, ...],
                recorded: LockedBuild | None = None, *, digest_only: bool = False) -> builder.BuildRequest:
        """What to build for ``b`` (its source prepared, its FetchContent inputs fetched);
        ``recorded``'s build requirements are taken instead of resolving them anew (a frozen rebuild).
        ``digest_only``: only to compare its input digest (a lock): its FetchContent inputs' pins, not trees."""
        state = self.states[b.source]
        inputs = dict(self.inputs.get(b.name, {})) if digest_only else self.fetched(b)
        return builder.BuildRequest(
            b, state.patched.tree, state.prepared.source_date_epoch, self.spec.python, self.spec.platform,
            self.index_url, () if b.isolation else env_packages,
            recorded.requirements if recorded is not None else None,
            {name: f.tree for name, f in inputs.items() if f.tree is not None},
            {name: f.pin.recipe(name) for name, f in inputs.items()},
            (recorded.toolchain or None) if recorded is not None else None,
            digest_only=digest_only,
        )

    def with_backend(self, plan_: builder.BuildPlan) -> builder.BuildPlan:
        """``plan_`` with a stored wheel of each of its build requirements, which its build installs alone,
        and of its toolchain, which it unpacks: from the store, else (online) downloaded from the default
        index and held to the locked hashes."""
        what = f"[builds.{plan_.request.spec.name}]"
        wheels = build_inputs.backend_wheels(plan_.build_requirements, self.store, python=self.spec.python,
                                            index_url=self.index_url, offline=self.offline, what=what,
                                            env=self.spec.name)
        tools = build_inputs.backend_wheels(plan_.toolchain, self.store, python=self.spec.python,
                                           index_url=self.index_url, offline=self.offline,
                                           what=f"{what} toolchain", env=self.spec.name)
        return replace(plan_, backend_wheels=wheels, toolchain_wheels=tools)

    def pins(self) -> dict[str, dict[str, LockedFetchContent]]:
        """The FetchContent pins of the session's builds, for the lock."""
        return {name: {dep: f.pin for dep, f in inputs.items()} for name, inputs in self.inputs.items() if inputs}


def checkout_fetchcontent(b: BuildSpec, store: Store, mirrors: Mapping[str, str],
                          lock: Lock | None = None) -> dict[str, Path]:
    """Each FetchContent input of ``b`` fetched into the store, by name (from ``mirrors[name]`` when
    there is one: the commit or sha256 is checked either way); a ``BuildError`` names the input that
    failed, a ``SourceError`` every one of several."""
    got, failed = build_inputs.fetch_fetchcontent([b], store, mirrors, lock)
    deps = {f"builds.{b.name}.fetchcontent.{d.name}": d for d in b.fetchcontent}
    build_inputs.raise_unreachable(failed, Path(f"[builds.{b.name}]"),
                                  lambda f: build_inputs.fetchcontent_error(b.name, f, deps[f.key]))
    return {name: f.tree for name, f in got[b.name].items() if f.tree is not None}


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


def _open_session(ws: Workspace, spec: EnvSpec, lock: Lock, wanted: Sequence[BuildSpec], mirrors: Mirrors,
                  options: BuildOptions) -> BuildSession:
    """The sources of ``wanted`` prepared, and the mirrors the builds read, for ``build_env``."""
    store = Store.open()
    if options.offline:
        _check_offline(ws, spec, store, lock, wanted, options)
    if options.caches is not None:  # fetched sources the store lacks, from the caches (checked), before git or URLs
        from envlock.cache import buildsources

        commits = {b.source: pinned_commit(spec.sources[b.source], lock) for b in wanted
                   if b.source in spec.sources and b.source not in options.overrides}
        buildsources.sources_into_store(options.caches, store, buildsources.wanted(spec, lock, wanted, commits))
    try:
        states, inputs = prepare_inputs(ws, spec, store, lock=lock, overrides=options.overrides,
                                        names={b.source for b in wanted}, builds=wanted, mirrors=mirrors)
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
        return {
            "env": self.env,
            "lock": str(self.lock),
            "lock-changed": self.lock_changed,
            "rebuilt": self.rebuilt,
            "builds": [b.to_dict() for b in self.builds],
            "checks": [c.to_dict() for c in self.checks],
            "reproducible": self.reproducible,
            "notices": list(self.notices),
        }


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
    spec = load_env_spec(ws, env, check_paths=not options.overrides)
    return build_spec(ws, spec, Mirrors.of(spec, asked, read_indexes=not options.offline), packages, options)


def build_spec(ws: Workspace, spec: EnvSpec, mirrors: Mirrors, packages: tuple[str, ...] = (),
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
    with mirrors.credentials(), Store.open().writing():
        return _build_spec(ws, spec, mirrors, packages, options or BuildOptions())


def _build_spec(ws: Workspace, spec: EnvSpec, mirrors: Mirrors, packages: tuple[str, ...],
                options: BuildOptions) -> BuildReport:
    env, check, frozen = spec.name, options.check, options.frozen
    lock_path = ws.lock_path(env)
    old = LockFile.read(lock_path)
    if old.text is None:
        raise LockError(f"{lock_path}: no lock file; create it with `envlock lock {env}` before building")
    lock = Lock.from_toml(old.text, lock_path)
    wanted = _wanted_builds(spec, packages)
    session = _open_session(ws, spec, lock, wanted, mirrors, options)
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


# -- builds for lock and sync ------------------------------------------------


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


def ensure_builds(ws: Workspace, spec: EnvSpec, lock: Lock, lock_path: Path, mirrors: Mirrors, *, frozen: bool,
                  progress: Progress | None = None,
                  on_build: Callable[[str, str], None] | None = None,
                  caches: Caches | None = None) -> tuple[Lock, BuildReport | None]:
    """Before a sync: build what the spec's ``[builds.*]`` need and the wheelhouse lacks.

    Unfrozen, the lock gets the build records; ``--frozen`` rebuilds only to restore a
    recorded wheel and fails if the rebuild is not bit-identical to it. Returns the lock
    and the report of the builds run (None: none were needed).
    """
    env = spec.name
    missing = _unbuilt(spec, lock, lock_path)
    if not missing:
        return lock, None
    if caches is not None:  # trusted builds of the lock's very records, from a binary cache: no planning
        from envlock.cache.caches import builds_into_wheelhouse

        missing = builds_into_wheelhouse(caches, Store.open(), lock, lock_path, missing)
        if not missing:
            return lock, None
    report = build_spec(ws, spec, mirrors, missing, BuildOptions(frozen=frozen, progress=progress, on_build=on_build,
                                                                 caches=caches))
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
