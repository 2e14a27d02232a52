"""What the environment says about the network, read one way for envlock, uv and git."""

from __future__ import annotations

import base64
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envlock import netenv, runner
from envlock.errors import PackageIndexError
from envlock.net import auth, http
from envlock.net.indexes import project_files
from kit.certs import PrivateCA, make_ca
from kit.index import IndexServer, uv_compile
from kit.proxy import Proxy, Seen
from kit.wheels import build_wheel
from kit.workspaces import Cli, ScratchWorkspace


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "bypassed"),
    [
        ("10.1.2.3", 80, "10.0.0.0/8", True),  # a CIDR block
        ("11.1.2.3", 80, "10.0.0.0/8", False),
        ("10.1.2.3", 80, "192.168.0.0/16, 10.0.0.0/8", True),  # a list with spaces
        ("10.1.2.3", 80, "10.0.0.0/8:8080", False),  # ...on another port only
        ("10.1.2.3", 8080, "10.0.0.0/8:8080", True),
        ("pypi.corp.example", 443, ".corp.example", True),  # a leading dot: its subdomains
        ("corp.example", 443, ".corp.example", True),  # ...and the domain itself, as curl and uv
        ("pypi.corp.example", 443, "corp.example", True),  # no dot: the domain and its subdomains
        ("notcorp.example", 443, "corp.example", False),  # not a suffix match of a name
        ("PyPI.Corp.Example", 443, "corp.example", True),  # case is no difference
        ("pypi.corp.example", 443, "*.corp.example", True),  # a glob on the left, as some set it
        ("pypi.corp.example", 8443, "pypi.corp.example:8443", True),  # a host and a port
        ("pypi.corp.example", 443, "pypi.corp.example:8443", False),
        ("anything.example", 443, "*", True),  # every host
        ("::1", 80, "[::1]", True),  # an IPv6 literal, bracketed
        ("::1", 80, "::1", True),  # ...or bare: its colons are no port
        ("fd00::5", 80, "fd00::/8", True),  # an IPv6 block
        ("10.1.2.3", 80, "", False),
        ("10.1.2.3", 80, "10.1.2.3", True),
        ("10.1.2.30", 80, "10.1.2.3", False),  # an address is not a prefix
    ],
)
def test_no_proxy_reads_as_curl_and_uv_read_it(host: str, port: int, no_proxy: str, bypassed: bool) -> None:
    assert netenv.bypass(host, port, no_proxy) is bypassed


@pytest.mark.parametrize(
    ("environ", "url", "proxy"),
    [
        ({"HTTPS_PROXY": "http://p:3128"}, "https://pypi.org/simple/", "http://p:3128"),
        ({"https_proxy": "http://low:1", "HTTPS_PROXY": "http://up:2"}, "https://h/", "http://low:1"),
        ({"HTTPS_PROXY": "http://p:3128"}, "http://h/", None),  # a plain URL asks HTTP_PROXY
        ({"HTTP_PROXY": "http://p:3128"}, "http://h/", "http://p:3128"),
        ({"ALL_PROXY": "http://all:1"}, "https://h/", "http://all:1"),  # the fallback for every scheme
        ({"HTTPS_PROXY": "p:3128"}, "https://h/", "http://p:3128"),  # no scheme: an http proxy
        ({"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "10.0.0.0/8"}, "https://10.2.3.4/simple/", None),
        ({"HTTPS_PROXY": "http://p:3128", "no_proxy": "*"}, "https://h/", None),
    ],
)
def test_the_proxy_of_a_url(environ: dict[str, str], url: str, proxy: str | None) -> None:
    assert netenv.proxy_for(url, environ) == proxy


def test_uv_gets_the_same_trust_store_keyring_and_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # REQUESTS_CA_BUNDLE is pip's and requests' name: uv reads SSL_CERT_FILE only, so it is mapped;
    # what uv reads itself goes through as it is (proxies, NETRC); UV_* survive only as envlock sets them.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/corp/ca.pem")
    monkeypatch.setenv("SSL_CERT_DIR", "/etc/corp/certs")
    monkeypatch.setenv("UV_NATIVE_TLS", "1")
    monkeypatch.setenv("ENVLOCK_KEYRING_PROVIDER", "subprocess")
    monkeypatch.setenv("HTTPS_PROXY", "http://u:p@proxy:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.0/8,.corp")
    monkeypatch.setenv("NETRC", "/etc/corp/netrc-ci")
    monkeypatch.setenv("UV_INDEX_URL", "https://elsewhere.example/simple")
    env = runner.uv_env()
    got = {k: env.get(k) for k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "UV_SYSTEM_CERTS", "UV_NATIVE_TLS",
                                   "UV_KEYRING_PROVIDER", "HTTPS_PROXY", "NO_PROXY", "NETRC", "UV_INDEX_URL")}
    assert got == {"SSL_CERT_FILE": "/etc/corp/ca.pem", "SSL_CERT_DIR": "/etc/corp/certs", "UV_SYSTEM_CERTS": "1",
                   "UV_NATIVE_TLS": None, "UV_KEYRING_PROVIDER": "subprocess",
                   "HTTPS_PROXY": "http://u:p@proxy:3128", "NO_PROXY": "10.0.0.0/8,.corp",
                   "NETRC": "/etc/corp/netrc-ci", "UV_INDEX_URL": None}


def test_ssl_cert_file_wins_over_requests_ca_bundle() -> None:
    t = netenv.trust({"SSL_CERT_FILE": "/a.pem", "REQUESTS_CA_BUNDLE": "/b.pem"})
    assert (t.cafile, t.cafile_var, t.native) == ("/a.pem", "SSL_CERT_FILE", False)
    assert netenv.uv_settings({"CURL_CA_BUNDLE": "/c.pem", "UV_SYSTEM_CERTS": "true"}) == {
        "SSL_CERT_FILE": "/c.pem", "UV_SYSTEM_CERTS": "1"}


def test_git_gets_proxies_and_ca_bundle_as_libcurl_reads_them() -> None:
    # libcurl ignores HTTP_PROXY in upper case and SSL_CERT_FILE: spelled for it; a lower-case proxy stays.
    environ = {"HTTP_PROXY": "http://p:1", "HTTPS_PROXY": "http://p:2", "https_proxy": "http://mine:3",
               "NO_PROXY": ".corp", "REQUESTS_CA_BUNDLE": "/etc/corp/ca.pem", "SSL_CERT_DIR": "/etc/corp/certs"}
    assert netenv.git_settings(environ) == {
        "http_proxy": "http://p:1", "no_proxy": ".corp", "GIT_SSL_CAINFO": "/etc/corp/ca.pem",
        "GIT_SSL_CAPATH": "/etc/corp/certs"}
    # one trust store: what envlock trusts is what git trusts, over a GIT_SSL_CAINFO set before
    assert netenv.git_settings({**environ, "GIT_SSL_CAINFO": "/own.pem"})["GIT_SSL_CAINFO"] == "/etc/corp/ca.pem"
    assert "GIT_SSL_CAINFO" not in netenv.git_settings({"GIT_SSL_CAINFO": "/own.pem"})


@pytest.mark.parametrize(("value", "provider"), [("subprocess", "subprocess"), ("SUBPROCESS", "subprocess"),
                                                 ("disabled", "disabled"), ("", "disabled")])
def test_keyring_provider(value: str, provider: str) -> None:
    assert netenv.keyring_provider({"ENVLOCK_KEYRING_PROVIDER": value}) == provider
    assert netenv.keyring_provider({"UV_KEYRING_PROVIDER": value}) == provider


def test_a_keyring_provider_that_is_none_is_named() -> None:
    from envlock.errors import UsageError

    with pytest.raises(UsageError) as info:
        netenv.keyring_provider({"ENVLOCK_KEYRING_PROVIDER": "subproces"})
    assert info.value.message == "ENVLOCK_KEYRING_PROVIDER='subproces': expected disabled or subprocess"


# -- proxies: envlock's, uv's and git's requests through one authenticating proxy -------------------
# Through an authenticating proxy on loopback: envlock's requests, uv's and git's, plain and
# CONNECT.
#
# The proxy (kit.proxy) logs what it got: the request target as sent and the Proxy-Authorization
# header. The conftest points every proxy variable at a closed port and exempts loopback; these
# tests name their proxy and exempt nothing.

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
    auth.forget()
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


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "CONNECT"])
def test_uv_goes_through_the_same_proxy(tmp_path: Path, ca: PrivateCA, proxy: Proxy, through: None,
                                        monkeypatch: pytest.MonkeyPatch, tls: bool) -> None:
    server = _index(tmp_path, ca if tls else None)
    monkeypatch.setenv("HTTPS_PROXY" if tls else "HTTP_PROXY", proxy.url())
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca.ca_cert))  # mapped to uv's SSL_CERT_FILE
    try:
        result = uv_compile(tmp_path, server.url("pypi"))
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


# -- the trust store: a private CA for envlock, uv and git ------------------------------------------
# One trust store: a TLS index signed by a private CA, reached by envlock and by the uv it drives
# under each variable that names the CA, and by neither when none does.


@pytest.fixture(scope="module")
def tls_index(ca: PrivateCA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IndexServer, PrivateCA]]:
    base = tmp_path_factory.mktemp("tls")
    with IndexServer(base / "served").start(ca.server_context()) as server:
        server.add("pypi", build_wheel(base / "wheels", "tinydep", "1.0"))
        yield server, ca


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    http._local.__dict__.pop("pool", None)  # a kept-alive TLS connection would skip the handshake
    yield
    http._local.__dict__.pop("pool", None)


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_DIR",
                                      "native+SSL_CERT_FILE"])
def test_envlock_and_uv_trust_the_private_ca_under_each_variable(
        tls_index: tuple[IndexServer, PrivateCA], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        variable: str) -> None:
    server, ca = tls_index
    if variable == "SSL_CERT_DIR":
        monkeypatch.setenv(variable, str(ca.ca_dir))
    else:
        monkeypatch.setenv(variable.removeprefix("native+"), str(ca.ca_cert))
    if variable.startswith("native+"):
        monkeypatch.setenv("UV_NATIVE_TLS", "1")  # --native-tls, as uv spells it
    assert [f.filename for f in project_files(server.url("pypi"), "tinydep")] == ["tinydep-1.0-py3-none-any.whl"]
    result = uv_compile(tmp_path, server.url("pypi"))
    assert result.ok, result.tail()
    assert "tinydep==1.0" in (tmp_path / "out.txt").read_text()


@pytest.mark.parametrize("native", [False, True], ids=["default roots", "native"])
def test_neither_trusts_it_unless_told(tls_index: tuple[IndexServer, PrivateCA], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    # The CA is in no store of this machine: envlock and uv fail alike (not one of them only).
    server, _ = tls_index
    if native:
        monkeypatch.setenv("UV_SYSTEM_CERTS", "1")
    with pytest.raises(PackageIndexError) as info:
        project_files(server.url("pypi"), "tinydep")
    assert "CERTIFICATE_VERIFY_FAILED" in info.value.message
    result = uv_compile(tmp_path, server.url("pypi"))
    assert not result.ok
    assert "UnknownIssuer" in result.stderr or "certificate" in result.stderr.lower(), result.tail()


def test_a_ca_bundle_that_is_not_there_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "missing.pem"))
    with pytest.raises(http.HttpError) as info:
        http.get_page("https://127.0.0.1:9/simple/", accept="text/html")
    missing = tmp_path / "missing.pem"
    assert str(info.value) == (f"https://127.0.0.1:9/: cannot load the CA certificates of REQUESTS_CA_BUNDLE={missing} "
                               "([Errno 2] No such file or directory)")


@pytest.fixture(scope="module")
def tls_repo(tls_index: tuple[IndexServer, PrivateCA], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A git repository served over HTTPS (dumb HTTP: plain files) with the private CA's certificate."""
    import subprocess
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    _, ca = tls_index
    served = tmp_path_factory.mktemp("git-served")
    repo = served / "repo.git"
    work = tmp_path_factory.mktemp("git-work")
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    (work / "a.txt").write_text("a\n")
    for args in (["init", "-q"], ["add", "a.txt"], ["commit", "-qm", "a"],
                 ["push", "-q", str(repo), "HEAD:refs/heads/main"]):
        assert runner.git(args, cwd=work).ok
    subprocess.run(["git", "update-server-info"], cwd=repo, check=True)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(served)))
    httpd.socket = ca.server_context().wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}/repo.git"
    httpd.shutdown()


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "SSL_CERT_DIR", None])
def test_git_trusts_what_envlock_trusts(tls_index: tuple[IndexServer, PrivateCA], tls_repo: str,
                                        monkeypatch: pytest.MonkeyPatch, variable: str | None) -> None:
    # git's libcurl reads none of these: envlock hands them on as GIT_SSL_CAINFO / GIT_SSL_CAPATH.
    _, ca = tls_index
    if variable is not None:
        monkeypatch.setenv(variable, str(ca.ca_dir if variable == "SSL_CERT_DIR" else ca.ca_cert))
    result = runner.git(["ls-remote", tls_repo])
    assert result.ok is (variable is not None), result.tail()
    if variable is not None:
        assert "refs/heads/main" in result.stdout


@pytest.mark.parametrize("native", [False, True], ids=["REQUESTS_CA_BUNDLE", "--native-tls + SSL_CERT_FILE"])
def test_a_lock_from_a_private_ca_index(
        tmp_path: Path, ca_lock_index: tuple[IndexServer, PrivateCA], monkeypatch: pytest.MonkeyPatch,
        ws: ScratchWorkspace, cli: Cli, native: bool) -> None:
    # envlock reads the nightly index's page and hashes its wheel; uv resolves the rest: one trust store.
    server, ca = ca_lock_index
    monkeypatch.setenv("SSL_CERT_FILE" if native else "REQUESTS_CA_BUNDLE", str(ca.ca_cert))
    ws.write_spec("e", f'[env]\npython = "{PY}"\n[indexes.priv]\nurl = "{server.url("priv")}"\ndefault = true\n'
                       '[packages]\ntinydep = "==1.0"\n'
                       'torch = { nightly = "2026-03-10", local = "cpu", index = "priv" }\n')
    result = cli("-q", *(["--native-tls"] if native else []), "lock", "e")
    assert result.code == 0, result.err
    lock = (ws.root / "locks" / "pylock.e.toml").read_text()
    assert f'url = "{server.base}/priv/files/torch-2.12.0.dev20260310+cpu-py3-none-any.whl"' in lock


@pytest.fixture
def ca_lock_index(tls_index: tuple[IndexServer, PrivateCA], tmp_path: Path) -> Iterator[tuple[IndexServer, PrivateCA]]:
    _, ca = tls_index
    server = IndexServer(tmp_path / "served").start(ca.server_context())
    server.add_index("priv", hashes=False)
    server.add("priv", build_wheel(tmp_path / "wheels", "tinydep", "1.0"))
    server.add("priv", build_wheel(tmp_path / "wheels", "torch", "2.12.0.dev20260310+cpu"))
    yield server, ca
    server.stop()
