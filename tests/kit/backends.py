"""Test set-up step: download the build backends the build tests need, once, into tests/.wheels/.

    python tests/kit/backends.py

The build tests run ``uv build`` against a loopback index (tests/kit/index.py) that
publishes this folder, so the test run itself never reaches PyPI. Run this again
after changing ``BACKENDS``; the folder is gitignored.
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


# Test tools from PyPI, not build backends: cuobjdump (a ~290 KB wheel holding one static binary) checks
# envlock's reading of CUDA binaries (tests/test_gpu_binaries.py). Platform-specific: where there is no
# wheel for this machine, the comparison is skipped with that reason.
TOOLS = ["nvidia-cuda-cuobjdump>=13.2.51"]


def main() -> int:
    WHEELS.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary",
        ":all:",
        "--python-version",
        f"{sys.version_info.major}.{sys.version_info.minor}",
        "--dest",
        str(WHEELS),
        *BACKENDS,
    ]
    proc = subprocess.run(argv, check=False)
    if proc.returncode != 0:
        print(f"backends: pip download failed (exit {proc.returncode})", file=sys.stderr)
        return proc.returncode
    tools = subprocess.run([*argv[:argv.index("--python-version")], "--no-deps", "--dest", str(WHEELS), *TOOLS],
                           check=False)
    if tools.returncode != 0:
        print(f"backends: {', '.join(TOOLS)}: no wheel for this machine (the tests that need it skip)",
              file=sys.stderr)
    names = sorted(p.name for p in WHEELS.glob("*.whl"))
    print(f"backends: {len(names)} wheels in {WHEELS}")
    for name in names:
        print(f"  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
