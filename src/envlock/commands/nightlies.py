"""``envlock nightlies ENV [PKG]``: the dates each nightly pin of an env could take, for its target.

The recipe: read the spec, its lock (if any) and the mirrors; ask the store which locked
nightly a relock could keep though the index dropped its date (``resolve.kept_pins``, the rule
``lock`` follows); read each nightly-pinned package's index page once, concurrently; then list
each package's dates with ``nightly.list_dates`` (pure: the function ``lock`` pins with decides
which dates the target can use). Nothing is written and nothing downloaded but index pages.

``list_nightlies`` is what other recipes call: ``upgrade --nightly latest`` takes
``NightlyListing.newest_usable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envlock.errors import LockError, PackageIndexError, UsageError, did_you_mean
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Artifact, Lock, LockFile, NightlyPin
from envlock.model.mirrors import MirrorOptions, Mirrors
from envlock.model.spec import EnvSpec, PackageSpec, load_env_spec
from envlock.model.target import target_tags
from envlock.resolution.nightly import NightlyDate, list_dates
from envlock.store.store import Store
from envlock.workspace import Workspace


@dataclass(frozen=True)
class PackageNightlies:
    """One nightly-pinned package: its pin and every date its index lists for it, newest first."""

    name: str
    index: str  # the spec's index name
    index_url: str  # the URL read (a mirror, if one was given), without credentials
    local: str | None  # the pin's local tag ("cu130")
    same_date: bool  # shares its date with the index's other nightlies (spec ``same-date``)
    pinned: str  # the spec's date
    locked: NightlyPin | None  # the lock's pin, None without a lock (or one without this package)
    dates: tuple[NightlyDate, ...]

    def usable_dates(self) -> tuple[str, ...]:
        """The dates a lock for the target can take, newest first."""
        return tuple(d.date for d in self.dates if d.usable)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class NightlyListing:
    """What ``envlock nightlies`` says; doubles as its ``--json`` output."""

    env: str
    python: str
    platform: str | None
    lock: Path | None  # the lock read; None when there is none (nothing is marked locked)
    packages: tuple[PackageNightlies, ...]
    note: str = ""
    # A spec of several targets: each target's own listing (the dates as its platform sees them).
    targets: Mapping[str, NightlyListing] = field(default_factory=dict)

    def newest_usable(self, index: str) -> str | None:
        """The newest date that every nightly of spec index ``index`` sharing its date (``same-date``)
        can use for the target; None when they have none in common (or the index pins none)."""
        sharing = [set(p.usable_dates()) for p in self.packages if p.index == index and p.same_date]
        common = set.intersection(*sharing) if sharing else set()
        return max(common, default=None)

    def to_dict(self) -> dict[str, Any]:
        doc = json_doc(self, omit=("targets",))
        if self.targets:
            doc["targets"] = {name: t.to_dict() for name, t in sorted(self.targets.items())}
        return doc


def nightlies_env(ws: Workspace, env: str, package: str | None = None,
                  asked: MirrorOptions | None = None) -> NightlyListing:
    """``envlock nightlies ENV [PKG]``: the listing of ``envs/ENV.toml``, its indexes read through
    the mirrors ``asked`` and the environment names."""
    spec = load_env_spec(ws, env, check_paths=False)  # no source or patch is read
    mirrors, store = Mirrors.of(spec, asked), Store.open(create=False)
    if not spec.targets:
        return list_nightlies(ws, spec, mirrors, package, store=store)
    per = {name: list_nightlies(ws, spec.for_target(name), mirrors, package, store=store)
           for name in sorted(spec.targets)}
    first = per[min(per)]
    return replace(first, platform=None, packages=(), targets=per)


def list_nightlies(ws: Workspace, spec: EnvSpec, mirrors: Mirrors, package: str | None = None, *,
                   store: Store) -> NightlyListing:
    """Every nightly-pinned package of ``spec`` (or only ``package``: ``UsageError`` when the spec
    pins no nightly of that name) with the dates its index lists, as ``spec``'s target sees them,
    marked with the pins of ``spec`` and of the workspace's lock of it, and the locked date a
    relock keeps from ``store`` when the index no longer lists it."""
    from envlock.install import fetch
    from envlock.net import http
    from envlock.net.indexes import Listings, choosable
    from envlock.resolution import resolve

    wanted = _wanted(spec, package)
    urls = resolve.index_urls(spec, mirrors.indexes)
    lock_path = ws.lock_path(spec.name)
    lock = _target_lock(LockFile.read(lock_path), spec.target)
    note = ""
    if lock is not None and lock.env != spec.name:
        note = f"{ws.relative(lock_path)} holds env {lock.env!r}'s lock, not {spec.name!r}'s: nothing is marked locked"
        lock = None
    elif lock is None and wanted:
        note = f"no lock at {ws.relative(lock_path)}: nothing is marked locked (`envlock lock {spec.name}`)"
    earlier = _locked_nightlies(lock)
    kept = resolve.kept_pins(spec, resolve.ResolveInputs(
        index_urls=urls, store=store, hash_unlisted=fetch.hash_unlisted,
        kept_nightlies=earlier))
    tags = target_tags(spec.python, spec.platform)
    try:
        with mirrors.credentials(), Listings() as listings:
            for pkg in wanted:
                listings.prefetch(urls[pkg.index or ""], pkg.name)
            packages = []
            for pkg in wanted:
                assert pkg.index is not None and pkg.nightly is not None
                name = str(pkg.name)
                locked = lock.nightlies.get(name) if lock is not None else None
                # A date pins no exact version: its yanked builds are none lock could take (PEP 592).
                dates = list_dates(choosable(listings.files(urls[pkg.index], pkg.name)), local=pkg.local, tags=tags,
                                   pinned=pkg.nightly, locked=locked,
                                   kept_wheel=earlier[name][1].filename if name in kept else None)
                packages.append(PackageNightlies(
                    name=name, index=pkg.index, index_url=http.redact(urls[pkg.index]), local=pkg.local,
                    same_date=pkg.same_date, pinned=pkg.nightly, locked=locked, dates=dates))
    except PackageIndexError as exc:
        hint = mirrors.index_hint(exc)  # an unreachable host: how to read it from a mirror
        raise exc.with_details(hint) if hint else exc from None
    return NightlyListing(env=spec.name, python=spec.python, platform=spec.platform,
                          lock=lock_path if lock is not None else None, packages=tuple(packages), note=note)


def _target_lock(found: LockFile, target: str | None) -> Lock | None:
    """The lock ``found`` holds (of a lock of several targets, ``target``'s); None if it holds none."""
    if found.text is None or target is None:
        return found.lock
    try:
        return Lock.from_toml(found.text, found.path, target)
    except LockError:
        return None


def _wanted(spec: EnvSpec, package: str | None) -> list[PackageSpec]:
    """The spec's nightly pins, in its order; only ``package`` when one is named (exit 2 unless it is one)."""
    pins = [p for p in spec.packages.values() if p.nightly]
    if package is None:
        return pins
    name = canonicalize_name(package)
    found = [p for p in pins if p.name == name]
    if found:
        return found
    listed = ", ".join(str(p.name) for p in pins) or "none"
    if name in spec.packages:
        raise UsageError(f"{spec.path}: packages.{name} is not a nightly pin (expected a package with "
                         f"nightly = \"YYYY-MM-DD\"; nightly pins: {listed})")
    hint = did_you_mean(str(name), [str(p.name) for p in pins], before="; ")
    raise UsageError(f"{spec.path}: no package {package!r} in [packages]{hint} (nightly pins: {listed})")


def _locked_nightlies(lock: Lock | None) -> Mapping[str, tuple[NightlyPin, Artifact, str | None]]:
    """The lock's nightly pins with their wheel and the index URL it was locked from, as a relock
    reads them (``resolve.ResolveInputs.kept_nightlies``)."""
    if lock is None:
        return {}
    out = {}
    for name, pin in lock.nightlies.items():
        pkg = lock.package(name)
        if pkg is not None and pkg.wheels and pkg.wheels[0].url:
            out[name] = (pin, pkg.wheels[0], pkg.index)
    return out

