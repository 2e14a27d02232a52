"""HTTP details that index and wheel URLs depend on: credentials kept out of text, IPv6 hosts."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from envlock import http as envlock_http


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
    assert envlock_http.with_credentials_of(url, index) == sent


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
    from envlock.fetch import Stop

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
