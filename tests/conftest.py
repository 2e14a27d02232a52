"""Shared fixtures: the loopback index universe, a loopback index, throwaway workspaces, the CLI in-process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.cli.main import main
from envlock.store.store import Store
from kit.cuda import CudaKit, nvcc_path, nvml_stub
from kit.index import IndexServer
from kit.sglike import SgLike, make_sglike
from kit.universe import Universe, backend_wheels, build_universe
from kit.workspaces import Cli, CliResult, ScratchWorkspace


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-network", action="store_true", help="run tests that reach PyPI")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-network"):
        return
    skip = pytest.mark.skip(reason="reaches PyPI: opt in with --run-network")
    for item in items:
        if "network" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _hermetic_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep uv's cache and envlock's store inside the test session's temp dir."""
    base = tmp_path_factory.mktemp("session")
    saved = {k: os.environ.get(k) for k in ("UV_CACHE_DIR", "ENVLOCK_HOME")}
    os.environ["UV_CACHE_DIR"] = str(base / "uv-cache")
    os.environ["ENVLOCK_HOME"] = str(base / "envlock-home")
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def _no_credentials_left() -> Iterator[None]:
    """Index credentials a command hands to ``auth.credentials`` end with it."""
    from envlock.net import auth

    yield
    assert auth._scopes == []


@pytest.fixture(autouse=True)
def _no_way_out(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside ``network`` tests, any HTTP not to loopback goes to a closed port and fails at once.

    A mirror that was not applied (a spec still naming the real PyTorch index) then
    fails the test instead of quietly reaching the internet.
    """
    if request.node.get_closest_marker("network"):
        return
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    # Nor do this machine's netrc, keyring, CA bundles or page cap reach a test (envlock.netenv).
    monkeypatch.setenv("NETRC", os.path.join(os.devnull, "no-netrc"))
    for var in ("ENVLOCK_KEYRING_PROVIDER", "UV_KEYRING_PROVIDER", "SSL_CERT_FILE", "SSL_CERT_DIR",
                "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "ENVLOCK_NATIVE_TLS", "UV_NATIVE_TLS", "UV_SYSTEM_CERTS",
                "ENVLOCK_MAX_PAGE_BYTES"):
        monkeypatch.setenv(var, "")  # recorded, so what a test (or --native-tls in-process) sets is undone
        monkeypatch.delenv(var)


@pytest.fixture(scope="session")
def universe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Universe]:
    u = build_universe(tmp_path_factory.mktemp("universe"))
    yield u
    u.server.stop()


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ScratchWorkspace:
    root = tmp_path / "ws"
    (root / "envs").mkdir(parents=True)
    (root / "locks").mkdir()
    monkeypatch.chdir(root)
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / "home"))
    return ScratchWorkspace(root)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run ``envlock ARGS`` in-process; returns exit code, stdout, stderr."""

    def run(*args: str) -> CliResult:
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture(scope="session")
def backend_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """A loopback index serving only the build backends (uv build's isolated envs use it)."""
    server = IndexServer(tmp_path_factory.mktemp("backend-index"))
    server.add_dir("pypi", backend_wheels())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sg(tmp_path_factory: pytest.TempPathFactory) -> SgLike:
    """The SGLang-shaped fixture repository (tests/kit/sglike.py)."""
    return make_sglike(tmp_path_factory.mktemp("sglike"))


@pytest.fixture(scope="session")
def cuda_kit(tmp_path_factory: pytest.TempPathFactory) -> CudaKit:
    """nvcc builds of a small kernel, each compiled once per session (tests/kit/cuda.py)."""
    nvcc = nvcc_path()
    if nvcc is None:
        pytest.skip("no nvcc (ENVLOCK_TEST_NVCC, tests/.cuda/bin/nvcc or PATH): the fixtures are compiled by it")
    return CudaKit(tmp_path_factory.mktemp("cuda"), nvcc)


@pytest.fixture(scope="session")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stub ``libnvidia-ml.so`` compiled from C (tests/kit/cuda.py), answering NVML_STUB_* variables."""
    return nvml_stub(tmp_path_factory.mktemp("nvml"))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[IndexServer]:
    """A loopback index on 127.0.0.1, started with nothing published yet: the test adds its wheels
    (``server.add(index, *wheels)``), sets faults, and reads the requests it logged."""
    with IndexServer(tmp_path / "served").start() as started:
        yield started


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "home")


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real nginx with WebDAV PUT on 127.0.0.1 serving a cache folder: its (URL, folder)."""
    from kit.cacheservers import nginx_binary, nginx_cache

    if nginx_binary() is None:
        pytest.skip("nginx is not installed (.ci/run installs it: apt-get install -y nginx)")
    with nginx_cache(tmp_path / "srv") as found:
        yield found


@pytest.fixture
def flagship_mirrors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexServer]:
    """For the opt-in network tests of envs/qwen35-blackwell.toml: its nightly and flashinfer indexes as
    loopback stand-ins, its sglang source (``ENVLOCK_TEST_SGLANG_GIT``, else GitHub) and its triton tag,
    all through envlock's own mirror variables (``tests/kit/flagship.py``), so the spec stays as committed.
    Skips when no sglang repository holding the pin is at hand."""
    from kit.flagship import flagship_indexes, mirror_env, sglang_source, triton_source

    sglang = sglang_source()
    if sglang is None:
        pytest.skip("no sglang repository: set ENVLOCK_TEST_SGLANG_GIT to a clone or mirror holding f016738f "
                    "(GitHub is not reachable from here)")
    server = flagship_indexes(tmp_path / "standin")
    for var, value in mirror_env(server, sglang, triton_source(tmp_path / "standin")).items():
        monkeypatch.setenv(var, value)
    yield server
    server.stop()
