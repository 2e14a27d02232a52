"""CUDA builds end to end: a kernel shaped like sgl-kernel, compiled by the real nvcc of the locked
toolchain wheels (tests/kit/cudalike.py), bit for bit across ENVLOCK_HOMEs and workspace paths.

The toolchain wheels come from tests/.wheels/cuda/ (``python tests/kit/backends.py`` downloads them)
on a loopback index with the build backends; the test skips, naming the step, where they are absent.
No GPU is needed: nvcc compiles for sm_90a and sm_120a, and the module imports without launching.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envlock import runner
from envlock.build import buildenv
from envlock.model.target import find_python
from kit.cudalike import OLDER_NVCC, TOOLCHAIN, CudaLike, make_cudalike, serve_cuda_index, spec
from kit.index import IndexServer
from kit.workspaces import Cli, CliResult
from kit.workspaces import ScratchWorkspace as Workspace

pytestmark = pytest.mark.slow

ENV = "cuda"


@pytest.fixture(scope="module")
def cuda_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """A loopback index of the build backends and the CUDA toolchain wheels."""
    yield from serve_cuda_index(tmp_path_factory)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> CudaLike:
    return make_cudalike(tmp_path_factory.mktemp("cuda-repos"))


def _poisoned_host(where: Path) -> Path:
    """A folder whose ``nvcc`` and ``cmake`` exit 1, as a broken host install would."""
    where.mkdir(parents=True)
    for tool in ("nvcc", "cmake"):
        (where / tool).write_text(f"#!/bin/sh\necho 'host {tool}: must not be used' >&2\nexit 1\n")
        (where / tool).chmod(0o755)
    return where


def _build(cli: Cli, *args: str, code: int = 0) -> tuple[CliResult, dict[str, Any]]:
    r = cli("build", ENV, "--json", *args)
    assert r.code == code, r.err
    return r, json.loads(r.out)


def _wheel_sha(report: dict[str, Any]) -> str:
    builds = report["builds"]
    assert isinstance(builds, list) and len(builds) == 1
    return str(builds[0]["sha256"])


def _so_bytes(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".so")]
        return z.read(name)


def _elsewhere(ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label: str) -> Path:
    """The workspace's spec and lock copied to another path, with another ENVLOCK_HOME: the second place."""
    other = tmp_path / f"{label}-place" / "workspace"
    (other / "envs").mkdir(parents=True)
    shutil.copytree(ws.root / "locks", other / "locks")
    shutil.copy(ws.root / "envs" / f"{ENV}.toml", other / "envs")
    monkeypatch.chdir(other)
    monkeypatch.setenv("ENVLOCK_HOME", str(tmp_path / f"{label}-home"))
    return other


def _say(capsys: pytest.CaptureFixture[str], label: str, first: str, second: str) -> None:
    """The two wheels' sha256 on the terminal (the figures the issue asks for), past the CLI's capture."""
    with capsys.disabled():
        print(f"\n{label} wheel sha256: {first} (first home), {second} (second home and workspace path)")


def test_cuda_build_is_bit_identical_with_the_locked_toolchain(
    ws: Workspace, cli: Cli, cuda_index: IndexServer, kernel: CudaLike, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws.write_spec(ENV, spec(kernel, cuda_index.url("pypi")))
    r = cli("lock", ENV)
    assert r.code == 0, r.err

    r, report = _build(cli)
    first = _wheel_sha(report)
    r, report = _build(cli, "--check")  # rebuilt from scratch: the lock's very wheel
    assert report["reproducible"] is True, r.out
    assert report["checks"][0]["expected-from"] == "lock"
    assert report["checks"][0]["fixed-build-path"] is True
    lock = tomllib.loads(ws.lock_text(ENV))
    recorded = lock["tool"]["envlock"]["builds"]["cudalike-kernel"]
    assert [line.split()[0] for line in recorded["toolchain"]] == [
        "cmake==3.31.10", "ninja==1.13.2", "nvidia-cuda-cccl==13.0.85", "nvidia-cuda-crt==13.0.88",
        "nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-runtime==13.0.96", "nvidia-nvvm==13.0.88"]
    assert recorded["sha256"] == first
    log = Path(report["builds"][0]["log"]).read_text()
    assert "The CUDA compiler identification is NVIDIA 13.0.88" in log
    assert "/.envlock/toolchain/nvidia/cu13/bin/nvcc" in log or "/toolchains/" in log
    assert "invalid.invalid" not in log  # the FetchContent .cu came from envlock's checkout
    wheel = ws.root / "wheelhouse" / recorded["wheel"]
    assert b"tmpxft" not in _so_bytes(wheel)

    # The module imports (no GPU needed) and was compiled for the arch list of TORCH_CUDA_ARCH_LIST.
    venv = tmp_path / "venv"
    assert runner.uv(["venv", "--no-project", "--python", find_python("3.11"), venv]).ok
    assert runner.uv(["pip", "install", "--python", venv / "bin/python", "--no-deps", "--no-index", wheel]).ok
    probe = runner.run([venv / "bin/python", "-c", "import cudalike_kernel as k; print(k.arches())"])
    assert (probe.returncode, probe.stdout.strip()) == (0, "90a,120a"), probe.stderr

    # Where the kernel allows no private mount namespace, --check says so and what that risks; here the
    # risk is real: the -rdc pair's device link wrote the toolchain's path (the store's, now) into its cubin.
    fake = tmp_path / "no-namespace"
    fake.mkdir()
    (fake / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (fake / "unshare").chmod(0o755)
    with monkeypatch.context() as m:
        m.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
        r, report = _build(cli, "--check", code=1)
    check = report["checks"][0]
    assert (check["reproducible"], check["fixed-build-path"]) == (False, False)
    assert check["differing"] == ["cudalike_kernel-0.1.0.dist-info/RECORD",
                                  "cudalike_kernel/_cuda.cpython-311-x86_64-linux-gnu.so"]
    assert b"/toolchains/" in _so_bytes(Path(check["kept"]))
    assert (f"envlock: cudalike-kernel: checked without a fixed build path (the kernel did not let `unshare` make "
            f"a private mount namespace (unshare: unshare failed: Operation not permitted)); "
            f"{buildenv.UNFIXED_RISK}\n") in r.err

    # Another ENVLOCK_HOME, another workspace path, and a host whose nvcc and cmake exit 1 and whose
    # CUDA_HOME names nothing: the toolchain's own tools build the same bytes.
    _elsewhere(ws, tmp_path, monkeypatch, "second")
    poisoned = _poisoned_host(tmp_path / "host-bin")
    monkeypatch.setenv("PATH", f"{poisoned}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda-here"))
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "no-cuda-here"))
    r, report = _build(cli)
    assert report["rebuilt"] == 1
    _say(capsys, "stripped", first, _wheel_sha(report))
    assert _wheel_sha(report) == first

    # The toolchain moves (nvcc 13.0.88 -> 13.0.48): another input digest, and diff names the move.
    before = ws.root / "before.toml"
    shutil.copy(Path("locks") / f"pylock.{ENV}.toml", before)
    older = tuple(OLDER_NVCC if t.startswith("nvidia-cuda-nvcc==") else t for t in TOOLCHAIN)
    Path("envs", f"{ENV}.toml").write_text(spec(kernel, cuda_index.url("pypi"), toolchain=older))
    r = cli("lock", ENV)
    assert r.code == 0, r.err
    assert "cudalike-kernel: not built for this lock yet" in r.out  # its input digest moved
    r = cli("diff", str(before), ENV)
    assert r.code == 0, r.err
    assert "toolchain nvidia-cuda-nvcc: 13.0.88 -> 13.0.48" in r.out


@pytest.mark.parametrize("lineinfo", [False, True], ids=["unstripped", "unstripped-lineinfo"])
def test_unstripped_cuda_build_is_bit_identical(
    ws: Workspace, cli: Cli, cuda_index: IndexServer, kernel: CudaLike, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    lineinfo: bool, capsys: pytest.CaptureFixture[str],
) -> None:
    ws.write_spec(ENV, spec(kernel, cuda_index.url("pypi"), env={"CUDAFLAGS": "-lineinfo"} if lineinfo else {},
                            config={"install.strip": "false"}))
    assert cli("lock", ENV).code == 0
    r, report = _build(cli)
    first = _wheel_sha(report)
    r, report = _build(cli, "--check")
    assert report["reproducible"] is True, r.out
    assert report["checks"][0]["expected-from"] == "lock"
    so = _so_bytes(ws.root / "wheelhouse" / report["builds"][0]["wheel"])
    assert b"_GLOBAL__N__" in so  # the anonymous-namespace kernels' names, hashed from a mapped path
    assert b"__fatbinwrap_" in so  # the -rdc pair's module id
    assert b"tmpxft" not in so and str(tmp_path).encode() not in so
    # Built in a private mount namespace (root here; else unprivileged user namespaces): -lineinfo
    # wrote the fixed build path, never the scratch folder's.
    assert report["checks"][0]["fixed-build-path"] is True
    assert (str(buildenv.FIXED / "src" / "csrc").encode() in so) is lineinfo
    _elsewhere(ws, tmp_path, monkeypatch, "second")
    r, report = _build(cli)
    assert report["rebuilt"] == 1
    second = _wheel_sha(report)
    _say(capsys, "unstripped -lineinfo" if lineinfo else "unstripped", first, second)
    # With -lineinfo, ptxas wrote each source's mtime into the cubins' DWARF line tables: the same, as
    # envlock fixes them.
    assert second == first
