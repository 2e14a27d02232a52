"""Guards against silent moves, at lock time: what a resolution does that nobody asked for.

- A resolution made from metadata that is not the wheels' own: the metadata an index serves beside
  a wheel (PEP 658) requires other than the wheel's ``METADATA``, or the resolution does not meet a
  wheel's own requirements (uv answered from its cache of a lie): the lock fails (``MetadataError``)
  naming the package, its index and both lists.
- Two distributions that install one file with different bytes (PyPI's ``triton``, pulled in
  by xgrammar, and the nightly's ``pytorch-triton`` both install ``triton/``): the lock fails
  (``OverlapError``, exit 1) naming both, the files, who pulled each in and the exclude that
  fixes it. Same bytes (a shared namespace ``__init__.py``) are fine: RECORD hashes decide.
- Notes (the lock is written): an ``exclude`` that matches nothing (nothing requires it any
  more); an ``override`` that beats an upstream pin it did not beat at the last lock (the lock
  records the pins its overrides beat, ``Lock.overridden``); a FetchContent input a build's
  CMake files declare that its ``fetchcontent`` table does not, or declares otherwise.

Who requires whom comes from the wheels' ``Requires-Dist`` (``wheelfiles``) and, for a local
build, its ``pyproject.toml``'s static ``[project] dependencies``, evaluated for the target.
"""

from __future__ import annotations

import contextlib
import json
import re
import tomllib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from envlock.errors import MetadataError, OverlapError
from envlock.model import overlaps
from envlock.model.lockfile import reach
from envlock.model.overlaps import AllowedOverlap
from envlock.model.target import target_environment, target_markers
from envlock.resolution.cmakefetch import Declared, declared
from envlock.resolution.wheelfiles import ListingError, Served, WheelListing, Whole, listings, served_metadatas
from envlock.store.store import store_file, write_atomic

if TYPE_CHECKING:
    from envlock.model.lockfile import Artifact, LockedPackage
    from envlock.model.spec import BuildSpec, EnvSpec
    from envlock.store.store import Store

#: Paths named in an overlap message; the rest are counted.
SHOWN_PATHS = 3


@dataclass(frozen=True)
class GuardReport:
    """What the guards say of a resolution that may be locked."""

    notes: tuple[str, ...] = ()
    # The upstream pins the spec's overrides beat, as "REQUIRER: REQUIREMENT" (recorded in the lock,
    # so the next lock can tell a pin newly beaten from one beaten all along).
    overridden: tuple[str, ...] = ()
    # The spec's ``allow-overlap`` entries that accepted a path of this resolution (the lock records them).
    allowed: tuple[AllowedOverlap, ...] = ()
    # What each package requires among the resolution's (``recorded_requires``): the lock's graph.
    requires: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Overlap:
    """Two distributions that install ``paths`` with different bytes."""

    first: NormalizedName
    second: NormalizedName
    paths: tuple[str, ...]


@dataclass
class Requirements:
    """Who requires whom in a resolution, for the target: each node's requirements (None: not known,
    a local build whose requirements are not static), and the roots (the spec's packages and the
    build requirements locked with the env)."""

    nodes: dict[NormalizedName, list[Requirement] | None]
    roots: list[Requirement]
    environment: dict[str, str]
    # Filled by ``walk``: each reached node's extras, and the node it was first reached from.
    extras: dict[NormalizedName, set[str]] = field(default_factory=dict)
    parent: dict[NormalizedName, NormalizedName | None] = field(default_factory=dict)

    def active(self, req: Requirement, extras: Iterable[str]) -> bool:
        """Whether ``req`` holds for the target, for a requirer with ``extras`` asked of it."""
        if req.marker is None:
            return True
        for extra in ("", *sorted(extras)):
            try:
                if req.marker.evaluate({**self.environment, "extra": extra}):
                    return True
            except Exception:  # a marker variable not known here: counted as holding (nothing is missed)
                return True
        return False

    def walk(self) -> None:
        """Reach every node from the roots, breadth first (so ``chain`` is a shortest one)."""
        queue: deque[tuple[NormalizedName, set[str], NormalizedName | None]] = deque(
            (canonicalize_name(r.name), set(r.extras), None) for r in self.roots if self.active(r, ()))
        while queue:
            name, extras, parent = queue.popleft()
            if name not in self.nodes:
                continue
            seen = self.extras.get(name)
            if seen is not None and extras <= seen:
                continue
            if seen is None:
                self.parent[name] = parent
            self.extras[name] = (seen or set()) | extras
            for req in self.nodes[name] or []:
                if self.active(req, self.extras[name]):
                    queue.append((canonicalize_name(req.name), set(req.extras), name))

    def chain(self, name: NormalizedName) -> list[NormalizedName]:
        """The requirement chain from a root to ``name`` ([] when it is not reached)."""
        if name not in self.parent:
            return []
        out: list[NormalizedName] = [name]
        while (up := self.parent[out[-1]]) is not None and up not in out:
            out.append(up)
        return out[::-1]

    def requirers(self, name: NormalizedName) -> list[tuple[NormalizedName, Requirement]]:
        """Each reached node's requirement on ``name`` that holds for the target."""
        return [(node, req) for node in sorted(self.extras) for req in self.nodes[node] or []
                if canonicalize_name(req.name) == name and self.active(req, self.extras[node])]

    def knows_all(self) -> bool:
        """Whether every reached node's requirements are known."""
        return all(self.nodes[node] is not None for node in self.extras)


# -- the checks (pure) -------------------------------------------------------------


def file_overlaps(found: Mapping[NormalizedName, WheelListing]) -> list[Overlap]:
    """Every pair of distributions that install one path with different hashes (or a path whose
    RECORD gives no hash: bytes that cannot be compared count as different)."""
    owners: dict[str, list[tuple[NormalizedName, str]]] = {}
    for name in sorted(found):
        for path, digest in found[name].files.items():
            owners.setdefault(path, []).append((name, digest))
    pairs: dict[tuple[NormalizedName, NormalizedName], list[str]] = {}
    for path, who in owners.items():
        for i, (a, ha) in enumerate(who):
            for b, hb in who[i + 1:]:
                if ha != hb or not ha:
                    pairs.setdefault((a, b), []).append(path)
    return [Overlap(a, b, tuple(sorted(paths))) for (a, b), paths in sorted(pairs.items())]


def overlap_error(spec: EnvSpec, overlaps: Sequence[Overlap], versions: Mapping[NormalizedName, str],
                  graph: Requirements) -> OverlapError:
    """The error for ``overlaps``: both distributions, the files, who pulled each in, the fix."""
    details: list[str] = []
    for o in overlaps:
        shown = ", ".join(o.paths[:SHOWN_PATHS])
        more = f" and {len(o.paths) - SHOWN_PATHS} more" if len(o.paths) > SHOWN_PATHS else ""
        count = f"{len(o.paths)} file{'s' if len(o.paths) != 1 else ''}"
        details.append(f"{o.first} {versions[o.first]} and {o.second} {versions[o.second]} both install "
                       f"{shown}{more} ({count}, different bytes)")
        for name in (o.first, o.second):
            details.append(f"  {name} {versions[name]}: {_why(spec, name, graph)}")
        details.append(f"  fix: {_fix(spec, o)}")
    if len(overlaps) == 1:
        head = f"{overlaps[0].first} and {overlaps[0].second} install the same files with different bytes"
    else:
        head = f"{len(overlaps)} pairs of distributions install the same files with different bytes"
    return OverlapError(f"{spec.path}: {head}; the one installed last would overwrite the other's, so "
                        "nothing is locked", details=details)


def _why(spec: EnvSpec, name: NormalizedName, graph: Requirements) -> str:
    if name in spec.packages:
        return "declared in [packages]"
    chain = graph.chain(name)
    if not chain:
        return "required by nothing envlock can read (a local build's requirements that are not static?)"
    if chain[0] not in spec.packages:  # a root that is no spec package: a non-isolated build's requirement
        return "pulled in by a [builds.*] requires: " + " -> ".join(chain)
    return "pulled in by " + " -> ".join(chain)


def _fix(spec: EnvSpec, o: Overlap) -> str:
    free = [n for n in (o.first, o.second) if n not in spec.packages]
    if not free:
        fix = f"keep one of packages.{o.first} and packages.{o.second} in {spec.path.name}"
    else:
        options = " or ".join(f'resolution.exclude = ["{n}"]' for n in free)
        fix = f"{options} in {spec.path.name}, for the one the env does not need"
    if len(o.paths) > SHOWN_PATHS:
        return fix
    # A few known, harmless files: each may be accepted by name, for this pair only.
    allow = ", ".join(f'{{ path = "{p}", packages = ["{o.first}", "{o.second}"], reason = "..." }}' for p in o.paths)
    return f"{fix}; or, if the shared file is harmless, resolution.allow-overlap = [{allow}]"


def unread_note(unread: Mapping[NormalizedName, ListingError], versions: Mapping[NormalizedName, str]) -> list[str]:
    """The one note for the wheels whose file lists could not be read (none: no note)."""
    if not unread:
        return []
    if len(unread) == 1:
        ((name, why),) = unread.items()
        return [f"{name}: what it installs could not be read ({why}); not checked for files another distribution "
                "installs too"]
    listed = ", ".join(f"{name} {versions.get(name, '?')} ({why})" for name, why in sorted(unread.items()))
    return [f"what {len(unread)} wheels install could not be read; not checked for files another distribution "
            f"installs too: {listed}"]


@dataclass(frozen=True)
class Misled:
    """A wheel uv resolved from metadata that is not its own: its index serves other requirements
    (``served``, PEP 658), or the resolution does not meet the wheel's own (``unmet``: uv answered
    from what its cache kept of an earlier answer)."""

    package: LockedPackage
    served: Served | None  # None: not asked (not on an http index)
    own: tuple[str, ...]
    unmet: tuple[str, ...] = ()

    @property
    def lying(self) -> bool:
        """Whether the index serves requirements other than the wheel's own (in any order, each as
        packaging writes it)."""
        return self.served is not None and self.served.requires is not None and (
            sorted(map(_normal, self.served.requires)) != sorted(map(_normal, self.own)))


def _normal(line: str) -> str:
    """A Requires-Dist line as packaging writes it (``otherdep ==2.0`` is ``otherdep==2.0``)."""
    try:
        return str(Requirement(line))
    except InvalidRequirement:
        return line.strip()


#: Marker variables whose target value envlock may read otherwise than uv: a requirement whose marker
#: reads one is not held to the resolution.
_UNSURE = ("platform_release", "platform_version", "python_full_version", "implementation_version")


def unmet(spec: EnvSpec, own: Sequence[str], extras: set[str], versions: Mapping[NormalizedName, str]) -> list[str]:
    """Those of a wheel's own requirements ``own`` (reached with ``extras``) that surely hold for the
    target and that the resolution (``versions``) does not meet: a package it lacks, or a version the
    requirement does not allow. What the spec decides (excludes, overrides, builds, nightlies) is left out."""
    markers = target_markers(spec.python, spec.platform)
    if markers is None:
        return []
    decided = {canonicalize_name(n) for n in spec.resolution.exclude}
    decided |= {canonicalize_name(Requirement(o).name) for o in spec.resolution.overrides}
    decided |= {p.name for p in spec.packages.values() if p.build or p.nightly}
    out = []
    for line in own:
        try:
            req = Requirement(line)
            if req.marker is not None and (any(v in str(req.marker) for v in _UNSURE) or not any(
                    req.marker.evaluate({**markers, "extra": e}) for e in (extras or {""}))):
                continue
        except Exception:  # not a requirement, or a marker not read here: uv's call
            continue
        name = canonicalize_name(req.name)
        if name in decided:
            continue
        if name not in versions:
            out.append(f"{line.strip()} (the resolution has no {name})")
            continue
        with contextlib.suppress(InvalidVersion):
            if not req.specifier.contains(Version(versions[name]), prereleases=True):
                out.append(f"{line.strip()} (the resolution has {name} {versions[name]})")
    return out


def misled(spec: EnvSpec, packages: Sequence[LockedPackage], found: Mapping[NormalizedName, WheelListing],
           served: Mapping[str, Served], graph: Requirements) -> list[Misled]:
    """Every package uv resolved from metadata that is not its wheel's own: the metadata its index
    serves requires otherwise (in any order, each as packaging writes it), or the resolution does not
    meet the wheel's own requirements (``unmet``)."""
    versions = {p.name: p.version for p in packages}
    out = []
    for pkg in packages:
        if (listing := found.get(pkg.name)) is None:
            continue
        missing = unmet(spec, listing.requires, graph.extras.get(pkg.name, set()), versions)
        got = Misled(pkg, served.get(str(pkg.name)), listing.requires, tuple(missing))
        if got.lying or got.unmet:
            out.append(got)
    return out


def metadata_error(spec: EnvSpec, wrong: Sequence[Misled]) -> MetadataError:
    """The error for ``wrong``: each package, its index, the requirements the index serves and the
    wheel's own, and what the resolution lacks of them."""

    def listed(requires: Sequence[str] | None) -> str:
        return ", ".join(json.dumps(r) for r in requires) if requires else "nothing"

    details: list[str] = []
    for m in wrong:
        pkg = m.package
        details.append(f"{pkg.name} {pkg.version} from index {spec.index_of(pkg.name)!r} ({pkg.index}): "
                       f"{pkg.wheels[0].filename}")
        if m.served is not None and m.served.requires is not None:
            details.append(f"  the index's metadata ({m.served.url}, PEP 658) requires "
                           f"{listed(m.served.requires) if m.lying else 'the same now'}")
        details.append(f"  the wheel's own METADATA requires {listed(m.own)}")
        details += [f"  unmet: {u}" for u in m.unmet]
    names = ", ".join(f"{m.package.name} {m.package.version}" for m in wrong)
    if all(m.lying for m in wrong):
        pkg = wrong[0].package
        head = (f"{pkg.name} {pkg.version}: index {spec.index_of(pkg.name)!r} ({pkg.index}) serves metadata for "
                f"{pkg.wheels[0].filename} that is not the wheel's own" if len(wrong) == 1 else
                f"their index serves metadata for {names} that is not the wheels' own")
        head += "; uv resolved the env from it"
    else:
        clean = " ".join(str(m.package.name) for m in wrong)
        head = (f"uv resolved the env from metadata of {names} that is not the wheel's own (what the index "
                f"serves, or what uv's cache kept of it: `uv cache clean {clean}` drops that)")
    return MetadataError(f"{spec.path}: {head}, so nothing is locked", details=details)


def recorded_requires(nodes: Mapping[NormalizedName, list[Requirement] | None],
                      roots: Iterable[NormalizedName]) -> dict[str, tuple[str, ...]]:
    """What the lock records each package of ``nodes`` to require (``Lock.requires``, the graph
    ``lock --check`` holds every package to): the other packages its requirements name, whatever
    their markers and extras (a resolver never takes a package no requirement names, so from
    ``roots`` this reaches all uv locked). A package whose requirements cannot be read (a build's
    dynamic metadata) is recorded to require what nothing else reaches."""
    known = {str(n) for n in nodes}
    edges: dict[str, tuple[str, ...]] = {
        str(n): tuple(sorted({str(canonicalize_name(r.name)) for r in reqs} & known - {str(n)}))
        for n, reqs in nodes.items() if reqs is not None}
    reached = reach(roots, edges)
    rest = tuple(sorted(known - reached))
    for unknown in sorted(str(n) for n, reqs in nodes.items() if reqs is None and n in reached):
        edges[unknown] = rest
    return {n: deps for n, deps in sorted(edges.items()) if deps}


def dead_excludes(spec: EnvSpec, graph: Requirements) -> list[str]:
    """A note for each ``resolution.exclude`` that nothing in the resolution requires (when who
    requires whom is fully known: else nothing is said)."""
    if not graph.knows_all():
        return []
    return [f"resolution.exclude: {name} matched nothing: no package requires it"
            for name in spec.resolution.exclude if not graph.requirers(name)]


def beaten_pins(spec: EnvSpec, versions: Mapping[NormalizedName, str],
                graph: Requirements) -> list[tuple[str, str, str]]:
    """(override, requirer, requirement) for each upstream requirement that the locked version of an
    overridden package does not satisfy: the pins the overrides beat."""
    out = []
    for text in spec.resolution.overrides:
        name = canonicalize_name(Requirement(text).name)
        if name not in versions:
            continue
        for requirer, req in graph.requirers(name):
            try:
                if req.specifier.contains(Version(versions[name]), prereleases=True):
                    continue
            except InvalidVersion:
                continue
            out.append((text, str(requirer), f"{req.name}{req.specifier}"))
    return sorted(set(out))


def override_notes(beaten: Sequence[tuple[str, str, str]], before: Sequence[str] | None) -> list[str]:
    """A note for each pin beaten now that the earlier lock did not record (none without one)."""
    if before is None:
        return []
    return [f"resolution.overrides: {text} overrides {requirer}'s {req}"
            for text, requirer, req in beaten if f"{requirer}: {req}" not in before]


def fetchcontent_notes(b: BuildSpec, project: str, found: Sequence[Declared]) -> list[str]:
    """A note for each input the CMake files of build ``b`` (its source folder ``project``) declare
    that ``fetchcontent`` does not, or names with another commit, tag, repository or URL."""
    ours = {dep.name.lower(): dep for dep in b.fetchcontent}
    out = []
    for d in found:
        where = f"{project}/{d.file}" if project else d.file
        key = f"builds.{b.name}.fetchcontent"
        dep = ours.get(d.name.lower())
        if dep is None:
            out.append(f"{key}: {where} declares {d.name} ({d.how()}), the spec does not: the build downloads it "
                       f"unchecked, or cannot configure (declare {d.name} = {d.spec_form()})")
            continue
        differs = []
        rev = dep.rev or ""
        if d.tag and "${" not in d.tag and not _same_rev(rev, d.tag):
            differs.append(f"GIT_TAG {d.tag}")
        if d.git and "${" not in d.git and dep.git and _repo(d.git) != _repo(dep.git):
            differs.append(f"GIT_REPOSITORY {d.git}")
        # An archive URL names its commit or tag: .../archive/<ref>.tar.gz
        ref = re.sub(r"\.(tar\.gz|tgz|tar\.bz2|tar\.xz|zip)$", "", d.url.rsplit("/", 1)[-1]) if d.url else ""
        if d.url and not (d.url == dep.url or (rev and (rev in d.url or _same_rev(rev, ref)))):
            differs.append(f"URL {d.url}")
        if differs:
            has = f"git {dep.git} at rev {dep.rev}" if dep.git is not None else f"the archive {dep.url}"
            out.append(f"{key}.{dep.name}: {where} declares {', '.join(differs)}; the spec has {has} "
                       f"(as upstream: {dep.name} = {d.spec_form()})")
    return out


def _same_rev(rev: str, written: str) -> bool:
    """Whether the spec's ``rev`` is the one CMake's ``written`` names: the same, or a commit
    ``written`` abbreviates (7 or more hex digits)."""
    return rev == written or (len(written) >= 7 and re.fullmatch(r"[0-9a-f]+", written) is not None
                              and rev.startswith(written))


def _repo(url: str) -> str:
    """A git URL's repository name (``cutlass`` of ``https://github.com/NVIDIA/cutlass.git``): a mirror
    of it (a local path, another host) names the same one."""
    return url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git").lower()


# -- gathering and the whole check ---------------------------------------------------


def static_requirements(project: Path) -> list[Requirement] | None:
    """A source project's ``[project] dependencies`` from its pyproject.toml, or None when they are
    not static (``dynamic``, no [project], unreadable)."""
    try:
        doc = tomllib.loads((project / "pyproject.toml").read_text())
    except (OSError, ValueError):
        return None
    table = doc.get("project")
    if not isinstance(table, dict) or "dependencies" in table.get("dynamic", []):
        return None
    deps = table.get("dependencies", [])
    try:
        return [Requirement(d) for d in deps] if isinstance(deps, list) else None
    except (InvalidRequirement, TypeError):
        return None


def _parsed(lines: Iterable[str]) -> list[Requirement] | None:
    try:
        return [Requirement(line) for line in lines]
    except InvalidRequirement:
        return None


@dataclass(frozen=True)
class GuardInputs:
    """What the guards read besides the spec: the resolved packages, each local build's project
    folder (by the package it provides) and source-relative subdirectory, the build requirements
    locked with the env, and the pins the earlier lock's overrides beat (None: no earlier lock)."""

    packages: tuple[LockedPackage, ...]
    store: Store
    projects: Mapping[NormalizedName, tuple[Path, str]] = field(default_factory=dict)
    extra_requirements: tuple[str, ...] = ()
    before: tuple[str, ...] | None = None
    base: Path | None = None  # where a lock's relative wheel paths start
    # Brings a wheel whose index serves no byte ranges into the store (``install.fetch``, passed in by the
    # recipe), so that its file list is read there, whole.
    whole: Whole | None = None


def check(spec: EnvSpec, inputs: GuardInputs) -> GuardReport:
    """Every guard on a resolution about to be locked: ``MetadataError`` for a wheel whose index
    serves metadata that is not its own (uv resolved from it), ``OverlapError`` for files two
    distributions install with different bytes, else the notes and the pins the overrides beat."""
    wheels = {str(p.name): p.wheels[0] for p in inputs.packages if p.wheels}
    record = inputs.store.path("guards", f"{_resolution_key(wheels, inputs.store)}.json")
    versions = {p.name: p.version for p in inputs.packages}
    found: dict[NormalizedName, WheelListing] = {}
    served: dict[str, Served] = {}
    notes: list[str] = []
    requires, recorded = _checked_before(record)
    if requires is None:  # not this set of wheels: every file list read and compared
        found, served, notes = _read(inputs, wheels, versions)
        requires = {n: got.requires for n, got in found.items()}
    nodes: dict[NormalizedName, list[Requirement] | None] = {n: _parsed(r) for n, r in requires.items()}
    nodes.update({n: None for n in map(canonicalize_name, wheels) if n not in nodes})
    nodes.update({name: static_requirements(project) for name, (project, _) in inputs.projects.items()})
    roots = [Requirement(str(p.name)) for p in spec.packages.values()]
    roots += [r for r in (_parsed(inputs.extra_requirements) or [])]
    graph = Requirements(nodes=nodes, roots=roots, environment=target_environment(spec.python, spec.platform))
    graph.walk()
    if wrong := misled(spec, inputs.packages, found, served, graph):
        raise metadata_error(spec, wrong)
    every = file_overlaps(found) if recorded is None else recorded
    kept, used = overlaps.allow([(o.first, o.second, o.paths) for o in every], spec.resolution.allow_overlap)
    if found and not notes and not kept:
        _record_checked(record, requires, every)
    notes += [overlaps.unused_note(i, o, set(versions)) for i, o in enumerate(spec.resolution.allow_overlap)
              if o not in used]
    notes += dead_excludes(spec, graph)
    beaten = beaten_pins(spec, versions, graph)
    notes += override_notes(beaten, inputs.before)
    for name, (project, subdirectory) in sorted(inputs.projects.items()):
        build = spec.packages[name].build
        if build is not None and build in spec.builds:
            notes += fetchcontent_notes(spec.builds[build], subdirectory, declared(project))
    if kept:  # after the notes: a lock that stops says what else it found
        refused = [Overlap(canonicalize_name(a), canonicalize_name(b), paths) for a, b, paths in kept]
        error = overlap_error(spec, refused, versions, graph)
        raise error.with_details(*(f"note: {n}" for n in notes)) if notes else error
    return GuardReport(notes=tuple(notes), overridden=tuple(sorted({f"{r}: {q}" for _, r, q in beaten})),
                       allowed=tuple(used),
                       requires=recorded_requires(nodes, [canonicalize_name(r.name) for r in roots]))


def _read(inputs: GuardInputs, wheels: Mapping[str, Artifact], versions: Mapping[NormalizedName, str],
          ) -> tuple[dict[NormalizedName, WheelListing], dict[str, Served], list[str]]:
    """Every wheel's file list and Requires-Dist, the metadata its index serves beside it (PEP 658:
    what uv may have resolved from instead), and the notes on those that could not be read."""
    read = listings(wheels, inputs.store, base=inputs.base, whole=inputs.whole)
    found = {canonicalize_name(n): got for n, got in read.items() if isinstance(got, WheelListing)}
    notes = unread_note({canonicalize_name(n): got for n, got in read.items() if isinstance(got, ListingError)},
                        versions)
    remote = {n: a.url for n, a in wheels.items()
              if canonicalize_name(n) in found and a.url is not None and a.url.startswith(("http://", "https://"))}
    served = served_metadatas(remote)
    unread = {canonicalize_name(n): got.problem for n, got in served.items() if got.problem is not None}
    if unread:
        listed = ", ".join(f"{n} {versions.get(n, '?')} ({why})" for n, why in sorted(unread.items()))
        notes.append(f"the metadata the index serves for {len(unread)} wheel{'s' if len(unread) != 1 else ''} "
                     f"could not be read; not compared with the wheel's own: {listed}")
    return found, served, notes


# -- a set of wheels checked before ---------------------------------------------------
#
# Whether two of a set of wheels install one path with different bytes depends on those wheels'
# bytes alone: a relock that resolves the very wheels (by sha256) an earlier lock checked cannot
# find an overlap it did not, so their file lists are not read again (158 listings, or a nightly's
# directory of 15,000 files). The record keeps their Requires-Dist for the notes. A new wheel, a
# sha256 that moved or a wheel read from elsewhere (the store now holds it) makes another key:
# the whole set is read and compared again. Only a set read whole and found clean is recorded.

_RECORD_FORMAT = "envlock-guards-1"


def _resolution_key(wheels: Mapping[str, Artifact], store: Store) -> str:
    """The record key of a set of wheels: each name, sha256 and whether its list comes from the
    store's copy (a verified read) or from elsewhere, as ``wheelfiles.listing`` would read it."""
    import hashlib

    lines = [f"{name}\0{a.sha256}\0{'store' if store_file(store, a).is_file() else 'other'}\n"
             for name, a in sorted(wheels.items())]
    return hashlib.sha256("".join([_RECORD_FORMAT, "\n", *lines]).encode()).hexdigest()


def _checked_before(record: Path) -> tuple[dict[NormalizedName, tuple[str, ...]] | None, list[Overlap] | None]:
    """The Requires-Dist of each wheel of a set checked before, and the overlaps found in it (each
    allowed by the spec then; re-checked against the spec now); (None, None): not recorded, or unreadable."""
    try:
        doc = json.loads(record.read_text())
    except (OSError, ValueError):
        return None, None
    requires = doc.get("requires") if isinstance(doc, dict) else None
    found = doc.get("overlaps", []) if isinstance(doc, dict) else None
    if not (isinstance(requires, dict) and all(isinstance(v, list) and all(isinstance(r, str) for r in v)
                                               for v in requires.values())):
        return None, None
    if not (isinstance(found, list) and all(isinstance(o, list) and len(o) == 3 and isinstance(o[2], list)
                                            and all(isinstance(x, str) for x in (o[0], o[1], *o[2])) for o in found)):
        return None, None
    return ({canonicalize_name(str(n)): tuple(v) for n, v in requires.items()},
            [Overlap(canonicalize_name(a), canonicalize_name(b), tuple(paths)) for a, b, paths in found])


def _record_checked(record: Path, requires: Mapping[NormalizedName, tuple[str, ...]],
                    found: Sequence[Overlap]) -> None:
    """Record a set of wheels whose file lists were all read and found clean but for ``found`` (each
    allowed by the spec), a shortcut only."""
    doc = {"format": _RECORD_FORMAT, "requires": {str(n): list(r) for n, r in sorted(requires.items())},
           "overlaps": [[o.first, o.second, list(o.paths)] for o in found]}
    with contextlib.suppress(OSError):
        write_atomic(record, json.dumps(doc, sort_keys=True).encode())
