"""The one module that speaks HTTP (index pages here; artifact downloads in ``fetch``)."""

from __future__ import annotations

import threading
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
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


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
