"""``envlock doctor`` on a stub ``libnvidia-ml.so`` compiled from C (tests/kit/cuda.py): the real ctypes
path, answering a chosen driver and GPU set through environment variables; and sync's machine note."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from envlock.model.lockfile import LockedBuild, LockedPackage, canonicalize_name
from envlock.store.store import Store
from kit.cuda import CudaKit, gencode
from kit.locks import artifact, lock_for
from kit.wheels import build_wheel

TAG = "py3-none-manylinux_2_28_x86_64"


@pytest.fixture
def machine(stub: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This test's machine: the stub NVML, a good R580 driver and one 12.0 GPU unless a test says else."""
    monkeypatch.setenv("ENVLOCK_NVML_LIBRARY", str(stub))
    monkeypatch.setenv("NVML_STUB_DRIVER", "580.65.06")
    monkeypatch.setenv("NVML_STUB_CUDA", "13000")
    monkeypatch.setenv("NVML_STUB_GPUS", "NVIDIA RTX PRO 6000 Blackwell:12.0")
    return monkeypatch


def env_with(ws, cuda_kit: CudaKit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A cu130 env: ``cu13`` (an index wheel whose library needs libcudart.so.13) and ``sgl-kernel`` (a
    local build for 12.0a only, as sgl-kernel with TORCH_CUDA_ARCH_LIST=12.0a), both in the store."""
    cu13 = build_wheel(tmp_path / "w", "cu13", "1.0", tag=TAG, files={
        "cu13/ops.so": cuda_kit.library("shared", [*gencode("sm_120a"), "-cudart", "shared"]).read_bytes()})
    sgl = build_wheel(ws.root / "wheelhouse", "sgl-kernel", "0.3.21", tag=TAG, files={
        "sgl_kernel/common_ops.so": cuda_kit.library("common_ops", gencode("sm_120a")).read_bytes()})
    lock = lock_for(None, "pypi", [], env="e", local=[(sgl, f"../wheelhouse/{sgl.name}")])
    cu13_pkg = LockedPackage(canonicalize_name("cu13"), "1.0",
                             (artifact(cu13, url=f"https://example.invalid/{cu13.name}"),))
    recorded = LockedBuild("sha256:" + "1" * 64, sgl.name, lock.packages[0].wheels[0].sha256)
    lock = replace(lock, packages=(cu13_pkg, *lock.packages), builds={"sgl-kernel": recorded})
    (ws.root / "locks" / "pylock.e.toml").write_text(lock.to_toml())
    store = Store.open()
    entry = store.path("wheels", cu13_pkg.wheels[0].sha256)
    entry.mkdir(parents=True)
    (entry / cu13.name).write_bytes(cu13.read_bytes())  # as a sync leaves it
    (ws.root / "envs" / "e.toml").write_text(
        '[env]\npython = "3.11"\n[indexes.pypi]\nurl = "https://example.invalid/simple"\ndefault = true\n'
        '[packages]\ncu13 = "==1.0"\nsgl-kernel = { build = "sgl-kernel" }\n'
        '[sources.sgl]\npath = "sgl"\n[builds.sgl-kernel]\nsource = "sgl"\nenv = { TORCH_CUDA_ARCH_LIST = "12.0a" }\n')


def test_a_good_machine_runs_the_env(ws, cli, machine: pytest.MonkeyPatch, cuda_kit: CudaKit,  # type: ignore[no-untyped-def]
                                     tmp_path: Path) -> None:
    env_with(ws, cuda_kit, tmp_path)
    shown = cli("doctor", "e")
    assert shown.code == 0, shown.out
    assert shown.out.splitlines() == [
        "machine: NVIDIA driver 580.65.06 (runs CUDA up to 13.0), 1 GPU",
        "  GPU 0: NVIDIA RTX PRO 6000 Blackwell (compute capability 12.0)",
        "env e: kernels in cu13, sgl-kernel; needs driver >= 580",
        "  build sgl-kernel: toolchain not in the store",
        "env e runs here",
    ]


def test_a_driver_too_old_for_cuda_13_is_named(ws, cli, machine: pytest.MonkeyPatch, cuda_kit: CudaKit,  # type: ignore[no-untyped-def]
                                              tmp_path: Path) -> None:
    env_with(ws, cuda_kit, tmp_path)
    machine.setenv("NVML_STUB_DRIVER", "575.57.08")
    machine.setenv("NVML_STUB_CUDA", "12090")
    shown = cli("doctor", "e", "--json")
    assert shown.code == 1
    report = json.loads(shown.out)
    assert report["problems"] == [{
        "package": "cu13", "file": "cu13/ops.so", "needs": "driver >= 580 (CUDA 13: needs libcudart.so.13)",
        "has": "driver 575.57.08 (CUDA 12.9)",
        "fix": "install an NVIDIA driver >= 580, or lock a build of cu13 for the CUDA 12.9 this driver runs "
               "(another nightly or index, e.g. a cu129 one)"}]


def test_a_gpu_the_build_has_no_kernel_for_is_named_with_the_rebuild_hint(  # type: ignore[no-untyped-def]
        ws, cli, machine: pytest.MonkeyPatch, cuda_kit: CudaKit, tmp_path: Path) -> None:
    env_with(ws, cuda_kit, tmp_path)
    machine.setenv("NVML_STUB_GPUS", "NVIDIA H100 80GB HBM3:9.0")
    shown = cli("doctor", "e")
    assert shown.code == 1
    assert shown.out.splitlines()[-3:] == [
        "2 problems:",
        "  cu13: cu13/ops.so: needs a GPU it has a kernel for (SASS sm_120a); this machine has GPU 0 NVIDIA H100 "
        "80GB HBM3 (compute capability 9.0); fix: another nightly or wheel of cu13 built for 9.0",
        "  sgl-kernel: sgl_kernel/common_ops.so: needs a GPU it has a kernel for (SASS sm_120a); this machine has "
        "GPU 0 NVIDIA H100 80GB HBM3 (compute capability 9.0); fix: rebuild with TORCH_CUDA_ARCH_LIST=\"12.0a;9.0\" "
        "([builds.sgl-kernel] env in e.toml)",
    ]


@pytest.mark.parametrize(("setting", "said"), [
    ({"ENVLOCK_NVML_LIBRARY": "/nonexistent/libnvidia-ml.so.1"},
     "machine: no NVIDIA driver: /nonexistent/libnvidia-ml.so.1 cannot be loaded"),
    ({"NVML_STUB_INIT": "9"}, "machine: no NVIDIA driver answers: nvmlInit failed: Driver Not Loaded"),
    ({"NVML_STUB_GPUS": ""}, "machine: NVIDIA driver 580.65.06 (runs CUDA up to 13.0), 0 GPUs"),
])
def test_no_driver_or_no_gpu_is_said_plainly(ws, cli, machine: pytest.MonkeyPatch, cuda_kit: CudaKit,  # type: ignore[no-untyped-def]
                                            tmp_path: Path, setting: dict[str, str], said: str) -> None:
    env_with(ws, cuda_kit, tmp_path)
    for key, value in setting.items():
        machine.setenv(key, value)
    shown = cli("doctor", "e")
    assert shown.code == 1
    assert shown.out.splitlines()[0].startswith(said)
    assert "needs a GPU (cu13, sgl-kernel carry GPU kernels)" in shown.out
    assert cli("doctor").code == 1  # the machine alone: nothing runs here either


def test_the_machine_alone(cli, machine: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    machine.setenv("NVML_STUB_GPUS", "NVIDIA H100:9.0,NVIDIA RTX PRO 6000:12.0")
    shown = cli("doctor", "--json")
    assert shown.code == 0
    assert json.loads(shown.out)["machine"] == {
        "library": os.environ["ENVLOCK_NVML_LIBRARY"], "driver": "580.65.06", "cuda": "13.0", "problem": "",
        "gpus": [{"index": 0, "name": "NVIDIA H100", "capability": "9.0"},
                 {"index": 1, "name": "NVIDIA RTX PRO 6000", "capability": "12.0"}]}
