"""Cache backends against real storage: a folder, a real nginx with WebDAV PUT, moto's S3 server."""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envlock.cache.backends import Backend, CacheError, TooLargeError, get_bytes, open_backend, put_bytes
from envlock.errors import UsageError
from kit.cacheservers import Trickle, failing_server, full_server, hanging_server, nginx_binary, nginx_cache, s3_server


@pytest.fixture(params=["file", "nginx", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "file":
        yield open_backend(f"file://{tmp_path / 'cache'}")
    elif request.param == "nginx":
        if nginx_binary() is None:
            pytest.skip("nginx is not installed (.ci/run installs it: apt-get install -y nginx)")
        with nginx_cache(tmp_path) as (url, _folder):
            yield open_backend(url)
    else:
        with s3_server("envlock-test") as url:
            yield open_backend(url)


def test_put_get_exists_and_list(backend: Backend) -> None:
    assert not backend.exists("wheels/aa")
    assert get_bytes(backend, "wheels/aa") is None
    put_bytes(backend, "wheels/aa", b"first")
    put_bytes(backend, "builds/bb.json", b"{}")
    assert backend.exists("wheels/aa")
    assert get_bytes(backend, "wheels/aa") == b"first"
    put_bytes(backend, "wheels/aa", b"again")  # a put replaces (same key, same bytes in practice)
    assert get_bytes(backend, "wheels/aa") == b"again"
    assert sorted(backend.keys("wheels/")) == ["wheels/aa"]
    assert sorted(backend.keys("builds/")) == ["builds/bb.json"]
    assert list(backend.keys("closures/")) == []
    with pytest.raises(TooLargeError):
        backend.get("wheels/aa", io.BytesIO().write, limit=3)


def test_a_key_cannot_leave_the_cache(tmp_path: Path) -> None:
    backend = open_backend(f"file://{tmp_path / 'cache'}")
    with pytest.raises(ValueError) as exc:
        backend.exists("../x")
    assert str(exc.value) == "cache key '../x': expected '/'-separated plain names"


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://host/x", "cache 'ftp://host/x': expected a file://, http(s):// or s3:// URL"),
    ("gs://user:secret@bucket/x", "cache 'gs://bucket/x': expected a file://, http(s):// or s3:// URL"),
])
def test_unknown_schemes_are_refused_without_credentials(url: str, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        open_backend(url)
    assert exc.value.message == message


def test_a_server_answering_500_is_a_cache_error_without_credentials() -> None:
    with failing_server() as url:
        backend = open_backend(url.replace("http://", "http://user:secret@"))
        with pytest.raises(CacheError) as exc:
            get_bytes(backend, "wheels/aa")
    assert exc.value.message == f"cache {url}: wheels/aa: HTTP 500"


def _refused_url() -> str:
    import socket

    with socket.socket() as sock:  # bound, never listening: a connect is refused
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/cache"


@pytest.mark.parametrize(("server", "said"), [
    ("refused", "cannot connect (ConnectionRefusedError: [Errno 111] Connection refused)"),
    ("full", "cannot connect (TimeoutError: timed out)"),
    ("hanging", "timed out after 0.5 s waiting for an answer (connected)"),
    ("trickle", "timed out after 0.5 s waiting for the rest of the body (connected)"),
])
def test_cannot_connect_only_when_the_connect_failed(monkeypatch: pytest.MonkeyPatch, server: str, said: str) -> None:
    # A server that took the connection and then hung was said to be one envlock "cannot connect" to.
    monkeypatch.setenv("ENVLOCK_CACHE_TIMEOUT", "0.5")
    with contextlib.ExitStack() as stack:
        makers: dict[str, Callable[[], str]] = {
            "refused": _refused_url, "full": lambda: stack.enter_context(full_server()),
            "hanging": lambda: stack.enter_context(hanging_server()),
            "trickle": lambda: stack.enter_context(Trickle(size=100, every=2.0)).url}
        url = makers[server]()
        started = time.monotonic()
        with pytest.raises(CacheError) as exc:
            get_bytes(open_backend(url), "wheels/aa")
        assert time.monotonic() - started < 5
    assert exc.value.message == f"cache {url}: wheels/aa: {said}"


def test_a_trickle_is_ended_by_the_transfer_deadline_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # Headers, then a byte a second: no read ever waits its timeout; the whole transfer's deadline ends it.
    monkeypatch.setenv("ENVLOCK_TRANSFER_TIMEOUT", "2")
    with Trickle(size=1000, every=0.25) as trickle:
        started = time.monotonic()
        with pytest.raises(CacheError) as exc:
            get_bytes(open_backend(trickle.url), "wheels/aa")
        took = time.monotonic() - started
    assert 2 <= took < 4, took
    assert re.fullmatch(rf"cache {trickle.url}: wheels/aa: timed out after 2 s, the most one transfer may take "
                        r"\(\d+ bytes in; ENVLOCK_TRANSFER_TIMEOUT=2 plus 1 s per MiB of a known size\)",
                        exc.value.message), exc.value.message
