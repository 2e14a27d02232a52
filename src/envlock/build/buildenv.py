"""The environment a build runs in: its toolchain first, its paths kept out of what it writes.

The variables (``build_env``): the spec's ``env``, the locked toolchain's (``Toolchain.env``),
the compilers' path maps below, ``SOURCE_DATE_EPOCH`` and a fixed locale, time zone and hash
seed. CMake gets the FetchContent inputs and the toolchain's CUDA compiler and toolkit root as
cache entries (``config_settings`` for scikit-build-core, ``CMAKE_ARGS`` for other backends).

A build runs in a scratch folder whose path holds a pid and a random suffix, and reads
FetchContent inputs and a toolchain from the store, whose path is ``$ENVLOCK_HOME``'s. Compilers
write paths into their output, so each is mapped away:

- gcc (and nvcc's host compiler): ``-ffile-prefix-map=REAL=/envlock/...`` in ``CFLAGS``,
  ``CXXFLAGS`` and (``-Xcompiler=``) ``CUDAFLAGS``;
- nvcc's front end (cudafe++) hashes the source file's path into the names of internal-linkage
  symbols (a kernel in an anonymous namespace) and ``-rdc`` module ids, and no gcc flag reaches it:
  a compiler launcher (``CMAKE_CUDA_COMPILER_LAUNCHER``, ``LAUNCHER`` below, written into the
  scratch folder) adds ``-Xcudafe --orig_src_path_name=<the -c input, mapped>``;
- nvcc names its temp files ``tmpxft_<pid>_...`` and writes them into ``.strtab``:
  ``NVCC_APPEND_FLAGS=--objdir-as-tempdir`` puts them beside the object, under a fixed name;
- ``-lineinfo`` and ``-G`` write the paths themselves into the cubin and its DWARF, unmapped: where
  the kernel lets envlock make a private mount namespace (``unshare``), the build runs with its
  scratch folder bind-mounted at one fixed path (``FIXED``) and its FetchContent inputs and
  toolchain inside it, so every build sees the same paths. ``BuildPaths.unfixed`` says why not,
  when it cannot (``build --check`` reports it).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envlock import runner
from envlock.build.toolchain import Toolchain
from envlock.errors import BuildError
from envlock.model.spec import BuildSpec
from envlock.store import trees
from envlock.store.store import STORE_MTIME

SCRATCH_MAP = "/envlock/build"
VENV_MAP = "/envlock/build-env"
TOOLCHAIN_MAP = "/envlock/toolchain"
#: Where the scratch folder is bind-mounted in a build's private mount namespace. Only a folder
#: here: each build mounts its own scratch over it, seen by that build alone.
FIXED = Path("/tmp/envlock-build")
#: Under the scratch folder: where FetchContent inputs and the toolchain are mounted, the launcher written.
INNER = ".envlock"
#: What a build's output risks when its path could not be fixed.
UNFIXED_RISK = ("nvcc -lineinfo or -G writes the build's paths (its scratch folder, the store's FetchContent "
                "inputs and toolchain) into the cubins and their DWARF, and an -rdc device link the toolchain's "
                "library path into its cubin, so such a build differs from one built in another ENVLOCK_HOME "
                "or at the fixed path")

LAUNCHER = r"""#!/bin/sh
# envlock's CUDA compiler launcher (CMAKE_CUDA_COMPILER_LAUNCHER): runs "$@" (nvcc and its
# arguments) with -Xcudafe --orig_src_path_name=<the -c input, mapped through ENVLOCK_PATH_MAP>,
# so that cudafe++ hashes a path that does not depend on where the build ran (the names of
# internal-linkage symbols, -rdc module ids). ENVLOCK_PATH_MAP: lines "FROM<tab>TO"; the longest
# FROM that is a prefix of the input wins.
src=
prev=
for arg in "$@"; do
    if [ "$prev" = "-c" ]; then src=$arg; fi
    prev=$arg
done
if [ -z "$src" ]; then exec "$@"; fi
case $src in /*) ;; *) src=$PWD/$src ;; esac
tab=$(printf '\t')
mapped=$src
best=0
while IFS= read -r pair; do
    from=${pair%%"$tab"*}
    to=${pair#*"$tab"}
    if [ -z "$from" ] || [ "$from" = "$pair" ]; then continue; fi
    case $src in
        "$from"/*)
            if [ "${#from}" -gt "$best" ]; then best=${#from}; mapped=$to${src#"$from"}; fi ;;
    esac
done <<EOF
$ENVLOCK_PATH_MAP
EOF
exec "$@" -Xcudafe "--orig_src_path_name=$mapped"
"""

_MOUNTS = r"""set -e
fixed=$1
mount --bind "$2" "$fixed"
shift 2
while [ "$1" != "--" ]; do mount --bind "$1" "$2"; shift 2; done
shift
cd "$fixed"
exec "$@"
"""


@dataclass(frozen=True)
class BuildPaths:
    """Where a build's folders are as the build sees them, and what each maps to in its output."""

    scratch: Path  # the scratch folder (``FIXED`` in a private mount namespace)
    fetchcontent: Mapping[str, Path] = field(default_factory=dict)  # each input's tree
    toolchain: Path | None = None  # the toolchain's tree
    mounts: tuple[tuple[Path, Path], ...] = ()  # (real, seen) bind mounts inside the scratch folder
    unfixed: str | None = None  # why the build path is not fixed (None: it is)
    real_scratch: Path | None = None  # the scratch folder outside the namespace

    @property
    def launcher(self) -> Path:
        return self.scratch / INNER / "nvcc-launcher"

    def prefix_map(self, venv: bool) -> list[tuple[Path, str]]:
        """(seen path, mapped name) for every folder the build reads, the most specific last (gcc
        takes the last ``-ffile-prefix-map`` that matches)."""
        maps = [(self.scratch, SCRATCH_MAP)]
        maps += [(path, f"/envlock/fetchcontent/{name}") for name, path in sorted(self.fetchcontent.items())]
        if self.toolchain is not None:
            maps.append((self.toolchain, TOOLCHAIN_MAP))
        if venv:
            maps.append((self.scratch / "venv", VENV_MAP))
        return maps

    def wrap(self) -> list[str]:
        """The argv that runs a command in the build's mount namespace ([]: as it is)."""
        prefix = _namespace()[0]
        if self.unfixed is not None or prefix is None or self.real_scratch is None:
            return []
        pairs = [str(p) for real, seen in self.mounts for p in (real, seen)]
        return [*prefix, "sh", "-c", _MOUNTS, "envlock-build", str(FIXED), str(self.real_scratch), *pairs, "--"]


def prepare(scratch: Path, fetchcontent: Mapping[str, Path], toolchain: Path | None, *, epoch: int) -> BuildPaths:
    """The paths of a build in ``scratch`` (made here: its launcher, its mount points): at ``FIXED``
    when a private mount namespace can be made, else where they are (``unfixed`` says why). The
    files it reads get fixed mtimes (``settle``)."""
    paths = _paths(scratch, fetchcontent, toolchain)
    settle(scratch, fetchcontent, epoch)
    return paths


def _paths(scratch: Path, fetchcontent: Mapping[str, Path], toolchain: Path | None) -> BuildPaths:
    inner = scratch / INNER
    inner.mkdir(parents=True, exist_ok=True)
    launcher = inner / "nvcc-launcher"
    launcher.write_text(LAUNCHER)
    launcher.chmod(0o755)
    prefix, why = _namespace()
    inside = [path for path in (*fetchcontent.values(), *([toolchain] if toolchain else []))
              if path == FIXED or FIXED in path.parents]
    if prefix is None or inside:
        reason = why or f"{inside[0]} is under {FIXED}, which the build's scratch folder would hide"
        return BuildPaths(scratch, dict(fetchcontent), toolchain, unfixed=reason, real_scratch=scratch)
    mounts: list[tuple[Path, Path]] = []
    seen_fc: dict[str, Path] = {}
    for name, path in sorted(fetchcontent.items()):
        (inner / "fetchcontent" / name).mkdir(parents=True, exist_ok=True)
        seen_fc[name] = FIXED / INNER / "fetchcontent" / name
        mounts.append((path, seen_fc[name]))
    seen_tc = None
    if toolchain is not None:
        (inner / "toolchain").mkdir(exist_ok=True)
        seen_tc = FIXED / INNER / "toolchain"
        mounts.append((toolchain, seen_tc))
    return BuildPaths(FIXED, seen_fc, seen_tc, tuple(mounts), real_scratch=scratch)


def settle(scratch: Path, fetchcontent: Mapping[str, Path], epoch: int) -> None:
    """Fixed mtimes for what a build reads: ``epoch`` (its ``SOURCE_DATE_EPOCH``) for the scratch
    folder (its copy of the source), ``STORE_MTIME`` for the store's FetchContent inputs (written
    only where one differs: an entry made before this rule, or moved by hand). ptxas records each
    source file's mtime in a ``-lineinfo`` or ``-G`` cubin's DWARF line table, and a checkout made at
    another moment would build other bytes. (The toolchain's tree gets its mtimes when unpacked.)"""
    for tree, when in ((scratch, epoch), *((path, STORE_MTIME) for _name, path in sorted(fetchcontent.items()))):
        try:
            trees.settle_mtimes(tree, when)
        except OSError as exc:
            raise BuildError(f"{tree}: cannot set the mtimes of the files a build reads ({exc.strerror}); "
                             "ptxas writes them into -lineinfo and -G cubins") from None


def _namespace() -> tuple[tuple[str, ...] | None, str | None]:
    """The ``unshare`` argv that makes a private mount namespace a bind mount works in, or (None, why not)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None, "no unshare command (util-linux) to make a private mount namespace"
    return _probe(unshare)


@functools.cache
def _probe(unshare: str) -> tuple[tuple[str, ...] | None, str | None]:
    """``_namespace`` for the ``unshare`` at that path, asked once."""
    try:
        if FIXED.is_symlink() or (FIXED.exists() and not FIXED.is_dir()):
            return None, f"{FIXED} is not a folder"
        FIXED.mkdir(mode=0o755, exist_ok=True)
    except OSError as exc:
        return None, f"cannot make {FIXED} ({exc.strerror})"
    tries = [("--mount",), ("--user", "--map-root-user", "--mount")]
    if os.geteuid() != 0:
        tries.reverse()
    last = ""
    with tempfile.TemporaryDirectory(prefix="envlock-probe-") as tmp:
        (Path(tmp) / "probe").write_text("")
        for flags in tries:
            prefix = (unshare, *flags, "--propagation", "private")
            probe = runner.run([*prefix, "sh", "-c", 'mount --bind "$1" "$2" && test -e "$2/probe"', "probe", tmp,
                                str(FIXED)])
            if probe.ok:
                return prefix, None
            last = probe.tail(1) or f"exit {probe.returncode}"
    return None, f"the kernel did not let `unshare` make a private mount namespace ({last})"


@functools.cache
def nvcc_knows_objdir(nvcc: str) -> bool:
    """Whether ``nvcc`` takes ``--objdir-as-tempdir`` (an older one stops at the unknown option)."""
    return runner.run([nvcc, "--objdir-as-tempdir", "--version"]).ok


def compiler_env(spec_env: Mapping[str, str], paths: BuildPaths, *, venv: bool, nvcc: str | None) -> dict[str, str]:
    """The variables that keep ``paths`` out of the compilers' output, over the build's own ``spec_env``:
    the prefix maps, the nvcc launcher and (when ``nvcc``, the one the build runs, takes it) temp files
    beside the objects."""
    env = dict(spec_env)
    maps = paths.prefix_map(venv)
    flags = " ".join(f"-ffile-prefix-map={src}={dst}" for src, dst in maps)
    cuda_flags = " ".join(f"-Xcompiler=-ffile-prefix-map={src}={dst}" for src, dst in maps)
    for var, value in (("CFLAGS", flags), ("CXXFLAGS", flags), ("CUDAFLAGS", cuda_flags)):
        env[var] = f"{env[var]} {value}" if env.get(var) else value
    env["ENVLOCK_PATH_MAP"] = "".join(f"{src}\t{dst}\n" for src, dst in maps)
    theirs = env.get("CMAKE_CUDA_COMPILER_LAUNCHER")  # a list, as CMake reads it: ours runs theirs
    env["CMAKE_CUDA_COMPILER_LAUNCHER"] = f"{paths.launcher};{theirs}" if theirs else str(paths.launcher)
    if nvcc is not None and nvcc_knows_objdir(nvcc):
        env["NVCC_APPEND_FLAGS"] = " ".join(filter(None, [env.get("NVCC_APPEND_FLAGS"), "--objdir-as-tempdir"]))
    return env


def build_env(spec: BuildSpec, epoch: int, paths: BuildPaths, tools: Toolchain | None,
              backend_is_skbuild: bool) -> dict[str, str]:
    """The variables of a build of ``spec`` at ``paths``: the spec's, the toolchain first, its paths
    mapped away, a fixed clock (``epoch``), locale, time zone and hash seed."""
    env = dict(spec.env)
    nvcc = shutil.which("nvcc")
    if tools is not None:
        env.update(_seen(tools, paths).env(os.environ.get("PATH", os.defpath)))
        nvcc = str(tools.tree / tools.tools["nvcc"]) if "nvcc" in tools.tools else nvcc
    env = compiler_env(env, paths, venv=not spec.isolation, nvcc=nvcc)
    if not backend_is_skbuild and (defines := cmake_defines(paths, tools)):
        env["CMAKE_ARGS"] = " ".join([env.get("CMAKE_ARGS", ""), *(f"-D{k}={v}" for k, v in defines.items())]).strip()
    env.update({"SOURCE_DATE_EPOCH": str(epoch), "PYTHONHASHSEED": "0", "TZ": "UTC", "LC_ALL": "C"})
    return env


def _seen(tools: Toolchain, paths: BuildPaths) -> Toolchain:
    """``tools`` where the build sees it (mounted inside its scratch folder, at a fixed path)."""
    return tools.at(paths.toolchain) if paths.toolchain is not None else tools


def cmake_defines(paths: BuildPaths, tools: Toolchain | None) -> dict[str, str]:
    """The CMake cache entries envlock hands a build: its FetchContent inputs, its toolchain's CUDA."""
    out = {f"FETCHCONTENT_SOURCE_DIR_{name.upper()}": str(path) for name, path in sorted(paths.fetchcontent.items())}
    if paths.fetchcontent:
        out["FETCHCONTENT_FULLY_DISCONNECTED"] = "ON"
    if tools is not None:
        out.update(_seen(tools, paths).cmake_defines())
    return out


def config_settings(spec: BuildSpec, paths: BuildPaths, tools: Toolchain | None,
                    backend_is_skbuild: bool) -> list[str]:
    """``--config-setting`` arguments of ``uv build``: the spec's; for scikit-build-core its build folder
    in the scratch folder and ``cmake_defines``."""
    settings = dict(spec.config_settings)
    if backend_is_skbuild:
        settings.setdefault("build-dir", str(paths.scratch / "cmake-build"))
        settings.update((f"cmake.define.{k}", v) for k, v in cmake_defines(paths, tools).items())
    out: list[str] = []
    for key, value in sorted(settings.items()):
        out += ["--config-setting", f"{key}={value}"]
    return out
