"""``envlock kernels``, and the GPU check ``lock``, ``build`` and ``sync`` run for ``[env] gpus``.

The recipe: each locked package's wheel from the store (a local build's from the wheelhouse), read
once for the ELF files it holds (``gpu.binaries``, kept per wheel sha256); then each kernel-bearing
package against each GPU the spec names (``gpu.coverage``), and the CUDA majors the binaries need
(``gpu.drivers``). The lock check fetches into the store the wheels it must read (those whose file
list names a shared object, a cubin or an executable), as a sync would; ``kernels ENV`` does too,
unless ``--offline``. Nothing here is written but the store's records and, for the lock, the
``[tool.envlock.kernels]`` table and ``min-driver``.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock.errors import GpuError, SpecError, UsageError
from envlock.gpu.binaries import Binaries, maybe_elf, read_tree, wheel_binaries
from envlock.gpu.coverage import SHOWN, Gpu, Verdict, arches, carried, judge
from envlock.gpu.drivers import MIN_DRIVER, Need, min_driver, needs, older
from envlock.gpu.elf import ElfFile
from envlock.model.lockfile import Artifact, Lock, LockedKernels, LockedPackage, read_lock
from envlock.store.store import Store, store_file

if TYPE_CHECKING:
    from envlock.model.mirrors import MirrorOptions, Mirrors
    from envlock.model.spec import EnvSpec
    from envlock.model.spectables import AllowedGap
    from envlock.progress import Progress
    from envlock.workspace import Workspace


@dataclass(frozen=True)
class PackageBinaries:
    """One package's wheel, and the ELF files in it."""

    name: str
    version: str
    wheel: str  # its file name
    files: tuple[ElfFile, ...] = ()
    unread: str = ""  # why the wheel was not read ("" when it was)

    @property
    def kernel_files(self) -> tuple[ElfFile, ...]:
        return tuple(f for f in self.files if f.kernels)

    def needs(self) -> list[Need]:
        return [n for f in self.files for n in needs(f)]

    def locked(self) -> LockedKernels:
        """What the lock records of it (``[tool.envlock.kernels]``)."""
        files = self.kernel_files
        names = arches(files)
        return LockedKernels(sass=tuple(n for n in names if n.startswith("sm_")),
                             ptx=tuple(n for n in names if n.startswith("compute_")),
                             cuda=tuple(sorted({n.major for n in self.needs()})))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "wheel": self.wheel, "unread": self.unread,
                "files": [f.to_dict() for f in self.files if f.kernels or needs(f)],
                "sass": list(self.locked().sass), "ptx": list(self.locked().ptx), "cuda": list(self.locked().cuda)}


@dataclass(frozen=True)
class KernelsReport:
    """What ``envlock kernels`` says; doubles as its ``--json`` output."""

    target: str  # the env name, or the wheel or folder read
    packages: tuple[PackageBinaries, ...]
    gpus: tuple[Gpu, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    fetched: int = 0  # wheels brought into the store to be read

    @property
    def needs(self) -> list[Need]:
        return sorted({n for p in self.packages for n in p.needs()})

    @property
    def min_driver(self) -> str | None:
        return min_driver(n.major for n in self.needs)

    @property
    def runs(self) -> bool:
        """Every kernel-bearing package has a kernel for every GPU the spec names."""
        return all(v.runs for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "packages": [p.to_dict() for p in self.packages],
                "gpus": [{"name": g.name, "capability": g.capability} for g in self.gpus],
                "verdicts": [v.to_dict() for v in self.verdicts], "runs": self.runs,
                "min_driver": self.min_driver,
                "needs": [{"cuda": n.major, "file": n.path, "why": n.why, "driver": n.driver} for n in self.needs],
                "fetched": self.fetched}


def spec_gpus(spec: EnvSpec) -> tuple[Gpu, ...]:
    """The GPUs of ``[env] gpus`` (checked by the spec's parser), each once, in the spec's order."""
    out: dict[tuple[int, int], Gpu] = {}
    for text in spec.gpus:
        gpu = Gpu.parse(text)
        if gpu is not None:
            out.setdefault((gpu.major, gpu.minor), gpu)
    return tuple(out.values())


# -- reading a lock's wheels -------------------------------------------------------------------------


def _wheel_path(store: Store, artifact: Artifact, base: Path) -> Path | None:
    """Where ``artifact``'s bytes are on this machine: the store, else (a local build) the lock's folder."""
    stored = store_file(store, artifact)
    if stored.is_file():
        return stored
    if artifact.path is not None and (base / artifact.path).is_file():
        return base / artifact.path
    return None


def _may_hold_elf(store: Store, artifact: Artifact, base: Path) -> bool:
    """Whether the wheel's file list names a file that may be an ELF (its RECORD, read as the guards
    read it: from the store's record of an earlier read, or by range requests); True when unknown."""
    from envlock.resolution.wheelfiles import ListingError, listing

    try:
        files = listing(artifact, store, base=base).files
    except ListingError:
        return True
    return any(maybe_elf(path) for path in files)


def read_lock_wheels(store: Store, lock: Lock, base: Path, *, mirrors: Mirrors | None = None, fetch: bool = True,
                     progress: Progress | None = None) -> tuple[tuple[PackageBinaries, ...], int]:
    """Each package of ``lock`` with the ELF files of its wheel, and how many wheels were fetched into
    the store to read them (``fetch``: those the store lacks that may hold one; else they are named
    unread). ``base``: the lock's folder, where its local builds' ``path`` wheels are."""
    # A local build's wheel (a ``path``) is read where it is, never fetched: absent, it is not built here.
    missing = [p for p in lock.packages if p.wheels and p.wheels[0].path is None
               and _wheel_path(store, p.wheels[0], base) is None]
    # A wheel whose file list names no shared object, cubin or executable holds no ELF: never fetched, not unread.
    plain = {p.name for p in missing if not _may_hold_elf(store, p.wheels[0], base)} if fetch else set()
    wanted = [p for p in missing if p.name not in plain]
    wanted = wanted if fetch else []
    fetched = 0
    if wanted:
        from envlock.install import fetch as fetching
        from envlock.model.mirrors import package_locator

        locate = package_locator(wanted, mirrors.for_packages(lock)) if mirrors is not None else None
        got = fetching.fetch([p.wheels[0] for p in wanted], store, base_dir=base, progress=progress,
                             options=fetching.FetchOptions(locate=locate, env=lock.env))
        fetched = sum(1 for a in got.artifacts if a.source != "store")
    out = [PackageBinaries(p.name, p.version, p.wheels[0].filename) if p.name in plain
           else _read_package(store, p, base) for p in lock.packages]
    return tuple(out), fetched


def _read_package(store: Store, pkg: LockedPackage, base: Path) -> PackageBinaries:
    art = pkg.wheels[0]
    where = _wheel_path(store, art, base)
    if where is None:
        return PackageBinaries(pkg.name, pkg.version, art.filename,
                               unread="not in the store" if art.path is None else f"not built here ({art.path})")
    found = wheel_binaries(store, art.sha256, where)
    return PackageBinaries(pkg.name, pkg.version, art.filename, found.files, found.problem)


def read_path(path: Path) -> PackageBinaries:
    """A wheel file or a folder (a venv, an unpacked wheel), read directly (not kept in the store)."""
    from envlock.gpu.binaries import read_file, read_wheel

    if path.is_file() and not zipfile.is_zipfile(path):  # one ELF file
        one = read_file(path)
        found = Binaries((one,) if one is not None else (), "" if one is not None else "not an ELF file nor a wheel")
    else:
        found = read_wheel(path) if path.is_file() else read_tree(path)
    return PackageBinaries(path.name, "", path.name, found.files, found.problem)


# -- the check of lock, build and sync -----------------------------------------------------------------


def _verdicts(packages: Sequence[PackageBinaries], gpus: Sequence[Gpu]) -> list[Verdict]:
    return judge({p.name: p.kernel_files for p in packages}, gpus)


def check(spec: EnvSpec, packages: Sequence[PackageBinaries], *, fix: Mapping[str, str] | None = None) -> list[str]:
    """Hold ``packages`` to the spec's ``[env] gpus``: ``GpuError`` naming every package with no kernel
    for a named GPU (its files and what they carry; ``fix``: package -> how to fix it); else the notes
    (partial coverage, a line per package and GPU naming the first few files; wheels that could not be read).
    The failure names the first few files of each package too: ``envlock kernels`` lists every file."""
    gpus = spec_gpus(spec)
    if not gpus:
        return []
    verdicts = _verdicts(packages, gpus)
    failed = [v for v in verdicts if not v.runs]
    # A known gap the spec accepts (flashinfer-cubin's cubins are for sm_100/sm_103 only): a note.
    allowed = [(v, gap) for v in failed if (gap := _allowance(spec, v)) is not None]
    failed = [v for v in failed if all(v is not a for a, _ in allowed)]
    listing = f"`envlock kernels {spec.name}{f' --target {spec.target}' if spec.target else ''}` lists each file"
    if failed:
        details = [v.problem(SHOWN) + (f" ({listing})" if len(v.missing) > SHOWN else "")
                   + (f"; {fix[v.package]}" if fix and v.package in fix else "") for v in failed]
        names = sorted({v.package for v in failed})
        raise GpuError(f"{spec.path}: env.gpus: {', '.join(names)} {'has' if len(names) == 1 else 'have'} no kernel "
                       f"for {', '.join(sorted({v.gpu.label for v in failed}))}", details=details)
    notes = [f"{n}; {listing}" for v in verdicts if (n := v.note())]  # a line per package and GPU
    notes += [f"{p.name}: {p.wheel} not read for env.gpus ({p.unread})" for p in packages if p.unread]
    notes += [f"{v.package} has no kernel for {v.gpu.label}, allowed by resolution.allow-no-kernels ({gap.reason})"
              for v, gap in allowed]
    return notes


def _allowance(spec: EnvSpec, verdict: Verdict) -> AllowedGap | None:
    """The ``[resolution] allow-no-kernels`` entry that accepts ``verdict``'s package lacking its GPU, or None."""
    for gap in spec.resolution.allow_no_kernels:
        if gap.package == verdict.package and any(
                (g := Gpu.parse(name)) is not None and (g.major, g.minor) == (verdict.gpu.major, verdict.gpu.minor)
                for name in gap.gpus):
            return gap
    return None


def record(lock: Lock, packages: Sequence[PackageBinaries]) -> Lock:
    """``lock`` with each kernel-bearing package of ``packages``'s arches in ``[tool.envlock.kernels]``
    (others keep theirs) and the ``min-driver`` of every recorded package's CUDA majors."""
    kept = {name: k for name, k in lock.kernels.items() if lock.package(name) is not None}
    for p in packages:
        kept.pop(p.name, None)
        if p.kernel_files or p.locked().cuda:
            kept[p.name] = p.locked()
    return replace(lock, kernels=kept, min_driver=min_driver(m for k in kept.values() for m in k.cuda))


def check_lock(spec: EnvSpec, store: Store, lock: Lock, base: Path, mirrors: Mirrors,
               progress: Progress | None = None) -> tuple[Lock, list[str]]:
    """The lock's GPU check (``[env] gpus`` set): its wheels read (fetched where the store lacks
    them), held to the named GPUs (``GpuError``), recorded; the lock as recorded, and the notes."""
    packages, _ = read_lock_wheels(store, lock, base, mirrors=mirrors, progress=progress)
    notes = check(spec, packages)
    return record(lock, packages), notes


def check_built(spec: EnvSpec, store: Store, lock: Lock, base: Path, built: Sequence[str]) -> tuple[Lock, list[str]]:
    """The build's GPU check: the packages ``built`` (their wheels in the lock), held to the named GPUs
    with the rebuild hint, and recorded."""
    from envlock.model.lockfile import canonicalize_name

    names = {canonicalize_name(b) for b in built}
    packages = [_read_package(store, p, base) for p in lock.packages if p.name in names]
    fix = {p.name: rebuild_hint(spec, p.name, spec_gpus(spec)) for p in packages}
    notes = check(spec, packages, fix=fix)
    return record(lock, packages), notes


def rebuild_hint(spec: EnvSpec | None, package: str, gpus: Sequence[Gpu]) -> str:
    """How to rebuild local build ``package`` with kernels for ``gpus``: its ``TORCH_CUDA_ARCH_LIST``
    with their compute capabilities added."""
    from envlock.model.lockfile import canonicalize_name

    build = next((b for b in (spec.builds.values() if spec else ()) if canonicalize_name(b.name) == package), None)
    listed = (build.env.get("TORCH_CUDA_ARCH_LIST", "") if build is not None else "").replace(" ", ";")
    have = [a for a in listed.split(";") if a]
    wanted = have + [g.capability for g in gpus if g.capability not in {a.rstrip("af+PTX") for a in have}]
    where = f" ([builds.{build.name}] env in {spec.path.name})" if build is not None and spec is not None else ""
    return f"rebuild with TORCH_CUDA_ARCH_LIST=\"{';'.join(wanted)}\"{where}"


def machine_note(lock: Lock) -> str:
    """For ``sync``: one line when this machine has GPUs and a package the lock records kernels of has
    none for one of them ("" otherwise: no driver, no GPU, or every GPU runs the env). Never a failure:
    an env is often built on a CPU machine for a GPU fleet."""
    if not lock.kernels:
        return ""
    from envlock.gpu.coverage import kernel_named, runs
    from envlock.gpu.nvml import probe

    host = probe()
    lacking = []
    for device in host.devices:
        for name, locked in sorted(lock.kernels.items()):
            kernels = [k for a in (*locked.sass, *locked.ptx) if (k := kernel_named(a)) is not None]
            if kernels and not any(runs(k, device.gpu) for k in kernels):
                lacking.append(f"{name} on GPU {device.index} ({device.name}, {device.gpu.capability})")
    if lacking:
        return (f"this machine's GPUs cannot run the env: no kernel for {'; '.join(lacking)} (`envlock doctor "
                f"{lock.env}` says what to do)")
    if host.driver and lock.min_driver and older(host.driver, lock.min_driver):
        return (f"this machine's driver {host.driver} is older than {lock.min_driver}, which the env's binaries "
                f"need (`envlock doctor {lock.env}` says which)")
    return ""


# -- envlock kernels -------------------------------------------------------------------------------------


def kernels_env(ws: Workspace, target: str, *, offline: bool = False, progress: Progress | None = None,
                asked: MirrorOptions | None = None, env_target: str | None = None) -> KernelsReport:
    """``envlock kernels TARGET``: an env's locked wheels (``TARGET`` an env name), or a wheel file or a
    folder (a path): what their binaries carry, and each GPU of the spec's ``[env] gpus`` against them.
    ``env_target``: of an env of several targets, the one (``--target``; None: this machine's), held to
    its own ``gpus``."""
    path = Path(target)
    an_env = (ws.root / "envs" / f"{target}.toml").is_file()
    if target.endswith(".whl") or "/" in target or (path.exists() and not an_env):
        if not path.exists():
            raise UsageError(f"{target}: no such wheel or folder; expected an env name (envs/NAME.toml), a .whl "
                             "file or a folder (a venv)")
        return KernelsReport(str(path), (read_path(path),))
    from envlock.model.mirrors import Mirrors
    from envlock.model.spec import load_env_spec

    lock_path = ws.lock_path(target)
    lock = read_lock(lock_path, env_target)
    try:
        spec: EnvSpec | None = load_env_spec(ws, target, check_paths=False)
    except SpecError:
        spec = None  # a lock without a readable spec: no GPUs named, no mirrors
    if spec is not None and lock.target is not None and lock.target in spec.targets:
        spec = spec.for_target(lock.target)  # its own gpus
    if spec is None and asked is not None and (asked.indexes or asked.sources):
        raise UsageError(f"--index/--source: mirrors are named by the spec's indexes, and envs/{target}.toml does "
                         "not read (`envlock lock --check` says why)")
    mirrors = Mirrors.of(spec, asked) if spec is not None and not offline else None
    store = Store.open()
    if mirrors is not None:
        with mirrors.credentials():
            packages, fetched = read_lock_wheels(store, lock, lock_path.parent, mirrors=mirrors, progress=progress)
    else:
        packages, fetched = read_lock_wheels(store, lock, lock_path.parent, fetch=False)
    gpus = spec_gpus(spec) if spec is not None else ()
    return KernelsReport(target, packages, gpus, tuple(_verdicts(packages, gpus)), fetched)


def describe(file: ElfFile) -> str:
    """``torch/lib/libx.so: SASS sm_90, sm_120a; PTX compute_120a (zstd); needs libcudart.so.13``."""
    compressed = sorted({k.compression for k in file.kernels if k.compression})
    runtime = [n for n in file.needed if n.startswith(("libcudart", "libcuda.", "libtorch", "libnvrtc", "libcublas"))]
    parts = [carried(file) if file.kernels else "no kernels"]
    if compressed:
        parts[0] += f" (compressed: {', '.join(compressed)})"
    if runtime:
        parts.append("needs " + ", ".join(runtime))
    if file.problem:
        parts.append(f"not all read: {file.problem}")
    return f"{file.path}: {'; '.join(parts)}"


def driver_line(report: KernelsReport) -> str:
    """The minimum driver and why (the first file that needs the newest major)."""
    if not report.needs:
        return "min driver: none known (no binary names a CUDA runtime or carries PTX)"
    top = max(report.needs)
    return f"min driver: {MIN_DRIVER.get(top.major, 'unknown')} (CUDA {top.major}: {top.path} {top.why})"
