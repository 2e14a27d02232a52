"""A PEP 503 + PEP 691 package index served on 127.0.0.1 for tests.

Several named indexes live on one server: ``http://127.0.0.1:PORT/<index>/simple/``.
An index may publish links without ``#sha256=`` fragments (as PyTorch's nightly
index does), and a file may be given a fault (cut midway once, wrong bytes, a body that
does not end) to exercise verified, resumable downloads; a path may answer with a redirect.
Every request is logged for assertions.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import ssl
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from envlock import runner


class _QuietServer(ThreadingHTTPServer):
    """A loopback server that does not print a client's dropped connection (a download stopped on
    purpose, a keep-alive socket closed) to the stderr the tests compare.

    Its listen backlog is 128, not socketserver's 5: uv opens dozens of connections at once (two uv
    processes for a lock of two targets), and a connection the full backlog drops is retried by the
    client's TCP only after 1 s, 3 s, 7 s..., which made a warm relock take 2 s or 17 s at random."""

    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


Fault = Literal["cut-once", "corrupt", "slow", "stall", "flood"]
_JSON = "application/vnd.pypi.simple.v1+json"


def project_of(filename: str) -> str:
    if filename.endswith(".whl"):
        return str(parse_wheel_filename(filename)[0])
    return str(parse_sdist_filename(filename)[0])


@dataclass
class _Index:
    hashes: bool
    files: dict[str, Path] = field(default_factory=dict)  # filename -> path


_PROBE = "bytes=0-0"  # what envlock asks to learn a file's size (http.remote_size)


class IndexServer:
    """Serve wheels from named indexes; start with ``start()``, stop with ``stop()`` (or ``with
    IndexServer(root).start() as server:``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.indexes: dict[str, _Index] = {}
        self.faults: dict[str, Fault] = {}
        self.html_only: set[str] = set()  # indexes that answer PEP 503 HTML even to PEP 691 clients
        self.requests: list[tuple[str, str]] = []  # (path, Range header or "")
        # Fault "slow": the body trickles out in slow_chunk pieces, slow_delay seconds apart,
        # so a test can kill a client mid-download. Fault "stall": half the body, then nothing
        # until the server stops (or the client goes away), as a hung server does.
        self.slow_chunk = 16 * 1024
        self.slow_delay = 0.05
        # Fault "flood": no Content-Length, then flood_bytes of zeros and a closed connection, as a
        # broken or hostile server sends a body that does not end (a client must stop well before).
        self.flood_bytes = 64 * 1024 * 1024
        # path -> the Location a request for it is answered with (302), to follow redirects.
        self.redirects: dict[str, str] = {}
        # File responses carry an ETag, as nginx makes one; ``replicas`` > 1 answers each
        # request with the next of that many ETags for one file (hosts behind a load
        # balancer, each with its own), 0 sends none (the size is then all there is).
        self.replicas = 1
        self._answered = 0
        self._served_cut: set[str] = set()
        self._auth: dict[str, str | None] = {}
        #: An Authorization header every request must carry (a private index), else 401.
        self.required_auth: str | None = None
        #: PEP 592: filename -> the reason it is yanked ("" for none), on HTML and JSON pages.
        self.yanked: dict[str, str] = {}
        self._tls = False
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    # -- content ---------------------------------------------------------
    def add_index(self, name: str, *, hashes: bool = True) -> None:
        self.indexes.setdefault(name, _Index(hashes=hashes))

    def add(self, index: str, *paths: Path) -> None:
        """Publish files on an index (copied under the server's root)."""
        self.add_index(index)
        folder = self.root / index
        folder.mkdir(parents=True, exist_ok=True)
        for path in paths:
            target = folder / path.name
            if path.resolve() != target.resolve():
                shutil.copyfile(path, target)
            self.indexes[index].files[path.name] = target

    def add_dir(self, index: str, folder: Path) -> None:
        files = sorted(p for p in folder.iterdir() if p.suffix == ".whl" or p.name.endswith(".tar.gz"))
        self.add(index, *files)

    def url(self, index: str) -> str:
        return f"{self.base}/{index}/simple"

    def file_url(self, index: str, filename: str) -> str:
        return f"{self.base}/{index}/files/{filename}"

    @property
    def base(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self._tls else 'http'}://{host!s}:{port}"

    def downloads(self, filename: str | None = None) -> list[str]:
        """Paths of file requests served so far (optionally for one filename); a one-byte size
        probe (``Range: bytes=0-0``) is not a download."""
        with self._lock:
            paths = [p for p, rng in self.requests if "/files/" in p and rng != _PROBE]
        return [p for p in paths if filename is None or p.endswith("/" + filename)]

    def probes(self, filename: str) -> int:
        """How many one-byte size probes of ``filename`` were served."""
        with self._lock:
            return sum(1 for p, rng in self.requests if p.endswith("/" + filename) and rng == _PROBE)

    # -- serving ---------------------------------------------------------
    def start(self, tls: ssl.SSLContext | None = None, *, port: int = 0) -> IndexServer:
        """Serve on 127.0.0.1 (``port`` 0: any free one); over HTTPS with ``tls`` (a server context:
        a test's private CA)."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Keep-alive clients otherwise wait out a delayed ACK (~40 ms) per request.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with server._lock:
                    server.requests.append((self.path, self.headers.get("Range", "")))
                server._handle(self)

            def do_HEAD(self) -> None:
                # uv probes files with HEAD before range requests for metadata.
                server._handle(self)

        self._httpd = _QuietServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
            self._tls = True
        # A short poll interval keeps stop() (and so each test using a server) fast.
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __enter__(self) -> IndexServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def auth_seen(self, filename: str) -> str | None:
        """The Authorization header of the last request for ``filename`` (None: it had none)."""
        with self._lock:
            return self._auth.get(filename)

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?", 1)[0]
        with self._lock:
            self._auth[unquote(path.rsplit("/", 1)[-1])] = req.headers.get("Authorization")
        if self.required_auth is not None and req.headers.get("Authorization") != self.required_auth:
            return self._send(req, 401, b"authentication required\n", "text/plain")
        if path in self.redirects:
            req.send_response(302)
            req.send_header("Location", self.redirects[path])
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        m = re.fullmatch(r"/([^/]+)/simple/?", path)
        if m and m.group(1) in self.indexes:
            return self._root_page(req, m.group(1))
        m = re.fullmatch(r"/([^/]+)/simple/([^/]+)/?", path)
        if m and m.group(1) in self.indexes:
            return self._project_page(req, m.group(1), m.group(2))
        m = re.fullmatch(r"/([^/]+)/files/([^/]+)", path)
        name = unquote(m.group(2)) if m else ""  # as a real server does: torch-…%2Bcu130-….whl
        if m and m.group(1) in self.indexes and name in self.indexes[m.group(1)].files:
            return self._file(req, self.indexes[m.group(1)].files[name])
        self._send(req, 404, b"not found\n", "text/plain")

    def _projects(self, index: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for filename in sorted(self.indexes[index].files):
            out[str(canonicalize_name(project_of(filename)))].append(filename)
        return out

    def _wants_json(self, req: BaseHTTPRequestHandler) -> bool:
        index = req.path.strip("/").split("/", 1)[0]
        return index not in self.html_only and _JSON in req.headers.get("Accept", "")

    def _root_page(self, req: BaseHTTPRequestHandler, index: str) -> None:
        names = sorted(self._projects(index))
        if self._wants_json(req):
            doc = {"meta": {"api-version": "1.0"}, "projects": [{"name": n} for n in names]}
            return self._send(req, 200, json.dumps(doc).encode(), _JSON)
        links = "".join(f'<a href="{n}/">{n}</a>\n' for n in names)
        self._send(req, 200, f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode(), "text/html")

    def _project_page(self, req: BaseHTTPRequestHandler, index: str, project: str) -> None:
        files = self._projects(index).get(str(canonicalize_name(project)))
        if not files:
            return self._send(req, 404, b"no such project\n", "text/plain")
        idx = self.indexes[index]
        rows = []
        for filename in files:
            digest = hashlib.sha256(idx.files[filename].read_bytes()).hexdigest()
            rows.append((filename, f"../../files/{filename}", digest))
        if self._wants_json(req):
            doc = {
                "meta": {"api-version": "1.0"},
                "name": str(canonicalize_name(project)),
                "files": [
                    {"filename": f, "url": u, "hashes": {"sha256": d} if idx.hashes else {},
                     **({"yanked": self.yanked[f] or True} if f in self.yanked else {})}
                    for f, u, d in rows
                ],
            }
            return self._send(req, 200, json.dumps(doc).encode(), _JSON)
        links = "".join(
            f'<a href="{html.escape(u)}{"#sha256=" + d if idx.hashes else ""}"'
            f'{" data-yanked=" + chr(34) + html.escape(self.yanked[f]) + chr(34) if f in self.yanked else ""}>'
            f'{html.escape(f)}</a><br/>\n'
            for f, u, d in rows
        )
        body = f"<!DOCTYPE html><html><body>\n<h1>Links for {project}</h1>\n{links}</body></html>\n"
        self._send(req, 200, body.encode(), "text/html")

    def _file(self, req: BaseHTTPRequestHandler, path: Path) -> None:
        fault = self.faults.get(path.name)
        if fault == "flood":
            return self._flood(req)
        st = path.stat()
        size = st.st_size
        start, end = 0, size
        ranged = False
        rng = re.fullmatch(r"bytes=(\d*)-(\d*)", req.headers.get("Range", ""))
        if rng and (rng.group(1) or rng.group(2)):
            ranged = True
            if not rng.group(1):  # suffix range: the last N bytes
                start = max(0, size - int(rng.group(2)))
            else:
                start = int(rng.group(1))
                end = min(size, int(rng.group(2)) + 1) if rng.group(2) else size
            if start >= size:
                return self._send(req, 416, b"", "text/plain")
        req.send_response(206 if ranged else 200)
        req.send_header("Content-Type", "application/octet-stream")
        req.send_header("Content-Length", str(end - start))
        req.send_header("Accept-Ranges", "bytes")
        if self.replicas:
            with self._lock:
                self._answered += 1
                replica = self._answered % self.replicas
            req.send_header("ETag", f'"{st.st_mtime_ns:x}-{size:x}"' + (f"-{replica}" if self.replicas > 1 else ""))
        if ranged:
            req.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        req.end_headers()
        if req.command == "HEAD":
            return
        if fault is None:
            # Stream from disk: a multi-GB wheel must not sit in the server's memory.
            with path.open("rb") as fh:
                fh.seek(start)
                left = end - start
                try:
                    while left > 0:
                        chunk = fh.read(min(left, 1 << 20))
                        if not chunk:
                            break
                        req.wfile.write(chunk)
                        left -= len(chunk)
                except (BrokenPipeError, ConnectionResetError):  # the client went away
                    req.close_connection = True
            return
        data = path.read_bytes()
        if fault == "corrupt":
            data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
        body = data[start:end]
        if fault == "cut-once" and path.name not in self._served_cut:
            self._served_cut.add(path.name)
            req.wfile.write(body[: len(body) // 2])
            req.wfile.flush()
            req.close_connection = True
            return
        if fault == "stall":
            try:
                req.wfile.write(body[: len(body) // 2])
                req.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            self._stopping.wait()
            req.close_connection = True
            return
        if fault == "slow":
            try:
                for i in range(0, len(body), self.slow_chunk):
                    req.wfile.write(body[i : i + self.slow_chunk])
                    req.wfile.flush()
                    time.sleep(self.slow_delay)
            except (BrokenPipeError, ConnectionResetError):  # the client went away (killed)
                req.close_connection = True
            return
        req.wfile.write(body)

    def _flood(self, req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Type", "application/octet-stream")
        req.send_header("Connection", "close")  # the body ends when the connection does
        req.end_headers()
        req.close_connection = True
        if req.command == "HEAD":
            return
        block = bytes(1 << 20)
        left = self.flood_bytes
        try:
            while left > 0 and not self._stopping.is_set():
                req.wfile.write(block[:left])
                left -= len(block)
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading and went away
            pass

    def _send(self, req: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str) -> None:
        req.send_response(status)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(body)


def uv_compile(folder: Path, index_url: str) -> runner.Result:
    """The pinned uv, run as envlock runs it (``runner``: its network settings), resolving ``tinydep``
    from ``index_url`` with no cache; the pins land in ``folder/out.txt``."""
    req = folder / "requirements.in"
    req.write_text("tinydep\n")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return runner.uv([*runner.compile_args(req, folder / "out.txt", runner.CompileOptions(python=python,
                                                                                          default_index=index_url)),
                      "--no-cache"])
