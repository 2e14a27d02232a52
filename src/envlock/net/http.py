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
from typing import IO, BinaryIO
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

from envlock import __version__, netenv, transfers
from envlock.errors import redact as redact  # http.redact too, as the stages call it
from envlock.net import auth as net_auth

USER_AGENT = f"envlock/{__version__}"
_MAX_REDIRECTS = 10
_local = threading.local()
_lock = threading.Lock()


@dataclass(frozen=True)
class Page:
    url: str  # final URL after redirects
    content_type: str
    text: str


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


def _basic(user: str, password: str) -> str:
    """The Basic header of a user and password as they are (a URL's decoded by the caller)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass(frozen=True)
class _Given:
    """Credentials handed over for an origin: a user, and a password unless the keyring has it."""

    user: str
    password: str | None
    index: str  # the index URL they came with, without them (the keyring's service name)


#: Credentials by origin (scheme, host, port), one mapping per ``credentials`` block under way,
#: the innermost last.
_scopes: list[dict[tuple[str, str | None, int | None], _Given]] = []


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
    get a 401 without a netrc. A ``user@`` without a password asks the keyring (when enabled). A
    command's recipe hands them over; they end with it."""
    scope = {_origin(parts): _Given(unquote(parts.username), None if parts.password is None
                                    else unquote(parts.password), redact(url))
             for url, parts in ((u, urlsplit(u)) for u in urls) if parts.username is not None}
    with _lock:
        _scopes.append(scope)
    try:
        yield
    finally:
        with _lock:
            del _scopes[next(i for i in range(len(_scopes) - 1, -1, -1) if _scopes[i] is scope)]


@dataclass(frozen=True)
class _Auth:
    header: str | None  # the Authorization header sent, None: none
    looked: tuple[str, ...]  # where envlock looked, for a 401/403's message
    user_only: str | None = None  # the user sent without a password (none was found)

    def refused(self) -> str:
        """What a 401/403 answered, in words."""
        if self.header is None:
            return "asks for credentials"
        if self.user_only is not None:
            return f"refused user {self.user_only} without a password"
        return "refused the credentials sent"


def _credentials(url: str, *, own_only: bool = False) -> _Auth:
    """An Authorization header from the URL's ``user:password``, else from an index URL of its
    origin (``credentials``), else from the netrc file (``$NETRC`` or ~/.netrc, as pip and uv do),
    else from the keyring for the user an index URL names (``--keyring-provider subprocess``).
    ``own_only``: the netrc's entry for the URL's host only (a redirect's target)."""
    parts = urlsplit(url)
    given: _Given | None = None
    if own_only:
        pass
    elif parts.username is not None:
        given = _Given(unquote(parts.username), None if parts.password is None else unquote(parts.password),
                       redact(url))
    else:
        origin = _origin(parts)
        with _lock:
            given = next((s[origin] for s in reversed(_scopes) if origin in s), None)
    if given is not None and given.password is not None:
        return _Auth(_basic(given.user, given.password), ("the index URL (user:password)",))
    looked = ["the index URL (no user:password)" if given is None else "the index URL (a user, no password)"]
    # A redirect's target gets its host's own entry, never the netrc's catch-all ``default``:
    # whoever answered chose that host.
    entry, said, refused = net_auth.netrc_entry(parts.hostname, default=not own_only)
    if refused is not None:
        raise HttpError(url, refused)
    looked.append(said)
    if entry is not None and (given is None or entry.login in (given.user, "")):
        return _Auth(_basic(entry.login or (given.user if given else ""), entry.password), tuple(looked))
    if given is not None:
        password, said = net_auth.keyring_password(given.index, given.user)
        looked.append(said)
        return _Auth(_basic(given.user, password or ""), tuple(looked), None if password else given.user)
    on = netenv.keyring_provider() == "subprocess"
    looked.append("the keyring (no USER@ in the index URL to ask for)" if on else "the keyring (off)")
    return _Auth(None, tuple(looked))


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
        proxy_headers = {"Proxy-Authorization": _basic(*login)} if login else None
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


def _hop_auth(url: str, first: str, hop: int, kept: _Auth | None) -> tuple[_Auth, _Auth | None]:
    """The credentials of a redirect chain's hop ``hop`` to ``url``, and those kept for the next.

    Credentials go along only to the origin they came with: a netrc names a host, not a port or a
    scheme, so a redirect to another port of that host (whoever listens there) or down to plain
    http (readable on the way) must not get them again. Once dropped they stay dropped: the rest
    of the chain was chosen by whoever answered there. Another host gets its own netrc entry,
    unless the chain went down from https to plain http to reach it.
    """
    if hop == 0:
        found = _credentials(url)
        return found, found
    if kept is not None and (same_origin(url, first) or _upgrade(url, first)):
        return kept, kept
    a, b = urlsplit(first), urlsplit(url)
    if b.hostname != a.hostname and not (a.scheme == "https" and b.scheme == "http"):
        return _credentials(url, own_only=True), None
    return _Auth(None, ("nothing: a redirect from another origin (credentials stay with theirs)",)), None


def _request(
    url: str, headers: dict[str, str], timeout: float, watcher: Watcher | None = None
) -> tuple[str, http.client.HTTPResponse, http.client.HTTPConnection]:
    """GET ``url`` following redirects; the body is still to be read, then ``_finish`` it.

    ``watcher`` is told each socket from the request on (waiting for the headers too), and
    must be told to ``unwatch`` the last one's (``_finish`` does): http.client forgets
    the socket of a response that closes its connection, but it is still read from.
    """
    first = url
    kept: _Auth | None = None
    for hop in range(_MAX_REDIRECTS):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(url, "not an http(s) URL")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:  # "host:99999", in a redirect too: this URL's failure, not the whole sync's
            raise HttpError(url, "invalid port in the URL") from None
        sent = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
        auth, kept = _hop_auth(url, first, hop, kept)
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
                extra = {"Proxy-Authorization": _basic(*login)} if login else {}
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


@dataclass(frozen=True)
class PageStream:
    """A page being read: its final URL, its Content-Type and its text in pieces (``open_page``)."""

    url: str
    content_type: str
    pieces: Iterator[str]


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
        with _open_local(url, path) as fh:
            yield PageStream(url, "text/html", _decoded(url, iter(lambda: fh.read(chunk_size), b""), "utf-8", cap))
        return
    with _transfer(url) as t:
        final, resp, conn = _request(url, {"Accept": accept}, timeout, t)
        try:
            _raise_for_status(url, resp)
            if (length := _int(resp.getheader("Content-Length"))) is not None and length > cap:
                raise HttpError(url, _too_big(cap, f"says Content-Length {length}"))
            t.expect(length)
            content_type = resp.getheader("Content-Type", "")
            charset = "utf-8"
            for param in content_type.split(";")[1:]:
                key, _, value = param.strip().partition("=")
                if key.lower() == "charset" and value:
                    charset = value.strip('"')
            chunks = _page_chunks(url, resp, chunk_size, t, timeout)
            yield PageStream(final, content_type, _decoded(url, chunks, charset, cap))
        finally:
            _finish(resp, conn, t)


def _page_chunks(url: str, resp: http.client.HTTPResponse, chunk_size: int, t: transfers.Transfer,
                 timeout: float) -> Iterator[bytes]:
    try:
        while chunk := resp.read1(chunk_size):
            t.count(len(chunk))
            yield chunk
    except (OSError, http.client.HTTPException) as exc:
        raise HttpError(url, _broken(exc, timeout, "mid-page"), retryable=True) from None
    if t.expired is not None:  # the watchdog shut the socket: an end that is no end of the page
        raise HttpError(url, t.expired)


def _decoded(url: str, chunks: Iterator[bytes], charset: str, cap: int) -> Iterator[str]:
    import codecs

    try:
        decoder = codecs.getincrementaldecoder(charset)(errors="replace")
    except LookupError:  # a charset Python does not know: as a browser would, read it as UTF-8
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    got = 0
    for chunk in chunks:
        got += len(chunk)
        if got > cap:
            raise HttpError(url, _too_big(cap, "sent more"))
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


def _too_big(cap: int, what: str) -> str:
    return (f"index page larger than {cap} bytes ({what}); not read further: "
            f"set {_PAGE_VAR} to a larger byte count if the page is genuine")


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


def _raise_for_status(url: str, resp: http.client.HTTPResponse) -> None:
    status = resp.status
    if status == 407 and (proxy := getattr(resp, "envlock_proxy", None)):
        raise HttpError(url, _proxy_refused(proxy), status=status)
    if status in (401, 403):
        auth: _Auth | None = getattr(resp, "envlock_auth", None)
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
        with _open_local(url, path) as fh:
            st = os.fstat(fh.fileno())
            fh.seek(start)
            yield Body(start, iter(lambda: fh.read(chunk_size), b""), st.st_size, _file_validator(st))
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
        with _open_local(url, path) as fh:
            st = os.fstat(fh.fileno())
            return st.st_size, _file_validator(st)
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


def _file_validator(st: os.stat_result) -> str:
    return f"modified {st.st_mtime_ns}"


def _chunks(url: str, resp: http.client.HTTPResponse, chunk_size: int, t: transfers.Transfer,
            timeout: float) -> Iterator[bytes]:
    # Memory stays at one chunk. A body that ends before its Content-Length (a cut
    # connection) becomes a retry from the offset: http.client's read(n) just returns
    # b"" there, so the count is checked here. read1: what has arrived, so the transfer's
    # rate is counted as the bytes come (read(n) waits for all n of a trickle).
    expected = _int(resp.getheader("Content-Length"))
    got = 0
    try:
        while chunk := resp.read1(chunk_size):
            got += len(chunk)
            t.count(len(chunk))
            yield chunk
    except (OSError, http.client.HTTPException) as exc:
        raise HttpError(url, _broken(exc, timeout, "mid-body"), retryable=True) from None
    if t.expired is not None:  # the watchdog shut the socket: an end that is no end of the body
        raise HttpError(url, t.expired)
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


@dataclass(frozen=True)
class Range:
    """Bytes ``data`` of a remote file, from offset ``start``; ``total`` is the whole file's size."""

    start: int
    data: bytes
    total: int


def read_range(url: str, *, start: int | None = None, end: int | None = None, last: int | None = None,
               timeout: float = 60.0) -> Range:
    """Bytes ``start``..``end`` (inclusive) of the file at ``url``, or its ``last`` bytes (a suffix range),
    with one GET (RFC 9110 14.1.2). A server that answers with the whole file (200: no range support)
    is an ``HttpError`` before its body is read: a caller reading a wheel's listing never downloads it."""
    if (path := file_path(url)) is not None:
        with _open_local(url, path) as fh:
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
    auth = _credentials(url)
    if auth.header:
        headers["Authorization"] = auth.header
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn, _new = _connection(parts.scheme, parts.hostname, port, timeout)
    proxy: str | None = getattr(conn, "envlock_proxy", None)
    if proxy is not None and parts.scheme == "http":  # RFC 9112 3.2.2: the absolute form to a proxy
        target = f"http://{netloc}{target}"
        if login := netenv.proxy_credentials(proxy):
            headers["Proxy-Authorization"] = _basic(*login)
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
