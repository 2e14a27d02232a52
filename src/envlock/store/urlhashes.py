"""What the store hashed from a URL whose index publishes no hash (PyTorch's nightlies).

One small JSON file per URL, ``urls/<sha256 of URL>``: the sha256 and size of the bytes
last downloaded from it, and the ``http.validator``s (ETags, else Last-Modified) the URL
answered with for those bytes. A relock reads it to tell whether the URL still holds the
bytes the store has, so GBs are not downloaded again to learn a hash already known.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from envlock.model.lockfile import Artifact
from envlock.store.store import Store, store_file, write_atomic


def hashed_before(url: str, store: Store) -> Artifact | None:
    """What the store last hashed from ``url`` (``fetch.fetch_unhashed``), if it still holds those bytes.

    So a lock that failed after hashing a nightly (or one whose earlier lock was lost)
    does not download its GBs again.
    """
    record = _read_url_record(url, store)
    try:
        artifact = Artifact(sha256=record["sha256"], url=url, size=int(record["size"])) if record else None
    except (KeyError, TypeError, ValueError):
        return None
    if artifact is None or artifact.filename_problem() or not store_file(store, artifact).is_file():
        return None
    return artifact


def last_hashed(url: str, store: Store) -> str | None:
    """The sha256 of the bytes the store last hashed from ``url``, whether or not it still holds them."""
    record = _read_url_record(url, store)
    return str(record["sha256"]) if record else None


def record_hashed(url: str, store: Store, artifact: Artifact, validator: str | None) -> None:
    """Record that ``url`` held ``artifact``'s bytes (just hashed), answering with ``validator``.

    Every validator seen for these bytes is kept: servers behind a load balancer may
    each give their own ETag for one file, and a relock must not re-hash GBs for that.
    """
    seen = uploads_hashed(url, store, artifact.sha256) | ({validator} if validator else set())
    record = {"url": url, "sha256": artifact.sha256, "size": artifact.size, "validators": sorted(seen)}
    write_atomic(_url_record(store, url), json.dumps(record, sort_keys=True).encode())


def note_upload(url: str, store: Store, sha256: str, validator: str) -> None:
    """Add ``validator`` to those ``url`` is known to answer with for the bytes ``sha256``
    (when the store's record is of those bytes)."""
    record = _read_url_record(url, store)
    seen = _validators(record, sha256)
    if record and seen and validator not in seen:
        record["validators"] = sorted(seen | {validator})
        write_atomic(_url_record(store, url), json.dumps(record, sort_keys=True).encode())


def uploads_hashed(url: str, store: Store, sha256: str) -> set[str]:
    """The ``http.validator``s ``url`` answered with when the store hashed its bytes as ``sha256``
    (empty when none was recorded, or the record is of other bytes)."""
    return _validators(_read_url_record(url, store), sha256)


def _read_url_record(url: str, store: Store) -> dict[str, Any] | None:
    """The store's record of what ``url`` held when it was last hashed, or None (none, or unreadable)."""
    try:
        record = json.loads(_url_record(store, url).read_bytes())
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and record.get("url") == url and isinstance(record.get("sha256"), str)
    return record if ok else None


def _validators(record: dict[str, Any] | None, sha256: str) -> set[str]:
    if record is None or record["sha256"] != sha256:
        return set()
    found = record.get("validators")
    return {v for v in found if isinstance(v, str)} if isinstance(found, list) else set()


def _url_record(store: Store, url: str) -> Path:
    return store.root / "urls" / hashlib.sha256(url.encode()).hexdigest()
