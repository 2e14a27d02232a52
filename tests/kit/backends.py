"""Test set-up step: download the build backends the build tests need, once, into tests/.wheels/.

    python tests/kit/backends.py

The build tests run ``uv build`` against a loopback index (tests/kit/index.py) that
publishes this folder, so the test run itself never reaches PyPI. Run this again
after changing ``BACKENDS`` or ``TOOLCHAIN``; the folder is gitignored.

The CUDA tests' toolchain (``TOOLCHAIN``: NVIDIA's CUDA 13.0 wheels, cmake, ninja, and an
older nvcc to move to) goes into ``tests/.wheels/cuda/``, served by the CUDA tests alone
(tests/kit/cudalike.py): 176 MB, each wheel pinned, without its dependencies (the nvcc
wheel requires the others with no version).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WHEELS = Path(__file__).resolve().parents[1] / ".wheels"

# Build backends of the fixture projects (tests/kit/sglike.py, examples/mini-kernel) and
# their runtime dependencies; pip pulls the dependencies in.
BACKENDS = [
    "scikit-build-core>=0.10",
    "setuptools>=68",
    "wheel",
    "packaging",
    "pathspec",
]

CUDA_WHEELS = WHEELS / "cuda"
# One pip download each (two versions of nvcc cannot share one), --no-deps: every piece pinned.
TOOLCHAIN = [
    ["nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88",
     "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cccl==13.0.85", "cmake==3.31.10", "ninja==1.13.2"],
    ["nvidia-cuda-nvcc==13.0.48"],  # the toolchain move the tests make (resolved, never unpacked)
]

# Test tools from PyPI, not build backends: cuobjdump (a ~290 KB wheel holding one static binary) checks
# envlock's reading of CUDA binaries (tests/test_gpu_binaries.py). Platform-specific: where there is no
# wheel for this machine, the comparison is skipped with that reason.
TOOLS = ["nvidia-cuda-cuobjdump>=13.2.51"]


def _download(dest: Path, requirements: list[str], *options: str) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--only-binary", ":all:", "--python-version",
            f"{sys.version_info.major}.{sys.version_info.minor}", *options, "--dest", str(dest), *requirements]
    proc = subprocess.run(argv, check=False)
    if proc.returncode != 0:
        print(f"backends: pip download {' '.join(requirements)} failed (exit {proc.returncode})", file=sys.stderr)
    return proc.returncode


def main() -> int:
    if code := _download(WHEELS, BACKENDS):
        return code
    for group in TOOLCHAIN:
        if code := _download(CUDA_WHEELS, group, "--no-deps"):
            return code
    if _download(WHEELS, TOOLS, "--no-deps"):
        print(f"backends: {', '.join(TOOLS)}: no wheel for this machine (the tests that need it skip)",
              file=sys.stderr)
    for folder in (WHEELS, CUDA_WHEELS):
        names = sorted(p.name for p in folder.glob("*.whl"))
        print(f"backends: {len(names)} wheels in {folder}")
        for name in names:
            print(f"  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
