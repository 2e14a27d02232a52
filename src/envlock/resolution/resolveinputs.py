"""What a resolution is asked with besides the spec (``ResolveInputs``), and the seam through which a
wheel its index publishes no hash for is downloaded and hashed (``HashUnlisted``: the recipe hands in
``install.fetch.hash_unlisted``, or the caches' ``cache.urlrecords.CachedHashing``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from packaging.utils import NormalizedName

from envlock.model.lockfile import Artifact, NightlyPin

if TYPE_CHECKING:
    from envlock.net.indexes import Listings
    from envlock.progress import Progress, Stop
    from envlock.resolution.uvahead import Ahead
    from envlock.store.store import Store


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
    # What downloads such a wheel into the store (``install.fetch.hash_unlisted``, passed in by the
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
    # Index pages read already, and read into: a lock of several targets reads each page once for all.
    listings: Listings | None = None
    # uv started ahead on the run recorded for this lock (``resolution.uvahead``), and where its run is
    # recorded (None: neither; a lock of several targets, a sync's relock).
    ahead: Ahead | None = None


def unlisted_artifact(url: str, inputs: ResolveInputs, stop: Stop | None = None) -> tuple[Artifact, int]:
    """The artifact at ``url``, whose index publishes no hash, and the bytes downloaded to hash it
    (``inputs.hash_unlisted``, given what the earlier lock found there)."""
    return inputs.hash_unlisted(url, inputs.store, known=inputs.hashed.get(url), progress=inputs.progress,
                                stop=stop)
