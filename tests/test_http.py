"""HTTP details that index and wheel URLs depend on: credentials kept out of text, IPv6 hosts."""

from __future__ import annotations

import http.server
import socket
import threading

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
