"""What a wheel installs, read without downloading it: its RECORD (path -> hash) and Requires-Dist.

A lock's guards compare what distributions install (two that write one path with different
bytes: PyPI's ``triton`` and the nightly's ``pytorch-triton`` both install ``triton/``) and who
requires whom. A wheel the store holds is read there; any other is read from its index with
HTTP range requests, as pip and uv read metadata (PEP 658 aside): the tail of the file (the zip's
end record and central directory, where wheel writers also put ``.dist-info``), then the
``RECORD`` and ``METADATA`` members where they are. That is a few hundred kB for a 1 GB torch
wheel. What was read is kept in the store as ``listings/<wheel sha256>.json`` (marked when it was
read from the store's own copy), so a relock asks nothing again and opens no zip. A listing read
by ranges is what the index served, not bytes hashed against the lock: it feeds a guard, never an
install, and it is not taken for a wheel the store holds. Where the index serves no byte ranges
(``RangesNotServedError``), ``listings`` has the wheel brought into the store whole (held to its
sha256, as the sync would fetch it) and reads it there.

``served_metadata`` reads what an index serves beside a wheel as its metadata (PEP 658): what uv
resolves from instead of the wheel's own ``METADATA``, for the guards to compare.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envlock.model.jsondoc import json_doc
from envlock.store.store import Store, store_file, write_atomic

if TYPE_CHECKING:
    from envlock.model.lockfile import Artifact

#: The first request asks for this many bytes at the end of the file: a small wheel whole, a big
#: one's central directory and ``.dist-info`` most of the time.
TAIL_BYTES = 64 * 1024
#: Reads for one listing stop past this: a wheel's directory and RECORD are far smaller.
MAX_READ_BYTES = 64 << 20
_DATA_DIRS = {"purelib": "", "platlib": "", "scripts": "<scripts>/", "headers": "<headers>/", "data": "<data>/"}


class ListingError(Exception):
    """A wheel's listing cannot be read (the file is gone, is no wheel, ...)."""


class RangesNotServedError(ListingError):
    """The index serves no byte ranges (Python's ``http.server``, many static mirrors): the wheel can
    be read whole only (``listings`` does, given ``whole``)."""


@dataclass(frozen=True)
class WheelListing:
    """What one wheel installs and requires."""

    # Installed path (relative to site-packages; ``<scripts>/``, ``<data>/``, ``<headers>/`` for
    # the other install schemes) -> RECORD's hash (``sha256=<urlsafe base64>``, "" when none).
    files: Mapping[str, str]
    requires: tuple[str, ...]  # Requires-Dist lines of METADATA, as written
    via: str = "store"  # where it was read: "store", "file" (a wheel on disk), "index" (ranges), "cache"

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, omit=("via",))  # kept with sorted keys (``_keep``)

    @classmethod
    def from_dict(cls, doc: object, via: str) -> WheelListing:
        if not isinstance(doc, dict):
            raise ListingError("not a listing")
        files, requires = doc.get("files"), doc.get("requires")
        if not (isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
                and isinstance(requires, list) and all(isinstance(r, str) for r in requires)):
            raise ListingError("not a listing")
        return cls(files=files, requires=tuple(requires), via=via)


def listing(artifact: Artifact, store: Store, *, base: Path | None = None) -> WheelListing:
    """What ``artifact`` installs and requires: from its store copy, else a wheel on disk (a
    ``file://`` URL, or ``path`` relative to ``base``), else the store's record of an earlier
    read, else its URL by range requests (then recorded). ``ListingError`` says why not."""
    from envlock.net import http

    stored = store_file(store, artifact)
    record = store.path("listings", f"{artifact.sha256}.json")
    if stored.is_file():
        # Read from the store copy once (a nightly's directory of 15,000 files is ~50 ms of zipfile),
        # then from its record; a record of a range read is not taken for the verified bytes.
        if (kept := _recorded(record, from_store=True)) is not None:
            return kept
        found = _read_local(stored, "store")
        _keep(record, found, from_store=True)
        return found
    local = http.file_path(artifact.url) if artifact.url else (
        str(base / artifact.path) if base is not None and artifact.path else None)
    if local is not None:
        return _read_local(Path(local), "file")
    if (kept := _recorded(record, from_store=False)) is not None:
        return kept
    if artifact.url is None:
        raise ListingError("neither in the store nor at a URL")
    # A failure that may pass (a timeout, a dropped connection, a 5xx, 429) is tried again: a listing that
    # cannot be read changes what the lock records (its requires, the overlaps it checked), so a transient
    # one would make a relock differ (seen with two targets' listings next to GBs of the GPU check's downloads).
    for attempt in range(1, LISTING_TRIES + 1):
        try:
            with _RemoteFile(artifact.url) as remote:
                found = _read_zip(remote, "index")  # type: ignore[arg-type]  # a binary file, as zipfile reads one
            break
        except http.NoRangesError as exc:
            raise RangesNotServedError(str(exc)) from None
        except http.HttpError as exc:
            if not exc.retryable or attempt == LISTING_TRIES:
                raise ListingError(str(exc) + (f" ({attempt} tries)" if attempt > 1 else "")) from None
            time.sleep(0.5 * attempt)
    _keep(record, found, from_store=False)
    return found


#: How many times a wheel's file list is read by range requests when the failure may pass.
LISTING_TRIES = 3


def _recorded(record: Path, *, from_store: bool) -> WheelListing | None:
    """The listing kept at ``record``, if any (``from_store``: only one read from the store's copy)."""
    try:
        doc = json.loads(record.read_text())
        if from_store and not (isinstance(doc, dict) and doc.get("read") == "store"):
            return None
        return WheelListing.from_dict(doc, "cache")
    except (OSError, ValueError, ListingError):
        return None


def _keep(record: Path, found: WheelListing, *, from_store: bool) -> None:
    """Keep ``found`` at ``record`` (a shortcut only: without it the next lock reads the wheel again)."""
    doc = {**found.to_dict(), **({"read": "store"} if from_store else {})}
    with contextlib.suppress(OSError):
        write_atomic(record, json.dumps(doc, sort_keys=True).encode())


def _read_local(path: Path, via: str) -> WheelListing:
    try:
        with path.open("rb") as fh:
            return _read_zip(fh, via)
    except OSError as exc:
        raise ListingError(f"cannot read {path} ({exc.strerror})") from None


def _read_zip(fh: IO[bytes], via: str) -> WheelListing:
    try:
        with zipfile.ZipFile(fh) as zf:
            infos = [n for n in zf.namelist() if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")]
            dist_info = {n.split("/")[0] for n in infos}
            if len(dist_info) != 1:
                raise ListingError(f"not a wheel (expected one top-level .dist-info folder, found {len(dist_info)})")
            (folder,) = dist_info
            names = set(zf.namelist())
            if f"{folder}/RECORD" not in names or f"{folder}/METADATA" not in names:
                raise ListingError(f"not a wheel ({folder} lacks RECORD or METADATA)")
            for member in ("RECORD", "METADATA"):  # zipfile stops at the size the directory says
                if zf.getinfo(f"{folder}/{member}").file_size > MAX_READ_BYTES:
                    raise ListingError(f"{folder}/{member} is larger than {MAX_READ_BYTES >> 20} MiB")
            record = zf.read(f"{folder}/RECORD").decode("utf-8")
            from email.parser import BytesParser  # ~25 ms of email imports: only when a wheel is read

            metadata = BytesParser().parsebytes(zf.read(f"{folder}/METADATA"), headersonly=True)
    # zipfile raises NotImplementedError for a compression method it lacks (e.g. a wheel compressed with zstd)
    except (zipfile.BadZipFile, UnicodeDecodeError, NotImplementedError, EOFError) as exc:
        raise ListingError(f"not a readable wheel ({exc})") from None
    return WheelListing(files=installed_files(record), requires=tuple(metadata.get_all("Requires-Dist") or []),
                        via=via)


def installed_files(record: str) -> dict[str, str]:
    """RECORD's rows (PEP 376 CSV: path, hash, size) as installed path -> hash; the ``.dist-info``
    folder's own files are left out (no two distributions share one), ``.data`` paths are mapped
    to where they install."""
    import csv

    out = {}
    for row in csv.reader(io.StringIO(record)):
        if not row or not row[0]:
            continue
        path, digest = row[0], row[1] if len(row) > 1 else ""
        top, _, rest = path.partition("/")
        if top.endswith(".dist-info"):
            continue
        if top.endswith(".data"):
            scheme, _, inner = rest.partition("/")
            path = _DATA_DIRS.get(scheme, f"<{scheme}>/") + inner
        out[path] = digest
    return out


class _RemoteFile(io.RawIOBase):
    """A remote file read as a seekable binary file, each missing piece fetched by one range request
    of at least ``TAIL_BYTES`` (zipfile reads the end record, the directory, then members)."""

    def __init__(self, url: str) -> None:
        from envlock.net import http

        super().__init__()
        self._url = url
        first = http.read_range(url, last=TAIL_BYTES)
        self._size = first.total
        self._parts = [(first.start, first.data)]
        self._pos = 0
        self._read_bytes = len(first.data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._bytes(self._pos, n)
        buffer[:n] = data
        self._pos += n
        return n

    def _bytes(self, start: int, n: int) -> bytes:
        for first, data in self._parts:
            if first <= start and start + n <= first + len(data):
                return data[start - first:start - first + n]
        from envlock.net import http

        # What a part already holds from ``start`` on is not asked again (zipfile reads a member's
        # header, then its data); else an aligned block, so that the members zipfile reads next
        # (METADATA beside RECORD) often come with it.
        head = next((data[start - first:] for first, data in self._parts if first <= start < first + len(data)), b"")
        first = start + len(head) if head else start - start % TAIL_BYTES
        end = min(self._size, max(start + n, first + TAIL_BYTES)) - 1
        self._read_bytes += end + 1 - first
        if self._read_bytes > MAX_READ_BYTES:
            raise http.HttpError(self._url, f"more than {MAX_READ_BYTES >> 20} MiB read for its listing; "
                                            "not a wheel's directory")
        got = http.read_range(self._url, start=first, end=end)
        if got.start != first or len(got.data) != end + 1 - first:
            raise http.HttpError(self._url, f"asked for bytes {first}-{end}, got {len(got.data)} from {got.start}")
        if head:
            first, data = start, head + got.data
        else:
            data = got.data
        self._parts.append((first, data))
        return data[start - first:start - first + n]


#: Brings a wheel into the store, held to its sha256 (``install.fetch.fetch`` of that one artifact, handed in
#: by the recipe); an ``EnvlockError`` when it cannot.
Whole = Callable[["Artifact"], object]


def listings(artifacts: Mapping[str, Artifact], store: Store, *, base: Path | None = None,
             jobs: int = 8, whole: Whole | None = None) -> dict[str, WheelListing | ListingError]:
    """``listing`` of each artifact (by a name of the caller's), read ``jobs`` at a time; a failure
    is that artifact's ``ListingError``, not the others'. ``whole``: where the index serves no byte
    ranges, the wheel is brought into the store with it (as the sync after the lock would) and read
    there, its bytes held to the lock's sha256."""
    from envlock.errors import EnvlockError
    from envlock.progress import Stop, parallel

    names = sorted(artifacts)

    def one(name: str) -> WheelListing | ListingError:
        try:
            return listing(artifacts[name], store, base=base)
        except RangesNotServedError as exc:
            if whole is None:
                return exc
            try:
                whole(artifacts[name])
            except EnvlockError as err:
                return ListingError(f"{exc}, and the whole wheel could not be read: {err.message}")
        except ListingError as exc:
            return exc
        try:
            return listing(artifacts[name], store, base=base)  # from the store now
        except ListingError as exc:
            return exc

    calls: list[Callable[[Stop], WheelListing | ListingError]] = [
        lambda stop, name=name: one(name) for name in names]  # type: ignore[misc]
    got = parallel(calls, jobs=jobs) if calls else []
    # parallel hands back a FetchError as a result: here none is raised, but it is typed so.
    return {name: r if isinstance(r, WheelListing | ListingError) else ListingError(str(r))
            for name, r in zip(names, got, strict=True)}


@dataclass(frozen=True)
class Served:
    """The metadata an index serves beside a wheel (PEP 658: the wheel's URL + ``.metadata``): what
    uv resolves from when the index offers it, instead of the wheel's own ``METADATA``."""

    url: str
    requires: tuple[str, ...] | None  # its Requires-Dist lines, as written; None: the index serves none
    problem: str | None = None  # why it could not be read (a server error, not a 404)


def served_metadata(url: str) -> Served:
    """What the index serves as the metadata of the wheel at ``url`` (a ``Served``: none when it
    answers 404 or 410), read no further than ``MAX_READ_BYTES``."""
    from envlock.net import http

    where = f"{url}.metadata"
    data = bytearray()
    try:
        with http.open_stream(where) as body:
            for chunk in body.chunks:
                data += chunk
                if len(data) > MAX_READ_BYTES:
                    return Served(where, None, f"larger than {MAX_READ_BYTES >> 20} MiB; not a wheel's metadata")
    except http.HttpError as exc:
        return Served(where, None, None if exc.status in (404, 410) else exc.reason)
    from email.parser import BytesParser  # ~25 ms of email imports: only when a wheel is read

    metadata = BytesParser().parsebytes(bytes(data), headersonly=True)
    return Served(where, tuple(metadata.get_all("Requires-Dist") or []))


def served_metadatas(urls: Mapping[str, str], jobs: int = 8) -> dict[str, Served]:
    """``served_metadata`` of each URL (by a name of the caller's), ``jobs`` at a time."""
    from envlock.progress import Stop, parallel

    names = sorted(urls)
    calls: list[Callable[[Stop], Served]] = [
        lambda stop, name=name: served_metadata(urls[name]) for name in names]  # type: ignore[misc]
    got = parallel(calls, jobs=jobs) if calls else []
    return {name: r if isinstance(r, Served) else Served(f"{urls[name]}.metadata", None, str(r))
            for name, r in zip(names, got, strict=True)}
