"""An HTTP proxy on 127.0.0.1 for tests: plain requests (absolute-form GET) and CONNECT tunnels.

It can require ``Proxy-Authorization`` (else 407, as a corporate proxy answers) and logs every
request it got: the method, the request target exactly as sent, and the Proxy-Authorization
header (None: none), so a test asserts what envlock, uv or git really sent.
"""

from __future__ import annotations

import base64
import select
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Seen:
    method: str
    target: str  # "http://host:port/path" (absolute form), "host:port" (CONNECT) or "/path" (a client's bug)
    proxy_auth: str | None


class Proxy:
    """Start with ``start()``, stop with ``stop()``; ``url`` is ``http://[user:password@]127.0.0.1:PORT``."""

    def __init__(self, *, user: str | None = None, password: str | None = None) -> None:
        self.user, self.password = user, password
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def required(self) -> str | None:
        """The Proxy-Authorization header the proxy wants, None when it wants none."""
        if self.user is None:
            return None
        return "Basic " + base64.b64encode(f"{self.user}:{self.password or ''}".encode()).decode()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "start() the proxy first"
        return int(self._httpd.server_address[1])

    def url(self, *, credentials: bool = True) -> str:
        login = f"{self.user}:{self.password}@" if credentials and self.user is not None else ""
        return f"http://{login}127.0.0.1:{self.port}"

    def start(self) -> Proxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _allowed(self) -> bool:
                auth = self.headers.get("Proxy-Authorization")
                with proxy._lock:
                    proxy.seen.append(Seen(self.command, self.path, auth))
                if proxy.required is None or auth == proxy.required:
                    return True
                self.send_response(407)
                self.send_header("Proxy-Authenticate", 'Basic realm="test proxy"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return False

            def do_CONNECT(self) -> None:
                if not self._allowed():
                    return
                host, _, port = self.path.rpartition(":")
                try:
                    upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
                except OSError:
                    self.send_error(502)
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                self.close_connection = True
                _pipe(self.connection, upstream)

            def do_GET(self) -> None:
                self._forward()

            def do_HEAD(self) -> None:
                self._forward()

            def _forward(self) -> None:
                if not self._allowed():
                    return
                parts = urlsplit(self.path)
                if parts.scheme != "http" or not parts.hostname:  # origin-form: not a proxy request
                    self.send_error(400, "expected an absolute-form request target")
                    return
                upstream = socket.create_connection((parts.hostname, parts.port or 80), timeout=30)
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                head = [f"{self.command} {path} HTTP/1.1"]
                head += [f"{k}: {v}" for k, v in self.headers.items()
                         if k.lower() not in ("proxy-authorization", "proxy-connection", "connection")]
                head.append("Connection: close")
                upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
                self.close_connection = True
                # The answer goes back as it comes (HTTP/1.1, then the connection closes).
                _pipe(self.connection, upstream)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    socks = [client, upstream]
    try:
        while True:
            ready, _, _ = select.select(socks, [], [], 30)
            if not ready:
                return
            for s in ready:
                data = s.recv(1 << 16)
                if not data:
                    return
                (upstream if s is client else client).sendall(data)
    except OSError:
        return
    finally:
        upstream.close()
