"""A git repository shaped like SGLang, made of our own tiny files, for source/patch/build tests.

    python/            a setuptools package ``sglike`` (stands in for ``sglang``)
    sgl-kernel/        a scikit-build-core + CMake C extension ``sglike-kernel``
                       (stands in for ``sgl-kernel``): CPython C API, no third-party code;
                       its CMakeLists pulls a header-only dependency with FetchContent
                       from a URL that does not exist, so it builds only when envlock
                       hands CMake a pre-fetched FETCHCONTENT_SOURCE_DIR.

Commits: ``pin`` (the pinned commit) and ``upstream`` (a later one that contains patch
0001's change and rewrote the lines patch 0002 touches). Patches (our own, written with
``git diff`` against ``pin``): 0001 adds compute capability 12 to a table, 0002 adds a
``mul`` function to the C extension, 0003 makes the kernel import soft.
Against ``pin`` all three apply; against ``upstream``: already-applied, conflict, applies.

A second repository, ``kdep``, is the FetchContent dependency (one header), tagged ``v1.0``.
With ``-DSGLIKE_WITH_KARCH=ON`` the kernel also reads ``repo-karch``, a FetchContent input
declared by an archive URL (as upstream declares nlohmann/json): ``karch_archive`` writes such
a tar.gz (one top folder, one header), and ``hostile_archive`` one with a member that escapes.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kit.index import IndexServer
from kit.universe import backend_wheels
from kit.wheels import build_wheel

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "fixture",
    "GIT_AUTHOR_EMAIL": "fixture@localhost",
    "GIT_COMMITTER_NAME": "fixture",
    "GIT_COMMITTER_EMAIL": "fixture@localhost",
}


def git(repo: Path, *args: str, date: str = "2026-03-07T10:06:00+00:00", raw: bool = False) -> str:
    env = {**os.environ, **GIT_ENV, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    proc = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True)
    return proc.stdout if raw else proc.stdout.strip()


def init_repo(repo: Path) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")


def commit_all(repo: Path, message: str, *, date: str = "2026-03-07T10:06:00+00:00") -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, date=date)
    return git(repo, "rev-parse", "HEAD")


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# -- the FetchContent dependency ---------------------------------------------

KDEP_NAME = "repo-kdep"  # as in FetchContent_Declare(repo-kdep ...), shaped like sgl-kernel's names


KDEP_TAG = "v1.0"  # a tag on the kdep commit, as upstream pins triton by v3.5.1


def make_kdep(root: Path) -> tuple[Path, str]:
    """A one-header git repo, its commit tagged ``KDEP_TAG``; returns (repo, commit)."""
    repo = root / "kdep"
    init_repo(repo)
    write(repo, {"include/kdep.h": "#pragma once\n#define KDEP_MAGIC 42\n"})
    commit = commit_all(repo, "kdep: one header")
    git(repo, "tag", "-a", KDEP_TAG, "-m", f"kdep {KDEP_TAG}")  # annotated: ls-remote must peel it
    return repo, commit


KARCH_NAME = "repo-karch"  # FetchContent_Declare(repo-karch URL ...), an archive input


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        for info, data in members:
            info.mtime = 1772877960
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def karch_archive(dest: Path, magic: int = 7, *, name: str = "karch-1.0.tar.gz") -> Path:
    """A GitHub-archive-shaped tar.gz: one top folder holding one header (``KARCH_MAGIC``)."""
    top = tarfile.TarInfo("karch-1.0")
    top.type, top.mode = tarfile.DIRTYPE, 0o755
    return _tar(dest / name, [(top, None), _file("karch-1.0/include/karch.h",
                                                 f"#pragma once\n#define KARCH_MAGIC {magic}\n".encode())])


def hostile_archive(dest: Path, kind: str) -> Path:
    """A tar.gz with one member that would land outside the folder it is unpacked into."""
    ok = _file("karch-1.0/include/karch.h", b"#define KARCH_MAGIC 7\n")
    bad: tuple[tarfile.TarInfo, bytes | None]
    if kind == "dotdot":
        bad = _file("karch-1.0/../x", b"escaped\n")
    elif kind == "absolute":
        bad = _file("/envlock-absolute/x", b"escaped\n")
    elif kind in ("symlink", "hardlink"):
        info = tarfile.TarInfo("karch-1.0/include/host.h")
        info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
        info.linkname = "../../../etc/passwd" if kind == "symlink" else "/etc/passwd"
        bad = (info, None)
    else:
        info = tarfile.TarInfo("karch-1.0/fifo")
        info.type = tarfile.FIFOTYPE
        bad = (info, None)
    return _tar(dest / f"hostile-{kind}.tar.gz", [ok, bad])


# -- the SGLang-shaped repository -------------------------------------------

PY_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sglike"
version = "0.5.9"
requires-python = ">=3.10"
dependencies = ["sglike-kernel==0.1.0"]  # as sglang pins sgl-kernel: the env builds it instead

[tool.setuptools.packages.find]
include = ["sglike*"]
"""

PY_INIT = '''\
"""sglike: a tiny stand-in for a serving framework."""

from sglike.comm import max_size

try:
    from sglike_kernel import add as kernel_add
except ImportError as exc:
    raise ImportError("sglike needs sglike-kernel") from exc

__all__ = ["kernel_add", "max_size"]
'''

PY_COMM = """\
MiB = 1024 * 1024

# all-reduce size limits by compute capability major, then world size
MAX_SIZES = {
    9: {
        2: 64 * MiB,
        4: 64 * MiB,
    },
    10: {
        2: 64 * MiB,
        4: 64 * MiB,
    },
}


def max_size(cc: int, world: int) -> int:
    return MAX_SIZES[cc][world]
"""

KERNEL_PYPROJECT = """\
[build-system]
requires = ["scikit-build-core>=0.10", "torchlike"]
build-backend = "scikit_build_core.build"

[project]
name = "sglike-kernel"
version = "0.1.0"
requires-python = ">=3.10"

[tool.scikit-build]
minimum-version = "0.10"
cmake.version = ">=3.15"
cmake.build-type = "Release"
ninja.make-fallback = true
wheel.packages = ["python/sglike_kernel"]
"""

KERNEL_CMAKE = """\
cmake_minimum_required(VERSION 3.15)
project(sglike_kernel LANGUAGES C)

find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)

# Like sgl-kernel: a dependency fetched at configure time. The URL does not exist:
# the build works only when the caller supplies FETCHCONTENT_SOURCE_DIR_REPO-KDEP.
include(FetchContent)
FetchContent_Declare(
    repo-kdep
    GIT_REPOSITORY https://invalid.invalid/kdep.git
    GIT_TAG        @KDEP_COMMIT@
)
FetchContent_MakeAvailable(repo-kdep)
option(SGLIKE_WITH_KARCH "also read the archive input repo-karch" OFF)
if(SGLIKE_WITH_KARCH)
    # An archive input, as mscclpp declares nlohmann/json: a URL, and no hash.
    FetchContent_Declare(repo-karch URL https://invalid.invalid/karch-1.0.tar.gz)
    FetchContent_MakeAvailable(repo-karch)
endif()

# Like sgl-kernel against torch: compile against the headers of the env's own package.
execute_process(
    COMMAND "${Python_EXECUTABLE}" -c "import torchlike; print(torchlike.include_dir())"
    OUTPUT_VARIABLE TORCHLIKE_INCLUDE OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE TORCHLIKE_FOUND)
if(NOT TORCHLIKE_FOUND EQUAL 0)
    message(FATAL_ERROR "torchlike is not importable by ${Python_EXECUTABLE}")
endif()

python_add_library(_ops MODULE WITH_SOABI csrc/ops.c)
target_include_directories(_ops PRIVATE "${repo-kdep_SOURCE_DIR}/include" "${TORCHLIKE_INCLUDE}")
install(TARGETS _ops DESTINATION sglike_kernel)
if(SGLIKE_WITH_KARCH)  # a second module, compiled against the archive input's header
    python_add_library(_karch MODULE WITH_SOABI csrc/karch.c)
    target_include_directories(_karch PRIVATE "${repo-karch_SOURCE_DIR}/include")
    install(TARGETS _karch DESTINATION sglike_kernel)
endif()
"""

KERNEL_C = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "kdep.h"
#include "torchlike.h"

static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) {
        return NULL;
    }
    return PyLong_FromLong(a + b);
}

static PyObject *built_against(PyObject *self, PyObject *args) {
    return PyUnicode_FromString(TORCHLIKE_VERSION);
}

static PyObject *magic(PyObject *self, PyObject *args) {
    return PyLong_FromLong(KDEP_MAGIC);
}

static PyMethodDef methods[] = {
    {"add", add, METH_VARARGS, "a + b"},
    {"built_against", built_against, METH_NOARGS, "torchlike version compiled against"},
    {"magic", magic, METH_NOARGS, "a constant from the FetchContent dependency"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ops", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ops(void) { return PyModule_Create(&module); }
"""

KARCH_C = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "karch.h"

static PyObject *karch(PyObject *self, PyObject *args) {
    return PyLong_FromLong(KARCH_MAGIC);
}

static PyMethodDef methods[] = {
    {"karch", karch, METH_NOARGS, "a constant from the archive input"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_karch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__karch(void) { return PyModule_Create(&module); }
"""

KERNEL_INIT = """\
from sglike_kernel._ops import add, built_against, magic

__all__ = ["add", "built_against", "magic"]
"""


@dataclass(frozen=True)
class SgLike:
    repo: Path
    url: str  # file:// URL of the repo
    pin: str  # commit the patches are made against
    upstream: str  # later commit: has 0001, conflicts with 0002
    pin_time: int  # committer time of ``pin``
    patches_dir: Path  # holds 0001-*.patch, 0002-*.patch, 0003-*.patch
    patches: tuple[str, ...]  # patch file names, in order
    kdep_url: str
    kdep_commit: str


def _patch_from_edit(repo: Path, edit: Callable[[Path], None], header: str) -> str:
    edit(repo)
    diff = git(repo, "diff", "--no-color", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/", raw=True)
    git(repo, "checkout", "-q", "--", ".")
    return header + diff


def _edit_sm12(repo: Path) -> None:
    path = repo / "python/sglike/comm.py"
    path.write_text(
        path.read_text().replace(
            "    10: {\n        2: 64 * MiB,\n        4: 64 * MiB,\n    },\n}",
            "    10: {\n        2: 64 * MiB,\n        4: 64 * MiB,\n    },\n"
            "    12: {\n        2: 64 * MiB,\n        4: 64 * MiB,\n    },\n}",
        )
    )


def _edit_mul(repo: Path) -> None:
    path = repo / "sgl-kernel/csrc/ops.c"
    text = path.read_text()
    text = text.replace(
        "static PyObject *built_against(",
        "static PyObject *mul(PyObject *self, PyObject *args) {\n"
        "    long a, b;\n"
        '    if (!PyArg_ParseTuple(args, "ll", &a, &b)) {\n'
        "        return NULL;\n"
        "    }\n"
        "    return PyLong_FromLong(a * b);\n"
        "}\n\n"
        "static PyObject *built_against(",
    )
    text = text.replace(
        '    {"add", add, METH_VARARGS, "a + b"},\n',
        '    {"add", add, METH_VARARGS, "a + b"},\n    {"mul", mul, METH_VARARGS, "a * b"},\n',
    )
    path.write_text(text)
    init = repo / "sgl-kernel/python/sglike_kernel/__init__.py"
    init.write_text(
        init.read_text()
        .replace("built_against, magic", "built_against, magic, mul")
        .replace('"magic"]', '"magic", "mul"]')
    )


def _edit_soft_import(repo: Path) -> None:
    path = repo / "python/sglike/__init__.py"
    path.write_text(
        path.read_text().replace(
            'except ImportError as exc:\n    raise ImportError("sglike needs sglike-kernel") from exc\n',
            "except ImportError:  # the kernel is optional\n    kernel_add = None\n",
        )
    )


def _upstream_changes(repo: Path) -> None:
    _edit_sm12(repo)  # upstream took 0001 verbatim
    path = repo / "sgl-kernel/csrc/ops.c"  # ... and reworded the method table 0002 extends
    path.write_text(path.read_text().replace('"a + b"', '"add two integers"'))


PATCH_SPECS = (
    (
        "0001-sm12-max-sizes.patch",
        _edit_sm12,
        "Subject: Add compute capability 12 to MAX_SIZES\n"
        "Why: max_size() indexes the table directly: KeyError on SM120.\n"
        "Upstream: fixture\n---\n",
    ),
    (
        "0002-kernel-mul.patch",
        _edit_mul,
        "Subject: sgl-kernel: add mul()\nWhy: the fixture needs a C patch.\nUpstream: fixture\n---\n",
    ),
    (
        "0003-soft-kernel-import.patch",
        _edit_soft_import,
        "Subject: Soft import of the kernel\nWhy: import sglike without a kernel.\nUpstream: fixture\n---\n",
    ),
)


def make_sglike(root: Path, *, python_files: Mapping[str, str] | None = None) -> SgLike:
    """Create the repositories and patches under ``root``; ``python_files`` replace the python
    package's ``pyproject.toml`` (the example world builds it with an in-tree backend)."""
    kdep, kdep_commit = make_kdep(root)
    repo = root / "sglike"
    init_repo(repo)
    write(
        repo,
        {
            **({f"python/{k}": v for k, v in python_files.items()} if python_files is not None
               else {"python/pyproject.toml": PY_PYPROJECT}),
            "python/sglike/__init__.py": PY_INIT,
            "python/sglike/comm.py": PY_COMM,
            "sgl-kernel/pyproject.toml": KERNEL_PYPROJECT,
            "sgl-kernel/CMakeLists.txt": KERNEL_CMAKE.replace("@KDEP_COMMIT@", kdep_commit),
            "sgl-kernel/csrc/ops.c": KERNEL_C,
            "sgl-kernel/csrc/karch.c": KARCH_C,
            "sgl-kernel/python/sglike_kernel/__init__.py": KERNEL_INIT,
            "README.md": "sglike: test fixture\n",
        },
    )
    pin = commit_all(repo, "sglike: pinned commit", date="2026-03-07T10:06:00+00:00")
    pin_time = int(git(repo, "show", "-s", "--format=%ct", pin))
    patches_dir = root / "patches" / "sglike"
    patches_dir.mkdir(parents=True)
    names = []
    for name, edit, header in PATCH_SPECS:
        (patches_dir / name).write_text(_patch_from_edit(repo, edit, header))
        names.append(name)
    _upstream_changes(repo)
    upstream = commit_all(repo, "sglike: upstream moves on", date="2026-03-10T23:00:00+00:00")
    git(repo, "tag", "v0.6.0")
    return SgLike(
        repo=repo,
        url=repo.as_uri(),
        pin=pin,
        upstream=upstream,
        pin_time=pin_time,
        patches_dir=patches_dir,
        patches=tuple(names),
        kdep_url=kdep.as_uri(),
        kdep_commit=kdep_commit,
    )


# -- the torch stand-in ------------------------------------------------------


def torchlike_wheel(dest: Path, version: str) -> Path:
    """A wheel ``torchlike`` shipping a C header, as torch ships its headers for extensions."""
    return build_wheel(
        dest,
        "torchlike",
        version,
        files={
            "torchlike/__init__.py": (
                "import os\n\n"
                f"__version__ = {version!r}\n\n\n"
                "def include_dir():\n    return os.path.join(os.path.dirname(__file__), 'include')\n"
            ),
            "torchlike/include/torchlike.h": f'#pragma once\n#define TORCHLIKE_VERSION "{version}"\n',
        },
    )


# -- a build that is not reproducible ----------------------------------------

NONDET = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "nondet"\nversion = "1.0"\n\n[tool.setuptools]\npackages = ["nondet"]\n'
    ),
    "setup.py": (
        "import time\nfrom pathlib import Path\n\nfrom setuptools import setup\n\n"
        "# Deliberately not reproducible: the build time ends up inside the wheel.\n"
        "Path('nondet/stamp.py').write_text(f'BUILT_AT = {time.time_ns()!r}\\n')\n"
        "setup()\n"
    ),
    "nondet/__init__.py": "",
    "nondet/stamp.py": "BUILT_AT = 0\n",
}


#: The torch stand-in's version on the kernel's index.
KERNEL_TORCH = "2.12.0.dev20260307"


def kernel_index(folder: Path, *, with_archives: bool) -> IndexServer:
    """An index (not started) for building the kernel: the build backends, the torch stand-in and a
    runtime-only package on ``pypi``, and (``with_archives``) the FetchContent archive on ``archives``."""
    server = IndexServer(folder / "served")
    server.add_dir("pypi", backend_wheels())
    wheels = folder / "wheels"
    server.add("pypi", torchlike_wheel(wheels, KERNEL_TORCH), build_wheel(wheels, "tinydep", "1.0"))
    if with_archives:
        server.add("archives", karch_archive(wheels))
    return server


def kernel_spec(server: IndexServer, sg: SgLike, *, kdep: str | None = None, kdep_rev: str = KDEP_TAG,
                karch: str | None = None) -> str:
    """Env ``e``: tinydep, the torch stand-in and the kernel built from ``sg`` (not isolated, its FetchContent
    inputs: ``kdep`` at ``kdep_rev``, the archive at ``karch``), all from ``server`` (``kernel_index``)."""
    return f"""
[env]
python = "3.11"
[indexes.pypi]
url = "{server.url('pypi')}"
default = true
[packages]
tinydep = "==1.0"                      # a runtime package: no build reads it
torchlike = "=={KERNEL_TORCH}"
sglike-kernel = {{ build = "sglike-kernel" }}
[sources.sglike]
git = "{sg.url}"
rev = "{sg.pin}"
[builds.sglike-kernel]
source = "sglike"
subdirectory = "sgl-kernel"
isolation = false
requires = ["scikit-build-core>=0.10"]
config-settings = {{ "cmake.define.SGLIKE_WITH_KARCH" = "ON" }}
[builds.sglike-kernel.fetchcontent]
{KDEP_NAME} = {{ git = "{kdep or sg.kdep_url}", rev = "{kdep_rev}" }}
{KARCH_NAME} = {{ url = "{karch or server.file_url('archives', 'karch-1.0.tar.gz')}" }}
"""
