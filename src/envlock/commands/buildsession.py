"""What the builds of one env read, shared by ``envlock lock`` and ``envlock build``.

Each source prepared (fetched or snapshotted into the store at its pin, then patched: a
``SourceState``), every git or URL input fetched before any wheel (``prepare_inputs``), and
gathered with the lock, the index and the mirrors into one ``BuildSession``, where both commands
make their build requests: a digest computed by one is the digest the other computes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from envlock.build import builder, requirements, sources
from envlock.build import inputs as build_inputs
from envlock.build.inputs import FetchedInput, Unreachable
from envlock.errors import PatchError, SourceError, SourceTreeError, UsageError, redact
from envlock.install import fetch
from envlock.install.fetch import FetchResult, Locate
from envlock.model.lockfile import Lock, LockedBuild, LockedFetchContent, LockedPackage, LockedSource, canonicalize_name
from envlock.model.mirrors import Mirrors, source_mirror_how
from envlock.model.spec import COMMIT_ID, BuildSpec, EnvSpec, SourceSpec
from envlock.patches.patchapply import PatchedTree, apply_all
from envlock.patches.patchfile import load_patches
from envlock.progress import Progress
from envlock.store.store import Store
from envlock.workspace import Workspace


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


@dataclass(frozen=True)
class InputsWanted:
    """Which git or URL inputs ``prepare_inputs`` fetches, and from where."""

    builds: Sequence[BuildSpec] = ()  # the builds whose FetchContent inputs are fetched
    names: set[str] | None = None  # only these sources (None: every source of the spec)
    lock: Lock | None = None  # the commits and FetchContent pins it records are kept
    overrides: Mapping[str, Path] = field(default_factory=dict)  # --override-source NAME=DIR
    mirrors: Mirrors = field(default_factory=Mirrors)  # where git repositories are fetched from
    pin_only: bool = False  # the FetchContent inputs pinned, not fetched (a lock reads none of them)


def prepare_inputs(ws: Workspace, spec: EnvSpec, store: Store, wanted: InputsWanted | None = None,
                   ) -> tuple[dict[str, SourceState], dict[str, dict[str, FetchedInput]]]:
    """Every git or URL input first -- the sources (only ``wanted.names``, if given) and the FetchContent
    inputs of ``wanted.builds`` (``wanted.pin_only``: pinned, not fetched) -- each tried, those that cannot
    be fetched named together in one error (before any wheel is downloaded); then each source's patches
    applied."""
    wanted = wanted or InputsWanted()
    unknown = sorted(set(wanted.overrides) - set(spec.sources))
    if unknown:
        known = ", ".join(sorted(spec.sources)) or "none"
        raise UsageError(f"--override-source {unknown[0]}=...: {spec.path} has no [sources.{unknown[0]}]; "
                         f"sources: {known}")
    prepared, failed = _fetch_sources(ws, spec, store, wanted)
    builds, mirrors = wanted.builds, wanted.mirrors
    fetched, fc_failed = build_inputs.fetch_fetchcontent(builds, store, mirrors.sources, wanted.lock,
                                                         pin_only=wanted.pin_only)
    deps = {f"builds.{b.name}.fetchcontent.{d.name}": (b.name, d) for b in builds for d in b.fetchcontent}

    def single(f: Unreachable) -> Exception:
        if f.key in deps:
            return build_inputs.fetchcontent_error(deps[f.key][0], f, deps[f.key][1])
        if f.mirrored:
            return f.error
        return f.error.with_details(f"no access to {spec.sources[f.name].git}? fetch the pinned commit from a "
                                    f"clone or mirror: {source_mirror_how(f.name)}")

    build_inputs.raise_unreachable([*failed, *fc_failed], ws.relative(spec.path), single)
    states = {name: SourceState(p, _patched(ws, store, spec.sources[name], p, wanted.overrides))
              for name, p in prepared.items()}
    return states, fetched


def _fetch_sources(ws: Workspace, spec: EnvSpec, store: Store, wanted: InputsWanted,
                   ) -> tuple[dict[str, sources.PreparedSource], list[Unreachable]]:
    """Each wanted source of ``spec`` into the store at its pin (or from its override); and the git
    sources that could not be fetched (to be named with the other inputs that could not)."""
    prepared: dict[str, sources.PreparedSource] = {}
    failed: list[Unreachable] = []
    mirrors = wanted.mirrors
    for name, src in sorted(spec.sources.items()):
        if wanted.names is not None and name not in wanted.names:
            continue
        try:
            prepared[name] = sources.prepare(src, store, ws.root, commit=pinned_commit(src, wanted.lock),
                                             override=wanted.overrides.get(name), fetch_from=mirrors.sources.get(name))
        except SourceError as exc:
            if src.git is None or isinstance(exc, SourceTreeError):
                raise
            failed.append(Unreachable(f"sources.{name}", name, exc, name in mirrors.sources))
    return prepared, failed


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
