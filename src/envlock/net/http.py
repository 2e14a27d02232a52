"""The one module that speaks HTTP: connections (kept per thread and per host, through the proxy the
environment names, TLS with the trust store it names), GETs that follow redirects, and what envlock
reads with them: index pages, ranged streaming GETs for ``install.fetch``, a file's size, a range of its
bytes; PUT and HEAD for a binary cache. A ``file://`` URL is read as a server would serve it
(``net.localfiles``).

Built on ``http.client`` rather than requests: every ``envlock lock`` pays for its
imports (requests costs ~90 ms more), and all envlock needs is GET with keep-alive,
redirects, proxies from the environment, credentials from the URL or ``~/.netrc``
and streaming. The credentials a request carries are ``net.auth``'s to find; what it
answers, and ``HttpError``, are defined in ``net.responses``.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import IO
from urllib.parse import urljoin, urlsplit

from envlock import __version__, netenv, transfers
from envlock.errors import redact as redact  # http.redact too, as the stages call it
from envlock.net import auth as net_auth

# What it answers, named here too (``X as X``: an explicit re-export): the stages call them ``http.X``.
from envlock.net.localfiles import file_validator, open_local
from envlock.net.responses import Body as Body
from envlock.net.responses import HttpError as HttpError
from envlock.net.responses import NoRangesError as NoRangesError
from envlock.net.responses import Page as Page
from envlock.net.responses import PageStream as PageStream
from envlock.net.responses import Range as Range
from envlock.net.responses import decoded, max_page_bytes, too_big
from envlock.net.responses import validator as validator

USER_AGENT = f"envlock/{__version__}"
_MAX_REDIRECTS = 10
_local = threading.local()
_lock = threading.Lock()


# -- connections ---------------------------------------------------------------

_contexts: dict[netenv.Trust, ssl.SSLContext] = {}


def _context(url: str) -> ssl.SSLContext:
    """The trust store the environment names (``netenv.trust``), the one uv is handed too:
    ``SSL_CERT_FILE``/``REQUESTS_CA_BUNDLE`` and ``SSL_CERT_DIR`` replace the default roots, and
    ``--native-tls`` takes the operating system's (through ``truststore`` when installed, the
    ``native-tls`` extra; else OpenSSL's default paths, which are the system's on Linux)."""
    trust = netenv.trust()
    with _lock:
        if (ctx := _contexts.get(trust)) is None:
            ctx = _contexts[trust] = _new_context(url, trust)
        return ctx


def _new_context(url: str, trust: netenv.Trust) -> ssl.SSLContext:
    try:
        return netenv.ssl_context(trust)
    except (OSError, ssl.SSLError) as exc:
        named = f"{trust.cafile_var}={trust.cafile}" if trust.cafile else f"SSL_CERT_DIR={trust.capath}"
        raise HttpError(url, f"cannot load the CA certificates of {named} ({exc})") from None


def _connection(scheme: str, host: str, port: int, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
    """A kept-alive connection for this thread (and whether it is new): to the host, or through
    the proxy the environment names for it (``netenv.proxy_for``), kept as ``envlock_proxy``."""
    shown = f"[{host}]" if ":" in host else host
    where = f"{scheme}://{shown}:{port}/"
    proxy = netenv.proxy_for(where)
    key = (scheme, host, port, proxy)
    pool: dict[tuple[str, str, int, str | None], http.client.HTTPConnection] = _local.__dict__.setdefault("pool", {})
    conn = pool.get(key)
    if conn is not None:
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, False
    if proxy is None:
        conn = (http.client.HTTPSConnection(host, port, timeout=timeout, context=_context(where)) if scheme == "https"
                else http.client.HTTPConnection(host, port, timeout=timeout))
    else:
        p = urlsplit(proxy)
        try:
            proxy_port = p.port or 80
        except ValueError:
            proxy_port = -1
        if p.scheme != "http" or not p.hostname or proxy_port < 0:
            raise HttpError(where, f"proxy {redact(proxy)}: expected an http://HOST:PORT "
                            "proxy (https and socks proxies are not supported)")
        login = netenv.proxy_credentials(proxy)
        proxy_headers = {"Proxy-Authorization": net_auth.basic(*login)} if login else None
        if scheme == "https":  # a CONNECT tunnel through the proxy, TLS end to end inside it
            conn = http.client.HTTPSConnection(p.hostname, proxy_port, timeout=timeout, context=_context(where))
            conn.set_tunnel(host, port, headers=proxy_headers)
        else:  # plain HTTP: the proxy gets the absolute URL and its credentials on each request
            conn = http.client.HTTPConnection(p.hostname, proxy_port, timeout=timeout)
    conn.envlock_proxy = proxy  # type: ignore[attr-defined]
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
    kept: net_auth.Auth | None = None
    for hop in range(_MAX_REDIRECTS):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(url, "not an http(s) URL")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:  # "host:99999", in a redirect too: this URL's failure, not the whole sync's
            raise HttpError(url, "invalid port in the URL") from None
        sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
        auth, kept = net_auth.hop_auth(url, first, hop, kept)
        if auth.netrc_refused is not None:
            raise HttpError(url, auth.netrc_refused)
        if auth.header:
            sent["Authorization"] = auth.header
        netloc = parts.netloc.rpartition("@")[2]  # host[:port], an IPv6 literal keeping its brackets
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for attempt in (0, 1):
            conn, new = _connection(parts.scheme, parts.hostname, port, timeout)
            proxy: str | None = getattr(conn, "envlock_proxy", None)
            if proxy is not None and parts.scheme == "http":  # RFC 9112 3.2.2: the absolute form to a proxy
                login = netenv.proxy_credentials(proxy)
                request_target = f"http://{netloc}{target}"
                extra = {"Proxy-Authorization": net_auth.basic(*login)} if login else {}
            else:
                request_target, extra = target, {}
            _connect(url, conn, proxy)
            sock: socket.socket | None = conn.sock
            if watcher is not None and sock is not None:
                watcher.watch(sock)
            try:
                conn.request("GET", request_target, headers={"Host": netloc, **sent, **extra})
                resp = conn.getresponse()
                resp.envlock_sock = sock  # type: ignore[attr-defined]  # for _finish's unwatch
                resp.envlock_auth = auth  # type: ignore[attr-defined]  # for a 401's message
                resp.envlock_proxy = proxy  # type: ignore[attr-defined]  # for a 407's
                break
            except (OSError, http.client.HTTPException) as exc:
                if watcher is not None and sock is not None:
                    watcher.unwatch(sock)
                _drop(conn)
                # A kept-alive connection the server closed meanwhile: one fresh try.
                if new or attempt:
                    raise HttpError(url, _broken(exc, timeout, "before an answer"), retryable=True) from None
        if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
            resp.read()
            _unwatch(resp, watcher)
            url = urljoin(url, resp.getheader("Location") or "")
            continue
        return url, resp, conn
    raise HttpError(url, f"more than {_MAX_REDIRECTS} redirects")


def _connect(url: str, conn: http.client.HTTPConnection, proxy: str | None) -> None:
    """Open ``conn`` unless it is open (kept alive): only a failure here is "cannot connect"."""
    if conn.sock is not None:
        return
    try:
        conn.connect()
    except (OSError, http.client.HTTPException) as exc:
        _drop(conn)
        if proxy is not None and " 407 " in f" {exc} ":  # CONNECT refused: retrying will not help
            raise HttpError(url, _proxy_refused(proxy)) from None
        raise HttpError(url, f"cannot connect ({type(exc).__name__}: {exc})", retryable=True) from None


def _proxy_refused(proxy: str) -> str:
    given = "its credentials were refused" if netenv.proxy_credentials(proxy) else "the proxy URL has none"
    return (f"proxy {redact(proxy)} answered 407 Proxy Authentication Required ({given}); give them in the "
            "proxy URL: http://USER:PASSWORD@HOST:PORT in HTTPS_PROXY, HTTP_PROXY or ALL_PROXY")


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


@contextlib.contextmanager
def open_page(url: str, *, accept: str, timeout: float = 60.0, chunk_size: int = 1 << 20) -> Iterator[PageStream]:
    """GET a text page as it arrives, decoded piece by piece, at most ``max_page_bytes()`` of it:
    memory stays at a piece for a reader that parses as it goes. ``HttpError`` for a connection
    error, a non-2xx answer or a page over the cap (naming the URL and the cap).

    A ``file://`` URL (a static index on this machine or a mounted share, as an air-gapped
    cluster keeps one) is read as a web server would serve that folder: its ``index.html``; a
    missing one is a 404.
    """
    cap = max_page_bytes()
    if (path := file_path(url)) is not None:
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        with open_local(url, path) as fh:
            yield PageStream(url, "text/html", decoded(url, iter(lambda: fh.read(chunk_size), b""), "utf-8", cap))
        return
    with _transfer(url) as t:
        final, resp, conn = _request(url, {"Accept": accept}, timeout, t)
        try:
            _raise_for_status(url, resp)
            if (length := _int(resp.getheader("Content-Length"))) is not None and length > cap:
                raise HttpError(url, too_big(cap, f"says Content-Length {length}"))
            t.expect(length)
            content_type = resp.getheader("Content-Type", "")
            charset = "utf-8"
            for param in content_type.split(";")[1:]:
                key, _, value = param.strip().partition("=")
                if key.lower() == "charset" and value:
                    charset = value.strip('"')
            chunks = _read(url, resp, chunk_size, t, timeout, "page")
            yield PageStream(final, content_type, decoded(url, chunks, charset, cap))
        finally:
            _finish(resp, conn, t)


def _read(url: str, resp: http.client.HTTPResponse, chunk_size: int, t: transfers.Transfer, timeout: float,
          what: str) -> Iterator[bytes]:
    """The chunks of ``resp`` as they arrive, counted by ``t``; a cut connection, or the watchdog's, is an
    ``HttpError`` naming ``what`` was being read ("page", "body")."""
    try:
        while chunk := resp.read1(chunk_size):
            t.count(len(chunk))
            yield chunk
    except (OSError, http.client.HTTPException) as exc:
        raise HttpError(url, _broken(exc, timeout, f"mid-{what}"), retryable=True) from None
    if t.expired is not None:  # the watchdog shut the socket: an end that is no end of the page or body
        raise HttpError(url, t.expired)


def get_page(url: str, *, accept: str, timeout: float = 60.0) -> Page:
    """GET a whole text page (``open_page``, joined); ``HttpError`` as there."""
    with open_page(url, accept=accept, timeout=timeout) as page:
        return Page(url=page.url, content_type=page.content_type, text="".join(page.pieces))


def file_path(url: str) -> str | None:
    """The local path a ``file://`` URL names (a mirror on disk), else None."""
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None
    from urllib.request import url2pathname

    return url2pathname(parts.path)


def _raise_for_status(url: str, resp: http.client.HTTPResponse) -> None:
    status = resp.status
    if status == 407 and (proxy := getattr(resp, "envlock_proxy", None)):
        raise HttpError(url, _proxy_refused(proxy), status=status)
    if status in (401, 403):
        auth: net_auth.Auth | None = getattr(resp, "envlock_auth", None)
        host = urlsplit(url).netloc.rpartition("@")[2]
        what = auth.refused() if auth is not None else "asks for credentials"
        looked = "; ".join(auth.looked) if auth is not None else "nothing"
        raise HttpError(url, f"HTTP {status}: the server {what}", status=status,
                        details=(f"looked for credentials in: {looked}", net_auth.how_to_give(host)))
    if status >= 400:
        if status in (404, 410):  # asked in bulk (each wheel's .metadata): the connection is worth keeping
            _drain(resp)
        raise HttpError(url, f"HTTP {status}", retryable=status == 429 or status >= 500, status=status)


#: A "not found" answer's body is read to keep its connection when it says it is this small.
_DRAIN_BYTES = 64 * 1024


def _drain(resp: http.client.HTTPResponse) -> None:
    """Read a short "not found" body, so that ``_finish`` keeps the connection (the next request, such
    as the next wheel's ``.metadata``, needs no new one: 158 of them took 1 s with a connection each,
    0.1 s on kept ones); a long or unsized body is left unread, and the connection dropped."""
    length = _int(resp.getheader("Content-Length"))
    if length is not None and length <= _DRAIN_BYTES:
        with contextlib.suppress(OSError, http.client.HTTPException):
            resp.read(length)


Watcher = transfers.Watcher  # told the socket a body is read from (Ctrl-C while a server stalls)


@contextlib.contextmanager
def _transfer(url: str, watcher: Watcher | None = None, size: int | None = None) -> Iterator[transfers.Transfer]:
    """``url``'s transfer for the block (``transfers``): its total deadline, its minimum rate and an
    interrupt end it wherever it waits, and the ``HttpError`` it then ends in says which."""
    with transfers.transfer(redact(url), size=size, also=watcher) as t:
        try:
            yield t
        except HttpError as exc:
            if t.expired is None:
                raise
            raise HttpError(url, t.expired, status=exc.status) from None


_WAITED = {"before an answer": "waiting for an answer", "mid-body": "waiting for the rest of the body",
           "mid-page": "waiting for the rest of the page"}


def _broken(exc: BaseException, timeout: float, where: str) -> str:
    """What a failed read ``where`` says: a timeout as one (the server was reached: no "cannot
    connect"), anything else as the broken connection it is."""
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout:g} s {_WAITED[where]} (connected)"
    return f"connection broken {where} ({type(exc).__name__})"


@contextlib.contextmanager
def open_stream(
    url: str, *, start: int = 0, timeout: float = 60.0, chunk_size: int = 1 << 20, watcher: Watcher | None = None
) -> Iterator[Body]:
    """GET ``url`` from byte ``start`` (HTTP Range when > 0), streaming in ``chunk_size`` pieces.

    A server that ignores the Range answers 200: ``Body.start`` is then 0 and the
    caller must start over. Every failure, also mid-body, is an ``HttpError``.
    """
    if (path := file_path(url)) is not None:  # a mirror on disk: read as a server would send it
        with open_local(url, path) as fh:
            st = os.fstat(fh.fileno())
            fh.seek(start)
            yield Body(start, iter(lambda: fh.read(chunk_size), b""), st.st_size, file_validator(st))
        return
    headers = {}
    if start > 0:
        headers["Range"] = f"bytes={start}-"
    with _transfer(url, watcher) as t:
        _, resp, conn = _request(url, headers, timeout, t)
        try:
            if resp.status == 416:
                raise HttpError(url, f"HTTP 416 for bytes={start}-", status=416)
            _raise_for_status(url, resp)
            body_start = 0
            if resp.status == 206:
                body_start = _content_range(url, resp.getheader("Content-Range", ""))[0]
            length = _int(resp.getheader("Content-Length"))
            t.expect(length)
            yield Body(body_start, _chunks(url, resp, chunk_size, t, timeout),
                       None if length is None else body_start + length,
                       validator(resp.getheader("ETag"), resp.getheader("Last-Modified")))
        finally:
            _finish(resp, conn, t)


def remote_file(url: str, *, timeout: float = 60.0, watcher: Watcher | None = None) -> tuple[int | None, str | None]:
    """The size of the file at ``url`` (one byte asked for, the total read from Content-Range)
    and its ``validator``, each None when the server does not say. ``HttpError`` when it
    cannot be asked."""
    if (path := file_path(url)) is not None:
        with open_local(url, path) as fh:
            st = os.fstat(fh.fileno())
            return st.st_size, file_validator(st)
    with _transfer(url, watcher) as t:
        _, resp, conn = _request(url, {"Range": "bytes=0-0"}, timeout, t)
        try:
            _raise_for_status(url, resp)
            tag = validator(resp.getheader("ETag"), resp.getheader("Last-Modified"))
            if resp.status == 206:
                return _content_range(url, resp.getheader("Content-Range", ""))[1], tag
            return _int(resp.getheader("Content-Length")), tag  # the whole file, unasked for: not read
        finally:
            _finish(resp, conn, t)


def _chunks(url: str, resp: http.client.HTTPResponse, chunk_size: int, t: transfers.Transfer,
            timeout: float) -> Iterator[bytes]:
    # Memory stays at one chunk. A body that ends before its Content-Length (a cut
    # connection) becomes a retry from the offset: http.client's read(n) just returns
    # b"" there, so the count is checked here. read1: what has arrived, so the transfer's
    # rate is counted as the bytes come (read(n) waits for all n of a trickle).
    expected = _int(resp.getheader("Content-Length"))
    got = 0
    for chunk in _read(url, resp, chunk_size, t, timeout, "body"):
        got += len(chunk)
        yield chunk
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


def read_range(url: str, *, start: int | None = None, end: int | None = None, last: int | None = None,
               timeout: float = 60.0) -> Range:
    """Bytes ``start``..``end`` (inclusive) of the file at ``url``, or its ``last`` bytes (a suffix range),
    with one GET (RFC 9110 14.1.2). A server that answers with the whole file (200: no range support)
    is an ``HttpError`` before its body is read: a caller reading a wheel's listing never downloads it."""
    if (path := file_path(url)) is not None:
        with open_local(url, path) as fh:
            total = os.fstat(fh.fileno()).st_size
            first = max(0, total - last) if last is not None else start or 0
            fh.seek(first)
            wanted = (total if end is None else min(end + 1, total)) - first
            return Range(first, fh.read(max(0, wanted)), total)
    asked = f"bytes=-{last}" if last is not None else f"bytes={start or 0}-{'' if end is None else end}"
    with _transfer(url) as t:
        _, resp, conn = _request(url, {"Range": asked}, timeout, t)
        try:
            _raise_for_status(url, resp)
            if resp.status != 206:
                raise NoRangesError(url, f"HTTP {resp.status} to Range {asked}: the server does not serve byte "
                                         "ranges", status=resp.status)
            first, size = _content_range(url, resp.getheader("Content-Range", ""))
            length = _int(resp.getheader("Content-Length"))
            if size is None or length is None or length > (1 << 30):
                raise HttpError(url, f"HTTP 206 to Range {asked} without a size (Content-Range "
                                     f"{resp.getheader('Content-Range')!r}, Content-Length {length})")
            t.expect(length)
            data = b"".join(_chunks(url, resp, 1 << 20, t, timeout))  # counted as it comes, for the rate
            return Range(first, data, size)
        finally:
            _finish(resp, conn, t)


def _send(method: str, url: str, timeout: float, body: IO[bytes] | None = None,
          size: int = 0) -> http.client.HTTPResponse:
    """One ``method`` request to ``url`` (no redirect followed: a PUT's body is not sent twice),
    its response read; credentials and proxies as a GET's. ``HttpError`` on a connection failure."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(url, "not an http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise HttpError(url, "invalid port in the URL") from None
    netloc = parts.netloc.rpartition("@")[2]
    headers = {"User-Agent": USER_AGENT, "Host": netloc}
    if body is not None:
        headers.update({"Content-Length": str(size), "Content-Type": "application/octet-stream"})
    auth = net_auth.request_auth(url)
    if auth.netrc_refused is not None:
        raise HttpError(url, auth.netrc_refused)
    if auth.header:
        headers["Authorization"] = auth.header
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn, _new = _connection(parts.scheme, parts.hostname, port, timeout)
    proxy: str | None = getattr(conn, "envlock_proxy", None)
    if proxy is not None and parts.scheme == "http":  # RFC 9112 3.2.2: the absolute form to a proxy
        target = f"http://{netloc}{target}"
        if login := netenv.proxy_credentials(proxy):
            headers["Proxy-Authorization"] = net_auth.basic(*login)
    with _transfer(url, size=size if body is not None else None) as t:
        _connect(url, conn, proxy)
        sock = conn.sock
        if sock is not None:
            t.watch(sock)
        try:
            conn.request(method, target, body=None if body is None else t.counted(body), headers=headers)
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException) as exc:
            _drop(conn)
            raise HttpError(url, _broken(exc, timeout, "before an answer"), retryable=True) from None
        finally:
            if sock is not None:
                t.unwatch(sock)
    if resp.will_close:
        _drop(conn)
    resp.envlock_auth = auth  # type: ignore[attr-defined]  # for a 401's message
    resp.envlock_proxy = proxy  # type: ignore[attr-defined]  # for a 407's
    return resp


def put(url: str, body: IO[bytes], size: int, *, timeout: float = 60.0) -> int:
    """PUT ``size`` bytes read from ``body`` to ``url`` (a binary cache: WebDAV, bazel-remote, a
    presigned URL); the status (2xx). ``HttpError`` on a connection failure or a status of 300 and up."""
    resp = _send("PUT", url, timeout, body, size)
    _raise_for_status(url, resp)
    if resp.status >= 300:
        raise HttpError(url, f"HTTP {resp.status} to PUT", status=resp.status)
    return resp.status


def exists(url: str, *, timeout: float = 60.0) -> bool:
    """Whether ``url`` answers a HEAD with 2xx (False for 404/410); ``HttpError`` for anything else."""
    resp = _send("HEAD", url, timeout)
    if resp.status in (404, 410):
        return False
    _raise_for_status(url, resp)
    return True
