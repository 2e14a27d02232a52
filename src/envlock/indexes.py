"""Read a project's file list from a package index (PEP 691 JSON, else PEP 503 HTML)."""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from envlock import http
from envlock.errors import PackageIndexError

_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str  # absolute, without fragment
    version: Version
    sha256: str | None  # None when the index publishes no hash (PyTorch nightlies)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def project_files(index_url: str, project: str) -> list[IndexFile]:
    """Every file the index lists for ``project`` (empty when the project is absent)."""
    url = f"{index_url.rstrip('/')}/{canonicalize_name(project)}/"
    try:
        page = http.get_page(url, accept=_ACCEPT)
    except http.HttpError as exc:
        if exc.status == 404:
            return []
        raise PackageIndexError(f"{http.redact(url)}: cannot read the index page: {exc.reason}") from None
    entries: list[tuple[str, str, str | None]] = []  # filename, url, sha256
    if "json" in page.content_type:
        try:
            doc = json.loads(page.text)
            for f in doc["files"]:
                entries.append((f["filename"], urljoin(page.url, f["url"]), f.get("hashes", {}).get("sha256")))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:  # a page nested deep
            raise PackageIndexError(f"{http.redact(url)}: malformed PEP 691 page ({exc})") from None
    else:
        parser = _Links()
        parser.feed(page.text)
        for href, text in parser.links:
            absolute, fragment = urldefrag(urljoin(page.url, href))
            digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else None
            filename = text or absolute.rsplit("/", 1)[-1]
            entries.append((filename, absolute, digest))
    files = []
    for filename, raw_url, digest in entries:
        # The index's credentials stay with the index: file URLs are compared with uv's
        # (which carry none) and may be written into a lock.
        file_url = http.redact(raw_url)
        version = _version_of(filename)
        if version is not None:
            files.append(IndexFile(filename=filename, url=file_url, version=version, sha256=digest))
    return files


def project_names(index_url: str) -> set[str] | None:
    """Normalized project names an index lists on its root page; None if it has no usable root page."""
    url = f"{index_url.rstrip('/')}/"
    try:
        page = http.get_page(url, accept=_ACCEPT)
    except http.HttpError:
        return None
    if "json" in page.content_type:
        try:
            return {str(canonicalize_name(p["name"])) for p in json.loads(page.text)["projects"]}
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
    parser = _Links()
    parser.feed(page.text)
    return {str(canonicalize_name(text)) for _, text in parser.links if text}


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
