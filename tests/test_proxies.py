"""Through an authenticating proxy on loopback: envlock's requests, uv's and git's, plain and CONNECT.

The proxy (kit.proxy) logs what it got: the request target as sent and the Proxy-Authorization
header. The conftest points every proxy variable at a closed port and exempts loopback; these
tests name their proxy and exempt nothing.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envlock import http, netauth, runner
from envlock.errors import PackageIndexError
from envlock.indexes import project_files
from kit.certs import PrivateCA, make_ca
from kit.index import IndexServer
from kit.proxy import Proxy, Seen
from kit.wheels import build_wheel

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
AUTH = "Basic " + base64.b64encode(b"corp:pr0xy").decode()


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> PrivateCA:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    p = Proxy(user="corp", password="pr0xy").start()
    yield p
    p.stop()


def _index(tmp_path: Path, ca: PrivateCA | None = None) -> IndexServer:
    server = IndexServer(tmp_path / "served").start(ca.server_context() if ca else None)
    server.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
    return server


@pytest.fixture
def through(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Nothing exempt from the proxy (loopback included), a fresh connection pool."""
    for var in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                "all_proxy"):
        monkeypatch.delenv(var)
    http._local.__dict__.pop("pool", None)
    netauth.forget()
    yield
    http._local.__dict__.pop("pool", None)


def test_a_plain_request_goes_through_the_proxy_with_its_credentials_and_the_absolute_url(
        tmp_path: Path, proxy: Proxy, through: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # The proxy is on the index's host (another port): it still gets the absolute URL.
    server = _index(tmp_path)
    monkeypatch.setenv("HTTP_PROXY", proxy.url())
    try:
        files = project_files(server.url("pypi"), "tinydep")
    finally:
        server.stop()
    assert [f.filename for f in files] == ["tinydep-1.0-py3-none-any.whl"]
    assert proxy.seen == [Seen("GET", f"{server.url('pypi')}/tinydep/", AUTH)]


def test_a_plain_request_without_proxy_credentials_is_a_407_that_says_where_to_give_them(
        tmp_path: Path, proxy: Proxy, through: None, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _index(tmp_path)
    monkeypatch.setenv("http_proxy", proxy.url(credentials=False))
    try:
        with pytest.raises(PackageIndexError) as info:
            project_files(server.url("pypi"), "tinydep")
    finally:
        server.stop()
    assert info.value.message == (
        f"{server.url('pypi')}/tinydep/: cannot read the index page: proxy http://127.0.0.1:{proxy.port} answered "
        "407 Proxy Authentication Required (the proxy URL has none); give them in the proxy URL: "
        "http://USER:PASSWORD@HOST:PORT in HTTPS_PROXY, HTTP_PROXY or ALL_PROXY")


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "ALL_PROXY"])
def test_https_goes_through_a_connect_tunnel_with_the_proxy_credentials(
        tmp_path: Path, ca: PrivateCA, proxy: Proxy, through: None, monkeypatch: pytest.MonkeyPatch,
        variable: str) -> None:
    server = _index(tmp_path, ca)
    monkeypatch.setenv(variable, proxy.url())
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_cert))
    try:
        files = project_files(server.url("pypi"), "tinydep")
    finally:
        server.stop()
    assert [f.filename for f in files] == ["tinydep-1.0-py3-none-any.whl"]
    port = server.base.rsplit(":", 1)[1]
    assert proxy.seen == [Seen("CONNECT", f"127.0.0.1:{port}", AUTH)]


def test_a_refused_connect_is_a_407_not_a_retry(tmp_path: Path, ca: PrivateCA, proxy: Proxy, through: None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    server = _index(tmp_path, ca)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url().replace("pr0xy", "wrong"))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_cert))
    try:
        with pytest.raises(http.HttpError) as info:
            http.get_page(server.url("pypi") + "/tinydep/", accept="text/html")
    finally:
        server.stop()
    assert str(info.value) == (
        f"{server.url('pypi')}/tinydep/: proxy http://127.0.0.1:{proxy.port} answered 407 Proxy Authentication "
        "Required (its credentials were refused); give them in the proxy URL: http://USER:PASSWORD@HOST:PORT in "
        "HTTPS_PROXY, HTTP_PROXY or ALL_PROXY")
    assert not info.value.retryable
    assert len(proxy.seen) == 1


def test_no_proxy_cidr_sends_loopback_direct(tmp_path: Path, proxy: Proxy, through: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    server = _index(tmp_path)
    monkeypatch.setenv("HTTP_PROXY", proxy.url())
    monkeypatch.setenv("NO_PROXY", "10.0.0.0/8, 127.0.0.0/8")
    try:
        assert project_files(server.url("pypi"), "tinydep")
    finally:
        server.stop()
    assert proxy.seen == []


def _uv_compile(tmp_path: Path, index: str) -> runner.Result:
    req = tmp_path / "requirements.in"
    req.write_text("tinydep\n")
    return runner.uv(runner.compile_args(req, tmp_path / "out.txt", python=PY, default_index=index))


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "CONNECT"])
def test_uv_goes_through_the_same_proxy(tmp_path: Path, ca: PrivateCA, proxy: Proxy, through: None,
                                        monkeypatch: pytest.MonkeyPatch, tls: bool) -> None:
    server = _index(tmp_path, ca if tls else None)
    monkeypatch.setenv("HTTPS_PROXY" if tls else "HTTP_PROXY", proxy.url())
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca.ca_cert))  # mapped to uv's SSL_CERT_FILE
    try:
        result = _uv_compile(tmp_path, server.url("pypi"))
    finally:
        server.stop()
    assert result.ok, result.tail()
    assert "tinydep==1.0" in (tmp_path / "out.txt").read_text()
    assert proxy.seen, "uv did not use the proxy"
    assert all(s.proxy_auth == AUTH for s in proxy.seen), proxy.seen
    if tls:
        assert {s.method for s in proxy.seen} == {"CONNECT"}
    else:
        assert all(s.target.startswith(server.base + "/") for s in proxy.seen), proxy.seen


def test_git_goes_through_the_same_proxy(tmp_path: Path, proxy: Proxy, through: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # HTTP_PROXY in upper case, which libcurl ignores for http:// URLs: envlock hands it on as http_proxy.
    repo = tmp_path / "served" / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "a.txt").write_text("a\n")
    runner.git(["add", "a.txt"], cwd=work)
    runner.git(["commit", "-qm", "a"], cwd=work)
    runner.git(["push", "-q", str(repo), "HEAD:refs/heads/main"], cwd=work)
    subprocess.run(["git", "update-server-info"], cwd=repo, check=True)  # served as plain files (dumb HTTP)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(tmp_path / "served")))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("HTTP_PROXY", proxy.url())
    url = f"http://127.0.0.1:{httpd.server_address[1]}/repo.git"
    try:
        result = runner.git(["ls-remote", url])
    finally:
        httpd.shutdown()
    assert result.ok, result.tail()
    assert "refs/heads/main" in result.stdout
    assert proxy.seen and proxy.seen[0].target.startswith(f"{url}/info/refs")
    # libcurl asks once without credentials (the proxy answers 407 and names its scheme), then sends them.
    assert all(s.proxy_auth == AUTH for s in proxy.seen[1:]) and len(proxy.seen) > 1, proxy.seen
