"""The one module that speaks HTTP: index pages, and ranged streaming GETs for ``fetch``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import requests

from envlock import __version__

USER_AGENT = f"envlock/{__version__}"
_local = threading.local()


def session() -> requests.Session:
    """A per-thread session (requests sessions are not thread-safe)."""
    s: requests.Session | None = getattr(_local, "session", None)
    if s is None:
        s = requests.Session()
        s.headers["User-Agent"] = USER_AGENT
        _local.session = s
    return s


@dataclass(frozen=True)
class Page:
    url: str  # final URL after redirects
    content_type: str
    text: str


class HttpError(Exception):
    def __init__(self, url: str, reason: str, *, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        #: True for failures worth retrying: connection drops, timeouts, 5xx, 429.
        self.retryable = retryable
        self.status = status


def get_page(url: str, *, accept: str, timeout: float = 60.0) -> Page:
    """GET a text page; ``HttpError`` on connection errors and non-2xx answers."""
    try:
        resp = session().get(url, headers={"Accept": accept}, timeout=timeout)
    except requests.RequestException as exc:
        raise HttpError(url, f"cannot connect ({type(exc).__name__})") from None
    if resp.status_code >= 400:
        raise HttpError(url, f"HTTP {resp.status_code}")
    return Page(url=resp.url, content_type=resp.headers.get("Content-Type", ""), text=resp.text)


def hash_url(url: str, *, timeout: float = 60.0) -> tuple[str, int]:
    """Stream ``url`` and return its (sha256 hex, size) without keeping the body in memory."""
    import hashlib

    digest = hashlib.sha256()
    size = 0
    try:
        with session().get(url, stream=True, timeout=timeout) as resp:
            if resp.status_code >= 400:
                raise HttpError(url, f"HTTP {resp.status_code}")
            for chunk in resp.iter_content(chunk_size=1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except requests.RequestException as exc:
        raise HttpError(url, f"download failed ({type(exc).__name__})") from None
    return digest.hexdigest(), size


@dataclass(frozen=True)
class Body:
    """A streaming response body: ``chunks`` yields the file's bytes from offset ``start``."""

    status: int
    start: int  # offset in the whole file of the first byte ``chunks`` yields
    total: int | None  # size of the whole file, when the server says
    chunks: Iterator[bytes]


def _retryable_status(status: int) -> bool:
    return status == 429 or status >= 500


@contextlib.contextmanager
def open_stream(
    url: str, *, start: int = 0, timeout: float = 60.0, chunk_size: int = 1 << 20
) -> Iterator[Body]:
    """GET ``url`` from byte ``start`` (HTTP Range when > 0), streaming in ``chunk_size`` pieces.

    A server that ignores the Range answers 200: ``Body.start`` is then 0 and the
    caller must start over. Every failure, also mid-body, is an ``HttpError``.
    """
    headers = {"Accept-Encoding": "identity"}  # byte offsets must be offsets in the file itself
    if start > 0:
        headers["Range"] = f"bytes={start}-"
    try:
        resp = session().get(url, headers=headers, stream=True, timeout=timeout)
    except requests.RequestException as exc:
        raise HttpError(url, f"cannot connect ({type(exc).__name__})", retryable=True) from None
    try:
        if resp.status_code == 416:
            raise HttpError(url, f"HTTP 416 for bytes={start}-", status=416)
        if resp.status_code >= 400:
            raise HttpError(
                url,
                f"HTTP {resp.status_code}",
                retryable=_retryable_status(resp.status_code),
                status=resp.status_code,
            )
        body_start, total = 0, _int(resp.headers.get("Content-Length"))
        if resp.status_code == 206:
            body_start, total = _content_range(url, resp.headers.get("Content-Range", ""))
        yield Body(resp.status_code, body_start, total, _chunks(url, resp, chunk_size))
    finally:
        resp.close()


def _chunks(url: str, resp: requests.Response, chunk_size: int) -> Iterator[bytes]:
    try:
        # raw.stream keeps memory at one chunk; urllib3 raises when the body
        # ends before Content-Length (a cut connection), which we turn into a retry.
        yield from resp.raw.stream(chunk_size, decode_content=False)
    except Exception as exc:  # urllib3 ProtocolError, ReadTimeoutError, OSError, ...
        raise HttpError(url, f"connection broken mid-body ({type(exc).__name__})", retryable=True) from None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _content_range(url: str, value: str) -> tuple[int, int | None]:
    # "bytes START-END/TOTAL" (RFC 9110 14.4); TOTAL may be "*".
    try:
        unit, _, rest = value.partition(" ")
        span, _, total = rest.partition("/")
        first = int(span.split("-", 1)[0])
        if unit != "bytes":
            raise ValueError(unit)
    except ValueError:
        raise HttpError(url, f"HTTP 206 with unreadable Content-Range {value!r}", retryable=True) from None
    return first, (int(total) if total.isdigit() else None)
