"""A CUDA project shaped like sgl-kernel, made of our own tiny files, and the toolchain that compiles it.

    cudalike/          a git repository: scikit-build-core + CMake, ``LANGUAGES CXX CUDA``, the
                       arch list read from ``TORCH_CUDA_ARCH_LIST`` (``9.0a;12.0a`` -> 90a;120a),
                       kernels in an anonymous namespace (cudafe++ hashes the source path into
                       their names), a separately compiled (``-rdc``) pair in a static library
                       with its own device link (``__fatbinwrap_<module id>``), and a Python
                       module ``cudalike_kernel._cuda`` (CPython API) that launches nothing
                       (no GPU is needed to build or import it)
    kcuda/             the FetchContent input, a git repository holding one ``.cu`` file, declared
                       from a URL that does not exist (envlock must hand CMake its checkout)

The toolchain is NVIDIA's CUDA 13.0 wheels with cmake and ninja (``tests/kit/backends.py``
downloads them into ``tests/.wheels/cuda/``); ``TOOLCHAIN`` names them as a spec does.
``cmake.version = ">=3.26"``, as sgl-kernel needs: the host's CMake 3.25 (Debian's) cannot build it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.backends import CUDA_WHEELS
from kit.index import IndexServer
from kit.sglike import commit_all, init_repo, write
from kit.universe import backend_wheels

#: The spec's ``toolchain = [...]`` (each piece pinned: the nvcc wheel requires the others with no version).
TOOLCHAIN = ("nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88",
             "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cccl==13.0.85", "cmake>=3.26", "ninja")
#: The older nvcc a toolchain move goes to (its wheel is in tests/.wheels/cuda/ too).
OLDER_NVCC = "nvidia-cuda-nvcc==13.0.48"
ARCH_LIST = "9.0a;12.0a"
KCUDA_NAME = "repo-kcuda"

PYPROJECT = """\
[build-system]
requires = ["scikit-build-core>=0.10"]
build-backend = "scikit_build_core.build"

[project]
name = "cudalike-kernel"
version = "0.1.0"
requires-python = ">=3.10"

[tool.scikit-build]
minimum-version = "0.10"
cmake.version = ">=3.26"
cmake.build-type = "Release"
wheel.packages = ["python/cudalike_kernel"]
"""

CMAKE = """\
cmake_minimum_required(VERSION 3.26)
project(cudalike_kernel LANGUAGES CXX CUDA)

find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)

# As sgl-kernel does: the arch list from TORCH_CUDA_ARCH_LIST ("9.0a;12.0a" -> 90a;120a).
set(arch_list "$ENV{TORCH_CUDA_ARCH_LIST}")
if(NOT arch_list)
    message(FATAL_ERROR "TORCH_CUDA_ARCH_LIST is not set")
endif()
set(archs "")
foreach(arch IN LISTS arch_list)
    string(REPLACE "." "" arch "${arch}")
    list(APPEND archs "${arch}")
endforeach()
set(CMAKE_CUDA_ARCHITECTURES ${archs})

# A .cu file from a FetchContent input. The URL does not exist: the build works only when
# the caller supplies FETCHCONTENT_SOURCE_DIR_REPO-KCUDA.
include(FetchContent)
FetchContent_Declare(
    repo-kcuda
    GIT_REPOSITORY https://invalid.invalid/kcuda.git
    GIT_TAG        @KCUDA_COMMIT@
)
FetchContent_MakeAvailable(repo-kcuda)

# A separately compiled pair: a kernel calls a __device__ function of another file (-rdc),
# device-linked within the static library.
add_library(cudalike_rdc STATIC csrc/rdc_twice.cu csrc/rdc_kernel.cu)
set_target_properties(cudalike_rdc PROPERTIES CUDA_SEPARABLE_COMPILATION ON POSITION_INDEPENDENT_CODE ON
                      CUDA_RESOLVE_DEVICE_SYMBOLS ON)

python_add_library(_cuda MODULE WITH_SOABI csrc/module.cpp csrc/kernels.cu "${repo-kcuda_SOURCE_DIR}/kcuda.cu")
string(REPLACE ";" "," arches_text "${archs}")
target_compile_definitions(_cuda PRIVATE CUDALIKE_ARCHES="${arches_text}")
target_link_libraries(_cuda PRIVATE cudalike_rdc)
install(TARGETS _cuda DESTINATION cudalike_kernel)
"""

KERNELS_CU = """\
#include <cuda_runtime.h>

namespace {  // internal linkage: cudafe++ names it after a hash of this file's path

__global__ void scale_kernel(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] *= a;
    }
}

}  // namespace

int cudalike_scale(float *x, float a, int n) {
    scale_kernel<<<(n + 255) / 256, 256>>>(x, a, n);
    return static_cast<int>(cudaGetLastError());
}
"""

RDC_TWICE_CU = """\
__device__ float cudalike_twice(float v) { return 2.0f * v; }
"""

RDC_KERNEL_CU = """\
#include <cuda_runtime.h>

extern __device__ float cudalike_twice(float v);

namespace {

__global__ void twice_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = cudalike_twice(x[i]);
    }
}

}  // namespace

int cudalike_twice_all(float *x, int n) {
    twice_kernel<<<(n + 255) / 256, 256>>>(x, n);
    return static_cast<int>(cudaGetLastError());
}
"""

MODULE_CPP = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>

int cudalike_scale(float *x, float a, int n);
int cudalike_twice_all(float *x, int n);
int kcuda_add_one(float *x, int n);

static PyObject *arches(PyObject *self, PyObject *args) { return PyUnicode_FromString(CUDALIKE_ARCHES); }

static PyObject *launchers(PyObject *self, PyObject *args) {
    // Their addresses, so that the linker keeps them; nothing is launched (no GPU here).
    return Py_BuildValue("(KKK)", (unsigned long long)&cudalike_scale, (unsigned long long)&cudalike_twice_all,
                         (unsigned long long)&kcuda_add_one);
}

static PyMethodDef methods[] = {
    {"arches", arches, METH_NOARGS, "the CUDA architectures compiled for"},
    {"launchers", launchers, METH_NOARGS, "addresses of the host launchers"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cuda", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cuda(void) { return PyModule_Create(&module); }
"""

INIT_PY = """\
from cudalike_kernel._cuda import arches, launchers

__all__ = ["arches", "launchers"]
"""

KCUDA_CU = """\
#include <cuda_runtime.h>

namespace {

__global__ void add_one_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] += 1.0f;
    }
}

}  // namespace

int kcuda_add_one(float *x, int n) {
    add_one_kernel<<<(n + 255) / 256, 256>>>(x, n);
    return static_cast<int>(cudaGetLastError());
}
"""


@dataclass(frozen=True)
class CudaLike:
    url: str  # file:// URL of the kernel's repository
    commit: str
    kcuda_url: str
    kcuda_commit: str


def make_cudalike(root: Path) -> CudaLike:
    """Create the two repositories under ``root``."""
    kcuda = root / "kcuda"
    init_repo(kcuda)
    write(kcuda, {"kcuda.cu": KCUDA_CU})
    kcuda_commit = commit_all(kcuda, "kcuda: one kernel")
    repo = root / "cudalike"
    init_repo(repo)
    write(repo, {
        "pyproject.toml": PYPROJECT,
        "CMakeLists.txt": CMAKE.replace("@KCUDA_COMMIT@", kcuda_commit),
        "csrc/kernels.cu": KERNELS_CU,
        "csrc/rdc_twice.cu": RDC_TWICE_CU,
        "csrc/rdc_kernel.cu": RDC_KERNEL_CU,
        "csrc/module.cpp": MODULE_CPP,
        "python/cudalike_kernel/__init__.py": INIT_PY,
    })
    commit = commit_all(repo, "cudalike: pinned commit")
    return CudaLike(repo.as_uri(), commit, kcuda.as_uri(), kcuda_commit)


def toolchain_wheels() -> Path | None:
    """tests/.wheels/cuda/ when it holds the toolchain (``tests/kit/backends.py`` downloads it), else None."""
    wanted = ("nvidia_cuda_nvcc-13.0.88-", "nvidia_cuda_nvcc-13.0.48-", "nvidia_nvvm-13.0.88-",
              "nvidia_cuda_crt-13.0.88-", "nvidia_cuda_runtime-13.0.96-", "nvidia_cuda_cccl-13.0.85-", "cmake-",
              "ninja-")
    found = [p.name for p in CUDA_WHEELS.glob("*.whl")] if CUDA_WHEELS.is_dir() else []
    return CUDA_WHEELS if all(any(n.startswith(w) for n in found) for w in wanted) else None


def serve_cuda_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """A loopback index of the build backends and the CUDA toolchain wheels (a module fixture's body);
    the test is skipped when tests/.wheels/cuda/ lacks the toolchain."""
    wheels = toolchain_wheels()
    if wheels is None:
        pytest.skip("tests/.wheels/cuda/ lacks the CUDA toolchain wheels: run `python tests/kit/backends.py` "
                    "(it downloads them from PyPI)")
    server = IndexServer(tmp_path_factory.mktemp("cuda-index"))
    server.add_dir("pypi", backend_wheels())
    server.add_dir("pypi", wheels)
    server.start()
    yield server
    server.stop()


def spec(kernel: CudaLike, index_url: str, *, toolchain: tuple[str, ...] = TOOLCHAIN,
         env: dict[str, str] | None = None, config: dict[str, str] | None = None) -> str:
    """An env spec whose one package is the CUDA kernel, built with ``toolchain``."""
    env = {"TORCH_CUDA_ARCH_LIST": ARCH_LIST, **(env or {})}
    envs = ", ".join(f'{k} = "{v}"' for k, v in env.items())
    settings = ", ".join(f'"{k}" = "{v}"' for k, v in (config or {}).items())
    tools = ", ".join(f'"{t}"' for t in toolchain)
    return f"""\
[env]
python = "3.11"

[indexes.pypi]
url = "{index_url}"
default = true

[packages]
cudalike-kernel = {{ build = "cudalike-kernel" }}

[sources.cudalike]
git = "{kernel.url}"
rev = "{kernel.commit}"

[builds.cudalike-kernel]
source = "cudalike"
env = {{ {envs} }}
config-settings = {{ {settings} }}
toolchain = [{tools}]

[builds.cudalike-kernel.fetchcontent]
{KCUDA_NAME} = {{ git = "{kernel.kcuda_url}", rev = "{kernel.kcuda_commit}" }}
"""
