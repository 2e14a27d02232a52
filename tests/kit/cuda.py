"""Real CUDA artifacts for the GPU tests: shared objects compiled by nvcc with chosen ``-gencode``s,
cuobjdump from its PyPI wheel, and a stub ``libnvidia-ml.so`` compiled from C.

``nvcc_path`` is the one place the tests find nvcc: ``$ENVLOCK_TEST_NVCC``, else a locked CUDA
toolchain unpacked under ``tests/.cuda/bin/nvcc`` (the CUDA-builds work installs it from PyPI wheels),
else ``nvcc`` on PATH (this machine's ``/usr/local/bin/nvcc``, CUDA 13.0). ``cuobjdump_path`` takes
``cuobjdump`` out of the ``nvidia-cuda-cuobjdump`` wheel ``tests/kit/backends.py`` downloads into
``tests/.wheels``. Compiled objects are kept per test session (``CudaKit``): a suite compiles each once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import zipfile
from collections.abc import Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
LOCKED_NVCC = TESTS / ".cuda" / "bin" / "nvcc"
WHEELS = TESTS / ".wheels"

KERNEL_SOURCE = """\
__global__ void add(float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}
extern "C" void launch(float* a, const float* b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }
"""

NVML_STUB = r"""
/* The NVML entry points envlock doctor calls, answering from environment variables:
   NVML_STUB_INIT (an NVML error code nvmlInit returns; default 0), NVML_STUB_DRIVER ("580.65.06"),
   NVML_STUB_CUDA (13000), NVML_STUB_GPUS ("NVIDIA H100:9.0,NVIDIA RTX PRO 6000:12.0"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int index; } device_t;
static device_t devices[16];

static const char *var(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v ? v : fallback;
}

/* The idx-th "NAME:MAJOR.MINOR" of NVML_STUB_GPUS, into name/major/minor; 0 when there is none. */
static int gpu(unsigned idx, char *name, unsigned len, int *major, int *minor) {
    char all[1024];
    strncpy(all, var("NVML_STUB_GPUS", ""), sizeof all - 1);
    all[sizeof all - 1] = 0;
    unsigned i = 0;
    for (char *save = NULL, *item = strtok_r(all, ",", &save); item; item = strtok_r(NULL, ",", &save), i++) {
        if (i != idx) continue;
        char *colon = strrchr(item, ':');
        if (!colon) return 0;
        *colon = 0;
        if (name) { strncpy(name, item, len - 1); name[len - 1] = 0; }
        if (major && minor && sscanf(colon + 1, "%d.%d", major, minor) != 2) return 0;
        return 1;
    }
    return 0;
}

int nvmlInit_v2(void) { return atoi(var("NVML_STUB_INIT", "0")); }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int code) { return code == 9 ? "Driver Not Loaded" : "Unknown Error"; }
int nvmlSystemGetDriverVersion(char *version, unsigned len) {
    strncpy(version, var("NVML_STUB_DRIVER", "580.65.06"), len - 1); version[len - 1] = 0; return 0;
}
int nvmlSystemGetCudaDriverVersion_v2(int *cuda) { *cuda = atoi(var("NVML_STUB_CUDA", "13000")); return 0; }
int nvmlDeviceGetCount_v2(unsigned *count) {
    unsigned n = 0; while (n < 16 && gpu(n, NULL, 0, NULL, NULL)) n++; *count = n; return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned idx, device_t **handle) {
    if (idx >= 16 || !gpu(idx, NULL, 0, NULL, NULL)) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    devices[idx].index = idx; *handle = &devices[idx]; return 0;
}
int nvmlDeviceGetName(device_t *dev, char *name, unsigned len) {
    return gpu(dev->index, name, len, NULL, NULL) ? 0 : 2;
}
int nvmlDeviceGetCudaComputeCapability(device_t *dev, int *major, int *minor) {
    char name[96]; return gpu(dev->index, name, sizeof name, major, minor) ? 0 : 2;
}
"""


def nvcc_path() -> Path | None:
    """The nvcc the tests compile with (see the module docstring), or None."""
    given = os.environ.get("ENVLOCK_TEST_NVCC")
    if given:
        return Path(given)
    if LOCKED_NVCC.is_file():
        return LOCKED_NVCC
    found = shutil.which("nvcc")
    return Path(found) if found else None


def cuobjdump_path(dest: Path) -> Path | None:
    """``cuobjdump`` unpacked from the ``nvidia-cuda-cuobjdump`` wheel in tests/.wheels into ``dest``, or None."""
    wheels = sorted(WHEELS.glob("nvidia_cuda_cuobjdump-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[-1]) as zf:
        member = next((n for n in zf.namelist() if n.endswith("/bin/cuobjdump")), None)
        if member is None:
            return None
        target = dest / "cuobjdump"
        target.write_bytes(zf.read(member))
    target.chmod(target.stat().st_mode | stat.S_IXUSR)
    return target


class CudaKit:
    """nvcc builds of ``KERNEL_SOURCE`` for one test session, each kept under ``root`` by its flags."""

    def __init__(self, root: Path, nvcc: Path) -> None:
        self.root, self.nvcc = root, nvcc
        root.mkdir(parents=True, exist_ok=True)
        (root / "kernel.cu").write_text(KERNEL_SOURCE)

    def library(self, name: str, flags: Sequence[str]) -> Path:
        """``<name>.so``: ``nvcc -shared`` of the kernel with ``flags`` (``-gencode``s, ``--compress-mode``,
        ``-cudart shared``), compiled once per session."""
        key = hashlib.sha256("\0".join([name, *flags]).encode()).hexdigest()[:16]
        out = self.root / key / f"{name}.so"
        if not out.exists():
            out.parent.mkdir(exist_ok=True)
            subprocess.run([str(self.nvcc), "-shared", "-Xcompiler", "-fPIC", *flags, "-o", str(out),
                            str(self.root / "kernel.cu")], check=True, capture_output=True)
        return out

    def fatbin(self, arch: str) -> Path:
        """``nvcc -fatbin`` of the kernel for ``arch``: a fatbin file (one container), as a library that loads
        its own kernels keeps them among its data (cuFFT, in ``.ldata``)."""
        out = self.root / f"kernel.{arch}.fatbin"
        if not out.exists():
            subprocess.run([str(self.nvcc), "-fatbin", *gencode(arch), "-o", str(out), str(self.root / "kernel.cu")],
                           check=True, capture_output=True)
        return out

    def cubin(self, arch: str) -> Path:
        out = self.root / f"kernel.{arch}.cubin"
        if not out.exists():
            subprocess.run([str(self.nvcc), "-cubin", f"-arch={arch}", "-o", str(out), str(self.root / "kernel.cu")],
                           check=True, capture_output=True)
        return out


def gencode(arch: str, code: str | None = None) -> list[str]:
    """``-gencode arch=compute_X,code=sm_X``: ``arch`` ``sm_120a`` gives SASS, ``compute_120a`` PTX."""
    variant = arch.split("_", 1)[1]
    return ["-gencode", f"arch=compute_{variant},code={code or arch}"]


def nvml_stub(dest: Path) -> Path:
    """``libnvidia-ml.so`` compiled from ``NVML_STUB`` with the host's C compiler."""
    source = dest / "nvml_stub.c"
    source.write_text(NVML_STUB)
    out = dest / "libnvidia-ml.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(out), str(source)], check=True, capture_output=True)
    return out
