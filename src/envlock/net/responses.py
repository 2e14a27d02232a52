"""What ``net.http`` answers with, and the error a request ends in (``HttpError``): a page, whole
(``Page``) or as it arrives (``PageStream``, its text decoded piece by piece within the page cap),
a body streamed from an offset (``Body``), a range of a file's bytes (``Range``), and the
``validator`` that tells one upload of a URL's file from the next. No HTTP is spoken here.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from dataclasses import dataclass

from envlock.errors import redact


class HttpError(Exception):
    def __init__(self, url: str, reason: str, *, retryable: bool = False, status: int | None = None,
                 details: tuple[str, ...] = ()) -> None:
        url = redact(url)  # errors are printed and logged: never with a password in them
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        #: The next steps, for the error the caller raises (a 401's: where envlock looked, how to give them).
        self.details = details
        #: True for failures worth retrying: connection drops, timeouts, 5xx, 429.
        self.retryable = retryable
        self.status = status


class NoRangesError(HttpError):
    """A range request answered with the whole file (200): the server serves no byte ranges
    (Python's ``http.server``, many static mirrors). Its body is not read."""


@dataclass(frozen=True)
class Page:
    """A page read whole: its final URL (after redirects), its Content-Type and its text."""

    url: str  # final URL after redirects
    content_type: str
    text: str


@dataclass(frozen=True)
class PageStream:
    """A page being read: its final URL, its Content-Type and its text in pieces (``open_page``)."""

    url: str
    content_type: str
    pieces: Iterator[str]


@dataclass(frozen=True)
class Body:
    """A streaming response body: ``chunks`` yields the file's bytes from offset ``start``."""

    start: int  # offset in the whole file of the first byte ``chunks`` yields
    chunks: Iterator[bytes]
    size: int | None = None  # the whole file's, when the server says (for progress only)
    validator: str | None = None  # see ``validator``: what changes when the file is uploaded again


def validator(etag: str | None, last_modified: str | None) -> str | None:
    """What tells one upload of a URL's file from the next: its ETag, else its Last-Modified
    (None when the server gives neither). Two uploads of one size differ here, not in size."""
    if etag:
        return f"etag {etag}"
    return f"modified {last_modified}" if last_modified else None


@dataclass(frozen=True)
class Range:
    """Bytes ``data`` of a remote file, from offset ``start``; ``total`` is the whole file's size."""

    start: int
    data: bytes
    total: int


# -- a page's text ------------------------------------------------------------------


#: The largest index page read (``ENVLOCK_MAX_PAGE_BYTES`` overrides it): PyTorch's biggest pages
#: are a few MB; a page that does not end must not take the machine's memory.
MAX_PAGE_BYTES = 128 << 20
_PAGE_VAR = "ENVLOCK_MAX_PAGE_BYTES"


def max_page_bytes() -> int:
    """The page size cap: ``ENVLOCK_MAX_PAGE_BYTES`` if set, else ``MAX_PAGE_BYTES``."""
    raw = os.environ.get(_PAGE_VAR, "").strip()
    if not raw:
        return MAX_PAGE_BYTES
    if not raw.isdigit() or int(raw) <= 0:
        from envlock.errors import UsageError

        raise UsageError(f"{_PAGE_VAR}={raw!r}: expected a byte count, a whole number above 0 "
                         f"(the default is {MAX_PAGE_BYTES})")
    return int(raw)


def decoded(url: str, chunks: Iterator[bytes], charset: str, cap: int) -> Iterator[str]:
    """The text of a page's ``chunks`` in ``charset`` (UTF-8 for one Python does not know), piece by piece;
    ``HttpError`` once more than ``cap`` bytes came."""
    try:
        decoder = codecs.getincrementaldecoder(charset)(errors="replace")
    except LookupError:  # a charset Python does not know: as a browser would, read it as UTF-8
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    got = 0
    for chunk in chunks:
        got += len(chunk)
        if got > cap:
            raise HttpError(url, too_big(cap, "sent more"))
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


def too_big(cap: int, what: str) -> str:
    """What a page over the cap ``cap`` is told with (``what``: how it was found out)."""
    return (f"index page larger than {cap} bytes ({what}); not read further: "
            f"set {_PAGE_VAR} to a larger byte count if the page is genuine")
