"""Binary cache servers on 127.0.0.1 for the tests: a real nginx with WebDAV PUT, moto's S3
server, a server that answers 500 to everything, one that never answers, one whose listen queue
is full (a connect times out) and one that trickles a body out a byte a second."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NGINX_CONF = """\
daemon off;
master_process off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{
            dav_methods PUT;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
            client_max_body_size 0;
            autoindex on;
            autoindex_format json;
        }}
    }}
}}
"""


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int, proc: subprocess.Popen[bytes] | None = None, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds}s")


@contextmanager
def nginx_cache(base: Path) -> Iterator[tuple[str, Path]]:
    """A real nginx serving ``base/cache`` with WebDAV PUT and a JSON folder listing: (URL, folder)."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("no nginx (apt-get install -y nginx-light)")
    root, tmp = base / "cache", base / "nginx"
    root.mkdir(parents=True)
    tmp.mkdir(parents=True)
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, root=root))
    proc = subprocess.Popen([binary, "-c", str(conf), "-p", str(tmp)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        _wait_for(port, proc)
        yield f"http://127.0.0.1:{port}/team", root / "team"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class _Failing(http.server.BaseHTTPRequestHandler):
    def _fail(self) -> None:
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_PUT = do_HEAD = _fail  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def failing_server() -> Iterator[str]:
    """A cache URL on a server that answers HTTP 500 to every request."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cache"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def hanging_server() -> Iterator[str]:
    """A cache URL whose server accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/cache"
    finally:
        sock.close()


@contextmanager
def full_server() -> Iterator[str]:
    """A cache URL whose server's listen queue is full (one connection held, none accepted): a
    connect there waits for its timeout, as for a host that drops packets."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    held = socket.create_connection(sock.getsockname(), timeout=5)  # the one place in the queue
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/cache"
    finally:
        held.close()
        sock.close()


class Trickle:
    """A server that answers every GET with 200, a Content-Length of ``size`` and then one byte per
    ``every`` seconds (headers, then a trickle: no read ever times out), until the client leaves or
    the server stops. ``url`` is its cache URL; ``gets`` counts the requests."""

    def __init__(self, size: int = 1 << 20, every: float = 1.0) -> None:
        self.size, self.every, self.gets = size, every, 0
        self._stop = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.gets += 1
                self.send_response(200)
                self.send_header("Content-Length", str(owner.size))
                self.end_headers()
                self.wfile.flush()
                for _ in range(owner.size):
                    if owner._stop.wait(owner.every):
                        return
                    try:
                        self.wfile.write(b"x")
                        self.wfile.flush()
                    except OSError:
                        return

            def log_message(self, *args: object) -> None:
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass

        self._server = Quiet(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/cache"

    def __enter__(self) -> Trickle:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def s3_server(bucket: str) -> Iterator[str]:
    """moto's standalone S3 server on 127.0.0.1 with ``bucket`` made; boto3 pointed at it through the
    environment (AWS_ENDPOINT_URL and test credentials), as a user points it at MinIO."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_DEFAULT_REGION")}
    os.environ.update({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        _wait_for(port)
        boto3.client("s3").create_bucket(Bucket=bucket)
        yield f"s3://{bucket}/team"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
