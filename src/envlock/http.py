"""The one module that speaks HTTP: index pages, and ranged streaming GETs for ``fetch``.

Built on ``http.client`` rather than requests: every ``envlock lock`` pays for its
imports (requests costs ~90 ms more), and all envlock needs is GET with keep-alive,
redirects, proxies from the environment, credentials from the URL or ``~/.netrc``
and streaming. Connections are kept per thread and per host.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, BinaryIO, Protocol
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

from envlock import __version__
from envlock.errors import redact as redact  # http.redact too, as the stages call it

USER_AGENT = f"envlock/{__version__}"
_MAX_REDIRECTS = 10
_local = threading.local()
_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None
_netrc: object = None  # netrc.netrc | False (unreadable), loaded once


@dataclass(frozen=True)
class Page:
    url: str  # final URL after redirects
    content_type: str
    text: str


class HttpError(Exception):
    def __init__(self, url: str, reason: str, *, retryable: bool = False, status: int | None = None) -> None:
        url = redact(url)  # errors are printed and logged: never with a password in them
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        #: True for failures worth retrying: connection drops, timeouts, 5xx, 429.
        self.retryable = retryable
        self.status = status


def with_credentials_of(url: str, index_url: str) -> str:
    """``url`` with ``index_url``'s ``user:password@`` when both are on one host (and ``url`` has none).

    Index pages list their files without credentials (and envlock redacts them from
    what it reads); a download from a mirror that needs them must send them again.
    """
    index = urlsplit(index_url)
    parts = urlsplit(url)
    if index.username is None or parts.username is not None or (parts.scheme, parts.netloc) != (
            index.scheme, index.netloc.rpartition("@")[2]):
        return url
    return parts._replace(netloc=index.netloc).geturl()


# -- connections ---------------------------------------------------------------


def _context() -> ssl.SSLContext:
    """The system's CA store, or a bundle named the way pip/requests users already do."""
    global _ssl_context
    with _lock:
        if _ssl_context is None:
            bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or None
            _ssl_context = ssl.create_default_context(cafile=bundle)
        return _ssl_context


def _proxy_for(scheme: str, host: str) -> str | None:
    from urllib.request import getproxies, proxy_bypass

    proxy = getproxies().get(scheme)
    if not proxy or proxy_bypass(host):
        return None
    return proxy


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()


#: Authorization headers by origin (scheme, host, port), one mapping per ``credentials`` block
#: under way, the innermost last.
_scopes: list[dict[tuple[str, str | None, int | None], str]] = []


def _origin(parts: SplitResult) -> tuple[str, str | None, int | None]:
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # a port out of range: matches no origin
        port = -1
    return parts.scheme, parts.hostname, port


@contextlib.contextmanager
def credentials(*urls: str) -> Iterator[None]:
    """For the block, send the ``user:password@`` of these index URLs (a spec's private index, a
    mirror) with every request to their origin, from any thread: their pages list file URLs without
    them (and the lock keeps none), so the lock's hashing of a wheel and the sync's download would
    get a 401 without a ~/.netrc. A command's recipe hands them over; they end with it."""
    scope = {_origin(parts): _basic(parts.username, parts.password or "")
             for parts in map(urlsplit, urls) if parts.username is not None}
    with _lock:
        _scopes.append(scope)
    try:
        yield
    finally:
        with _lock:
            del _scopes[next(i for i in range(len(_scopes) - 1, -1, -1) if _scopes[i] is scope)]


def _credentials(url: str) -> str | None:
    """An Authorization header from the URL's user:password, else from an index URL of its origin
    (``credentials``), else from ~/.netrc (as pip and uv do)."""
    parts = urlsplit(url)
    if parts.username is not None:
        return _basic(parts.username, parts.password or "")
    global _netrc
    with _lock:
        origin = _origin(parts)
        if (given := next((s[origin] for s in reversed(_scopes) if origin in s), None)) is not None:
            return given
        if _netrc is None:
            import netrc

            try:
                _netrc = netrc.netrc()
            except (OSError, netrc.NetrcParseError):
                _netrc = False
    if _netrc is False or parts.hostname is None:
        return None
    auth = _netrc.authenticators(parts.hostname)  # type: ignore[attr-defined]
    return _basic(auth[0] or "", auth[2] or "") if auth else None


def _connection(scheme: str, host: str, port: int, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
    """A kept-alive connection for this thread (and whether it is new)."""
    proxy = _proxy_for(scheme, host)
    key = (scheme, host, port, proxy)
    pool: dict[tuple[str, str, int, str | None], http.client.HTTPConnection] = _local.__dict__.setdefault("pool", {})
    conn = pool.get(key)
    if conn is not None:
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, False
    if proxy is None:
        conn = (http.client.HTTPSConnection(host, port, timeout=timeout, context=_context()) if scheme == "https"
                else http.client.HTTPConnection(host, port, timeout=timeout))
    else:
        p = urlsplit(proxy)
        proxy_headers = {"Proxy-Authorization": _basic(p.username, p.password or "")} if p.username else None
        if scheme == "https":  # CONNECT tunnel through the proxy
            conn = http.client.HTTPSConnection(p.hostname or "", p.port or 80, timeout=timeout, context=_context())
            conn.set_tunnel(host, port, headers=proxy_headers)
        else:  # plain HTTP: the proxy gets the absolute URL (see _target)
            conn = http.client.HTTPConnection(p.hostname or "", p.port or 80, timeout=timeout)
    pool[key] = conn
    return conn, True


def _drop(conn: http.client.HTTPConnection) -> None:
    conn.close()
    pool = _local.__dict__.get("pool", {})
    for key, value in list(pool.items()):
        if value is conn:
            del pool[key]


def _request(
    url: str, headers: dict[str, str], timeout: float, watcher: Watcher | None = None
) -> tuple[str, http.client.HTTPResponse, http.client.HTTPConnection]:
    """GET ``url`` following redirects; the body is still to be read, then ``_finish`` it.

    ``watcher`` is told each socket from the request on (waiting for the headers too), and
    must be told to ``unwatch`` the last one's (``_finish`` does): http.client forgets
    the socket of a response that closes its connection, but it is still read from.
    """
    first = url
    auth: str | None = None
    for hop in range(_MAX_REDIRECTS):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(url, "not an http(s) URL")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:  # "host:99999", in a redirect too: this URL's failure, not the whole sync's
            raise HttpError(url, "invalid port in the URL") from None
        sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
        if hop == 0:
            auth = _credentials(url)
        elif not (same_origin(url, first) or _upgrade(url, first)):
            # Credentials go only to the origin they came with: ~/.netrc names a host, not a
            # port or a scheme, so a redirect to another port of that host (whoever listens
            # there) or down to plain http (readable on the way) must not get them again. Once
            # dropped they stay dropped: the rest of the chain was chosen by whoever answered there.
            auth = None
        if auth:
            sent["Authorization"] = auth
        netloc = parts.netloc.rpartition("@")[2]  # host[:port], an IPv6 literal keeping its brackets
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for attempt in (0, 1):
            conn, new = _connection(parts.scheme, parts.hostname, port, timeout)
            via_proxy = parts.scheme == "http" and conn.host != parts.hostname  # a plain proxy wants the URL
            sock: socket.socket | None = None
            try:
                conn.request("GET", f"http://{netloc}{target}" if via_proxy else target,
                             headers={"Host": netloc, **sent})
                sock = conn.sock
                if watcher is not None and sock is not None:
                    watcher.watch(sock)
                resp = conn.getresponse()
                resp.envlock_sock = sock  # type: ignore[attr-defined]  # for _finish's unwatch
                break
            except (OSError, http.client.HTTPException) as exc:
                if watcher is not None and sock is not None:
                    watcher.unwatch(sock)
                _drop(conn)
                # A kept-alive connection the server closed meanwhile: one fresh try.
                if new or attempt:
                    raise HttpError(url, f"cannot connect ({type(exc).__name__}: {exc})", retryable=True) from None
        if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
            resp.read()
            _unwatch(resp, watcher)
            url = urljoin(url, resp.getheader("Location") or "")
            continue
        return url, resp, conn
    raise HttpError(url, f"more than {_MAX_REDIRECTS} redirects")


def same_origin(url: str, other: str) -> bool:
    """Whether ``url`` and ``other`` have one scheme, host and port (RFC 6454): the only URLs a
    request's credentials are sent to again after a redirect."""
    a, b = _origin(urlsplit(url)), _origin(urlsplit(other))
    return a == b and a[2] != -1  # a port out of range is no origin at all


def _upgrade(url: str, first: str) -> bool:
    """Whether ``url`` is ``first``'s host over https, both on their default ports: an index
    moved to https. Credentials the first request sent in the clear lose nothing going on (as
    pip's requests keep them)."""
    a, b = urlsplit(first), urlsplit(url)
    try:
        return (a.scheme, b.scheme) == ("http", "https") and a.hostname == b.hostname and (
            a.port in (None, 80) and b.port in (None, 443))
    except ValueError:
        return False


def _finish(resp: http.client.HTTPResponse, conn: http.client.HTTPConnection, watcher: Watcher | None = None) -> None:
    """Keep the connection when its response was read to the end; otherwise unread bytes
    are still on the socket, so drop it."""
    _unwatch(resp, watcher)
    if not resp.isclosed():
        resp.close()
        _drop(conn)


def _unwatch(resp: http.client.HTTPResponse, watcher: Watcher | None) -> None:
    sock = getattr(resp, "envlock_sock", None)
    if watcher is not None and sock is not None:
        watcher.unwatch(sock)


# -- the API ---------------------------------------------------------------------


def get_page(url: str, *, accept: str, timeout: float = 60.0) -> Page:
    """GET a text page; ``HttpError`` on connection errors and non-2xx answers.

    A ``file://`` URL (a static index on this machine or a mounted share, as an
    air-gapped cluster keeps one) is read as a web server would serve that folder: its
    ``index.html``; a missing one is a 404.
    """
    if file_path(url) is not None:
        return _file_page(url)
    final, resp, conn = _request(url, {"Accept": accept}, timeout)
    try:
        body = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise HttpError(url, f"connection broken ({type(exc).__name__})", retryable=True) from None
    finally:
        _finish(resp, conn)
    _raise_for_status(url, resp.status)
    content_type = resp.getheader("Content-Type", "")
    charset = "utf-8"
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip('"')
    return Page(url=final, content_type=content_type, text=body.decode(charset, errors="replace"))


def _file_page(url: str) -> Page:
    path = file_path(url)
    assert path is not None
    if os.path.isdir(path):
        path = os.path.join(path, "index.html")
    with _open_local(url, path) as fh:
        body = fh.read()
    return Page(url=url, content_type="text/html", text=body.decode("utf-8", errors="replace"))


def file_path(url: str) -> str | None:
    """The local path a ``file://`` URL names (a mirror on disk), else None."""
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None
    from urllib.request import url2pathname

    return url2pathname(parts.path)


def _open_local(url: str, path: str) -> BinaryIO:
    """``path`` opened for reading, failing as a server would: a missing file is a 404, and what
    is no regular file (a FIFO, whose open would wait for a writer forever; a device such as
    /dev/zero; a folder) is refused before a byte is read."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO's open does not wait
    except (FileNotFoundError, NotADirectoryError):
        raise HttpError(url, "no such file", status=404) from None
    except OSError as exc:
        raise HttpError(url, f"cannot read {path} ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or special file"
        raise HttpError(url, f"{path} is {kind}; expected a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")  # the caller closes it


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


def _raise_for_status(url: str, status: int) -> None:
    if status >= 400:
        raise HttpError(url, f"HTTP {status}", retryable=status == 429 or status >= 500, status=status)


class Watcher(Protocol):
    """Told the socket a body is read from, so it can shut it down (Ctrl-C while a server stalls)."""

    def watch(self, sock: socket.socket) -> None: ...

    def unwatch(self, sock: socket.socket) -> None: ...


@contextlib.contextmanager
def open_stream(
    url: str, *, start: int = 0, timeout: float = 60.0, chunk_size: int = 1 << 20, watcher: Watcher | None = None
) -> Iterator[Body]:
    """GET ``url`` from byte ``start`` (HTTP Range when > 0), streaming in ``chunk_size`` pieces.

    A server that ignores the Range answers 200: ``Body.start`` is then 0 and the
    caller must start over. Every failure, also mid-body, is an ``HttpError``.
    """
    if (path := file_path(url)) is not None:  # a mirror on disk: read as a server would send it
        with _open_local(url, path) as fh:
            st = os.fstat(fh.fileno())
            fh.seek(start)
            yield Body(start, iter(lambda: fh.read(chunk_size), b""), st.st_size, _file_validator(st))
        return
    headers = {}
    if start > 0:
        headers["Range"] = f"bytes={start}-"
    _, resp, conn = _request(url, headers, timeout, watcher)
    try:
        if resp.status == 416:
            raise HttpError(url, f"HTTP 416 for bytes={start}-", status=416)
        _raise_for_status(url, resp.status)
        body_start = 0
        if resp.status == 206:
            body_start = _content_range(url, resp.getheader("Content-Range", ""))[0]
        length = _int(resp.getheader("Content-Length"))
        yield Body(body_start, _chunks(url, resp, chunk_size), None if length is None else body_start + length,
                   validator(resp.getheader("ETag"), resp.getheader("Last-Modified")))
    finally:
        _finish(resp, conn, watcher)


def remote_file(url: str, *, timeout: float = 60.0, watcher: Watcher | None = None) -> tuple[int | None, str | None]:
    """The size of the file at ``url`` (one byte asked for, the total read from Content-Range)
    and its ``validator``, each None when the server does not say. ``HttpError`` when it
    cannot be asked."""
    if (path := file_path(url)) is not None:
        with _open_local(url, path) as fh:
            st = os.fstat(fh.fileno())
            return st.st_size, _file_validator(st)
    _, resp, conn = _request(url, {"Range": "bytes=0-0"}, timeout, watcher)
    try:
        _raise_for_status(url, resp.status)
        tag = validator(resp.getheader("ETag"), resp.getheader("Last-Modified"))
        if resp.status == 206:
            return _content_range(url, resp.getheader("Content-Range", ""))[1], tag
        return _int(resp.getheader("Content-Length")), tag  # the whole file, unasked for: not read
    finally:
        _finish(resp, conn, watcher)


def _file_validator(st: os.stat_result) -> str:
    return f"modified {st.st_mtime_ns}"


def _chunks(url: str, resp: http.client.HTTPResponse, chunk_size: int) -> Iterator[bytes]:
    # Memory stays at one chunk. A body that ends before its Content-Length (a cut
    # connection) becomes a retry from the offset: http.client's read(n) just returns
    # b"" there, so the count is checked here.
    expected = _int(resp.getheader("Content-Length"))
    got = 0
    try:
        while chunk := resp.read(chunk_size):
            got += len(chunk)
            yield chunk
    except (OSError, http.client.HTTPException) as exc:
        raise HttpError(url, f"connection broken mid-body ({type(exc).__name__})", retryable=True) from None
    if expected is not None and got < expected:
        raise HttpError(url, f"connection broken mid-body ({got} of {expected} bytes)", retryable=True)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _content_range(url: str, value: str) -> tuple[int, int | None]:
    """The first byte's offset and the whole file's size (None for "*") in "bytes START-END/TOTAL"
    (RFC 9110 14.4)."""
    try:
        unit, _, rest = value.partition(" ")
        first = int(rest.split("-", 1)[0])
        total = rest.rpartition("/")[2]
        if unit != "bytes":
            raise ValueError(unit)
    except ValueError:
        raise HttpError(url, f"HTTP 206 with unreadable Content-Range {value!r}", retryable=True) from None
    return first, int(total) if total.isdigit() else None


def put(url: str, body: IO[bytes], size: int, *, timeout: float = 60.0) -> int:
    """PUT ``size`` bytes read from ``body`` to ``url`` (a binary cache: WebDAV, bazel-remote, a
    presigned URL); the status (2xx). No redirect is followed (a PUT's body is not resent).
    ``HttpError`` on a connection failure or a status of 300 and up."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(url, "not an http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise HttpError(url, "invalid port in the URL") from None
    netloc = parts.netloc.rpartition("@")[2]
    headers = {"User-Agent": USER_AGENT, "Host": netloc, "Content-Length": str(size),
               "Content-Type": "application/octet-stream"}
    if auth := _credentials(url):
        headers["Authorization"] = auth
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn, _new = _connection(parts.scheme, parts.hostname, port, timeout)
    via_proxy = parts.scheme == "http" and conn.host != parts.hostname
    try:
        conn.request("PUT", f"http://{netloc}{target}" if via_proxy else target, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
    except (OSError, http.client.HTTPException) as exc:
        _drop(conn)
        raise HttpError(url, f"cannot connect ({type(exc).__name__}: {exc})", retryable=True) from None
    if resp.will_close:
        _drop(conn)
    if resp.status >= 300:
        raise HttpError(url, f"HTTP {resp.status} to PUT", retryable=resp.status >= 500, status=resp.status)
    return resp.status


def exists(url: str, *, timeout: float = 60.0) -> bool:
    """Whether ``url`` answers a HEAD with 2xx (False for 404/410); ``HttpError`` for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(url, "not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    netloc = parts.netloc.rpartition("@")[2]
    headers = {"User-Agent": USER_AGENT, "Host": netloc}
    if auth := _credentials(url):
        headers["Authorization"] = auth
    conn, _new = _connection(parts.scheme, parts.hostname, port, timeout)
    try:
        conn.request("HEAD", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
        resp = conn.getresponse()
        resp.read()
    except (OSError, http.client.HTTPException) as exc:
        _drop(conn)
        raise HttpError(url, f"cannot connect ({type(exc).__name__}: {exc})", retryable=True) from None
    if resp.will_close:
        _drop(conn)
    if resp.status in (404, 410):
        return False
    _raise_for_status(url, resp.status)
    return True
