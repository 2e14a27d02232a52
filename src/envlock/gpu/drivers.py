"""The driver a CUDA major needs, and the CUDA majors a binary needs.

From NVIDIA's CUDA Compatibility guide, "Minor Version Compatibility"
(https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html): from CUDA 11
on, an application built with any toolkit of one major runs on a driver of at least that major's
minimum (Linux): CUDA 13.x needs R580 or newer, 12.x 525.60.13 or newer (the guide's table says
">= 525"; the CUDA 12.0 release notes give 525.60.13), 11.x 450.80.02 or newer (">= 450"; 11.0 shipped
with 450.36.06, and minor version compatibility across 11.x starts at 450.80.02). A newer driver
runs every older major (backward compatibility).

A binary says which CUDA major it needs by the runtime library it loads (``DT_NEEDED``:
``libcudart.so.13``; also ``libnvrtc``, ``libcublas``, ``libcublasLt`` and ``libnvJitLink``, whose
majors follow CUDA's) or is (its ``DT_SONAME``), and by the PTX ISA of its PTX, which a driver
compiles only if it knows that ISA (PTX ISA 9.x came with CUDA 13, 8.x with 12, 7.x with 11). A
binary that links the runtime statically and carries only SASS says nothing here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from envlock.gpu.elf import ElfFile

#: CUDA major -> the oldest Linux driver that runs it (see the module docstring for the source).
MIN_DRIVER = {13: "580", 12: "525.60.13", 11: "450.80.02"}
#: PTX ISA major -> the CUDA major that introduced it.
PTX_CUDA = {9: 13, 8: 12, 7: 11}
_RUNTIME = re.compile(r"lib(cudart|nvrtc|cublas|cublasLt|nvJitLink)\.so\.(\d+)")


@dataclass(frozen=True, order=True)
class Need:
    """A CUDA major one file needs, and why."""

    major: int
    path: str
    why: str  # "needs libcudart.so.13", "is libcudart.so.13", "PTX ISA 9.0"

    @property
    def driver(self) -> str | None:
        return MIN_DRIVER.get(self.major)


def needs(file: ElfFile) -> list[Need]:
    """The CUDA majors ``file`` needs (its runtime libraries, its PTX ISA), one reason each."""
    found: dict[int, str] = {}
    for name in file.needed:
        if m := _RUNTIME.fullmatch(name):
            found.setdefault(int(m.group(2)), f"needs {name}")
    if m := _RUNTIME.fullmatch(file.soname):
        found.setdefault(int(m.group(2)), f"is {file.soname}")
    for k in file.kernels:
        major = int(k.ptx.split(".")[0]) if k.ptx else 0
        if major in PTX_CUDA:
            found.setdefault(PTX_CUDA[major], f"PTX ISA {k.ptx}")
    return [Need(major, file.path, why) for major, why in sorted(found.items())]


def version_key(version: str) -> tuple[int, ...]:
    """``575.57.08`` -> (575, 57, 8), for comparing driver versions."""
    return tuple(int(p) for p in re.findall(r"\d+", version))


def older(driver: str, minimum: str) -> bool:
    """Whether driver ``driver`` is older than ``minimum`` (``"580"`` is R580's first release)."""
    return version_key(driver) < version_key(minimum)


def min_driver(majors: Iterable[int]) -> str | None:
    """The driver the newest of ``majors`` needs (None: none known)."""
    known = [m for m in majors if m in MIN_DRIVER]
    return MIN_DRIVER[max(known)] if known else None


def cuda_of(version: int) -> str:
    """NVML's CUDA driver version (13000) as people write it: ``13.0``."""
    return f"{version // 1000}.{version % 1000 // 10}"
