"""Binary cache backends: one small interface (get, put, exists, keys) over storage teams already run.

- ``file://DIR``: a folder (local, NFS, a mounted share); a put is a temp file renamed into place.
- ``http(s)://HOST/PREFIX``: GET reads, PUT writes, HEAD asks (the Bazel HTTP remote-cache
  convention: nginx with WebDAV's PUT, bazel-remote, a static server for a read-only mirror).
  ``keys`` reads the server's folder listing (nginx ``autoindex``, JSON or HTML).
- ``s3://BUCKET/PREFIX``: through boto3 (``pip install envlock[s3]``), which finds the endpoint,
  region and credentials where it always does (``AWS_ENDPOINT_URL``, ``~/.aws``, roles), so
  MinIO, R2 and Ceph work too. boto3 is imported only for an s3:// URL.

Keys are '/'-separated names under the cache's root (``wheels/<sha256>``, ``builds/<hex>.json``).
A backend says nothing of what the bytes mean: ``caching`` checks every byte it takes. Every
failure to reach or use a cache is one ``CacheError`` naming the cache (never its credentials),
and every network call has a bounded timeout (``ENVLOCK_CACHE_TIMEOUT`` seconds, default 10).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import unquote, urlsplit

from envlock.errors import EnvlockError, UsageError, redact, scrub
from envlock.store.store import temp_beside

_CHUNK = 1 << 20
_KEY = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")


#: Where a backend writes an entry's bytes, a chunk at a time.
Sink = Callable[[bytes], object]


class CacheError(EnvlockError):
    """A cache that cannot be reached or used (an answer of 5xx, a timeout, a refused write)."""


class TooLargeError(CacheError):
    """A cache entry longer than the caller's limit (a wheel longer than its locked size)."""


def timeout() -> float:
    """Seconds any one cache call may wait (connect, or between two reads)."""
    try:
        return max(0.1, float(os.environ.get("ENVLOCK_CACHE_TIMEOUT", "10")))
    except ValueError:
        return 10.0


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key) or any(part in (".", "..") for part in key.split("/")):
        raise ValueError(f"cache key {key!r}: expected '/'-separated plain names")
    return key


class Backend(Protocol):
    """A binary cache's storage."""

    @property
    def label(self) -> str:
        """The URL as said in messages (no credentials)."""
        ...

    def get(self, key: str, sink: Sink, *, limit: int) -> bool:
        """Write the entry's bytes to ``sink``; False when there is none; ``TooLarge`` past ``limit``."""
        ...

    def put(self, key: str, source: IO[bytes], size: int) -> None: ...

    def exists(self, key: str) -> bool: ...

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix`` ('wheels/')."""
        ...


def open_backend(url: str) -> Backend:
    """The backend for a cache URL; ``UsageError`` for a scheme envlock has none for."""
    scheme = urlsplit(url).scheme
    if scheme == "file":
        return FileBackend(Path(unquote(urlsplit(url).path)), redact(url))
    if scheme in ("http", "https"):
        return HttpBackend(url.rstrip("/") + "/", redact(url))
    if scheme == "s3":
        return S3Backend.of(url)
    raise UsageError(f"cache {redact(url)!r}: expected a file://, http(s):// or s3:// URL")


def _copy(chunks: Iterator[bytes], sink: Sink, limit: int, label: str, key: str) -> None:
    got = 0
    for chunk in chunks:
        got += len(chunk)
        if got > limit:
            raise TooLargeError(f"cache {label}: {key} is longer than {limit} bytes")
        sink(chunk)


def get_bytes(backend: Backend, key: str, *, limit: int = 16 << 20) -> bytes | None:
    """A small entry's bytes (a record, a manifest), None when there is none."""
    import io

    buf = io.BytesIO()
    return buf.getvalue() if backend.get(key, buf.write, limit=limit) else None


def put_bytes(backend: Backend, key: str, data: bytes) -> None:
    import io

    backend.put(key, io.BytesIO(data), len(data))


# -- file:// -------------------------------------------------------------------


@dataclass(frozen=True)
class FileBackend:
    """A ``file://DIR`` cache: each key a file under ``root``, a put a temp file renamed into place."""

    root: Path
    label: str

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def get(self, key: str, sink: Sink, *, limit: int) -> bool:
        try:
            with open(self._path(key), "rb") as fh:
                _copy(iter(lambda: fh.read(_CHUNK), b""), sink, limit, self.label, key)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise CacheError(f"cache {self.label}: cannot read {key}: {exc.strerror}") from None
        return True

    def put(self, key: str, source: IO[bytes], size: int) -> None:
        path = self._path(key)
        tmp = temp_beside(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                _copy(iter(lambda: source.read(_CHUNK), b""), out.write, size, self.label, key)
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise CacheError(f"cache {self.label}: cannot write {key}: {exc.strerror}") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def keys(self, prefix: str) -> Iterator[str]:
        base = self.root / prefix
        if not base.is_dir():
            return
        for dirpath, _dirs, files in os.walk(base):
            for name in sorted(files):
                if not name.startswith("."):
                    yield Path(dirpath, name).relative_to(self.root).as_posix()


# -- http(s):// ------------------------------------------------------------------


@dataclass(frozen=True)
class HttpBackend:
    """An ``http(s)://HOST/PREFIX`` cache: GET reads, PUT writes, HEAD asks, ``keys`` reads the folder listing."""

    base: str  # ends with '/'
    label: str

    def _url(self, key: str) -> str:
        return self.base + check_key(key)

    def _fail(self, key: str, exc: Exception) -> CacheError:
        reason = getattr(exc, "reason", None) or str(exc)
        return CacheError(f"cache {self.label}: {key}: {scrub(str(reason))}")

    def get(self, key: str, sink: Sink, *, limit: int) -> bool:
        from envlock.net import http

        try:
            with http.open_stream(self._url(key), timeout=timeout()) as body:
                _copy(body.chunks, sink, limit, self.label, key)
        except http.HttpError as exc:
            if exc.status in (404, 410):
                return False
            raise self._fail(key, exc) from None
        return True

    def put(self, key: str, source: IO[bytes], size: int) -> None:
        from envlock.net import http

        try:
            http.put(self._url(key), source, size, timeout=timeout())
        except http.HttpError as exc:
            raise self._fail(key, exc) from None

    def exists(self, key: str) -> bool:
        from envlock.net import http

        try:
            return http.exists(self._url(key), timeout=timeout())
        except http.HttpError as exc:
            raise self._fail(key, exc) from None

    def keys(self, prefix: str) -> Iterator[str]:
        from envlock.net import http

        folder = prefix.rstrip("/") + "/"
        try:
            page = http.get_page(self.base + folder, accept="application/json, text/html", timeout=timeout())
        except http.HttpError as exc:
            if exc.status in (404, 410):
                return
            raise CacheError(f"cache {self.label}: cannot list {folder}: {scrub(exc.reason)} (listing needs "
                             "the server's folder index: nginx `autoindex on;`)") from None
        for name, is_dir in _listing(page.text):
            if is_dir:
                yield from self.keys(folder + name)
            elif not name.startswith("."):
                yield folder + name


def _listing(text: str) -> list[tuple[str, bool]]:
    """(name, is a folder) of a server's folder listing: nginx's ``autoindex_format json``, else
    the links of an HTML index."""
    try:
        doc = json.loads(text)
    except ValueError:
        names = [unquote(h) for h in re.findall(r'href="([^"?#]+)"', text)]
        return [(n.rstrip("/"), n.endswith("/")) for n in names
                if n not in ("../", "./") and "/" not in n.rstrip("/") and _KEY.fullmatch(n.rstrip("/"))]
    return [(e["name"], e.get("type") == "directory") for e in doc
            if isinstance(e, dict) and isinstance(e.get("name"), str) and _KEY.fullmatch(e["name"])]


# -- s3:// -------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Backend:
    """An ``s3://BUCKET/PREFIX`` cache, through a boto3 client (``of`` makes one from the URL)."""

    bucket: str
    prefix: str  # "" or ends with '/'
    label: str
    client: Any

    @classmethod
    def of(cls, url: str) -> S3Backend:
        parts = urlsplit(url)
        label = redact(url)
        if not parts.hostname:
            raise UsageError(f"cache {label!r}: expected s3://BUCKET/PREFIX")
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise UsageError(f"cache {label}: an s3:// cache needs boto3: pip install 'envlock[s3]'") from None
        seconds = timeout()
        client = boto3.client("s3", config=Config(connect_timeout=seconds, read_timeout=seconds,
                                                  retries={"max_attempts": 2}))
        prefix = parts.path.strip("/")
        return cls(parts.netloc.rpartition("@")[2], prefix + "/" if prefix else "", label, client)

    def _fail(self, key: str, exc: Exception) -> CacheError:
        return CacheError(f"cache {self.label}: {key}: {scrub(str(exc))}")

    def get(self, key: str, sink: Sink, *, limit: int) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.prefix + check_key(key))
            _copy(got["Body"].iter_chunks(_CHUNK), sink, limit, self.label, key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return False
            raise self._fail(key, exc) from None
        except BotoCoreError as exc:
            raise self._fail(key, exc) from None
        return True

    def put(self, key: str, source: IO[bytes], size: int) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            # Streamed (multipart past 8 MB): a wheel can be GBs.
            self.client.upload_fileobj(source, self.bucket, self.prefix + check_key(key))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(key, exc) from None

    def exists(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self.prefix + check_key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return False
            raise self._fail(key, exc) from None
        except BotoCoreError as exc:
            raise self._fail(key, exc) from None
        return True

    def keys(self, prefix: str) -> Iterator[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                          Prefix=self.prefix + prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    yield item["Key"][len(self.prefix):]
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(prefix, exc) from None
