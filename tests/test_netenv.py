"""What the environment says about the network, read one way for envlock, uv and git."""

from __future__ import annotations

import pytest

from envlock import netenv, runner


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
