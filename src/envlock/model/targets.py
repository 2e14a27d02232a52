"""Named targets of one env spec (``[targets.NAME]``): each a kind of machine the env is locked for,
its platform, python and GPUs, and the spec as that target sees it (``EnvSpec.for_target``).

A spec without ``[targets]`` is one target, the ``[env]`` table's: every command reads it as before.
With targets, ``[env]`` gives what they share (the python, the GPUs) and each target its platform
and what differs: its python, its GPUs, its own nightly date, its own local tag for nightly pins
(``+cu130`` on x86_64, none on aarch64). The lock holds every target (``model.multilock``); a command
picks one (``pick``): the one named (``--target NAME``), else the one whose platform this machine runs.
"""

from __future__ import annotations

import platform as host_platform
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import NormalizedName, canonicalize_name

from envlock.errors import LockError, did_you_mean, found
from envlock.model import spectables
from envlock.model.locktables import PACKAGE_NAME, PYTHON_VERSION

#: The platforms a target may name: those whose PEP 508 markers a lock can tell apart (``target_marker``).
TARGET_PLATFORM = re.compile(r"(x86_64|aarch64)-manylinux_2_(\d+)")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_KEYS = {"platform", "python", "gpus", "nightly", "local", "exclude", "overrides", "build-env"}


@dataclass(frozen=True)
class TargetSpec:
    """One ``[targets.NAME]``: a kind of machine the env is locked for."""

    name: str
    platform: str  # as uv spells it: x86_64-manylinux_2_28
    python: str | None = None  # None: [env] python
    gpus: tuple[str, ...] | None = None  # None: [env] gpus
    nightly: str | None = None  # its own date for every nightly pin (None: each pin's own)
    local: str | None = None  # its own local tag for the nightly pins that name one ("": none)
    exclude: tuple[NormalizedName, ...] = ()  # packages this target does without (a wheel other machines have only)
    # Environment variables of every build of this target, over each build's own (its GPUs' arch list).
    build_env: Mapping[str, str] = field(default_factory=dict)
    # Its own overrides, over [resolution]'s of the same packages (a pin upstream made that has no wheel
    # for its platform: ``torch-memory-saver==0.0.9.post1`` on aarch64).
    overrides: tuple[str, ...] = ()

    @property
    def marker(self) -> str:
        """The PEP 508 marker of this target's machines (python given by the spec when None)."""
        assert self.python is not None
        return target_marker(self.platform, self.python)


def target_marker(platform: str, python: str) -> str:
    """The PEP 508 marker that holds on a machine of ``platform`` running ``python`` (X.Y)."""
    m = TARGET_PLATFORM.fullmatch(platform)
    assert m is not None, platform
    return f"sys_platform == 'linux' and platform_machine == '{m.group(1)}' and python_version == '{python}'"


def parse_targets(p: spectables.Problems, table: Mapping[str, Any], env: Mapping[str, Any], python: str,
                  gpu_problem: Callable[[str], str | None]) -> dict[str, TargetSpec]:
    """``[targets]``: each target's platform and what it does not share with ``[env]`` (``python``:
    env.python); every problem collected in ``p``. ``gpu_problem(gpu) -> str | None`` checks a GPU name."""
    if not table:
        return {}
    if "platform" in env:
        p.add("env.platform", "expected no platform in [env] when the spec has [targets]: each "
              "[targets.NAME] names its own platform")
    out: dict[str, TargetSpec] = {}
    seen: dict[tuple[str, str], str] = {}
    for name, key, entry in spectables.entries(p, dict(table), "targets", 'platform = "..."', _KEYS):
        if not _NAME.fullmatch(name):
            p.add(key, f"expected a target name of letters, digits, '-' or '_' (like \"gb200\"), found {name!r}")
        plat = spectables.get_str(p, entry, "platform", key, required=True)
        if plat is not None and not TARGET_PLATFORM.fullmatch(plat):
            p.add(f"{key}.platform", "expected an x86_64 or aarch64 manylinux platform as uv spells it "
                  f"(\"x86_64-manylinux_2_28\", \"aarch64-manylinux_2_28\"), found {plat!r}")
            plat = None
        own_python = spectables.get_str(p, entry, "python", key)
        if own_python is not None and not PYTHON_VERSION.fullmatch(own_python):
            p.add(f"{key}.python", f"expected a Python version like \"3.12\", found {own_python!r}")
        gpus = spectables.get_str_list(p, entry, "gpus", key) if "gpus" in entry else None
        for i, gpu in enumerate(gpus or ()):
            if (problem := gpu_problem(gpu)) is not None:
                p.add(f"{key}.gpus[{i}]", problem)
        nightly = spectables.get_str(p, entry, "nightly", key)
        if nightly is not None:
            spectables.check_date(p, f"{key}.nightly", nightly)
        local = entry.get("local")
        if local is not None and (not isinstance(local, str)
                                  or (local and not re.fullmatch(r"[A-Za-z0-9]+([._][A-Za-z0-9]+)*", local))):
            p.add(f"{key}.local", f"expected a local version tag like \"cu130\" (\"\" for none), found {found(local)}")
            local = None
        exclude = spectables.get_str_list(p, entry, "exclude", key)
        for i, excluded in enumerate(exclude):
            if not PACKAGE_NAME.fullmatch(excluded):
                p.add(f"{key}.exclude[{i}]",
                      f"expected a package name like \"flashinfer-jit-cache\", found {excluded!r}")
        overrides = spectables.get_overrides(p, entry, key)
        build_env = spectables.get_str_map(p, entry, "build-env", key)
        for var in build_env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
                p.add(f"{key}.build-env.{var}", "expected an environment variable name")
        target = TargetSpec(name, plat or "", own_python or python, gpus, nightly, local,
                            tuple(canonicalize_name(n) for n in exclude if PACKAGE_NAME.fullmatch(n)), build_env,
                            overrides)
        if plat is not None:
            other = seen.setdefault((plat.split("-")[0], target.python or ""), name)
            if other != name:
                p.add(key, f"expected another platform or python than [targets.{other}] ({plat.split('-')[0]}, "
                      f"python {target.python}): a lock cannot tell their machines apart")
        out[name] = target
    return out


def runs_here(platform: str, machine: str | None = None, glibc: str | None = None) -> bool:
    """Whether this machine (or ``machine`` with ``glibc``) installs wheels of ``platform``: its
    architecture, and a glibc at least the platform's."""
    m = TARGET_PLATFORM.fullmatch(platform)
    if m is None:
        return False
    machine = machine if machine is not None else host_platform.machine()
    if glibc is None:
        lib, glibc = host_platform.libc_ver()
        if lib != "glibc":
            return False
    try:
        major, minor = (int(x) for x in glibc.split(".")[:2])
    except ValueError:
        return False
    return machine == m.group(1) and (major, minor) >= (2, int(m.group(2)))


def machine_words(machine: str | None = None, glibc: str | None = None) -> str:
    """This machine (or ``machine`` with ``glibc``) as a target's platform is judged: "x86_64, glibc 2.36"."""
    arch = machine if machine is not None else host_platform.machine()
    if glibc is None:
        lib, version = host_platform.libc_ver()
        glibc = version if lib == "glibc" else None
    return f"{arch}, glibc {glibc}" if glibc else f"{arch}, no glibc"


def no_targets(where: str, chosen: str, platform: str | None) -> LockError:
    """``--target chosen`` given for the one-target lock (or spec) ``where``: it has no ``[targets]``."""
    return LockError(f"{where}: --target {chosen}: no such target; the lock has no [targets] (one target, "
                     f"{platform or 'this machine'}'s); drop --target")


def reported_note(name: str | None, platform: str | None, what: str = "the report") -> str | None:
    """Of a command on a whole lock of several targets (``pick(whole=True)``) that reports one target, ``name``
    (of ``platform``): a note saying so where this machine is not one of it; None where it is (or no target)."""
    if name is None or platform is None or runs_here(platform):
        return None
    return (f"{what} is of target {name} ({platform}): this machine ({machine_words()}) is none of the "
            "lock's targets; --target NAME for another")


def pick(platforms: Mapping[str, str], chosen: str | None, where: str, *, machine: str | None = None,
         glibc: str | None = None, whole: bool = False) -> str:
    """The target of ``platforms`` (name -> platform) a command works on: ``chosen`` (``--target``), else the
    one whose platform this machine runs; ``LockError`` naming ``where`` when none or several do. ``whole``:
    the command works on the whole file (an upgrade, a diff, a patch's pins), so where none or several run
    here it takes the first by name rather than fail (a machine of no target may relock them all)."""
    listed = ", ".join(f"{name} ({plat})" for name, plat in sorted(platforms.items()))
    if chosen is not None:
        if chosen in platforms:
            return chosen
        hint = did_you_mean(chosen, sorted(platforms), before=" (", after=")")
        raise LockError(f"{where}: --target {chosen}: no such target{hint}; targets: {listed}")
    here = [name for name, plat in sorted(platforms.items()) if runs_here(plat, machine, glibc)]
    if len(here) == 1:
        return here[0]
    if whole:
        return sorted(platforms)[0]
    if not here:
        raise LockError(f"{where}: this machine ({machine_words(machine, glibc)}) is none of the targets: "
                        f"{listed}; name one with --target NAME (a sync installs only on a machine of its target)")
    raise LockError(f"{where}: {len(here)} targets run on this machine ({', '.join(here)}); choose one with "
                    "--target NAME")
