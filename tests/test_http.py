"""HTTP details that index and wheel URLs depend on: credentials kept out of text, IPv6 hosts."""

from __future__ import annotations

import base64
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from envlock.net import auth as net_auth
from envlock.net import http as envlock_http
from kit.index import IndexServer


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("https://user:token@mirror.example/simple/", "https://mirror.example/simple/"),
        ("http://u:p@[::1]:8080/x.whl", "http://[::1]:8080/x.whl"),
        ("https://mirror.example:8443/simple", "https://mirror.example:8443/simple"),
    ],
)
def test_redact_drops_only_the_credentials(url: str, redacted: str) -> None:
    assert envlock_http.redact(url) == redacted


@pytest.mark.parametrize(
    ("url", "index", "sent"),
    [
        # A mirror's file on its own host gets the mirror's credentials back...
        ("https://mirror.example/files/x.whl", "https://ci:tok@mirror.example/simple",
         "https://ci:tok@mirror.example/files/x.whl"),
        # ...never a file on another host (a CDN the page links to), nor another scheme or port.
        ("https://cdn.example/x.whl", "https://ci:tok@mirror.example/simple", "https://cdn.example/x.whl"),
        ("http://mirror.example/x.whl", "https://ci:tok@mirror.example/simple", "http://mirror.example/x.whl"),
        ("https://mirror.example:8443/x.whl", "https://ci:tok@mirror.example/simple",
         "https://mirror.example:8443/x.whl"),
        ("https://mirror.example/x.whl", "https://mirror.example/simple", "https://mirror.example/x.whl"),
        ("https://own:pw@mirror.example/x.whl", "https://ci:tok@mirror.example/simple",
         "https://own:pw@mirror.example/x.whl"),
    ],
)
def test_a_mirror_file_gets_the_mirror_credentials_only_on_its_host(url: str, index: str, sent: str) -> None:
    assert net_auth.with_credentials_of(url, index) == sent


def test_an_ipv6_literal_host_gets_a_bracketed_host_header(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Host", ""))
            body = b"<html></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server6(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6

    server = Server6(("::1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost,::1")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost,::1")
    try:
        port = server.server_address[1]
        page = envlock_http.get_page(f"http://[::1]:{port}/simple/", accept="text/html")
    finally:
        server.shutdown()
    assert page.text == "<html></html>"
    assert seen == [f"[::1]:{port}"]


class _Stalling:
    """A raw server on loopback: answers each connection with ``head`` (if any), then sends nothing."""

    def __init__(self, head: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.head = head
        self.done = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/x.whl"

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            conn.recv(65536)
            if self.head:
                conn.sendall(self.head)

    def close(self) -> None:
        self.done.set()
        for c in [*self.conns, self.sock]:
            c.close()


@pytest.mark.parametrize("head", [
    # http.client forgets the socket of a response that closes its connection; it is still read from.
    b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\nhalf",
    b"",  # no answer at all: waiting for the headers
])
def test_a_stop_wakes_a_read_from_a_stalled_server(head: bytes) -> None:
    from envlock.progress import Stop

    server = _Stalling(head)
    stop = Stop()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(envlock_http.HttpError):
            if head:
                with envlock_http.open_stream(server.url, watcher=stop, timeout=30) as body:
                    for _ in body.chunks:
                        pass
            else:
                envlock_http.remote_file(server.url, watcher=stop, timeout=30)
        # Woken by the stop, not by the read's 30 s timeout (a liveness bound, not a speed target).
        assert time.monotonic() - started < 20
    finally:
        timer.cancel()
        server.close()


@pytest.mark.parametrize(
    ("url", "other", "same"),
    [
        ("https://h.example/a.whl", "https://h.example:443/b/c.whl", True),  # the default port, written or not
        ("http://h.example/a", "http://H.EXAMPLE:80/b", True),  # a host name's case is no difference
        ("https://u:p@h.example/a", "https://h.example/b", True),  # nor are credentials in the URL
        ("https://h.example/a", "http://h.example/a", False),  # a downgrade to plain http
        ("https://h.example:8443/a", "http://h.example:8443/a", False),  # ...also on one port
        ("https://127.0.0.1:4443/a", "http://127.0.0.1:8080/a", False),  # another scheme and port
        ("http://127.0.0.1:8080/a", "http://127.0.0.1:8081/a", False),  # another port of the host
        ("https://h.example/a", "https://cdn.example/a", False),  # another host
        ("http://h.example/a", "https://h.example/a", False),  # an upgrade is another origin too
    ],
)
def test_same_origin_is_scheme_host_and_port(url: str, other: str, same: bool) -> None:
    assert net_auth.same_origin(url, other) is same
    assert net_auth.same_origin(other, url) is same


@pytest.fixture
def netrc_for_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """~/.netrc credentials for 127.0.0.1 (a host, as netrc names them: no port, no scheme); their header."""
    path = tmp_path / "netrc"
    path.write_text("machine 127.0.0.1 login alice password s3cret\n")
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))
    return "Basic " + base64.b64encode(b"alice:s3cret").decode()


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[IndexServer, IndexServer]]:
    """Two loopback servers, each serving ``x-1.0-py3-none-any.whl``: one host, two ports."""
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel bytes")
    servers = [IndexServer(tmp_path / name).start() for name in ("a", "b")]
    for srv in servers:
        srv.add("pypi", wheel)
    yield servers[0], servers[1]
    for srv in servers:
        srv.stop()


def _read(url: str) -> bytes:
    with envlock_http.open_stream(url) as body:
        return b"".join(body.chunks)


@pytest.mark.parametrize("userinfo", ["", "alice:s3cret@"])
def test_credentials_are_not_sent_along_a_redirect_to_another_port(
        two_servers: tuple[IndexServer, IndexServer], netrc_for_loopback: str, userinfo: str) -> None:
    # Whoever listens on another port of the host is not the server the credentials are for.
    a, b = two_servers
    a.redirects["/pypi/files/moved.whl"] = b.file_url("pypi", "x-1.0-py3-none-any.whl")
    url = a.file_url("pypi", "moved.whl").replace("http://", f"http://{userinfo}")
    assert _read(url) == b"wheel bytes"
    assert a.auth_seen("moved.whl") == netrc_for_loopback
    assert b.auth_seen("x-1.0-py3-none-any.whl") is None


@pytest.mark.parametrize(("userinfo", "sent"), [("", "alice:s3cret"), ("ci:tok@", "ci:tok")])
def test_credentials_go_along_a_redirect_on_their_origin(
        two_servers: tuple[IndexServer, IndexServer], netrc_for_loopback: str, userinfo: str, sent: str) -> None:
    # An absolute Location on the same scheme, host and port gets the credentials the request
    # came with: the URL's own too (not ~/.netrc's for the host), though the Location has none.
    a, _ = two_servers
    a.redirects["/pypi/files/moved.whl"] = a.file_url("pypi", "x-1.0-py3-none-any.whl")
    url = a.file_url("pypi", "moved.whl").replace("http://", f"http://{userinfo}")
    assert _read(url) == b"wheel bytes"
    header = "Basic " + base64.b64encode(sent.encode()).decode()
    assert a.auth_seen("moved.whl") == a.auth_seen("x-1.0-py3-none-any.whl") == header


def test_credentials_are_not_sent_after_a_downgrade_to_plain_http(
        two_servers: tuple[IndexServer, IndexServer], netrc_for_loopback: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # https://127.0.0.1:P redirects to http://127.0.0.1:P (one host, one port): that request
    # travels in clear text, so it carries none; nor does the https one it redirects to (the
    # chain was chosen in clear text). The loopback server speaks plain HTTP: "https"
    # connections are made as plain ones, the URLs stay as written.
    a, _ = two_servers
    plain_connection = envlock_http._connection
    monkeypatch.setattr(envlock_http, "_connection",
                        lambda scheme, host, port, timeout: plain_connection("http", host, port, timeout))
    https = a.base.replace("http://", "https://")
    a.redirects["/pypi/files/first.whl"] = f"{a.base}/pypi/files/down.whl"
    a.redirects["/pypi/files/down.whl"] = f"{https}/pypi/files/x-1.0-py3-none-any.whl"
    assert _read(f"{https}/pypi/files/first.whl") == b"wheel bytes"
    assert [a.auth_seen(name) for name in ("first.whl", "down.whl", "x-1.0-py3-none-any.whl")] == [
        netrc_for_loopback, None, None]


def test_credentials_go_along_an_upgrade_to_https_on_the_default_ports(
        two_servers: tuple[IndexServer, IndexServer], netrc_for_loopback: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An index that moved to https (http://host -> https://host): the first request sent them in
    # the clear already, and without them the private index answers 401 (pip keeps them too).
    # The URLs name the default ports; every connection goes to the loopback server's port.
    a, _ = two_servers
    port = urlsplit(a.base).port
    assert port is not None
    plain_connection = envlock_http._connection
    monkeypatch.setattr(envlock_http, "_connection",
                        lambda scheme, host, _port, timeout: plain_connection("http", host, port, timeout))
    a.redirects["/pypi/files/first.whl"] = "https://127.0.0.1/pypi/files/x-1.0-py3-none-any.whl"
    assert _read("http://127.0.0.1/pypi/files/first.whl") == b"wheel bytes"
    assert a.auth_seen("x-1.0-py3-none-any.whl") == netrc_for_loopback


def test_a_redirect_to_a_port_out_of_range_fails_that_url(two_servers: tuple[IndexServer, IndexServer]) -> None:
    # It raised ValueError, past every `except HttpError`: one bad redirect stopped the whole sync.
    a, _ = two_servers
    a.redirects["/pypi/files/bad.whl"] = "http://127.0.0.1:99999/x.whl"
    with pytest.raises(envlock_http.HttpError) as info:
        _read(a.file_url("pypi", "bad.whl"))
    assert str(info.value) == "http://127.0.0.1:99999/x.whl: invalid port in the URL"


@pytest.mark.parametrize("kind", ["a FIFO", "a folder"])
def test_a_file_url_that_names_no_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    # A wheel an on-disk mirror lists: a FIFO's open waited for a writer forever (Ctrl-C too).
    import os

    path = tmp_path / "x-1.0-py3-none-any.whl"
    os.mkfifo(path) if kind == "a FIFO" else path.mkdir()
    with pytest.raises(envlock_http.HttpError) as info:
        _read(path.as_uri())
    assert str(info.value) == f"{path.as_uri()}: {path} is {kind}; expected a regular file"


@pytest.mark.parametrize(("text", "scrubbed"), [
    ("fatal: 'http://bob:pa'ss@127.0.0.1:9/foo.git' x", "fatal: 'http://127.0.0.1:9/foo.git' x"),
    ("http://bob:abc@def123@127.0.0.1/foo.git", "http://127.0.0.1/foo.git"),  # an unescaped @ in the password
    ("two https://u:p@h/x and https://v:q@k/y", "two https://h/x and https://k/y"),
    ("kept: https://h/a@b", "kept: https://h/a@b"),  # an @ in a path is no password
])
def test_scrub_cuts_every_url_password_in_a_message(text: str, scrubbed: str) -> None:
    from envlock.errors import scrub

    assert scrub(text) == scrubbed
