"""A build's locked toolchain: unpacked once per digest into the store, read-only, tools located;
and the input digest's toolchain part (the wheels' hashes instead of the host's version lines)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import backend_wheels
from envlock import build, toolchain
from envlock.errors import BuildError
from envlock.spec import BuildSpec
from envlock.store import STORE_MTIME, Store
from kit.cudalike import OLDER_NVCC, TOOLCHAIN, toolchain_wheels
from kit.index import IndexServer
from kit.wheels import build_wheel


def _stored(store: Store, wheel: Path) -> Path:
    """``wheel`` put into the store as a fetch does (``wheels/<sha256>/<filename>``)."""
    from envlock.quick import file_sha256

    sha = file_sha256(str(wheel))
    assert sha is not None
    folder = store.path("wheels", sha)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel, folder / wheel.name)
    return folder / wheel.name


def _fake_cuda(dest: Path) -> list[Path]:
    """Small wheels laid out as NVIDIA's and ninja's are (a CUDA root ``nvidia/cu13``, a script in ``.data``)."""
    nvcc = build_wheel(dest, "nvidia-cuda-nvcc", "13.0.88", tag="py3-none-manylinux_2_17_x86_64",
                       requires=["nvidia-cuda-runtime"],
                       files={"nvidia/cu13/bin/nvcc": "#!/bin/sh\necho fake nvcc\n",
                              "nvidia/cu13/bin/nvcc.profile": "TOP = $(_HERE_)/..\n"})
    runtime = build_wheel(dest, "nvidia-cuda-runtime", "13.0.96", tag="py3-none-manylinux_2_17_x86_64",
                          files={"nvidia/cu13/lib/libcudart.so.13": "ELF", "nvidia/cu13/include/cuda.h": "//\n"})
    ninja = build_wheel(dest, "ninja", "1.13.2", tag="py3-none-manylinux_2_17_x86_64",
                        files={"ninja-1.13.2.data/scripts/ninja": "#!/bin/sh\necho 1.13.2\n", "ninja/__init__.py": ""})
    return [nvcc, runtime, ninja]


def test_a_toolchain_is_unpacked_once_read_only_with_its_tools_located(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    wheels = [_stored(store, w) for w in _fake_cuda(tmp_path / "wheels")]
    first = toolchain.unpacked(store, wheels, what="[builds.k]")
    assert first.unpacked
    assert first.tree == store.path("toolchains", toolchain.digest(wheels)) / "tree"
    assert dict(first.tools) == {"nvcc": "nvidia/cu13/bin/nvcc", "ninja": "bin/ninja"}
    assert (first.cuda, first.bin_dirs) == ("nvidia/cu13", ("bin", "nvidia/cu13/bin"))
    assert os.readlink(first.tree / "nvidia/cu13/lib64") == "lib"  # nvcc.profile links against lib64
    assert (first.tree / "nvidia/cu13/lib64/libcudart.so.13").read_text() == "ELF"
    assert os.access(first.tree / "bin/ninja", os.X_OK)
    assert not (first.tree / "nvidia/cu13/include/cuda.h").stat().st_mode & 0o222  # read-only
    assert not (first.tree / "nvidia/cu13").stat().st_mode & 0o222
    # One mtime for every file, whenever it was unpacked (ptxas writes a header's into a -lineinfo cubin).
    assert {p.lstat().st_mtime for p in [first.tree, *first.tree.rglob("*")]} == {STORE_MTIME}
    # Another build naming the same wheels (in any order) shares it: nothing unpacked again.
    again = toolchain.unpacked(store, list(reversed(wheels)), what="[builds.other]")
    assert not again.unpacked and again.tree == first.tree and again.tools == first.tools
    env = again.env("/usr/bin")
    root = str(first.tree / "nvidia/cu13")
    assert env["PATH"] == f"{first.tree / 'bin'}:{first.tree / 'nvidia/cu13/bin'}:/usr/bin"
    assert (env["CUDA_HOME"], env["CUDA_PATH"], env["CUDAToolkit_ROOT"]) == (root, root, root)
    assert env["CUDACXX"] == f"{root}/bin/nvcc"
    assert again.cmake_defines() == {"CMAKE_CUDA_COMPILER": f"{root}/bin/nvcc", "CUDAToolkit_ROOT": root}


def test_a_path_two_wheels_write_differently_is_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    a = build_wheel(tmp_path / "w", "tool-a", "1", files={"bin/tool": "a"})
    b = build_wheel(tmp_path / "w", "tool-b", "1", files={"bin/tool": "b"})
    with pytest.raises(BuildError) as err:
        toolchain.unpacked(store, [_stored(store, a), _stored(store, b)], what="[builds.k]")
    assert err.value.message == ("[builds.k]: toolchain wheels tool_a-1-py3-none-any.whl and tool_b-1-py3-none-any.whl "
                                 "both hold bin/tool, with other bytes: one toolchain cannot hold both")
    assert not store.has("toolchains", toolchain.digest([_stored(store, a), _stored(store, b)]))


def test_a_member_that_climbs_out_is_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "home")
    bad = build_wheel(tmp_path / "w", "evil", "1", files={"../../outside": "x"})
    with pytest.raises(BuildError) as err:
        toolchain.unpacked(store, [_stored(store, bad)], what="[builds.k]")
    assert err.value.message == ("[builds.k]: toolchain wheel evil-1-py3-none-any.whl: member '../../outside' would "
                                 "land outside the toolchain's folder; refused")
    assert not (tmp_path / "outside").exists()


def test_a_dependency_the_toolchain_does_not_name_is_refused() -> None:
    lines = ("nvidia-cuda-nvcc==13.0.88 --hash=sha256:aa", "nvidia-nvvm==13.5.1 --hash=sha256:bb")
    with pytest.raises(BuildError) as err:
        toolchain.resolve(["nvidia-cuda-nvcc==13.0.88"], "[builds.k]", lambda reqs: lines)
    assert err.value.message == ("[builds.k]: toolchain: nvidia-nvvm==13.5.1 came in unnamed (a dependency of a "
                                 "toolchain wheel, which names no version); name each with == in toolchain = [...]")
    assert toolchain.resolve(["nvidia-cuda-nvcc==13.0.88", "nvidia_nvvm"], "[builds.k]", lambda reqs: lines) == lines
    assert toolchain.provided(lines) == {"nvcc"}


@pytest.fixture(scope="module")
def cuda_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    wheels = toolchain_wheels()
    if wheels is None:
        pytest.skip("tests/.wheels/cuda/ lacks the CUDA toolchain wheels: run `python tests/kit/backends.py`")
    server = IndexServer(tmp_path_factory.mktemp("cuda-index"))
    server.add_dir("pypi", backend_wheels())
    server.add_dir("pypi", wheels)
    server.start()
    yield server
    server.stop()


def test_the_input_digest_holds_the_toolchain_wheels_not_the_host_tools(
    tmp_path: Path, cuda_index: IndexServer
) -> None:
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=61"]\n'
                                         'build-backend = "setuptools.build_meta"\n')
    store = Store.open(tmp_path / "home")

    def plan(tools: tuple[str, ...]) -> build.BuildPlan:
        spec = BuildSpec(name="k", source="k", toolchain=tools)
        return build.plan(build.BuildRequest(spec, tree, 315532800, "3.11", index_url=cuda_index.url("pypi")), store)

    none, ours = plan(()), plan(TOOLCHAIN)
    assert "toolchain-wheels" not in none.recipe and set(none.recipe["toolchain"]) == {"cc", "c++", "cmake",
                                                                                         "nvcc", "uv"}
    assert set(ours.recipe["toolchain"]) == {"cc", "c++", "ld", "uv"}  # nvcc and cmake: the wheels' hashes
    assert [line.split()[0] for line in ours.recipe["toolchain-wheels"]] == [
        "cmake==3.31.10", "ninja==1.13.2", "nvidia-cuda-cccl==13.0.85", "nvidia-cuda-crt==13.0.88",
        "nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-runtime==13.0.96", "nvidia-nvvm==13.0.88"]
    assert ours.toolchain == tuple(ours.recipe["toolchain-wheels"])
    older = plan(tuple(OLDER_NVCC if t.startswith("nvidia-cuda-nvcc") else t for t in TOOLCHAIN))
    assert len({none.input_digest, ours.input_digest, older.input_digest}) == 3
    assert [line.split()[0] for line in older.toolchain if "nvcc" in line] == ["nvidia-cuda-nvcc==13.0.48"]
    # Planned from the lock's lines (a frozen rebuild): the same digest, no resolution.
    spec = BuildSpec(name="k", source="k", toolchain=TOOLCHAIN)
    request = build.BuildRequest(spec, tree, 315532800, "3.11", index_url=None, locked_toolchain=ours.toolchain,
                                 locked_requirements=ours.build_requirements)
    frozen = build.plan(request, store)
    assert frozen.input_digest == ours.input_digest
