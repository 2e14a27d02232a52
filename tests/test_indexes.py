"""Index pages: PEP 691 JSON that is not what the standard says fails with the page named."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from envlock.errors import PackageIndexError
from envlock.indexes import project_files


@pytest.fixture
def page() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server answering every GET with ``body[0]`` as PEP 691 JSON."""
    body = [b""]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body[0])))
            self.end_headers()
            self.wfile.write(body[0])

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", body
    server.shutdown()


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (b'{"files": [{"filename": "a-1.0-py3-none-any.whl", "url": "a.whl", "hashes": []}]}',
         "'list' object has no attribute 'get'"),
        (b'{"files": [{"url": "a.whl"}]}', "'filename'"),
        (b"not json", "Expecting value"),
        (b'{"files": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "maximum recursion depth exceeded"),
    ],
)
def test_malformed_json_page_is_an_index_error(page: tuple[str, list[bytes]], doc: bytes, reason: str) -> None:
    url, body = page
    body[0] = doc
    with pytest.raises(PackageIndexError) as info:
        project_files(url, "a")
    assert info.value.message.startswith(f"{url}/a/: malformed PEP 691 page (")
    assert reason in info.value.message
