"""Cache backends against real storage: a folder, a real nginx with WebDAV PUT, moto's S3 server."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.cachestore import Backend, CacheError, TooLargeError, get_bytes, open_backend, put_bytes
from envlock.errors import UsageError
from kit.cacheservers import failing_server, hanging_server, nginx_binary, nginx_cache, s3_server


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


def test_a_hanging_server_times_out_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVLOCK_CACHE_TIMEOUT", "0.5")
    with hanging_server() as url:
        backend = open_backend(url)
        started = time.monotonic()
        with pytest.raises(CacheError) as exc:
            get_bytes(backend, "wheels/aa")
        assert time.monotonic() - started < 5
    assert exc.value.message == f"cache {url}: wheels/aa: cannot connect (TimeoutError: timed out)"
