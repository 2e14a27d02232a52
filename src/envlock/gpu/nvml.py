"""This machine's NVIDIA driver and GPUs, asked through NVML (``libnvidia-ml.so.1``, the driver's
management library) with ctypes: no Python package, no CUDA toolkit.

The library is found as ``nvidia-ml-py`` (pynvml) finds it on Linux: ``dlopen("libnvidia-ml.so.1")``,
the dynamic loader's search (the driver installs it there); ``ENVLOCK_NVML_LIBRARY`` names another
file. No library, or a library that finds no driver, is an answer too (``Host.problem``): a CPU
machine is a normal place to build an env for a GPU fleet.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from typing import Any

from envlock.gpu.coverage import Gpu
from envlock.gpu.drivers import cuda_of
from envlock.model.jsondoc import json_doc

LIBRARY = "libnvidia-ml.so.1"
LIBRARY_VARIABLE = "ENVLOCK_NVML_LIBRARY"
_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80


@dataclass(frozen=True)
class Device:
    """A GPU NVML reports: its index, its name and its compute capability."""

    index: int
    name: str
    gpu: Gpu  # its compute capability

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, omit=("gpu",), extra={"capability": self.gpu.capability})


@dataclass(frozen=True)
class Host:
    """What NVML says of this machine (``problem``: why it said nothing)."""

    library: str
    driver: str | None = None  # "580.65.06"
    cuda: str | None = None  # the newest CUDA the driver runs, "13.0"
    devices: tuple[Device, ...] = field(default_factory=tuple)
    problem: str = ""

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"devices": "gpus"})


class _NvmlError(Exception):
    pass


def probe(library: str | None = None) -> Host:
    """Ask NVML (``library``, else ``$ENVLOCK_NVML_LIBRARY``, else ``libnvidia-ml.so.1``) for the
    driver version, the CUDA version it supports and each GPU's name and compute capability."""
    name = library or os.environ.get(LIBRARY_VARIABLE) or LIBRARY
    try:
        lib = ctypes.CDLL(name)
    except OSError as exc:
        return Host(name, problem=f"no NVIDIA driver: {name} cannot be loaded ({exc})")
    try:
        return _ask(lib, name)
    except _NvmlError as exc:
        return Host(name, problem=str(exc))
    except AttributeError as exc:  # a library that lacks an entry point NVML has had for years
        return Host(name, problem=f"{name} is no NVML library ({exc})")


def _check(lib: Any, code: int, call: str) -> None:
    if code != 0:
        lib.nvmlErrorString.restype = ctypes.c_char_p
        said = lib.nvmlErrorString(code)
        raise _NvmlError(f"{call} failed: {said.decode() if said else code} (NVML error {code})")


def _ask(lib: Any, name: str) -> Host:
    code = lib.nvmlInit_v2()
    if code != 0:
        lib.nvmlErrorString.restype = ctypes.c_char_p
        said = lib.nvmlErrorString(code)
        return Host(name, problem=f"no NVIDIA driver answers: nvmlInit failed: {said.decode() if said else code}")
    try:
        buffer = ctypes.create_string_buffer(_BUFFER)
        _check(lib, lib.nvmlSystemGetDriverVersion(buffer, ctypes.c_uint(_BUFFER)), "nvmlSystemGetDriverVersion")
        driver = buffer.value.decode()
        cuda = ctypes.c_int()
        _check(lib, lib.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)), "nvmlSystemGetCudaDriverVersion")
        count = ctypes.c_uint()
        _check(lib, lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount")
        devices = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            _check(lib, lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)),
                   f"nvmlDeviceGetHandleByIndex({index})")
            _check(lib, lib.nvmlDeviceGetName(handle, buffer, ctypes.c_uint(_BUFFER)), f"nvmlDeviceGetName({index})")
            major, minor = ctypes.c_int(), ctypes.c_int()
            _check(lib, lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)),
                   f"nvmlDeviceGetCudaComputeCapability({index})")
            devices.append(Device(index, buffer.value.decode(), Gpu(major.value, minor.value)))
    finally:
        lib.nvmlShutdown()
    problem = "" if devices else "the NVIDIA driver sees no GPU"
    return Host(name, driver, cuda_of(cuda.value), tuple(devices), problem)
