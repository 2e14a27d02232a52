"""Signed URL records: what a wheel URL of a hash-less index holds, so ``lock`` need not download it.

PyTorch's nightly index lists its wheels without a hash, so ``envlock lock`` downloads each one
(GBs for torch) to compute the sha256 the lock records. A cache keyed by sha256 cannot be asked
by URL; so a cache also holds, per URL, a record signed like a build record (``signing``)::

    urls/<sha256 of the plain URL>.json   {url, filename, sha256, size}, signed by the pusher's key

The plain URL (``plain_url``) has no credentials, query or fragment: no secret reaches a key or
a record, and a pre-signed URL's changing token does not change its key. ``lock`` asks the
caches, in order, before it downloads such a wheel (``CachedHashing``, the ``hash_unlisted`` it
hands ``resolve``): a record is used only when a trusted key's signature verifies and its URL is
the one the index lists; the wheel then comes from the cache by that sha256 into the store, its
bytes held to the record's sha256 and size, so neither the lock nor the sync after it downloads
anything from the index. Anything else is refused by name in a one-line note, and the wheel is
downloaded from the index as before. ``cache push`` pushes a record for every locked wheel
(``push_url_records``); ``lock`` with ``[cache] push`` pushes those it hashed (``push_hashed``).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from envlock.cache.backends import Backend, CacheError, open_backend, put_bytes
from envlock.cache.caches import KEY_ENV, CacheCheck, Caches, Pushed, check_records, secret_key, wheel_key
from envlock.cache.signing import (
    URL_RECORD_FORMAT,
    PublicKey,
    RecordRefusedError,
    SecretKey,
    sign_record,
    verify_record,
)
from envlock.errors import UsageError, redact
from envlock.model.lockfile import Artifact
from envlock.store.store import Store, store_file
from envlock.store.urlhashes import hashed_before

if TYPE_CHECKING:
    from envlock.progress import Progress, Stop

_SHA256 = re.compile(r"[0-9a-f]{64}")


def plain_url(url: str) -> str:
    """``url`` without credentials, query and fragment (scheme and host lower-cased): what a URL
    record names and is keyed by."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2].lower()
    return urlunsplit((parts.scheme.lower(), host, parts.path, "", ""))


def url_key(url: str) -> str:
    """The cache key of ``url``'s record."""
    return f"urls/{hashlib.sha256(plain_url(url).encode()).hexdigest()}.json"


def url_record(artifact: Artifact, size: int) -> dict[str, Any]:
    """The record that ``artifact.url`` holds ``artifact``'s bytes (``size`` of them)."""
    assert artifact.url is not None
    return {"url": plain_url(artifact.url), "filename": artifact.filename, "sha256": artifact.sha256, "size": size}


@dataclass
class CachedHashing:
    """``resolve.HashUnlisted`` that asks the caches first: ``fetch.hash_unlisted`` (a download from
    the index) only for a URL none of them holds a trusted record of. ``hashed``: what was
    downloaded to hash it, for ``push_hashed``."""

    caches: Caches
    hashed: list[Artifact] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # resolve hashes a few at once

    def __call__(self, url: str, store: Store, *, known: Artifact | None, progress: Progress | None = None,
                 stop: Stop | None = None) -> tuple[Artifact, int]:
        from envlock.install import fetch

        # Bytes the store holds for the URL already: fetch checks the URL still holds them (one
        # small request), as without a cache.
        if not _in_store(url, store, known) and (got := self.from_caches(url, store)) is not None:
            return got, 0
        artifact, downloaded = fetch.hash_unlisted(url, store, known=known, progress=progress, stop=stop)
        if downloaded:
            with self._lock:
                self.hashed.append(artifact)
        return artifact, downloaded

    def from_caches(self, url: str, store: Store) -> Artifact | None:
        """The artifact at ``url`` from the first cache with a trusted record of it, its wheel
        brought into the store (verified); None when no cache has both."""
        with self._lock:
            backends = list(self.caches.backends())
        for backend in backends:
            data = self.caches.read(backend, url_key(url))
            if data is None or (artifact := self._checked(backend, data, url)) is None:
                continue
            where = f"URL record of {artifact.filename}"
            if (self.caches.take_wheel(store, backend, artifact,
                                       absent=f"{where}: its wheel {wheel_key(artifact.sha256)} is not in the cache")
                    and store_file(store, artifact).is_file()):
                return artifact
        return None

    def _checked(self, backend: Backend, data: bytes, url: str) -> Artifact | None:
        """The artifact ``data`` records for ``url`` when a trusted key signed it and it is of that
        URL; else None, refused by name."""
        filename = Artifact(sha256="", url=url).filename
        where = f"URL record of {filename}"
        try:
            record = verify_record(data, self.caches.config.trusted, where, URL_RECORD_FORMAT)
        except RecordRefusedError as exc:
            self.caches.refuse(backend, exc.message)
            return None
        listed = plain_url(url)
        if record.get("url") != listed:
            self.caches.refuse(backend, f"{where}: it records URL {redact(str(record.get('url')))}, the index "
                                        f"lists {listed}")
            return None
        sha, size = record.get("sha256"), record.get("size")
        if (record.get("filename") != filename or not isinstance(sha, str) or not _SHA256.fullmatch(sha)
                or not isinstance(size, int) or isinstance(size, bool) or size < 0):
            self.caches.refuse(backend, f"{where}: expected the file name {filename}, a sha256 and a size in it")
            return None
        return Artifact(sha256=sha, url=url, size=size)


def _in_store(url: str, store: Store, known: Artifact | None) -> bool:
    """Whether the store holds bytes hashed from ``url`` (``known``: the earlier lock's)."""
    if known is not None and store_file(store, known).is_file():
        return True
    return hashed_before(url, store) is not None


# -- push --------------------------------------------------------------------------------


def push_url_records(backend: Backend, wheels: Sequence[tuple[Artifact, Path]], key: SecretKey | None) -> Pushed:
    """Upload what ``backend`` lacks of each wheel fetched by an http(s) URL: its bytes (by sha256),
    then its URL record signed by ``key`` (the record last: once it is there, its wheel is)."""
    wanted = {url_key(a.url): (a, path) for a, path in wheels
              if a.url is not None and urlsplit(a.url).scheme in ("http", "https")}
    if key is None:
        return Pushed(backend.label, (), 0, (f"no URL records pushed: a URL record must be signed (--key FILE, or "
                                             f"{KEY_ENV}, or [cache] key in envlock.toml)",) if wanted else ())
    uploaded: list[str] = []
    present = 0
    for name, (artifact, path) in sorted(wanted.items()):
        if backend.exists(name):
            present += 1
            continue
        if not backend.exists(wheel_key(artifact.sha256)):
            with open(path, "rb") as fh:
                backend.put(wheel_key(artifact.sha256), fh, path.stat().st_size)
            uploaded.append(wheel_key(artifact.sha256))
        put_bytes(backend, name, sign_record(url_record(artifact, path.stat().st_size), key, URL_RECORD_FORMAT))
        uploaded.append(name)
    return Pushed(backend.label, tuple(uploaded), present)


def push_hashed(caches: Caches, store: Store, hashed: Sequence[Artifact]) -> None:
    """After ``lock``: the wheels it downloaded to hash them, and their URL records, pushed to
    ``[cache] push`` (a failure is a note: the lock stands)."""
    if caches.config.push is None or not hashed:
        return
    try:
        backend = open_backend(caches.config.push)
        pushed = push_url_records(backend, [(a, store_file(store, a)) for a in hashed],
                                  secret_key(caches.config.key_file))
    except (CacheError, UsageError) as exc:
        caches.notes.append(f"push to {redact(caches.config.push)}: {exc.message}")
        return
    caches.pushed += len(pushed.uploaded)
    caches.notes.extend(pushed.notes)


# -- verify ----------------------------------------------------------------------------


def verify_url_records(url: str, trusted: Mapping[str, PublicKey]) -> CacheCheck:
    """``cache verify``'s look at the URL records of the cache at ``url``: each signed by a key of
    ``trusted``, stored under its URL's key, its wheel present."""
    return check_records(open_backend(url), trusted, "urls/", URL_RECORD_FORMAT, url_key,
                         lambda record: f"URL {redact(str(record.get('url')))}", subject="url")
