"""What the builds of an env read, fetched in the order that fails fast and downloads least.

First every git or URL input a build needs -- its sources and its CMake FetchContent inputs --
each tried, and every one that cannot be fetched reported in one message (with the
``--source NAME=URL`` / ``ENVLOCK_SOURCE_<NAME>`` that fetches it from a mirror). Only then the
env's wheels that an ``isolation = false`` build runs against: the closure of its build
requirements among the locked packages, followed level by level through the wheels'
``Requires-Dist`` (the lock records no dependency edges: a wheel's own metadata is the one
true list, and the closure's wheels are needed in the store anyway), so a runtime wheel
the build cannot import is never downloaded for it.

A FetchContent input is pinned as a source is: a tag or branch is resolved to its commit once
(``git ls-remote``) and the lock keeps that commit while the spec's rev is unchanged; an
archive is held to the spec's sha256, else to the one the lock recorded for the same URL,
else hashed now (at lock time) for the lock to record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envlock import build, sources
from envlock.errors import BuildError, SourceError
from envlock.fetch import FetchResult
from envlock.lockfile import Lock, LockedFetchContent, LockedPackage
from envlock.mirrors import SOURCE_ENV_PREFIX, env_var, source_mirror_how
from envlock.spec import COMMIT_ID, BuildSpec, FetchContentInput
from envlock.store import Store
from envlock.target import target_environment

# -- FetchContent inputs -----------------------------------------------------


@dataclass(frozen=True)
class FetchedInput:
    """A FetchContent input in the store, and what pins it (recorded in the lock)."""

    tree: Path
    pin: LockedFetchContent
    downloaded: int = 0  # bytes of an archive received this run


def known_pin(dep: FetchContentInput, recorded: LockedFetchContent | None) -> LockedFetchContent | None:
    """``dep``'s pin without asking the network: the spec's own (a full commit, an archive's sha256),
    else the lock's ``recorded`` one while the spec still names that URL and rev (None: resolve it)."""
    if dep.git is not None:
        if COMMIT_ID.fullmatch(dep.rev or ""):
            return LockedFetchContent(git=dep.git, commit=dep.rev)
        if recorded is not None and recorded.git == dep.git and recorded.rev == dep.rev and recorded.commit:
            return recorded
        return None
    if dep.sha256:
        return LockedFetchContent(url=dep.url, sha256=dep.sha256)
    if recorded is not None and recorded.url == dep.url and recorded.sha256:
        return recorded
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
        return FetchedInput(tree, LockedFetchContent(git=dep.git, commit=commit, rev=None if rev == commit else rev))
    assert dep.url is not None
    got = sources.fetch_archive(store, dep.url, pin.sha256 if pin is not None else None, fetch_from=mirror)
    return FetchedInput(got.tree, LockedFetchContent(url=dep.url, sha256=got.sha256), got.downloaded)


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
                       lock: Lock | None) -> tuple[dict[str, dict[str, FetchedInput]], list[Unreachable]]:
    """Each FetchContent input of ``builds`` fetched (by build, then input name), and those that could not be."""
    got: dict[str, dict[str, FetchedInput]] = {}
    failed: list[Unreachable] = []
    for b in builds:
        recorded = lock.fetchcontent.get(b.name, {}) if lock is not None else {}
        got[b.name] = {}
        for dep in b.fetchcontent:
            try:
                got[b.name][dep.name] = fetch_input(dep, store, mirror=mirrors.get(dep.name),
                                                    recorded=recorded.get(dep.name))
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
            todo += build.requirement_edges(wheel, extras, environment)
    ordered = tuple(p for p in lock.packages if p.name in reached)
    return ordered, tuple(results)
