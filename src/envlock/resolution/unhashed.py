"""Wheels an index publishes no hash for (PyTorch's nightlies, their ``pytorch-triton``): brought into
the store, hashed as they arrive, before uv runs, and handed to uv as files from there, so that they
cross the network once, a relock downloads nothing while the store holds them, and the sync after the
lock finds them stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion

from envlock.errors import FetchError, ResolveError, raise_all
from envlock.model.lockfile import Artifact
from envlock.model.spec import EnvSpec, PackageSpec, allows
from envlock.model.target import best_file, for_target, requires_dist, target_markers, target_tags
from envlock.net import auth, http
from envlock.net.indexes import IndexFile, Listings
from envlock.progress import parallel
from envlock.resolution.resolveinputs import ResolveInputs, unlisted_artifact
from envlock.resolution.uvproject import requirements_versions, run_uv
from envlock.store.store import store_file


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
    unhashed = sorted((name, f) for name, f in pinned.items() if f.sha256 is None or http.file_path(f.url))
    calls = [lambda stop, f=f: unlisted_artifact(f.url, inputs, stop) for _, f in unhashed]
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
    artifact, locked_from = inputs.earlier_wheels.get(str(name), (None, None))
    if artifact is None or artifact.url is None or locked_from is None:
        return []
    if locked_from.rstrip("/") != http.redact(index_url).rstrip("/"):
        return []  # locked from another index then
    if not auth.same_origin(artifact.url, index_url):
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
    versions = requirements_versions(run_uv(spec, inputs, pinned, stored, "requirements.txt"))
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


def hash_unlisted(name: str, version: str, url: str, inputs: ResolveInputs) -> tuple[str, int, int]:
    """sha256 and size of a wheel whose index publishes no hash, and the bytes downloaded for them."""
    try:
        artifact, downloaded = unlisted_artifact(url, inputs)
    except FetchError as exc:
        raise ResolveError(f"{name} {version}: cannot hash {url}: {exc.message}") from None
    assert artifact.size is not None
    return artifact.sha256, artifact.size, downloaded
