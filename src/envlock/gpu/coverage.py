"""Which GPUs a binary's kernels run on, by NVIDIA's compatibility rules.

- SASS (a cubin) built for ``sm_XY`` runs on a GPU of compute capability X.Z with Z >= Y: the same
  major revision, the same or a later minor (CUDA C++ Programming Guide, "Binary Compatibility").
  An ``f`` cubin (``sm_120f``) runs on its family, which is that same set; an ``a`` cubin
  (``sm_90a``) runs on X.Y alone.
- PTX is compiled by the driver at load time (JIT): plain ``compute_XY`` for any GPU of X.Y or
  later, of any major; ``compute_XYf`` for its family (X.Z, Z >= Y); ``compute_XYa`` for X.Y alone.

A GPU is named as a spec names it: ``sm_120a``, ``sm_120`` or ``12.0`` all name a GPU of compute
capability 12.0 (a GPU has no variant: every 12.0 GPU runs ``sm_120a`` code).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envlock.gpu.elf import ElfFile
from envlock.gpu.fatbin import Kernel
from envlock.model.spec import GPU_NAME


@dataclass(frozen=True, order=True)
class Gpu:
    """A GPU by its compute capability, and the name it was given."""

    major: int
    minor: int
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> Gpu | None:
        """The GPU ``text`` names (see ``GPU_NAME``), or None."""
        m = GPU_NAME.fullmatch(text.strip())
        if m is None:
            return None
        if m.group(1) is not None:
            major, minor = divmod(int(m.group(1)), 10)
        else:
            major, minor = int(m.group(2)), int(m.group(3))
        return cls(major, minor, text.strip())

    @property
    def capability(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def arch(self) -> int:
        return self.major * 10 + self.minor

    @property
    def label(self) -> str:
        """``sm_120a (12.0)``: the name given and the compute capability it means."""
        return f"{self.name} ({self.capability})" if self.name and self.name != self.capability else self.capability


def kernel_named(name: str) -> Kernel | None:
    """The kernel an arch name stands for (``sm_120a``: SASS; ``compute_90``: PTX), as a lock records it."""
    kind, _, rest = name.partition("_")
    variant = rest[-1] if rest[-1:] in ("a", "f") else ""
    digits = rest[:-1] if variant else rest
    if kind not in ("sm", "compute") or not digits.isdigit():
        return None
    return Kernel("sass" if kind == "sm" else "ptx", int(digits), variant)


def runs(kernel: Kernel, gpu: Gpu) -> bool:
    """Whether ``kernel`` runs on ``gpu`` (for PTX: once the driver compiles it)."""
    major, minor = kernel.capability
    if kernel.variant == "a":
        return (major, minor) == (gpu.major, gpu.minor)
    if kernel.kind == "sass" or kernel.variant == "f":
        return major == gpu.major and minor <= gpu.minor
    return kernel.arch <= gpu.arch


def how(kernel: Kernel) -> str:
    """Where ``kernel`` runs, in words: ``12.0 only``, ``12.x from 12.0``, ``8.0 and later``."""
    major, minor = kernel.capability
    if kernel.variant == "a":
        return f"{major}.{minor} only"
    if kernel.kind == "sass" or kernel.variant == "f":
        return f"{major}.x from {major}.{minor}"
    return f"{major}.{minor} and later (JIT)"


def runs_on(file: ElfFile, gpu: Gpu) -> tuple[Kernel, ...]:
    """The kernels of ``file`` that run on ``gpu``: SASS first (no JIT needed), then PTX."""
    fit = [k for k in file.kernels if runs(k, gpu)]
    return tuple(sorted(fit, key=lambda k: (k.kind != "sass", -k.arch)))


def arches(files: Iterable[ElfFile]) -> tuple[str, ...]:
    """The distinct ``sm_*`` and ``compute_*`` names of ``files``' kernels, SASS first, by arch."""
    names = {(k.kind != "sass", k.arch, k.variant, k.name) for f in files for k in f.kernels}
    return tuple(n for *_, n in sorted(names))


def carried(file: ElfFile) -> str:
    """What a file carries, for a message: ``SASS sm_90, sm_120a; PTX compute_120a``."""
    sass = sorted({(k.arch, k.name) for k in file.kernels if k.kind == "sass"})
    ptx = sorted({(k.arch, k.name) for k in file.kernels if k.kind == "ptx"})
    parts = ([f"SASS {', '.join(n for _, n in sass)}"] if sass else []) + (
        [f"PTX {', '.join(n for _, n in ptx)}"] if ptx else [])
    return "; ".join(parts) or "no kernels"


#: How many files a note or an error of the GPU check names before "and N more" (``envlock kernels`` lists each).
SHOWN = 3


@dataclass(frozen=True)
class Verdict:
    """One package against one GPU."""

    package: str
    gpu: Gpu
    running: tuple[str, ...]  # its kernel-bearing files with a kernel for the GPU
    missing: tuple[ElfFile, ...]  # those without one

    @property
    def runs(self) -> bool:
        """Some file has a kernel for the GPU (a package none of whose files has one cannot run there)."""
        return bool(self.running)

    def problem(self, shown: int | None = None) -> str:
        """The failure: the package, the GPU, and each file with what it carries (``shown``: the first
        that many, then how many more and the arches they carry)."""
        listed, rest = self.missing[:shown], self.missing[len(self.missing[:shown]):]
        files = "; ".join(f"{f.path}: {carried(f)}" for f in listed)
        more = f"; and {len(rest)} more file(s) ({', '.join(arches(rest)) or 'no kernels'})" if rest else ""
        return f"{self.package} has no kernel for {self.gpu.label}: {files}{more}"

    def notes(self) -> list[str]:
        """Partial coverage: a note per file without a kernel for the GPU, when others have one."""
        if not self.runs:
            return []
        return [f"{self.package}: {f.path} has no kernel for {self.gpu.label} ({carried(f)}); "
                f"{len(self.running)} other file(s) of it do" for f in self.missing]

    def note(self, shown: int = SHOWN) -> str:
        """Partial coverage in one line ("" when there is none): how many of the package's kernel-bearing
        files have no kernel for the GPU, the first ``shown`` of them named, then how many more."""
        if not self.runs or not self.missing:
            return ""
        n, names = len(self.missing), [f.path for f in self.missing]
        listed = ", ".join(names[:shown]) + (f" and {n - shown} more" if n > shown else "")
        return (f"{self.package}: {n} of {n + len(self.running)} kernel-bearing files "
                f"{'has' if n == 1 else 'have'} no kernel for {self.gpu.label} ({listed})")

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "gpu": self.gpu.name or self.gpu.capability,
                "capability": self.gpu.capability, "runs": self.runs, "files": list(self.running),
                "missing": [{"path": f.path, "carries": carried(f)} for f in self.missing]}


def judge(packages: Mapping[str, Sequence[ElfFile]], gpus: Sequence[Gpu]) -> list[Verdict]:
    """Each kernel-bearing package of ``packages`` (name -> its ELF files) against each GPU."""
    out = []
    for name, files in sorted(packages.items()):
        bearing = [f for f in files if f.kernels]
        if not bearing:
            continue
        for gpu in gpus:
            running = tuple(f.path for f in bearing if runs_on(f, gpu))
            out.append(Verdict(name, gpu, running, tuple(f for f in bearing if not runs_on(f, gpu))))
    return out
