"""Resolve an env spec to an exact, index-pinned set of wheels by driving the pinned uv.

uv sees a transient project: every spec index as a ``[[tool.uv.index]]`` (all but
the default ``explicit``, so a package comes from a non-default index only when it
names it), ``[tool.uv.sources]`` pinning packages to their index, overrides, and
excluded packages overridden to a never-true marker. envlock then checks uv's
answer against the indexes itself: every wheel must be listed on the index its
package is pinned to (the torchtriton lesson, Dec 2022), and every wheel gets a
sha256 even when the index publishes none.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urldefrag

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envlock import runner
from envlock.errors import FetchError, ResolveError, did_you_mean, raise_all
from envlock.model.lockfile import Artifact, LockedPackage, NightlyPin
from envlock.model.spec import EnvSpec, PackageSpec, allows
from envlock.model.target import best_file, best_wheel, for_target, requires_dist, target_markers, target_tags
from envlock.net import http
from envlock.net.indexes import IndexFile, Listings, choosable, link_problem
from envlock.resolution.nightly import DatePin, date_error, local_tag, nightlies_by_date, usable_files

if TYPE_CHECKING:
    from envlock.progress import Progress, Stop
    from envlock.store.store import Store

# An override to a marker that is never true removes a package from the resolution
# (uv's documented way to drop a dependency that an upstream package declares).
_NEVER = "sys_platform == 'never'"


@dataclass(frozen=True)
class Resolution:
    packages: tuple[LockedPackage, ...]
    nightlies: Mapping[str, NightlyPin]
    requires_python: str
    downloaded: int = 0  # bytes downloaded to hash wheels an index publishes no hash for


class HashUnlisted(Protocol):
    """Download the wheel at ``url``, whose index publishes no hash, into ``store`` (unless the store
    holds the bytes ``known`` names, still at that URL); its artifact and the bytes downloaded."""

    def __call__(self, url: str, store: Store, *, known: Artifact | None, progress: Progress | None = None,
                 stop: Stop | None = None) -> tuple[Artifact, int]: ...


@dataclass(frozen=True)
class ResolveInputs:
    """What the resolver needs besides the spec."""

    index_urls: Mapping[str, str]  # index name -> URL actually used (mirrors applied)
    # Where wheels an index publishes no hash for are downloaded to hash them.
    store: Store
    # What downloads such a wheel into the store (``fetch.hash_unlisted``, passed in by the
    # orchestration: a stage does not import another).
    hash_unlisted: HashUnlisted
    # Packages provided by local builds whose metadata uv may read from a source dir.
    build_sources: Mapping[NormalizedName, Path] = field(default_factory=dict)
    # Extra requirements to lock with the env (build requirements of non-isolated builds).
    extra_requirements: tuple[str, ...] = ()
    build_env: Mapping[str, str] = field(default_factory=dict)  # env vars for metadata builds
    # What an earlier lock found for wheels an index publishes no hash for (URL -> artifact).
    hashed: Mapping[str, Artifact] = field(default_factory=dict)
    progress: Progress | None = None  # of those downloads
    # The earlier lock's nightly pins: name -> (pin, its wheel, the index URL it came from).
    # Kept when the index no longer lists that date (PyTorch's keeps ~60 nightlies) and
    # the store still holds the wheel, so a spec edit can be locked without a mirror.
    kept_nightlies: Mapping[str, tuple[NightlyPin, Artifact, str | None]] = field(default_factory=dict)
    # The earlier lock's wheel of each package and the index URL it was locked from (as the lock
    # records it: no credentials), for a wheel the index dropped with the nightly that requires it.
    earlier_wheels: Mapping[str, tuple[Artifact, str | None]] = field(default_factory=dict)


def index_urls(spec: EnvSpec, mirrors: Mapping[str, str]) -> dict[str, str]:
    """The URL to use for each spec index: its mirror if one is given (``mirrors.index_mirrors``,
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
    from envlock.store.store import store_file

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


def uv_overrides(spec: EnvSpec, inputs: ResolveInputs, pinned: Mapping[str, IndexFile],
                 local: Mapping[str, Path] | None = None) -> list[str]:
    """The override lines uv gets (``overrides.txt``, named on its command line).

    ``local``: pinned wheels uv reads from these files (store copies) instead of their URL.
    """
    local = local or {}
    overrides = [o for o in spec.resolution.overrides if str(canonicalize_name(Requirement(o).name)) not in pinned]
    overrides += [f"{name} @ {local[name].as_uri() if name in local else f.url}" for name, f in sorted(pinned.items())]
    # Provided by a local build after resolution: upstream pins on it (sglang's
    # sgl-kernel==0.3.21) must not pull it from an index.
    overrides += [f"{pkg.name}; {_NEVER}" for pkg in spec.packages.values()
                  if pkg.build and pkg.name not in inputs.build_sources]
    overrides += [f"{name}; {_NEVER}" for name in spec.resolution.exclude]
    return overrides


def compile_args(spec: EnvSpec, inputs: ResolveInputs, output: str = "pylock.toml") -> list[str]:
    """``uv pip compile`` of the transient project (in its folder, with ``overrides.txt`` beside it),
    written as ``output`` (``pylock.toml``, or ``requirements.txt`` for versions without hashes)."""
    # uv runs with UV_NO_CONFIG (no user config may leak in), which also drops the
    # project's [tool.uv] settings: the default index and the overrides go on the
    # command line. Index pins ([tool.uv.sources]) are project metadata and stay.
    # Wheels only: an index's sdist is never built to read its metadata (its setup.py would run here);
    # a local build's source tree is (it is built from a pinned source anyway).
    return runner.compile_args("pyproject.toml", output, output_format=output, python=spec.python,
                               platform=spec.platform, default_index=inputs.index_urls[spec.default_index.name],
                               overrides="overrides.txt", wheels_only=sorted(map(str, inputs.build_sources)))


def transient_project(spec: EnvSpec, inputs: ResolveInputs, pinned: Mapping[str, IndexFile],
                      direct: Mapping[str, Path] | None = None) -> str:
    """The pyproject.toml uv resolves (pure function of its inputs, so it can be tested and benchmarked).

    ``direct``: packages given as a direct dependency on that wheel file (see ``_run_uv``).
    """
    deps: list[str] = []
    sources: dict[str, dict[str, str]] = {}
    for pkg in spec.packages.values():
        if direct and str(pkg.name) in direct:
            deps.append(f"{pkg.name} @ {direct[str(pkg.name)].as_uri()}")
            continue
        if pkg.build:
            if pkg.name in inputs.build_sources:
                deps.append(str(pkg.name))
                sources[str(pkg.name)] = {"path": str(inputs.build_sources[pkg.name])}
            continue
        if pkg.nightly:
            # The override (a URL on its own index) beats upstream == pins on the stable release.
            deps.append(f"{pkg.name}=={pinned[str(pkg.name)].version}")
        else:
            deps.append(f"{pkg.name}{pkg.specifier}")
        if pkg.index:
            sources[str(pkg.name)] = {"index": pkg.index}
    deps += inputs.extra_requirements
    # No [tool.uv] override-dependencies: UV_NO_CONFIG drops them (see compile_args); the
    # indexes and sources below are project metadata, which uv reads either way.
    lines = [
        "[project]",
        'name = "envlock-resolution"',
        'version = "0"',
        f"requires-python = {json.dumps('>=' + spec.python)}",
        f"dependencies = {json.dumps(deps)}",
    ]
    for name in sorted(spec.indexes, key=lambda n: (not spec.indexes[n].default, n)):
        idx = spec.indexes[name]
        # Its password reaches uv in its environment (``_run_uv``), never in a file it reads.
        url = runner.without_password(inputs.index_urls[name])
        lines += ["", "[[tool.uv.index]]", f"name = {json.dumps(name)}", f"url = {json.dumps(url)}"]
        lines.append("default = true" if idx.default else "explicit = true")
    lines += ["", "[tool.uv.sources]"]
    lines += [
        f"{json.dumps(name)} = {{ {', '.join(f'{k} = {json.dumps(v)}' for k, v in src.items())} }}"
        for name, src in sorted(sources.items())
    ]
    return "\n".join(lines) + "\n"


def resolve(spec: EnvSpec, inputs: ResolveInputs) -> Resolution:
    """Resolve the spec with uv; check index pins, hashes and same-version sets."""
    with Listings() as listings:
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
        entries = None
        if unhashed := unhashed_unpinned(spec, inputs, listings, pinned):
            if required := required_choices(spec, inputs, listings, stored, unhashed):
                # Exact versions a pinned wheel requires: stored (a probe if the store holds them
                # already) and handed to uv as direct dependencies, held to every requirement.
                got_stored, got = store_unhashed_pins(required, inputs)
                try:
                    entries = _pylock_entries(_run_uv(spec, inputs, {**pinned, **required}, {**stored, **got_stored},
                                                      "pylock.toml", direct=set(required)))
                    pinned, stored, downloaded = {**pinned, **required}, {**stored, **got_stored}, downloaded + got
                except ResolveError:
                    entries = None  # the target's markers read otherwise than here: ask uv for versions
                    downloaded += got
            if entries is None and (chosen := unhashed_choices(spec, inputs, listings, pinned, stored, unhashed)):
                more_stored, got = store_unhashed_pins(chosen, inputs)
                pinned, stored, downloaded = {**pinned, **chosen}, {**stored, **more_stored}, downloaded + got
        if entries is None:
            entries = _pylock_entries(_run_uv(spec, inputs, pinned, stored, "pylock.toml"))
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


def store_unhashed_pins(pinned: Mapping[str, IndexFile], inputs: ResolveInputs) -> tuple[dict[str, Artifact], int]:
    """The pinned wheels whose index publishes no hash, brought into the store before uv runs,
    and the bytes that took.

    uv then reads them from the store: handed the URL, it would download a nightly's
    GBs to hash it, and the sync after the lock would download them again. Stored
    here, they cross the network once (hashed while stored), and a relock downloads
    nothing while the store holds them. One failed download does not stop the others
    (they are kept for the next lock). A pinned wheel of a ``file://`` index (a mirror on
    disk) is stored too, hash or not: uv answers a direct file URL with a path, which only a
    store copy turns back into the index's URL; a listed hash must then be its bytes'.
    """
    from envlock.progress import parallel

    unhashed = sorted((name, f) for name, f in pinned.items() if f.sha256 is None or http.file_path(f.url))
    calls = [lambda stop, f=f: _unlisted_artifact(f.url, inputs, stop) for _, f in unhashed]
    results = dict(zip([name for name, _ in unhashed], parallel(calls, jobs=4) if calls else [], strict=True))
    failed = [f"{name} {pinned[name].version}: cannot hash {pinned[name].url}: {got.message}"
              for name, got in results.items() if isinstance(got, FetchError)]
    done = {name: got for name, got in results.items() if not isinstance(got, FetchError)}
    failed += [f"{name} {pinned[name].version}: {pinned[name].url}: the index lists sha256 {pinned[name].sha256}, "
               f"the file's is {artifact.sha256}"
               for name, (artifact, _) in done.items() if pinned[name].sha256 not in (None, artifact.sha256)]
    raise_all(ResolveError, failed, f"{len(failed)} pinned wheels could not be hashed")
    return {name: artifact for name, (artifact, _) in done.items()}, sum(n for _, n in done.values())


def unhashed_unpinned(spec: EnvSpec, inputs: ResolveInputs, listings: Listings,
                      pinned: Mapping[str, IndexFile]) -> list[PackageSpec]:
    """The spec's packages uv picks a version of itself (no exact pin) from an index that
    publishes no hash for them: ``pytorch-triton``, whose version a torch nightly requires.

    uv's pylock output must hash every wheel, so uv downloads such a wheel (twice, with a
    cold cache) and keeps no copy the sync could use: the sync downloaded it once more.
    So each is handed to uv as a file from the store instead, like a pinned nightly: the
    version a pinned wheel requires (``required_choices``), else the one uv picks when asked
    for versions only (``unhashed_choices``).
    """
    return [
        pkg for pkg in spec.packages.values()
        if pkg.index and not pkg.build and str(pkg.name) not in pinned
        and any(f.sha256 is None for f in listings.files(inputs.index_urls[pkg.index], pkg.name))
    ]


def required_choices(spec: EnvSpec, inputs: ResolveInputs, listings: Listings, stored: Mapping[str, Artifact],
                     unhashed: Sequence[PackageSpec]) -> dict[str, IndexFile]:
    """The wheel of each of ``unhashed`` when a pinned wheel in the store requires it at one exact
    version for the target (torch's ``pytorch-triton==3.6.0+git…``), else {} (uv is asked).

    Read from the pinned wheels' own metadata, so the choice depends on the spec and the
    index contents; every resolution has that version, so handing it to uv changes no other
    package's. Only a wheel the index no longer lists comes from the earlier lock and the
    store (``_kept_wheels``), as a kept nightly does.
    """
    markers = target_markers(spec.python, spec.platform)
    if markers is None:
        return {}
    from envlock.store.store import store_file

    exact: dict[NormalizedName, set[str]] = {}  # name -> its exact requirements ("==1.0", "===1.0")
    for artifact in stored.values():
        try:
            requirements = requires_dist(store_file(inputs.store, artifact))
        except Exception:  # a wheel that cannot be read (bad zip, corrupt or unknown compression): uv decides
            requirements = []
        for req in requirements:
            if req.marker is not None:
                try:
                    if not req.marker.evaluate(markers):
                        continue
                except Exception:  # an unknown marker variable: not read here, uv decides
                    return {}
            pins = [str(s) for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
            if pins:
                exact.setdefault(canonicalize_name(req.name), set()).update(pins)
    tags = target_tags(spec.python, spec.platform)
    chosen = {}
    for pkg in unhashed:
        required = exact.get(pkg.name)
        if not required:
            return {}  # not required at an exact version: uv picks it
        index_url = inputs.index_urls[pkg.index or ""]
        # Listed, else (dropped from the index with the nightly that requires it) the earlier lock's, if stored.
        files: list[IndexFile] = []
        for candidates in (listings.files(index_url, pkg.name), _kept_wheels(inputs, pkg.name, index_url)):
            files = [f for f in for_target(candidates, tags) if all(allows(pin, f.version, invalid=False)
                                                                    for pin in required)]
            if files:
                break
        # One listed version, or uv's choice might differ (a public ==1.0 admits 1.0+local too).
        if len({f.version for f in files}) != 1 or not allows(pkg.specifier, files[0].version, invalid=False):
            return {}
        chosen[str(pkg.name)] = best_file(files, tags)
    return chosen


def _kept_wheels(inputs: ResolveInputs, name: NormalizedName, index_url: str) -> list[IndexFile]:
    """The earlier lock's wheel of ``name``, as a listed file, when it was locked from ``index_url``
    (the index the spec pins it to now: never another's, the torchtriton lesson) and the store
    still holds it; no hash, ``store_unhashed_pins`` takes the earlier lock's. As for a kept nightly."""
    from envlock.store.store import store_file

    artifact, locked_from = inputs.earlier_wheels.get(str(name), (None, None))
    if artifact is None or artifact.url is None or locked_from is None:
        return []
    if locked_from.rstrip("/") != http.redact(index_url).rstrip("/"):
        return []  # locked from another index then
    if not http.same_origin(artifact.url, index_url):
        return []  # the lock's index field says this index, its URL another server: edited, not trusted
    if not store_file(inputs.store, artifact).is_file():
        return []
    try:
        wheel_name, version, *_ = parse_wheel_filename(artifact.filename)
    except (InvalidWheelFilename, InvalidVersion):
        return []
    if wheel_name != name:
        return []
    return [IndexFile(filename=artifact.filename, url=artifact.url, version=version, sha256=None)]


def unhashed_choices(spec: EnvSpec, inputs: ResolveInputs, listings: Listings, pinned: Mapping[str, IndexFile],
                     stored: Mapping[str, Artifact], unhashed: Sequence[PackageSpec]) -> dict[str, IndexFile]:
    """The wheel of each of ``unhashed`` uv picks when asked for versions only (a requirements
    output, for which it reads metadata with small range requests): the file the package's
    own index lists at that version for the target. A version the listing does not show is
    left to uv, which then hashes that wheel itself.
    """
    versions = _requirements_versions(_run_uv(spec, inputs, pinned, stored, "requirements.txt"))
    tags = target_tags(spec.python, spec.platform)
    chosen = {}
    for pkg in unhashed:
        version = versions.get(pkg.name)
        if version is None:
            continue  # not in the resolution (a marker left it out)
        files = [f for f in for_target(listings.files(inputs.index_urls[pkg.index or ""], pkg.name), tags)
                 if f.version == version]
        if files:
            chosen[str(pkg.name)] = best_file(files, tags)
    return chosen


def _requirements_versions(text: str) -> dict[NormalizedName, Version]:
    """``name==version`` lines of uv's requirements output (direct-URL lines and comments skipped)."""
    out = {}
    for line in text.splitlines():
        requirement = line.split("#", 1)[0].split(";", 1)[0].strip()
        name, sep, version = requirement.partition("==")
        if sep and " @ " not in requirement:
            try:
                out[canonicalize_name(name.strip())] = Version(version.strip())
            except InvalidVersion:
                continue  # not a version uv would write: the package is left to uv
    return out


def _pylock_entries(text: str) -> list[Mapping[str, object]]:
    entries: list[Mapping[str, object]] = tomllib.loads(text).get("packages", [])
    return entries


_SDIST_HINT = ("envlock locks wheels only: it never builds an index's sdist to read its metadata (that would run the "
               "index's code); declare a [builds.NAME] to build one from a pinned source, or pin a version that has "
               "wheels")


def _run_uv(spec: EnvSpec, inputs: ResolveInputs, pinned: Mapping[str, IndexFile],
            stored: Mapping[str, Artifact], output: str, direct: set[str] | None = None) -> str:
    """uv's resolution of the transient project, as the text of its ``output`` format.

    ``direct``: names of ``pinned`` handed to uv as direct dependencies on their store file
    (held to every requirement on them) rather than as overrides.
    """
    from envlock.store.store import store_file

    local = {name: store_file(inputs.store, art) for name, art in stored.items()}
    direct_files = {name: local[name] for name in direct or ()}
    overridden = {name: f for name, f in pinned.items() if name not in direct_files}
    work = Path(tempfile.mkdtemp(prefix="envlock-resolve-"))
    try:
        (work / "pyproject.toml").write_text(transient_project(spec, inputs, pinned, direct_files))
        (work / "overrides.txt").write_text("".join(f"{o}\n" for o in uv_overrides(spec, inputs, overridden, local)))
        args = compile_args(spec, inputs, output)
        result = runner.uv(args, cwd=work, env={**inputs.build_env, **runner.uv_index_credentials(inputs.index_urls)})
        if not result.ok:
            unreachable = "Failed to fetch" in result.stderr or "error sending request" in result.stderr
            sdists = [_SDIST_HINT] if "has no usable wheels" in result.stderr else []
            raise ResolveError(
                f"{spec.path}: uv could not read an index for env {spec.name!r} (no network, or a mirror is "
                f"needed: --index NAME=URL)" if unreachable else
                f"{spec.path}: uv found no resolution for env {spec.name!r}",
                details=[*result.tail().splitlines(), *sdists],
            )
        return (work / output).read_text()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _checked_packages(
    spec: EnvSpec, inputs: ResolveInputs, entries: Sequence[Mapping[str, object]], listings: Listings,
    pinned: Mapping[str, IndexFile], stored: Mapping[str, Artifact],
) -> tuple[tuple[LockedPackage, ...], int]:
    """uv's answer, checked: each wheel listed on its package's index, with a sha256.

    This guards against the resolver itself taking a package from the wrong index (as
    ``uv pip compile`` does with overrides of index-pinned packages, see
    ``pinned_override_wheels``). A package is looked up on its allowed index when it is
    pinned to a non-default index, or when a non-default index also lists its name (the
    only other place it could have come from); a name only the default index has cannot
    have come from anywhere else. Which index a package *should* come from is the spec's
    call: one not pinned comes from the default index, by the rule that protects against
    the torchtriton attack (pin `pytorch-triton = { index = ... }` to take it from there).
    """
    build_names = {p.name for p in spec.packages.values() if p.build}
    wanted: list[tuple[NormalizedName, str, Mapping[str, object]]] = []  # name, version, wheel
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
    checked = {item[0] for item in must_check}
    downloaded = 0
    for name, version, wheel in wanted:
        index_name = spec.index_of(name)
        url = urldefrag(str(wheel["url"]))[0]
        _check_url(spec, f"{name} {version}", url, index_name, inputs.index_urls[index_name])
        listed_sha = None  # what the index says, for a checked package
        if name in checked:
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
        # The index publishes no hash (PyTorch nightlies): the store's copy is hashed, also when
        # uv hashed its own download (a wheel uv picked, see unhashed_choices): the sync then
        # finds it stored, and the lock has its size whichever way it was found.
        if sha is None or (name in checked and listed_sha is None):
            ours, size, got = _hash_unlisted(name, version, url, inputs)
            downloaded += got
            if sha is not None and sha != ours:
                raise ResolveError(f"{name} {version}: {url} changed while it was locked: uv hashed it as sha256 "
                                   f"{sha}, the store's download as {ours}; lock again (if uv answers the same, "
                                   f"`uv cache clean {name}` drops the copy uv hashed)")
            sha = ours
        if listed_sha is not None and listed_sha != sha:
            raise ResolveError(f"{name} {version}: uv recorded sha256 {sha} for {url}, the index lists {listed_sha}")
        artifact = Artifact(sha256=str(sha), url=url, size=size if isinstance(size, int) else None)
        packages.append(
            LockedPackage(name=name, version=version, wheels=(artifact,),
                          index=http.redact(inputs.index_urls[index_name]))
        )
    return tuple(sorted(packages, key=lambda p: p.name)), downloaded


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
    from envlock.store.store import store_file

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


def _hash_unlisted(name: str, version: str, url: str, inputs: ResolveInputs) -> tuple[str, int, int]:
    """sha256 and size of a wheel whose index publishes no hash, and the bytes downloaded for them."""
    try:
        artifact, downloaded = _unlisted_artifact(url, inputs)
    except FetchError as exc:
        raise ResolveError(f"{name} {version}: cannot hash {url}: {exc.message}") from None
    assert artifact.size is not None
    return artifact.sha256, artifact.size, downloaded


def _unlisted_artifact(url: str, inputs: ResolveInputs, stop: Stop | None = None) -> tuple[Artifact, int]:
    """The artifact at ``url``, whose index publishes no hash, and the bytes downloaded to hash it
    (``inputs.hash_unlisted``, given what the earlier lock found there)."""
    return inputs.hash_unlisted(url, inputs.store, known=inputs.hashed.get(url), progress=inputs.progress,
                                stop=stop)


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
