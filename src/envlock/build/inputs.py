"""What the builds of an env read, fetched in the order that fails fast and downloads least.

First every git or URL input a build needs -- its sources and its CMake FetchContent inputs --
each tried, and every one that cannot be fetched reported in one message (with the
``--source NAME=URL`` / ``ENVLOCK_SOURCE_<NAME>`` that fetches it from a mirror). Only then the
env's wheels that an ``isolation = false`` build runs against: the closure of its build
requirements among the locked packages, followed level by level through the wheels'
``Requires-Dist`` (the lock records no dependency edges: a wheel's own metadata is the one
true list, and the closure's wheels are needed in the store anyway), so a runtime wheel
the build cannot import is never downloaded for it.

The wheels of a build's locked requirements (its backend and tools, ``name==version
--hash=sha256:...``): one per requirement, for this machine's interpreter, brought into the store
from the index (its listed sha256, or the bytes hashed, held to the locked hashes) or found there
already (after ``envlock import``); a build installs them alone, so it is repeated offline with
what the store holds. ``--offline``, a requirement with no wheel in the store is named, with the
``envlock export`` / ``import`` that brings it.

A FetchContent input is pinned as a source is: a tag or branch is resolved to its commit once
(``git ls-remote``) and the lock keeps that commit while the spec's rev is unchanged; an
archive is held to the spec's sha256, else to the one the lock recorded for the same URL,
else hashed now (at lock time) for the lock to record. ``envlock lock`` only pins them
(``pin_input``): a commit needs no fetch, a tag only ``git ls-remote``, an archive one download
the first time; ``envlock build`` fetches them all, first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envlock.build import requirements, sources
from envlock.errors import BuildError, PackageIndexError, SourceError, redact
from envlock.install import fetch
from envlock.install.fetch import FetchResult
from envlock.model.lockfile import Artifact, Lock, LockedFetchContent, LockedPackage
from envlock.model.mirrors import SOURCE_ENV_PREFIX, env_var, source_mirror_how
from envlock.model.spec import COMMIT_ID, BuildSpec, FetchContentInput, SourceSpec
from envlock.model.target import best_wheel, host_tags, target_environment
from envlock.store.closure import PinnedRequirement, pinned_requirement
from envlock.store.store import Store, store_file

# -- FetchContent inputs -----------------------------------------------------


@dataclass(frozen=True)
class FetchedInput:
    """A FetchContent input in the store, and what pins it (recorded in the lock)."""

    tree: Path | None  # None: pinned, not fetched (``envlock lock`` reads no FetchContent input)
    pin: LockedFetchContent
    downloaded: int = 0  # bytes of an archive received this run


def known_pin(dep: FetchContentInput, recorded: LockedFetchContent | None) -> LockedFetchContent | None:
    """``dep``'s pin without asking the network: the spec's own (a full commit, an archive's sha256),
    else the lock's ``recorded`` one while the spec still names that URL and rev (None: resolve it)."""
    if dep.git is not None:
        if COMMIT_ID.fullmatch(dep.rev or ""):
            return LockedFetchContent(git=redact(dep.git), commit=dep.rev)  # a lock keeps no token
        if recorded is not None and recorded.git in (redact(dep.git), dep.git) and recorded.rev == dep.rev and (
                recorded.commit):
            return replace(recorded, git=redact(dep.git))  # kept without a token an earlier lock recorded
        return None
    assert dep.url is not None
    if dep.sha256:
        return LockedFetchContent(url=redact(dep.url), sha256=dep.sha256)
    if recorded is not None and recorded.url in (redact(dep.url), dep.url) and recorded.sha256:
        return replace(recorded, url=redact(dep.url))
    return None


def fetch_input(dep: FetchContentInput, store: Store, *, mirror: str | None,
                recorded: LockedFetchContent | None) -> FetchedInput:
    """``dep`` fetched into the store at its pin (resolved now if it has none); ``SourceError`` if it cannot be."""
    pin = known_pin(dep, recorded)
    if dep.git is not None:
        rev = dep.rev or "HEAD"
        commit = pin.commit if pin is not None and pin.commit else sources.resolve_rev(dep.git, rev, store=store,
                                                                                         fetch_from=mirror)
        tree = sources.checkout(store, dep.git, commit, fetch_from=mirror).tree
        return FetchedInput(tree, LockedFetchContent(git=redact(dep.git), commit=commit,
                                                     rev=None if rev == commit else rev))
    assert dep.url is not None
    got = sources.fetch_archive(store, dep.url, pin.sha256 if pin is not None else None, fetch_from=mirror)
    return FetchedInput(got.tree, LockedFetchContent(url=redact(dep.url), sha256=got.sha256), got.downloaded)


def pin_input(dep: FetchContentInput, store: Store, *, mirror: str | None,
              recorded: LockedFetchContent | None) -> FetchedInput:
    """``dep``'s pin, fetching no more than pinning needs (a lock's resolution reads no FetchContent input):
    nothing for a commit, an archive with a sha256 or what the lock recorded for the spec's URL and rev; a
    ``git ls-remote`` for a tag or branch; the archive downloaded once (hashed, and kept in the store for
    the build) when nothing gives its sha256. ``SourceError`` if it cannot be."""
    pin = known_pin(dep, recorded)
    if pin is not None:
        return FetchedInput(None, pin)
    if dep.git is not None:
        rev = dep.rev or "HEAD"
        commit = sources.resolve_rev(dep.git, rev, store=store, fetch_from=mirror)
        return FetchedInput(None, LockedFetchContent(git=redact(dep.git), commit=commit,  # a lock keeps no token
                                                     rev=None if rev == commit else rev))
    assert dep.url is not None
    got = sources.fetch_archive(store, dep.url, None, fetch_from=mirror)
    return FetchedInput(None, LockedFetchContent(url=redact(dep.url), sha256=got.sha256), got.downloaded)


# -- every input at once, failures together ----------------------------------


@dataclass(frozen=True)
class Unreachable:
    """A git or URL input that could not be fetched: its spec key, its mirror name and why."""

    key: str  # "sources.sglang", "builds.sgl-kernel.fetchcontent.repo-cutlass"
    name: str  # what --source and ENVLOCK_SOURCE_<NAME> call it
    error: SourceError
    mirrored: bool  # it was read from a mirror already

    def line(self) -> str:
        why = self.error.message
        if details := [d.strip() for d in self.error.details if d.strip()]:  # git's "fatal: ..." line
            why += f" ({next((d for d in details if d.startswith(('fatal:', 'error:'))), details[-1])})"
        hint = "" if self.mirrored else f"; from a mirror: {source_mirror_how(self.name)}"
        return f"{self.key}: {why}{hint}"


def raise_unreachable(failures: Sequence[Unreachable], origin: Path | str,
                      single: Callable[[Unreachable], Exception]) -> None:
    """Nothing when every input was fetched; else one error: ``single``'s for one failure (as a
    command that reads one input says it), one ``SourceError`` naming each for several."""
    if not failures:
        return
    if len(failures) == 1:
        raise single(failures[0])
    raise SourceError(f"{origin}: {len(failures)} git or URL inputs of the builds cannot be fetched; every such input "
                      "is fetched before any wheel, so nothing else was downloaded",
                      details=[f.line() for f in failures])


def fetch_fetchcontent(builds: Sequence[BuildSpec], store: Store, mirrors: Mapping[str, str],
                       lock: Lock | None, *, pin_only: bool = False,
                       ) -> tuple[dict[str, dict[str, FetchedInput]], list[Unreachable]]:
    """Each FetchContent input of ``builds`` fetched (by build, then input name), and those that could not be.
    ``pin_only``: pinned (``pin_input``: what a lock needs), not fetched."""
    got: dict[str, dict[str, FetchedInput]] = {}
    failed: list[Unreachable] = []
    get = pin_input if pin_only else fetch_input
    for b in builds:
        recorded = lock.fetchcontent.get(b.name, {}) if lock is not None else {}
        got[b.name] = {}
        for dep in b.fetchcontent:
            try:
                got[b.name][dep.name] = get(dep, store, mirror=mirrors.get(dep.name), recorded=recorded.get(dep.name))
            except SourceError as exc:
                failed.append(Unreachable(f"builds.{b.name}.fetchcontent.{dep.name}", dep.name, exc,
                                          dep.name in mirrors))
    return got, failed


def fetchcontent_error(build_name: str, failure: Unreachable, dep: FetchContentInput) -> BuildError:
    """One FetchContent input that could not be fetched, as ``[builds.NAME]: fetchcontent.DEP: ...``."""
    exc = failure.error
    what = "commit from a clone or mirror" if dep.git is not None else "archive from a mirror"
    hint = [] if failure.mirrored else [
        f"no access to {dep.git or dep.url}? fetch the pinned {what}: "
        f"--source {dep.name}=URL (or {env_var(SOURCE_ENV_PREFIX, dep.name)}=URL)"]
    return BuildError(f"[builds.{build_name}]: fetchcontent.{dep.name}: {exc.message}", details=[*exc.details, *hint])


# -- the env's wheels a non-isolated build reads -----------------------------


def closure_packages(lock: Lock, roots: set[str], *, python: str, platform: str | None, exclude: set[str],
                     fetch_wheels: Callable[[list[LockedPackage]], FetchResult],
                     ) -> tuple[tuple[LockedPackage, ...], tuple[FetchResult, ...]]:
    """The locked packages reachable from ``roots`` (names) through their wheels' requirements, with the
    fetches that brought them into the store: level by level, so no wheel outside it is downloaded."""
    by_name = {str(p.name): p for p in lock.packages if str(p.name) not in exclude}
    environment = target_environment(python, platform)
    seen: set[tuple[str, frozenset[str]]] = set()
    reached: dict[str, LockedPackage] = {}
    results: list[FetchResult] = []
    todo = [(name, frozenset[str]()) for name in sorted(roots)]
    while todo:
        level = [(n, e) for n, e in dict.fromkeys(todo) if n in by_name and (n, e) not in seen]
        todo = []
        new = [by_name[n] for n in dict.fromkeys(n for n, _ in level) if n not in reached]
        if new:
            got = fetch_wheels(new)
            results.append(got)
            reached.update((p.name, p) for p in new)
        paths = {a.sha256: a.path for r in results for a in r.artifacts}
        for name, extras in level:
            seen.add((name, extras))
            wheel = paths[by_name[name].wheels[0].sha256]
            todo += requirements.requirement_edges(wheel, extras, environment)
    ordered = tuple(p for p in lock.packages if p.name in reached)
    return ordered, tuple(results)


# -- the wheels of a build's locked requirements -----------------------------


def stored_backend(store: Store, req: PinnedRequirement, python: str) -> Path | None:
    """The store's wheel of ``req`` (one of its hashes) that a ``python`` interpreter here installs
    (the best, if several), or None."""
    found = [wheel for sha in req.hashes if store.has("wheels", sha)
             for wheel in sorted(store.path("wheels", sha).glob("*.whl"))]
    tags = host_tags(python)
    usable = [w for w in found if _installs(w.name, set(tags))]
    return usable[best_wheel([w.name for w in usable], tags)] if usable else None


def _installs(filename: str, tags: set[Tag]) -> bool:
    try:
        return bool(parse_wheel_filename(filename)[3] & tags)
    except (InvalidWheelFilename, ValueError):
        return False


def backend_wheels(lines: Sequence[str], store: Store, *, python: str, index_url: str | None, offline: bool,
                   what: str, env: str) -> tuple[Path, ...]:
    """A stored wheel of each locked requirement ``lines`` for this machine's ``python``: from the store,
    else (not ``offline``) downloaded from ``index_url`` and held to the line's hashes. ``BuildError``
    naming every requirement that has none (offline: with how to bring it), ``what`` saying whose."""
    out: list[Path] = []
    lacking: list[PinnedRequirement] = []
    for req in map(pinned_requirement, lines):
        held = stored_backend(store, req, python)
        if held is None and not offline and index_url:
            held = _download_backend(req, store, python=python, index_url=index_url, what=what)
        if held is None:
            lacking.append(req)
        else:
            out.append(held)
    if lacking:
        n = len(lacking)
        why = "--offline, but the store" if offline else "no index to download from, and the store"
        raise BuildError(f"{what}: {why} {store.root} holds no wheel for python {python} on this machine of "
                         f"{n} build requirement{'s' if n != 1 else ''} (a build installs its backend from the "
                         f"store's wheels alone); bring {'them' if n != 1 else 'it'} with `envlock export {env} "
                         "--out DIR` on a machine that built this lock, then `envlock import DIR` here",
                         details=[f"{r.pin} (locked sha256: {', '.join(r.hashes) or 'none'})" for r in lacking])
    return tuple(out)


def _download_backend(req: PinnedRequirement, store: Store, *, python: str, index_url: str, what: str) -> Path:
    """``req``'s wheel for ``python`` here, from ``index_url`` into the store, held to the locked hashes."""
    from envlock.net import indexes  # http: only a build whose backend the store lacks reads an index

    try:
        version = Version(req.version)
        listed = [f for f in indexes.project_files(index_url, req.name) if f.version == version]
    except InvalidVersion:
        listed = []
    except PackageIndexError as exc:
        raise BuildError(f"{what}: build requirement {req.pin}: {exc.message}", details=exc.details) from None
    tags = host_tags(python)
    usable = [f for f in listed if f.filename.endswith(".whl") and _installs(f.filename, set(tags))
              and (f.sha256 is None or f.sha256 in req.hashes)]
    if not usable:
        page = f"{redact(index_url)}/{canonicalize_name(req.name)}/"
        raise BuildError(f"{what}: build requirement {req.pin}: {page} lists no wheel of it with a locked sha256 "
                         f"that python {python} installs here ({len(listed)} files of that version); a build "
                         "installs its backend from hash-checked wheels in the store alone, so that it can be "
                         "repeated offline")
    chosen = usable[best_wheel([f.filename for f in usable], tags)]
    if chosen.sha256 is not None:
        got = fetch.fetch([Artifact(sha256=chosen.sha256, url=chosen.url)], store, base_dir=store.root)
        return got.artifacts[0].path
    artifact, _ = fetch.hash_unlisted(chosen.url, store, known=None)  # an index that publishes no hash
    if artifact.sha256 not in req.hashes:
        raise BuildError(f"{what}: build requirement {req.pin}: {chosen.url} holds sha256 {artifact.sha256}, "
                         f"not one the lock records ({', '.join(req.hashes)}); refused")
    return store_file(store, artifact)


def missing_offline(srcs: Sequence[SourceSpec], builds: Sequence[BuildSpec], store: Store, lock: Lock | None,
                    commit_of: Callable[[SourceSpec], str | None]) -> list[str]:
    """The git and URL inputs an offline build of ``builds`` would have to fetch: each git source of
    ``srcs`` (at ``commit_of`` it: the spec's or the lock's commit) and each FetchContent input (at its
    pin) whose tree the store lacks, one line each."""
    out: list[str] = []
    for src in srcs:
        if src.git is None:
            continue  # a path source is read from the workspace
        commit = commit_of(src)
        if commit is None:
            out.append(f"sources.{src.name}: rev {src.rev or 'HEAD'} of {redact(src.git)}, which the lock pins to "
                       "no commit (resolving it needs the repository)")
        elif not (store.path("sources", f"git-{commit}") / "tree").is_dir():
            out.append(f"sources.{src.name}: commit {commit} of {redact(src.git)}")
    for b in builds:
        recorded = lock.fetchcontent.get(b.name, {}) if lock is not None else {}
        for dep in b.fetchcontent:
            key, pin = f"builds.{b.name}.fetchcontent.{dep.name}", known_pin(dep, recorded.get(dep.name))
            where = redact(dep.git or dep.url or "")
            if pin is None:
                out.append(f"{key}: {where} at {dep.rev or 'HEAD'}, which the lock pins to no commit or sha256")
            elif pin.commit is not None and not (store.path("sources", f"git-{pin.commit}") / "tree").is_dir():
                out.append(f"{key}: commit {pin.commit} of {where}")
            elif pin.sha256 is not None and not (store.path("sources", f"archive-{pin.sha256}") / "tree").is_dir():
                out.append(f"{key}: archive {where} (sha256 {pin.sha256})")
    return out
