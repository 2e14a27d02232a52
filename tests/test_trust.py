"""One trust store: a TLS index signed by a private CA, reached by envlock and by the uv it drives
under each variable that names the CA, and by neither when none does."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock import http, runner
from envlock.errors import PackageIndexError
from envlock.indexes import project_files
from kit.certs import PrivateCA, make_ca
from kit.index import IndexServer
from kit.wheels import build_wheel

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture(scope="module")
def tls_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IndexServer, PrivateCA]]:
    base = tmp_path_factory.mktemp("tls")
    ca = make_ca(base / "ca")
    server = IndexServer(base / "served").start(ca.server_context())
    server.add("pypi", build_wheel(base / "wheels", "tinydep", "1.0"))
    yield server, ca
    server.stop()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    http._local.__dict__.pop("pool", None)  # a kept-alive TLS connection would skip the handshake
    yield
    http._local.__dict__.pop("pool", None)


def _uv(tmp_path: Path, index: str) -> runner.Result:
    req = tmp_path / "requirements.in"
    req.write_text("tinydep\n")
    return runner.uv([*runner.compile_args(req, tmp_path / "out.txt", python=PY, default_index=index),
                      "--no-cache"])


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
    result = _uv(tmp_path, server.url("pypi"))
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
    result = _uv(tmp_path, server.url("pypi"))
    assert not result.ok
    assert "UnknownIssuer" in result.stderr or "certificate" in result.stderr.lower(), result.tail()


def test_a_ca_bundle_that_is_not_there_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "missing.pem"))
    with pytest.raises(http.HttpError) as info:
        http.get_page("https://127.0.0.1:9/simple/", accept="text/html")
    missing = tmp_path / "missing.pem"
    assert str(info.value) == (f"https://127.0.0.1:9/: cannot load the CA certificates of REQUESTS_CA_BUNDLE={missing} "
                               "([Errno 2] No such file or directory)")
