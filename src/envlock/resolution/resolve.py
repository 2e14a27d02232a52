"""Resolve an env spec to an exact, index-pinned set of wheels by driving the pinned uv.

uv sees a transient project (``resolution.uvproject``): every spec index as a ``[[tool.uv.index]]``
(all but the default ``explicit``, so a package comes from a non-default index only when it names
it), ``[tool.uv.sources]`` pinning packages to their index, overrides, and excluded packages
overridden to a never-true marker. Nightly dates are pinned here first, and overrides of
index-pinned packages become their own index's wheel; wheels an index publishes no hash for are
stored before uv runs (``resolution.unhashed``). envlock then checks uv's answer against the
indexes itself: every wheel must be listed on the index its package is pinned to (the torchtriton
lesson, Dec 2022), and every wheel gets a sha256 even when the index publishes none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urldefrag

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from envlock import timings
from envlock.errors import ResolveError, did_you_mean, raise_all
from envlock.model.lockfile import Artifact, LockedPackage, NightlyPin
from envlock.model.spec import EnvSpec
from envlock.model.target import best_file, best_wheel, for_target, target_tags
from envlock.net import http
from envlock.net.indexes import IndexFile, Listings, choosable, link_problem
from envlock.resolution.nightly import DatePin, date_error, local_tag, nightlies_by_date, usable_files

# What a resolution is asked with, named here too (``X as X``: an explicit re-export).
from envlock.resolution.resolveinputs import HashUnlisted as HashUnlisted
from envlock.resolution.resolveinputs import ResolveInputs as ResolveInputs
from envlock.resolution.unhashed import (
    hash_unlisted,
    required_choices,
    store_unhashed_pins,
    unhashed_choices,
    unhashed_unpinned,
)
from envlock.resolution.uvproject import pylock_entries, run_uv
from envlock.store.store import Store, store_file


@dataclass(frozen=True)
class Resolution:
    """What ``resolve`` answers: the locked packages, the nightly pins, the requires-python, and the bytes
    downloaded to hash wheels an index publishes no hash for."""

    packages: tuple[LockedPackage, ...]
    nightlies: Mapping[str, NightlyPin]
    requires_python: str
    downloaded: int = 0  # bytes downloaded to hash wheels an index publishes no hash for


def index_urls(spec: EnvSpec, mirrors: Mapping[str, str]) -> dict[str, str]:
    """The URL to use for each spec index: its mirror if one is given (``model.mirrors.index_mirrors``,
    which refuses names the spec has no index of), else the spec's URL."""
    return {name: mirrors.get(name, idx.url).rstrip("/") for name, idx in spec.indexes.items()}


def resolve_nightlies(spec: EnvSpec, urls: Mapping[str, str], listings: Listings,
                      kept: Mapping[str, NightlyPin] | None = None) -> dict[str, NightlyPin]:
    """Every ``nightly`` pin -> the exact version listed for that date on its index.

    ``kept``: pins of an earlier lock whose wheels the store holds (``kept_pins``), taken
    when the index no longer lists their date.
    """
    wanted = [p for p in spec.packages.values() if p.nightly]
    for pkg in wanted:
        listings.prefetch(urls[pkg.index or ""], pkg.name)
    tags = target_tags(spec.python, spec.platform)
    pins = {}
    for pkg in wanted:
        assert pkg.nightly is not None and pkg.index is not None
        # A date is no exact pin: a yanked build is never its choice (PEP 592).
        files = choosable(listings.files(urls[pkg.index], pkg.name))
        # The day's latest build the target can install: a later build of that day may
        # lack its python's wheel (uploads go one python at a time).
        installable = nightlies_by_date(usable_files(files, tags), pkg.local)
        earlier = (kept or {}).get(str(pkg.name))
        if pkg.nightly in installable:
            version = str(max(installable[pkg.nightly]))
        elif (earlier is not None and earlier.date == pkg.nightly
              and pkg.nightly not in nightlies_by_date(files, pkg.local)):
            version = earlier.version  # gone from the index, still in the store
        else:
            # Not listed, or no wheel for the target: the nearest dates the target can use.
            raise date_error(DatePin(
                env=spec.name, key=f"{spec.path}: packages.{pkg.name}.nightly", package=str(pkg.name),
                date=pkg.nightly, local=pkg.local, index_name=pkg.index, index_url=http.redact(urls[pkg.index]),
                python=spec.python, platform=spec.platform), files, tags)
        pins[str(pkg.name)] = NightlyPin(date=pkg.nightly, version=version)
    return pins


def _check_pinned_listed(spec: EnvSpec, urls: Mapping[str, str], listings: Listings,
                         kept: Mapping[str, NightlyPin]) -> None:
    """A package pinned to an index that does not list it is named with its key, before uv
    answers with a resolution failure that names neither the key nor the index."""
    missing = [
        f"packages.{pkg.name}.index: index {pkg.index!r} ({http.redact(urls[pkg.index])}) lists no {pkg.name}"
        for pkg in spec.packages.values()
        if pkg.index and not pkg.build and str(pkg.name) not in kept and not listings.files(urls[pkg.index], pkg.name)
    ]
    raise_all(ResolveError, missing, f"{len(missing)} packages missing from the index they are pinned to",
              prefix=f"{spec.path}: ")


def kept_pins(spec: EnvSpec, inputs: ResolveInputs) -> dict[str, NightlyPin]:
    """The earlier lock's nightly pins that may stand in for a date the index no longer lists:
    same package, same index URL, same local tag, a wheel for this target, in the store."""
    tags = target_tags(spec.python, spec.platform)
    out = {}
    for name, (pin, artifact, index_url) in inputs.kept_nightlies.items():
        pkg = spec.packages.get(canonicalize_name(name))
        if pkg is None or pkg.index is None or not pkg.nightly or index_url is None:
            continue
        if index_url.rstrip("/") != http.redact(inputs.index_urls[pkg.index]).rstrip("/"):
            continue  # another index now (the lock keeps its URL without credentials): its listing decides
        if Version(pin.version).local != local_tag(pkg.local) or artifact.filename_problem():
            continue
        if tags is not None and not parse_wheel_filename(artifact.filename)[3] & set(tags):
            continue  # locked for another python or platform
        if store_file(inputs.store, artifact).is_file():
            out[name] = pin
    return out


def pinned_override_wheels(
    spec: EnvSpec, urls: Mapping[str, str], nightlies: Mapping[str, NightlyPin], listings: Listings,
    kept: Mapping[str, tuple[NightlyPin, Artifact, str | None]] | None = None,
) -> dict[str, IndexFile]:
    """The wheels (URL and version) for overrides of packages pinned to a non-default index.

    uv does not apply ``[tool.uv.sources]`` to overrides in ``uv pip compile``: an
    override ``torch==X`` would be looked up on the default index (where a hostile
    ``torch`` may sit). So an override of an index-pinned package becomes a direct
    URL to the wheel that its own index lists for the target.
    """
    kept = kept or {}
    exact: dict[str, str] = {name: pin.version for name, pin in nightlies.items()}
    for text in spec.resolution.overrides:
        req = Requirement(text)
        pkg = spec.packages.get(canonicalize_name(req.name))
        if pkg is None or pkg.index is None or pkg.index == spec.default_index.name:
            continue
        # The spec allows only an exact ==VERSION here, and none for a nightly pin.
        (exact[str(pkg.name)],) = [s.version for s in req.specifier if s.operator in ("==", "===")]
    tags = target_tags(spec.python, spec.platform)
    out = {}
    for name, version in sorted(exact.items()):
        index = spec.index_of(canonicalize_name(name))
        wanted = Version(version)  # once, not per listed file (a torch page lists thousands)
        files = [f for f in for_target(listings.files(urls[index], name), tags) if f.version == wanted]
        if not files and name in kept and Version(kept[name][0].version) == wanted:
            # A nightly the index dropped, its wheel in the store: the store copy is what uv
            # reads (no hash here: store_unhashed_pins takes the earlier lock's for it).
            artifact = kept[name][1]
            assert artifact.url is not None
            files = [IndexFile(filename=artifact.filename, url=artifact.url, version=wanted, sha256=None)]
        if not files:
            raise ResolveError(
                f"{spec.path}: packages.{name}: index {index!r} ({http.redact(urls[index])}) "
                f"lists no wheel of {name} {version} "
                f"for python {spec.python}{' on ' + spec.platform if spec.platform else ''}"
            )
        out[name] = best_file(files, tags)
    return out


def resolve(spec: EnvSpec, inputs: ResolveInputs) -> Resolution:
    """Resolve the spec with uv; check index pins, hashes and same-version sets."""
    with nullcontext(inputs.listings) if inputs.listings is not None else Listings() as listings:
        # Pages the checks need are fetched while uv works.
        for pkg in spec.packages.values():
            if pkg.index and not pkg.build:
                listings.prefetch(inputs.index_urls[pkg.index], pkg.name)
        for name, idx in spec.indexes.items():
            if not idx.default:
                listings.prefetch_names(inputs.index_urls[name])
        exact = exact_names(spec, inputs)
        for name in exact:  # read while uv works: whether an exact pin takes a yanked release
            listings.prefetch(inputs.index_urls[spec.index_of(name)], name)
        kept = kept_pins(spec, inputs)
        nightlies = resolve_nightlies(spec, inputs.index_urls, listings, kept)
        _check_pinned_listed(spec, inputs.index_urls, listings, kept)
        pinned = pinned_override_wheels(spec, inputs.index_urls, nightlies, listings,
                                        {name: inputs.kept_nightlies[name] for name in kept})
        stored, downloaded = store_unhashed_pins(pinned, inputs)
        timings.mark("lock: the nightlies and the pinned wheels checked (before uv)")
        entries = None
        if unhashed := unhashed_unpinned(spec, inputs, listings, pinned):
            if required := required_choices(spec, inputs, listings, stored, unhashed):
                # Exact versions a pinned wheel requires: stored (a probe if the store holds them
                # already) and handed to uv as direct dependencies, held to every requirement.
                got_stored, got = store_unhashed_pins(required, inputs)
                try:
                    entries = pylock_entries(run_uv(spec, inputs, {**pinned, **required}, {**stored, **got_stored},
                                                      "pylock.toml", direct=set(required)))
                    pinned, stored, downloaded = {**pinned, **required}, {**stored, **got_stored}, downloaded + got
                except ResolveError:
                    entries = None  # the target's markers read otherwise than here: ask uv for versions
                    downloaded += got
            if entries is None and (chosen := unhashed_choices(spec, inputs, listings, pinned, stored, unhashed)):
                more_stored, got = store_unhashed_pins(chosen, inputs)
                pinned, stored, downloaded = {**pinned, **chosen}, {**stored, **more_stored}, downloaded + got
        if entries is None:
            entries = pylock_entries(run_uv(spec, inputs, pinned, stored, "pylock.toml"))
        timings.mark("lock: uv resolved")
        packages, more = _checked_packages(spec, inputs, entries, listings, pinned, stored)
        packages = mark_yanked(spec, inputs.index_urls, listings, packages, exact | set(pinned))
    check_same_version(spec, packages)
    check_spec_pins(spec, packages, nightlies)
    return Resolution(packages=packages, nightlies=nightlies, requires_python=f"=={spec.python}.*",
                      downloaded=downloaded + more)


def exact_names(spec: EnvSpec, inputs: ResolveInputs) -> set[NormalizedName]:
    """The packages an exact ``==``/``===`` requirement of the env pins: the spec's, its overrides',
    its non-isolated builds' requirements. Only these may lock a yanked release (PEP 592: uv
    takes one only for an exact pin of its own requirements; envlock's nightly choice never)."""
    lines = [f"{p.name}{p.specifier}" for p in spec.packages.values() if p.specifier and not p.build]
    lines += [*spec.resolution.overrides, *inputs.extra_requirements]
    out = set()
    for line in lines:
        try:
            req = Requirement(line)
        except ValueError:  # not a requirement uv was handed as one: nothing pinned here
            continue
        if any(s.operator in ("==", "===") and "*" not in s.version for s in req.specifier):
            out.add(canonicalize_name(req.name))
    return out


def mark_yanked(spec: EnvSpec, urls: Mapping[str, str], listings: Listings, packages: Sequence[LockedPackage],
                names: set[NormalizedName] | set[str]) -> tuple[LockedPackage, ...]:
    """``packages``, those of ``names`` whose locked wheel their index lists as yanked marked so
    (``LockedPackage.yanked``: the lock records it, and ``lock`` says it)."""
    out = []
    for pkg in packages:
        if pkg.name in names and pkg.wheels and pkg.wheels[0].url is not None:
            filename = pkg.wheels[0].filename
            listed = next((f for f in listings.files(urls[spec.index_of(pkg.name)], pkg.name)
                           if f.filename == filename), None)
            if listed is not None and listed.yanked is not None:
                pkg = replace(pkg, yanked=listed.yanked)
        out.append(pkg)
    return tuple(out)


def _checked_packages(
    spec: EnvSpec, inputs: ResolveInputs, entries: Sequence[Mapping[str, object]], listings: Listings,
    pinned: Mapping[str, IndexFile], stored: Mapping[str, Artifact],
) -> tuple[tuple[LockedPackage, ...], int]:
    """uv's answer, checked: each wheel listed on its package's index, with a sha256; and the bytes
    downloaded to hash those the index publishes no hash for.

    This guards against the resolver itself taking a package from the wrong index (as
    ``uv pip compile`` does with overrides of index-pinned packages, see
    ``pinned_override_wheels``). A package is looked up on its allowed index when it is
    pinned to a non-default index, or when a non-default index also lists its name (the
    only other place it could have come from); a name only the default index has cannot
    have come from anywhere else. Which index a package *should* come from is the spec's
    call: one not pinned comes from the default index, by the rule that protects against
    the torchtriton attack (pin `pytorch-triton = { index = ... }` to take it from there).
    """
    packages, wanted = _wanted_wheels(spec, inputs, entries, pinned, stored)
    checked = _names_to_check(spec, inputs, listings, wanted)
    downloaded = 0
    for item in wanted:
        package, got = _checked_wheel(spec, inputs, listings, item, item[0] in checked)
        packages.append(package)
        downloaded += got
    return tuple(sorted(packages, key=lambda p: p.name)), downloaded


#: A package of uv's answer and the one wheel of it the target installs: name, version, uv's wheel entry.
_Wanted = tuple[NormalizedName, str, Mapping[str, object]]


def _wanted_wheels(spec: EnvSpec, inputs: ResolveInputs, entries: Sequence[Mapping[str, object]],
                   pinned: Mapping[str, IndexFile], stored: Mapping[str, Artifact],
                   ) -> tuple[list[LockedPackage], list[_Wanted]]:
    """The packages uv read from their store copy, locked as they are (``_stored_package``), and the
    wheel of each other package the target installs; ``ResolveError`` naming every package that has
    none (an sdist only). A local build's package is left out: its wheel replaces it."""
    build_names = {p.name for p in spec.packages.values() if p.build}
    wanted: list[_Wanted] = []
    problems: list[str] = []
    packages = []
    tags = target_tags(spec.python, spec.platform)
    for entry in entries:
        name = canonicalize_name(str(entry["name"]))
        if name in build_names:
            continue  # replaced by the local build's wheel
        if name in stored:  # read from its store copy: lock the URL its index lists
            packages.append(_stored_package(name, entry, pinned[name], stored[name], inputs.store,
                                            inputs.index_urls[spec.index_of(name)]))
            continue
        wheels = entry.get("wheels")
        archive = entry.get("archive")
        if not wheels and isinstance(archive, dict) and str(archive.get("url", "")).endswith(".whl"):
            wheels = [archive]  # an index-pinned override, resolved as a direct wheel URL
        if not isinstance(wheels, list) or not wheels:
            problems.append(
                f"{name} {entry.get('version')}: no wheel for python {spec.python}"
                f"{' on ' + spec.platform if spec.platform else ''} (only an sdist); "
                f"declare a [builds.{name}] to build it reproducibly, or pin a version that has wheels"
            )
            continue
        # One wheel per package: the one the target would install, so the lock names
        # exactly the bytes that end up in the venv.
        names = [Artifact(sha256="", url=str(w["url"])).filename for w in wheels]
        wanted.append((name, str(entry["version"]), wheels[best_wheel(names, tags)]))
    if problems:
        raise ResolveError(f"{spec.path}: env {spec.name!r} cannot be locked to wheels", details=problems)
    return packages, wanted


def _names_to_check(spec: EnvSpec, inputs: ResolveInputs, listings: Listings,
                    wanted: Sequence[_Wanted]) -> set[NormalizedName]:
    """The packages looked up on their index (see ``_checked_packages``), their pages fetched meanwhile:
    those pinned to a non-default index, those a non-default index also lists (every one when such an
    index's names cannot be listed), and those uv gave no hash for."""
    default = spec.default_index.name
    elsewhere: set[str] | None = set()
    for index_name, idx in spec.indexes.items():
        if not idx.default:
            listed_names = listings.names(inputs.index_urls[index_name])
            elsewhere = None if listed_names is None or elsewhere is None else elsewhere | listed_names
    must_check = [
        item for item in wanted
        if spec.index_of(item[0]) != default or elsewhere is None or item[0] in elsewhere
        or not _sha_of(item[2])
    ]
    for name, _, _ in must_check:
        listings.prefetch(inputs.index_urls[spec.index_of(name)], name)
    return {item[0] for item in must_check}


def _checked_wheel(spec: EnvSpec, inputs: ResolveInputs, listings: Listings, item: _Wanted,
                   checked: bool) -> tuple[LockedPackage, int]:
    """One package of uv's answer locked at its wheel: the URL's form checked, the wheel found on its
    index's page when ``checked`` (the page's sha256 held to uv's), hashed from the store when no
    sha256 is known; and the bytes downloaded for that."""
    name, version, wheel = item
    index_name = spec.index_of(name)
    url = urldefrag(str(wheel["url"]))[0]
    _check_url(spec, f"{name} {version}", url, index_name, inputs.index_urls[index_name])
    listed_sha = None  # what the index says, for a checked package
    if checked:
        found = {f.url: f for f in listings.files(inputs.index_urls[index_name], name)}.get(url)
        if found is None:
            raise ResolveError(
                f"{spec.path}: {name} {version} resolved to {url}, which index {index_name!r} "
                f"({http.redact(inputs.index_urls[index_name])}) does not list; "
                f"{name} may come from that index only"
            )
        listed_sha = found.sha256
    sha = _sha_of(wheel) or listed_sha
    size = wheel.get("size")
    downloaded = 0
    # The index publishes no hash (PyTorch nightlies): the store's copy is hashed, also when
    # uv hashed its own download (a wheel uv picked, see unhashed_choices): the sync then
    # finds it stored, and the lock has its size whichever way it was found.
    if sha is None or (checked and listed_sha is None):
        ours, size, downloaded = hash_unlisted(name, version, url, inputs)
        if sha is not None and sha != ours:
            raise ResolveError(f"{name} {version}: {url} changed while it was locked: uv hashed it as sha256 "
                               f"{sha}, the store's download as {ours}; lock again (if uv answers the same, "
                               f"`uv cache clean {name}` drops the copy uv hashed)")
        sha = ours
    if listed_sha is not None and listed_sha != sha:
        raise ResolveError(f"{name} {version}: uv recorded sha256 {sha} for {url}, the index lists {listed_sha}")
    artifact = Artifact(sha256=str(sha), url=url, size=size if isinstance(size, int) else None)
    return LockedPackage(name=name, version=version, wheels=(artifact,),
                         index=http.redact(inputs.index_urls[index_name])), downloaded


def _check_url(spec: EnvSpec, what: str, url: str, index_name: str, index_url: str) -> None:
    """``ResolveError`` for a wheel URL uv answered that names no plain ``*.whl`` file, or that its
    index's page may not link (a remote index's ``file:`` link): before anything is downloaded."""
    if problem := Artifact(sha256="", url=url).filename_problem():
        raise ResolveError(f"{what}: {problem}")
    if problem := link_problem(index_url, url):  # uv read a page envlock may not have read
        raise ResolveError(f"{spec.path}: {what}: uv resolved it from index {index_name!r} ({http.redact(index_url)}), "
                           f"which lists {Artifact(sha256='', url=url).filename} at {url}: {problem}")


def _stored_package(name: NormalizedName, entry: Mapping[str, object], pin: IndexFile, artifact: Artifact,
                    store: Store, index_url: str) -> LockedPackage:
    """A pinned wheel uv read from its store copy, locked under the URL its index lists.

    uv's answer must be that very file at the pinned version: the index-pin check
    (``_checked_packages``) vouches only for the wheel the pin chose from the listing.
    """
    archive = entry.get("archive")
    path = archive.get("path") if isinstance(archive, dict) else None
    expected = store_file(store, artifact)
    if not isinstance(path, str) or Path(path).resolve() != expected.resolve():
        raise ResolveError(f"{name}: uv answered {archive or entry.get('wheels')!r}, expected the pinned wheel "
                           f"it was handed, {expected}")
    if str(entry.get("version")) != str(pin.version):
        raise ResolveError(f"{name}: {pin.url} holds version {entry.get('version')}, but its index lists it "
                           f"as {pin.version}; expected the version the file name says")
    sha = _sha_of(archive) if isinstance(archive, dict) else None
    if sha is not None and sha != artifact.sha256:  # the store entry changed under uv: never lock that
        raise ResolveError(f"{name}: uv hashed its store copy as sha256 {sha}, stored as {artifact.sha256}; "
                           f"the store entry is damaged, remove it and lock again")
    return LockedPackage(name=name, version=str(pin.version), wheels=(artifact,), index=http.redact(index_url))


def _sha_of(wheel: Mapping[str, object]) -> str | None:
    hashes = wheel.get("hashes")
    sha = hashes.get("sha256") if isinstance(hashes, dict) else None
    return str(sha) if sha else None


def check_spec_pins(spec: EnvSpec, packages: Sequence[LockedPackage], nightlies: Mapping[str, NightlyPin]) -> None:
    """Every package the spec declares is locked, at a version its pin allows (a nightly: that very version).

    The spec refuses overrides that move its own pins; this holds the lock to it
    whatever else uv was told, so the lock never names one version and installs another.
    """
    # uv drops a requirement whose marker is false (how `exclude` works): an override with
    # one would take a package the spec declares out of the env without a word.
    problems = spec.pin_problems({p.name: p.version for p in packages},
                                 {name: pin.version for name, pin in nightlies.items()}, what="the resolution",
                                 missing_hint=" (an override of it with a marker false for this target?)")
    if problems:
        raise ResolveError(f"{spec.path}: the resolution does not keep the spec's pins", details=problems)


def check_same_version(spec: EnvSpec, packages: Sequence[LockedPackage]) -> None:
    """``[resolution] same-version`` groups must share a public version (local tags free).

    Every name of a group must be resolved: a misspelt one would drop out of the
    comparison and leave the check holding for the names that remain. A package a
    local build provides is not resolved here (its wheel is built later) and is left out.
    """
    versions = {p.name: p.version for p in packages}
    built = {p.name for p in spec.packages.values() if p.build}
    problems = []
    for i, group in enumerate(spec.resolution.same_version):
        for name in group:
            if name not in versions and name not in built:
                hint = did_you_mean(name, sorted(versions), before=" (", after=")")
                problems.append(f"resolution.same-version[{i}]: {name!r} is not in the resolved lock{hint}; "
                                "expected names of packages the env resolves to")
        present = {n: versions[n] for n in group if n in versions}
        publics = {Version(v).public for v in present.values()}
        if len(publics) > 1:
            listed = ", ".join(f"{n} {v}" for n, v in present.items())
            problems.append(f"resolution.same-version[{i}]: public versions differ: {listed}")
    if problems:
        raise ResolveError(f"{spec.path}: inconsistent component set", details=problems)
