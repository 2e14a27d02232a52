"""``envlock doctor [ENV]``: this machine (its NVIDIA driver and GPUs, from NVML) against an env.

The recipe: ask NVML (``gpu.nvml``); read the env's lock and each locked wheel the store (or the
wheelhouse) holds (``kernels.read_lock_wheels``, no download); then name every problem: a driver
older than the newest CUDA major the binaries need, a GPU a kernel-bearing package has no kernel
for, no driver or no GPU at all. Each problem says the package, the file, what it needs, what the
machine has, and the fix. The toolchain each local build was made with is reported as its store
entry recorded it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envlock.commands.kernels import PackageBinaries, read_lock_wheels, rebuild_hint
from envlock.gpu.coverage import carried, judge
from envlock.gpu.drivers import MIN_DRIVER, older
from envlock.gpu.nvml import Host, probe
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import read_lock
from envlock.store.store import Store

if TYPE_CHECKING:
    from envlock.model.spec import EnvSpec
    from envlock.workspace import Workspace


@dataclass(frozen=True)
class Problem:
    """One reason the env does not run here."""

    package: str
    file: str
    needs: str
    has: str
    fix: str

    def text(self) -> str:
        where = f"{self.package}: {self.file}: " if self.file else f"{self.package}: " if self.package else ""
        return f"{where}needs {self.needs}; this machine has {self.has}; fix: {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class DoctorReport:
    """What ``envlock doctor`` found; doubles as its ``--json`` output."""

    host: Host
    env: str | None = None
    packages: tuple[PackageBinaries, ...] = ()
    problems: tuple[Problem, ...] = ()
    notes: tuple[str, ...] = ()
    min_driver: str | None = None
    toolchains: tuple[tuple[str, dict[str, str]], ...] = ()  # build -> its recorded toolchain

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"machine": self.host.to_dict(), "env": self.env, "ok": self.ok, "min_driver": self.min_driver,
                "problems": [p.to_dict() for p in self.problems], "notes": list(self.notes),
                "kernel_packages": sorted(p.name for p in self.packages if p.kernel_files),
                "toolchains": {name: tools for name, tools in self.toolchains}}


def doctor(ws: Workspace, env: str | None, *, library: str | None = None) -> DoctorReport:
    """This machine (NVML through ``library``, else as ``nvml.probe`` finds it) against ``env``'s lock
    (None: the machine alone, whose problem is only a missing driver or GPU)."""
    host = probe(library)
    if env is None:
        missing = (Problem("", "", "an NVIDIA driver and a GPU", host.problem, "install the NVIDIA driver "
                           "(its libnvidia-ml.so.1), or set ENVLOCK_NVML_LIBRARY to it"),) if host.problem else ()
        return DoctorReport(host, problems=missing)
    from envlock.errors import SpecError
    from envlock.model.spec import load_env_spec

    lock_path = ws.lock_path(env)
    lock = read_lock(lock_path)
    try:
        spec: EnvSpec | None = load_env_spec(ws, env, check_paths=False)
    except SpecError:
        spec = None
    store = Store.open(create=False)
    packages, _ = read_lock_wheels(store, lock, lock_path.parent, fetch=False)
    notes = [f"{p.name}: {p.wheel} not checked ({p.unread}; `envlock sync {env}` fetches it)"
             for p in packages if p.unread]
    problems = _driver_problems(host, packages) + _gpu_problems(host, packages, spec, lock.builds)
    needs = [n for p in packages for n in p.needs()]
    top = max((n.major for n in needs), default=None)
    return DoctorReport(host, env, packages, tuple(problems), tuple(notes),
                        MIN_DRIVER.get(top) if top is not None else None,
                        tuple((name, _toolchain(store, b.input_digest)) for name, b in sorted(lock.builds.items())))


def _driver_problems(host: Host, packages: tuple[PackageBinaries, ...]) -> list[Problem]:
    """Each file needing a CUDA major whose minimum driver is newer than this machine's."""
    if host.driver is None:
        return []
    out = []
    seen: set[tuple[str, int]] = set()
    for p in packages:
        for n in sorted(p.needs(), key=lambda n: (-n.major, n.path)):
            minimum = MIN_DRIVER.get(n.major)
            if minimum is None or not older(host.driver, minimum) or (p.name, n.major) in seen:
                continue
            seen.add((p.name, n.major))  # a package's first file per major: the rest say the same
            out.append(Problem(p.name, n.path, f"driver >= {minimum} (CUDA {n.major}: {n.why})",
                               f"driver {host.driver} (CUDA {host.cuda})",
                               f"install an NVIDIA driver >= {minimum}, or lock a build of {p.name} for the CUDA "
                               f"{host.cuda} this driver runs (another nightly or index, e.g. a cu{_cu(host.cuda)} "
                               "one)"))
    return out


def _cu(cuda: str | None) -> str:
    return (cuda or "").replace(".", "") or "12x"


def _gpu_problems(host: Host, packages: tuple[PackageBinaries, ...], spec: EnvSpec | None,
                  builds: Any) -> list[Problem]:
    """No driver or GPU at all (when the env carries kernels); else each GPU a package has no kernel for."""
    bearing = {p.name: p.kernel_files for p in packages if p.kernel_files}
    if not bearing:
        return []
    if not host.devices:
        return [Problem("", "", f"a GPU ({', '.join(sorted(bearing))} carry GPU kernels)", host.problem,
                        "run the env on a machine with an NVIDIA GPU and its driver")]
    from envlock.model.lockfile import canonicalize_name

    built = {canonicalize_name(b) for b in builds}
    out = []
    for device in host.devices:
        for v in judge(bearing, [device.gpu]):
            if v.runs:
                continue
            fix = (rebuild_hint(spec, v.package, [device.gpu]) if v.package in built else
                   f"another nightly or wheel of {v.package} built for {device.gpu.capability}")
            for f in v.missing:
                out.append(Problem(v.package, f.path, f"a GPU it has a kernel for ({carried(f)})",
                                   f"GPU {device.index} {device.name} (compute capability {device.gpu.capability})",
                                   fix))
    return out


def _toolchain(store: Store, input_digest: str) -> dict[str, str]:
    """The toolchain a local build was made with, as its store entry's ``recipe.json`` records it."""
    key = input_digest.removeprefix("sha256:")
    if not key.isalnum():  # a lock from elsewhere names no path in the store
        return {}
    try:
        recipe = json.loads((store.path("builds", key) / "recipe.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    tools = recipe.get("toolchain") if isinstance(recipe, dict) else None
    return {str(k): str(v) for k, v in tools.items()} if isinstance(tools, dict) else {}
