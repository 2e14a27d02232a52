"""The environment a build runs in: the nvcc launcher's path map, the compilers' variables, the
fixed build path (a private mount namespace) and what is said when there is none."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from envlock.build import buildenv
from envlock.model.spec import BuildSpec
from envlock.store.store import STORE_MTIME

EPOCH = 1700000000  # a build's SOURCE_DATE_EPOCH


def _echo_nvcc(where: Path) -> Path:
    """A stand-in for nvcc that prints its arguments, one a line."""
    where.mkdir(parents=True, exist_ok=True)
    nvcc = where / "nvcc"
    nvcc.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    nvcc.chmod(0o755)
    return nvcc


@pytest.mark.parametrize(("source", "mapped"), [
    ("/scratch/x/src/csrc/kernels.cu", "/envlock/build/src/csrc/kernels.cu"),
    ("/scratch/x/.envlock/fetchcontent/repo-k/k.cu", "/envlock/fetchcontent/repo-k/k.cu"),  # the longer prefix
    ("/elsewhere/k.cu", "/elsewhere/k.cu"),  # outside every mapped folder: as it is
    ("/scratch/xy/k.cu", "/scratch/xy/k.cu"),  # a prefix of the name, not of the path
], ids=["scratch", "fetchcontent", "unmapped", "not-a-folder-prefix"])
def test_the_launcher_adds_the_mapped_source_path(tmp_path: Path, source: str, mapped: str) -> None:
    paths = buildenv.prepare(tmp_path / "scratch", {}, None, epoch=EPOCH)
    nvcc = _echo_nvcc(tmp_path / "bin")
    env = {**os.environ, "ENVLOCK_PATH_MAP": "/scratch/x\t/envlock/build\n"
           "/scratch/x/.envlock/fetchcontent/repo-k\t/envlock/fetchcontent/repo-k\n"}
    assert paths.real_scratch is not None
    out = subprocess.run([paths.real_scratch / ".envlock" / "nvcc-launcher", nvcc, "-x", "cu", "-c", source, "-o",
                          "k.o"], env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["-x", "cu", "-c", source, "-o", "k.o", "-Xcudafe", f"--orig_src_path_name={mapped}"]


def test_the_launcher_leaves_a_link_step_alone(tmp_path: Path) -> None:
    paths = buildenv.prepare(tmp_path / "scratch", {}, None, epoch=EPOCH)
    nvcc = _echo_nvcc(tmp_path / "bin")
    assert paths.real_scratch is not None
    out = subprocess.run([paths.real_scratch / ".envlock" / "nvcc-launcher", nvcc, "-dlink", "a.o", "-o", "d.o"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["-dlink", "a.o", "-o", "d.o"]


def test_the_compilers_map_every_folder_the_build_reads(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    fc = tmp_path / "store" / "sources" / "git-1" / "tree"
    tools = tmp_path / "store" / "toolchains" / "d" / "tree"
    paths = buildenv.BuildPaths(scratch, {"repo-k": fc}, tools)
    nvcc = str(_echo_nvcc(tmp_path / "bin"))  # takes any flag: --objdir-as-tempdir is set
    env = buildenv.compiler_env({"CFLAGS": "-O2", "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache"}, paths, venv=True,
                                nvcc=nvcc)
    maps = [f"{scratch}=/envlock/build", f"{fc}=/envlock/fetchcontent/repo-k", f"{tools}=/envlock/toolchain",
            f"{scratch}/venv=/envlock/build-env"]
    assert env["CFLAGS"] == "-O2 " + " ".join(f"-ffile-prefix-map={m}" for m in maps)
    assert env["CUDAFLAGS"] == " ".join(f"-Xcompiler=-ffile-prefix-map={m}" for m in maps)
    assert env["ENVLOCK_PATH_MAP"] == "".join(m.replace("=", "\t", 1) + "\n" for m in maps)
    assert env["CMAKE_CUDA_COMPILER_LAUNCHER"] == f"{scratch}/.envlock/nvcc-launcher;ccache"  # ours runs theirs
    assert env["NVCC_APPEND_FLAGS"] == "--objdir-as-tempdir"
    old = tmp_path / "old"
    old.mkdir()
    (old / "nvcc").write_text("#!/bin/sh\necho 'nvcc fatal: Unknown option' >&2\nexit 1\n")
    (old / "nvcc").chmod(0o755)
    assert "NVCC_APPEND_FLAGS" not in buildenv.compiler_env({}, paths, venv=False, nvcc=str(old / "nvcc"))


def test_a_build_in_a_private_mount_namespace_sees_one_fixed_path(tmp_path: Path) -> None:
    fc = tmp_path / "store" / "fc"
    fc.mkdir(parents=True)
    (fc / "dep.h").write_text("#define DEP 1\n")
    paths = buildenv.prepare(tmp_path / "scratch", {"repo-k": fc}, None, epoch=EPOCH)
    if paths.unfixed is not None:
        pytest.skip(f"this machine makes no private mount namespace: {paths.unfixed}")
    assert paths.scratch == buildenv.FIXED
    assert paths.fetchcontent == {"repo-k": buildenv.FIXED / ".envlock/fetchcontent/repo-k"}
    (tmp_path / "scratch" / "src").mkdir()
    seen = subprocess.run([*paths.wrap(), "sh", "-c", 'pwd; cat .envlock/fetchcontent/repo-k/dep.h; ls'],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert seen == [str(buildenv.FIXED), "#define DEP 1", "src"]
    assert not list(buildenv.FIXED.iterdir())  # outside the namespace it stays an empty folder


def test_without_a_namespace_the_build_runs_where_it_is_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (fake / "unshare").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    paths = buildenv.prepare(tmp_path / "scratch", {}, None, epoch=EPOCH)
    assert (paths.scratch, paths.wrap()) == (tmp_path / "scratch", [])
    assert paths.unfixed == ("the kernel did not let `unshare` make a private mount namespace (unshare: unshare "
                             "failed: Operation not permitted)")


def test_the_toolchain_comes_first_and_cmake_is_told(tmp_path: Path) -> None:
    from envlock.build.toolchain import Toolchain

    tools = Toolchain("d", tmp_path / "tc", {"nvcc": "nvidia/cu13/bin/nvcc", "cmake": "cmake/data/bin/cmake"},
                      "nvidia/cu13", ("cmake/data/bin", "nvidia/cu13/bin"))
    paths = buildenv.BuildPaths(tmp_path / "scratch", {}, tmp_path / "seen-tc")
    spec = BuildSpec(name="k", source="k", env={"CUDA_HOME": "/usr/local/cuda"})
    env = buildenv.build_env(spec, 315532800, paths, tools, backend_is_skbuild=False)
    seen = tmp_path / "seen-tc"
    assert env["PATH"].split(os.pathsep)[:2] == [str(seen / "cmake/data/bin"), str(seen / "nvidia/cu13/bin")]
    assert env["CUDA_HOME"] == env["CUDAToolkit_ROOT"] == str(seen / "nvidia/cu13")  # never the host's
    assert env["CMAKE_ARGS"] == (f"-DCMAKE_CUDA_COMPILER={seen}/nvidia/cu13/bin/nvcc "
                                 f"-DCUDAToolkit_ROOT={seen}/nvidia/cu13")
    settings = buildenv.config_settings(spec, paths, tools, backend_is_skbuild=True)
    assert f"cmake.define.CMAKE_CUDA_COMPILER={seen}/nvidia/cu13/bin/nvcc" in settings


def test_what_a_build_reads_gets_fixed_mtimes_links_not_followed(tmp_path: Path) -> None:
    """ptxas writes each source file's mtime into a -lineinfo cubin: a checkout made at another moment
    (another ENVLOCK_HOME) must not build other bytes."""
    scratch, fc, outside = tmp_path / "scratch", tmp_path / "store" / "fc", tmp_path / "outside.h"
    (scratch / "src" / "csrc").mkdir(parents=True)
    (scratch / "src" / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    (fc / "include").mkdir(parents=True)
    (fc / "include" / "dep.cuh").write_text("#define DEP 1\n")
    outside.write_text("// not the build's\n")
    (fc / "include" / "out.h").symlink_to(outside)
    os.utime(outside, (1234, 1234))
    buildenv.prepare(scratch, {"repo-k": fc}, None, epoch=EPOCH)
    assert {p.lstat().st_mtime for p in [scratch, *scratch.rglob("*")]} == {EPOCH}
    assert {p.lstat().st_mtime for p in [fc, *fc.rglob("*")]} == {STORE_MTIME}
    assert outside.stat().st_mtime == 1234  # the link's own mtime was set, not its target's
    # An entry already settled is not written again.
    before = {p: p.lstat().st_ctime_ns for p in fc.rglob("*")}
    buildenv.prepare(tmp_path / "scratch2", {"repo-k": fc}, None, epoch=EPOCH)
    assert {p: p.lstat().st_ctime_ns for p in fc.rglob("*")} == before
