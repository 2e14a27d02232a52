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
def test_a_lock_from_a_private_ca_index(tmp_path: Path, ca_lock_index: tuple[IndexServer, PrivateCA],
                                        monkeypatch: pytest.MonkeyPatch, ws, cli, native: bool) -> None:  # type: ignore[no-untyped-def]
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
