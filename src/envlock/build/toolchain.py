"""A build's compilers: the locked toolchain it declares, else what the host has (recorded by version).

``[builds.NAME] toolchain = [...]`` names PyPI wheels that hold compilers and build tools:
NVIDIA's CUDA set (``nvidia-cuda-nvcc``, ``nvidia-nvvm``, ``nvidia-cuda-crt``,
``nvidia-cuda-runtime``, ``nvidia-cuda-cccl``), ``cmake``, ``ninja``. They are resolved and
locked by sha256 with the build's other inputs (``build.plan``), fetched into the store like any
wheel (``buildinputs.backend_wheels``), and unpacked here once per toolchain digest (the digest
of their sha256s) into ``toolchains/<digest>/tree``, read-only, which every build naming the same
wheels shares, every mtime ``STORE_MTIME`` (ptxas writes a header's into a ``-lineinfo`` cubin).
A wheel's ``*.data/scripts`` go to ``bin/``; its other files keep their paths
(``nvidia/cu13/bin/nvcc``, ``cmake/data/bin/cmake``). The CUDA root gets the ``lib64 -> lib``
link ``nvcc.profile`` needs. ``Toolchain.env`` then puts it first for the build: nvcc,
``CUDA_HOME``/``CUDA_PATH``/``CUDACXX``, ``CUDAToolkit_ROOT``, ``PATH`` (cmake and ninja).

What a toolchain does not provide comes from the host, recorded in the input digest by its
version line (``host_tools``): the C and C++ compilers and the linker always, nvcc and cmake
when no toolchain provides them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import re
import stat
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envlock import runner
from envlock.errors import BuildError
from envlock.store import trees
from envlock.store.store import STORE_MTIME, Store

TOOLCHAIN_FORMAT = 2  # 2: every mtime STORE_MTIME; toolchain.json names its wheels' sha256s
_SHA256 = re.compile(r"[0-9a-f]{64}")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_DATA = re.compile(r"^[^/]+\.data/(scripts|data|purelib|platlib|headers)/(.+)$")
#: The tools a toolchain may provide, as the host's version lines name them.
TOOLS = ("nvcc", "cmake", "ninja")
#: The wheel that provides each tool (its version line then leaves the input digest: the hash is there).
PROVIDERS = {"nvidia-cuda-nvcc": "nvcc", "cmake": "cmake", "ninja": "ninja"}
#: Variables that point a build at a CUDA install: a declared toolchain sets each to its own.
CUDA_VARS = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR", "CUDAToolkit_ROOT")


# -- the locked toolchain -------------------------------------------------------


def _pin_name(line: str) -> str:
    return str(canonicalize_name(line.split()[0].partition("==")[0]))


def provided(lines: Iterable[str]) -> set[str]:
    """The tools (``TOOLS``) the locked toolchain ``lines`` provide."""
    return {PROVIDERS[name] for name in map(_pin_name, lines) if name in PROVIDERS}


def resolve(requirements: Sequence[str], what: str,
            compile_: Callable[[Sequence[str]], tuple[str, ...]]) -> tuple[str, ...]:
    """``requirements`` resolved with hashes by ``compile_`` (one "name==version --hash=..." line each);
    ``BuildError`` when the resolution brings in a package they do not name: the nvcc wheel requires
    nvvm, crt and the runtime with no version, and a compiler set taken from the newest of each is no
    toolchain anyone tested."""
    if not requirements:
        return ()
    lines = compile_(requirements)
    named = {canonicalize_name(Requirement(r).name) for r in requirements}
    if unnamed := sorted(line.split()[0] for line in lines if _pin_name(line) not in named):
        raise BuildError(f"{what}: toolchain: {', '.join(unnamed)} came in unnamed (a dependency of a toolchain "
                         "wheel, which names no version); name each with == in toolchain = [...]",
                         details=[f"toolchain = {list(requirements)!r}"])
    return lines


# -- the host's tools ----------------------------------------------------------


def _first_line(argv: Sequence[str], prefer: str | None = None) -> str:
    result = runner.run(argv)
    if not result.ok:
        return "absent"
    lines = [line.strip() for line in (result.stdout or result.stderr).splitlines() if line.strip()]
    if prefer:
        lines = [line for line in lines if prefer in line] or lines
    return lines[0] if lines else "absent"


@functools.cache
def host_tools() -> dict[str, str]:
    """First version line of each compiler/build tool a backend may use ("absent" if missing)."""
    return {
        "cc": _first_line(["cc", "--version"]),
        "c++": _first_line(["c++", "--version"]),
        "cmake": _first_line(["cmake", "--version"]),
        "nvcc": _first_line(["nvcc", "--version"], prefer="release"),
        "uv": _first_line([runner.uv_bin(), "--version"]),
    }


@functools.cache
def host_linker() -> str:
    """The host linker's version line (binutils' ``ld``): a toolchain of wheels brings none."""
    return _first_line(["ld", "--version"])


def recorded_tools(provided: Iterable[str]) -> dict[str, str]:
    """The host tools' version lines an input digest records: all of them, but those a declared
    toolchain ``provided`` (its wheels' hashes stand for them); with a toolchain, the linker too."""
    provided = set(provided)
    tools = {k: v for k, v in host_tools().items() if k not in provided}
    if provided:
        tools["ld"] = host_linker()
    return tools


# -- a toolchain in the store --------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    """A toolchain unpacked in the store: where its tools are (``tree``-relative in ``toolchain.json``)."""

    digest: str  # sha256 over its wheels' sha256 (hex)
    tree: Path  # the unpacked wheels (read-only)
    tools: Mapping[str, str]  # "nvcc" / "cmake" / "ninja" -> its path under tree
    cuda: str | None  # the CUDA root under tree ("nvidia/cu13"), if it holds nvcc
    bin_dirs: tuple[str, ...]  # under tree: the folders put first on PATH
    unpacked: bool = False  # True: unpacked by this call (else found in the store)

    def at(self, tree: Path) -> Toolchain:
        """The same toolchain seen at ``tree`` (bind-mounted there for a fixed build path)."""
        return replace(self, tree=tree)

    def env(self, path: str) -> dict[str, str]:
        """The variables that put this toolchain first, ``path`` (the build's PATH) after its own folders."""
        out = {"PATH": os.pathsep.join([*(str(self.tree / d) for d in self.bin_dirs), path])}
        if self.cuda is not None:
            root = str(self.tree / self.cuda)
            out.update({var: root for var in CUDA_VARS})
            out["CUDACXX"] = str(self.tree / self.tools["nvcc"])
        return out

    def cmake_defines(self) -> dict[str, str]:
        """CMake cache entries naming this toolchain's CUDA compiler and toolkit root."""
        if self.cuda is None:
            return {}
        return {"CMAKE_CUDA_COMPILER": str(self.tree / self.tools["nvcc"]),
                "CUDAToolkit_ROOT": str(self.tree / self.cuda)}


def digest(wheels: Sequence[Path]) -> str:
    """The toolchain digest of ``wheels`` (store files, ``wheels/<sha256>/<filename>``)."""
    lines = sorted(f"{_sha_of(w)} {w.name}" for w in wheels)
    text = json.dumps({"format": TOOLCHAIN_FORMAT, "wheels": lines}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _sha_of(wheel: Path) -> str:
    if not _SHA256.fullmatch(wheel.parent.name):
        raise ValueError(f"{wheel}: not a store wheel (wheels/<sha256>/<filename>)")
    return wheel.parent.name


def unpacked(store: Store, wheels: Sequence[Path], *, what: str) -> Toolchain:
    """The toolchain of ``wheels`` in the store: unpacked there once (by the first build that needs
    it; a concurrent one waits for it), then only read. ``BuildError`` names a wheel that cannot be."""
    key = digest(wheels)
    if (found := _load(store, key)) is not None:
        return found
    with store.locked(f"toolchain-{key[:32]}"):
        if (found := _load(store, key)) is not None:
            return found
        with store.new_entry("toolchains", key) as work:
            tree = work / "tree"
            owners: dict[str, str] = {}
            for wheel in sorted(wheels, key=lambda w: w.name):
                _unpack_wheel(wheel, tree, owners, what=what)
            meta = _locate(tree, [w.name for w in wheels], key)
            meta["wheel-sha256"] = sorted(_sha_of(w) for w in wheels)  # what gc matches a lock's lines with
            (work / "toolchain.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            _read_only(tree)
            trees.settle_mtimes(tree, STORE_MTIME)  # ptxas writes a header's mtime into a -lineinfo cubin
    loaded = _load(store, key)
    assert loaded is not None
    return replace(loaded, unpacked=True)


def in_store(store: Store) -> dict[str, frozenset[str] | None]:
    """Each unpacked toolchain in the store: its digest -> the sha256s of its wheels (None when its
    ``toolchain.json`` does not say: an older format, or an entry cut short)."""
    found: dict[str, frozenset[str] | None] = {}
    for _kind, key, path in store.entries(("toolchains",)):
        try:
            meta = json.loads((path / "toolchain.json").read_text())
            shas = meta["wheel-sha256"] if meta.get("format") == TOOLCHAIN_FORMAT else None
            found[key] = frozenset(shas) if isinstance(shas, list) else None
        except (OSError, ValueError, TypeError, KeyError):
            found[key] = None
    return found


def made_from(wheels: frozenset[str], lines: Sequence[str]) -> bool:
    """Whether a toolchain of ``wheels`` (sha256s) is the one locked as ``lines`` ("name==version
    --hash=sha256:..."): one wheel of each line (whichever this machine took), and nothing else."""
    hashes = [set(_HASH.findall(line)) for line in lines]
    return (bool(lines) and len(wheels) == len(hashes) and all(len(h & wheels) == 1 for h in hashes)
            and wheels <= set().union(*hashes))


def _load(store: Store, key: str) -> Toolchain | None:
    entry = store.path("toolchains", key)
    try:
        meta = json.loads((entry / "toolchain.json").read_text())
    except FileNotFoundError:
        return None
    return Toolchain(key, entry / "tree", dict(meta["tools"]), meta["cuda"], tuple(meta["bin-dirs"]))


def _unpack_wheel(wheel: Path, tree: Path, owners: dict[str, str], *, what: str) -> None:
    """Every file of ``wheel`` under ``tree`` (``*.data/scripts`` into ``bin/``), exec bits kept; a path
    another wheel wrote with other bytes, or one that would land outside ``tree``, is refused."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise BuildError(f"{what}: toolchain wheel {wheel.name}: cannot be read ({exc})") from None
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            rel = _target(info.filename)
            if rel is None:
                raise BuildError(f"{what}: toolchain wheel {wheel.name}: member {info.filename!r} would land "
                                 "outside the toolchain's folder; refused")
            dest = tree / rel
            data = archive.read(info)
            if rel in owners:
                if dest.read_bytes() != data:
                    raise BuildError(f"{what}: toolchain wheels {owners[rel]} and {wheel.name} both hold {rel}, "
                                     "with other bytes: one toolchain cannot hold both")
                continue
            owners[rel] = wheel.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            if (info.external_attr >> 16) & 0o111 or dest.parent.name == "bin":  # a zip may carry no mode
                dest.chmod(0o755)


def _target(name: str) -> str | None:
    """Where wheel member ``name`` goes under the tree (None: it would climb out)."""
    if m := _DATA.match(name):
        kind, rest = m.groups()
        name = {"scripts": "bin/", "headers": "include/"}.get(kind, "") + rest
    if name.startswith("/") or "\\" in name:
        return None
    norm = posixpath.normpath(name)
    if norm.startswith("../") or norm in ("..", "."):
        return None
    return norm


def _locate(tree: Path, wheels: list[str], key: str) -> dict[str, object]:
    """What ``toolchain.json`` says of ``tree``: each tool's path, the CUDA root (with its ``lib64``
    link made), the folders for PATH."""
    tools: dict[str, str] = {}
    bin_dirs: set[str] = set()
    for top, dirs, files in os.walk(tree):
        dirs.sort()
        here = Path(top)
        if here.name != "bin":
            continue
        for tool in TOOLS:
            if tool in files and tool not in tools and os.access(here / tool, os.X_OK):
                tools[tool] = (here / tool).relative_to(tree).as_posix()
                bin_dirs.add(here.relative_to(tree).as_posix())
    cuda = None
    if "nvcc" in tools:
        cuda = posixpath.dirname(posixpath.dirname(tools["nvcc"]))
        root = tree / cuda
        if (root / "lib").is_dir() and not (root / "lib64").exists():
            (root / "lib64").symlink_to("lib")  # nvcc.profile: LIBRARIES =+ -L"$(TOP)/lib64"
    return {"format": TOOLCHAIN_FORMAT, "digest": key, "wheels": sorted(wheels), "tools": tools, "cuda": cuda,
            "bin-dirs": sorted(bin_dirs)}


def _read_only(tree: Path) -> None:
    """Every file and folder under ``tree`` made read-only (a build that writes into it fails)."""
    for top, _dirs, files in os.walk(tree, topdown=False):
        for name in files:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                os.chmod(path, 0o555 if mode & stat.S_IXUSR else 0o444)
        os.chmod(top, 0o555)
