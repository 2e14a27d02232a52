"""Read a project's file list from a package index (PEP 691 JSON, else PEP 503 HTML)."""

from __future__ import annotations

import json
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from html.parser import HTMLParser
from types import TracebackType
from urllib.parse import urldefrag, urljoin, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from envlock.errors import PackageIndexError
from envlock.net import http

_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


@dataclass(frozen=True)
class IndexFile:
    """A file an index lists for a project: its name, URL, version, sha256 and whether it is yanked (PEP 592)."""

    filename: str
    url: str  # absolute, without fragment
    version: Version
    sha256: str | None  # None when the index publishes no hash (PyTorch nightlies)
    #: PEP 592: None when not yanked, else the reason the index gives ("" for none). A yanked
    #: file is chosen only by an exact ``==`` pin (``choosable``).
    yanked: str | None = None


def choosable(files: Iterable[IndexFile], *, exact: bool = False) -> list[IndexFile]:
    """``files`` a version may be chosen from: all of them for an exact ``==`` pin, else those not
    yanked (PEP 592: a yanked release is for those who pinned it, not for a new choice)."""
    return list(files) if exact else [f for f in files if f.yanked is None]


#: An anchor's text past this many characters is not kept: a file name is far shorter.
_MAX_TEXT = 4096
#: The most the HTML parser may hold of one unfinished tag, comment or script: a PEP 503 page's are
#: a few hundred bytes; a page that opens one and never closes it is not read into memory whole.
_MAX_PENDING = 8 << 20
#: What a page's links (or a JSON page's text) take in memory while the page is read; past it they
#: go to a temporary file, so a page refused at the cap has taken no more than this.
_SPOOL_BYTES = 8 << 20


class _Links(HTMLParser):
    """The anchors of a PEP 503 page, fed piece by piece: each (href, text, data-yanked) handed to
    ``found`` when its ``</a>`` is read (none kept here), the ``<base href>`` links resolve against,
    and the PEP 629 repository version."""

    def __init__(self, found: Callable[[str, str, str | None], None]) -> None:
        super().__init__()
        self.base: str | None = None
        self.version: str | None = None
        self._found = found
        self._open: tuple[str, str | None] | None = None
        self._text: list[str] = []
        self._text_len = 0

    def feed_piece(self, url: str, piece: str) -> None:
        """``feed`` one piece of the page at ``url``; ``PackageIndexError`` when what the parser must
        hold of an unfinished construct passes ``_MAX_PENDING``."""
        self.feed(piece)
        if len(self.rawdata) > _MAX_PENDING:
            raise PackageIndexError(f"{http.redact(url)}: the index page holds a tag, comment or script longer "
                                    f"than {_MAX_PENDING} bytes, unfinished; not a PEP 503 page")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a":
            href = found.get("href")
            yanked = (found.get("data-yanked") or "") if "data-yanked" in found else None  # PEP 592
            self._open = None if href is None else (href, yanked)
            self._text, self._text_len = [], 0
        elif tag == "base" and self.base is None and found.get("href") is not None:
            self.base = found["href"]  # the first <base href> is the document's base (HTML 4.2.3)
        elif tag == "meta" and found.get("name") == "pypi:repository-version" and self.version is None:
            self.version = found.get("content") or ""

    def handle_data(self, data: str) -> None:
        if self._open is not None and self._text_len < _MAX_TEXT:
            self._text.append(data[:_MAX_TEXT - self._text_len])
            self._text_len += len(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self._found(self._open[0], "".join(self._text).strip(), self._open[1])
            self._open = None

    def resolve(self, page_url: str, href: str) -> str:
        """``href`` as a browser resolves it: ASCII tabs and newlines dropped, spaces around it
        stripped, against the ``<base href>`` (itself against the page URL), else the page URL."""
        base = urljoin(page_url, _clean(self.base)) if self.base is not None else page_url
        return urljoin(base, _clean(href))


class _Spool:
    """Rows of strings (or None) kept in the order they are read, one JSON line each: in memory up to
    ``_SPOOL_BYTES``, then in a temporary file. No object is kept per row while a page is read, so a
    page refused at the cap has cost a bounded amount of memory whatever it held (a 300 MB page of
    links, each kept as a tuple of strings, took envlock to 579 MB)."""

    def __init__(self) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115  # closed in __exit__

    def __enter__(self) -> _Spool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._file.close()

    def add(self, *row: str | None) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")

    def rows(self) -> Iterator[list[str | None]]:
        self._file.seek(0)
        for line in self._file:
            yield json.loads(line.decode("utf-8", "surrogatepass"))

    def write(self, piece: str) -> None:
        """Keep ``piece`` of a text read whole later (``text``)."""
        self._file.write(piece.encode("utf-8", "surrogatepass"))

    def text(self) -> str:
        self._file.seek(0)
        return self._file.read().decode("utf-8", "surrogatepass")


def _clean(href: str) -> str:
    return href.strip(" \t\n\r\f").replace("\t", "").replace("\n", "").replace("\r", "")


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def _check_api_version(url: str, version: object, where: str) -> None:
    """PEP 629/691: a client must refuse a major version it does not know (2.0 may mean anything)."""
    if version is None:
        return
    text = str(version).strip()
    major = text.split(".", 1)[0]
    if not major.isdigit():
        raise PackageIndexError(f"{http.redact(url)}: {where} {text!r}; expected a version like \"1.0\"")
    if int(major) > 1:
        raise PackageIndexError(f"{http.redact(url)}: {where} {text}; envlock reads version 1.x of the "
                                "simple repository API (PEP 691) only")


#: (filename, absolute url, sha256, yanked) as a page lists them.
_Entry = tuple[str, str, "str | None", "str | None"]


def _json_entries(url: str, page_url: str, text: str) -> list[_Entry]:
    try:
        doc = json.loads(text)
        _check_api_version(url, doc.get("meta", {}).get("api-version"), "PEP 691 api-version")
        entries: list[_Entry] = []
        for f in doc["files"]:
            yanked = f.get("yanked", False)
            reason = None if yanked is False else (yanked if isinstance(yanked, str) else "")
            entries.append((f["filename"], urljoin(page_url, f["url"]), f.get("hashes", {}).get("sha256"), reason))
        return entries
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:  # a page nested deep
        raise PackageIndexError(f"{http.redact(url)}: malformed PEP 691 page ({exc})") from None


def _json_text(page: http.PageStream, spool: _Spool) -> str:
    """A PEP 691 page's text, whole: kept in ``spool`` as it arrives, so a page refused at the cap
    has not been held in memory."""
    for piece in page.pieces:
        spool.write(piece)
    return spool.text()


def _html_entries(url: str, page: http.PageStream, spool: _Spool) -> Iterator[_Entry]:
    """The links of a PEP 503 page, parsed as it arrives (a huge page is never held whole) and kept
    in ``spool`` (nor are its links); then each resolved against the page's base, once it is all read."""
    parser = _Links(spool.add)
    for piece in page.pieces:
        parser.feed_piece(url, piece)
        if parser.version is not None:
            _check_api_version(url, parser.version, "pypi:repository-version")
    parser.close()
    return _resolved(parser, page.url, spool)


def _resolved(parser: _Links, page_url: str, spool: _Spool) -> Iterator[_Entry]:
    for href, text, yanked in spool.rows():
        absolute, fragment = urldefrag(parser.resolve(page_url, str(href)))
        digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else None
        yield text or absolute.rsplit("/", 1)[-1], absolute, digest, yanked


#: The schemes a page may link files with, by the page's own: a remote index's page links files on
#: the network only (a ``file:`` link would have envlock copy them from this machine's disk and lock
#: that path); a folder on disk (a mirror) may link its own files too.
_LINKABLE = {"http": ("http", "https"), "https": ("http", "https"), "file": ("file", "http", "https")}


def link_problem(page_url: str, link: str) -> str | None:
    """Why an index page at ``page_url`` may not list a file at ``link`` (None: it may): a remote
    (http, https) index's files are http or https URLs; an index on disk may also link ``file:``."""
    page, scheme = urlsplit(page_url).scheme.lower(), urlsplit(link).scheme.lower()
    allowed = _LINKABLE.get(page, ())
    if scheme in allowed:
        return None
    disk = " (a file: link would be copied from this machine's own disk)" if scheme == "file" else ""
    expected = " or ".join([", ".join(allowed[:-1]), *allowed[-1:]] if len(allowed) > 2 else allowed)
    return (f"{scheme}: links are refused on {'a' if page == 'file' else 'an'} {page or 'unknown'} index page; "
            f"expected {expected or 'none'}{disk}")


def _shown(reason: str | None) -> str | None:
    """A yank reason as it can be printed and written into a lock: each control or format character
    (a terminal escape, a right-to-left override) and each lone surrogate (a JSON page may carry
    one) as ``?``, at most 200 characters. The index's text, not ours, reaches a terminal."""
    if reason is None:
        return None
    shown = "".join("?" if unicodedata.category(c) in ("Cc", "Cf", "Cs") else c for c in reason)
    return shown if len(shown) <= 200 else shown[:199] + "…"


def project_files(index_url: str, project: str) -> list[IndexFile]:
    """Every file the index lists for ``project`` (empty when the project is absent).

    ``PackageIndexError`` for a page that cannot be read, is over the size cap, speaks an API
    major version above 1, or lists one file name twice with two hashes."""
    url = f"{index_url.rstrip('/')}/{canonicalize_name(project)}/"
    with _Spool() as spool:
        try:
            with http.open_page(url, accept=_ACCEPT) as page:
                page_url = page.url
                if "json" in page.content_type:
                    entries: Iterable[_Entry] = _json_entries(url, page.url, _json_text(page, spool))
                else:
                    entries = _html_entries(url, page, spool)
        except http.HttpError as exc:
            if exc.status == 404:
                return []
            raise PackageIndexError(f"{http.redact(url)}: cannot read the index page: {exc.reason}",
                                    details=exc.details) from None
        return _files(url, page_url, entries)


def _files(url: str, page_url: str, entries: Iterable[_Entry]) -> list[IndexFile]:
    """The files of ``entries`` (read from the page at ``url``, served from ``page_url``), by name."""
    files: dict[str, IndexFile] = {}
    for filename, raw_url, digest, yanked in entries:
        # The index's credentials stay with the index: file URLs are compared with uv's
        # (which carry none) and may be written into a lock.
        file_url = http.redact(raw_url)
        version = _version_of(filename)
        if version is None:
            continue
        if problem := link_problem(page_url, file_url):
            raise PackageIndexError(f"{http.redact(url)}: lists {filename} at {file_url}: {problem}")
        if (seen := files.get(filename)) is not None:
            if seen.sha256 is not None and digest is not None and seen.sha256 != digest:
                raise PackageIndexError(f"{http.redact(url)}: lists {filename} twice, with sha256 {seen.sha256} "
                                        f"and {digest}; expected one file per name")
            continue  # the first listing of a name is the one kept
        files[filename] = IndexFile(filename=filename, url=file_url, version=version, sha256=digest,
                                    yanked=_shown(yanked))
    return list(files.values())


def project_names(index_url: str) -> set[str] | None:
    """Normalized project names an index lists on its root page; None if it has no usable root page.
    Read as ``project_files`` reads a page: parsed as it arrives, its names spooled until it is all read."""
    url = f"{index_url.rstrip('/')}/"
    with _Spool() as spool:
        try:
            with http.open_page(url, accept=_ACCEPT) as page:
                if "json" in page.content_type:
                    text: str | None = _json_text(page, spool)
                else:
                    text = None
                    parser = _Links(lambda _href, name, _yanked: spool.add(name) if name else None)
                    for piece in page.pieces:
                        parser.feed_piece(url, piece)
                    parser.close()
        except (http.HttpError, PackageIndexError):
            return None
        if text is None:
            return {str(canonicalize_name(str(name))) for (name,) in spool.rows()}
    try:
        return {str(canonicalize_name(p["name"])) for p in json.loads(text)["projects"]}
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


class Listings:
    """Index pages fetched concurrently and once: a project's files, an index's project names."""

    def __init__(self, max_workers: int = 16) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=max_workers)
        self._files: dict[tuple[str, str], Future[list[IndexFile]]] = {}
        self._names: dict[str, Future[set[str] | None]] = {}

    def __enter__(self) -> Listings:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def prefetch(self, index_url: str, project: str) -> None:
        key = (index_url, str(canonicalize_name(project)))
        if key not in self._files:
            self._files[key] = self._pool.submit(project_files, index_url, project)

    def files(self, index_url: str, project: str) -> list[IndexFile]:
        self.prefetch(index_url, project)
        return self._files[(index_url, str(canonicalize_name(project)))].result()

    def prefetch_names(self, index_url: str) -> None:
        if index_url not in self._names:
            self._names[index_url] = self._pool.submit(project_names, index_url)

    def names(self, index_url: str) -> set[str] | None:
        self.prefetch_names(index_url)
        return self._names[index_url].result()
