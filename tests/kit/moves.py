"""A repository shaped like SGLang's move f016738f -> 69b02ea6, made of our own tiny files.

At ``pin``: ``python/`` (project ``upapp``, setuptools, static metadata: as ``python/`` builds
``sglang``) and ``kernel/`` (project ``kern``, as ``sgl-kernel``), whose ``CMakeLists.txt`` declares two
FetchContent inputs by git commit, ``repo-dep`` and ``repo-old``. One patch of ours changes
``python/upapp/comm.py``.

At ``main`` (what upstream did by 69b02ea6, in small):

- ``comm.py`` rewritten where the patch changes it: the patch conflicts;
- the kernel project renamed ``kern-ng`` (as ``sgl-kernel`` became ``sglang-kernel``);
- its CMake files declare ``repo-dep`` as an archive URL under ``${ARTIFACTORY}`` (a
  ``set(ARTIFACTORY "github.com" CACHE STRING ...)``) with a ``URL_HASH``, no longer ``repo-old`` (as
  ``repo-deepgemm`` and ``repo-mscclpp`` went), and a new ``repo-new`` (as ``repo-flashmla-cutlass``);
- ``python/pyproject.toml`` needs ``setuptools-rustlike`` to build and reads ``../rust/grpc/Cargo.toml``,
  outside ``python/`` (as sglang's ``setuptools-rust`` extension), and its project now requires
  ``libbase`` and ``libbase-cu13``, which install one file with different bytes (as
  ``nvidia-cutlass-dsl-libs-base`` and ``-cu13``).

``move_index`` serves what a lock of either commit reads: the build backends, ``tinydep`` and the two
``libbase`` wheels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.index import IndexServer
from kit.sglike import commit_all, git, init_repo, write
from kit.wheels import build_wheel

DEP_HASH = "09237099a70f80bff1dc8bb80c843a674bb4fdcb46e43cc6993e711c5ca89bb5"  # as upstream's URL_HASH gives it
NEW_HASH = "9f6c53320a85b4a570975e557918cde65168cd311f081920446c238437347dc6"

PY_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "upapp"
version = "1.0"
dependencies = ["tinydep"]

[tool.setuptools.packages.find]
include = ["upapp*"]
"""

PY_PYPROJECT_MAIN = """\
[build-system]
requires = ["setuptools>=61", "setuptools-rustlike>=1.10"]
build-backend = "setuptools.build_meta"

[project]
name = "upapp"
version = "1.0"
dependencies = ["tinydep", "libbase", "libbase-cu13"]

[tool.setuptools.packages.find]
include = ["upapp*"]

[[tool.setuptools-rust.ext-modules]]
target = "upapp._core"
path = "../rust/grpc/Cargo.toml"
"""

COMM = "SIZES = {\n    9: 64,\n    10: 64,\n}\n"
COMM_PATCHED = "SIZES = {\n    9: 64,\n    10: 64,\n    12: 64,\n}\n"
COMM_MAIN = "SIZES = {\n    9: 64,\n    10: 128,\n}\n"


def _kernel_pyproject(name: str) -> str:
    return (f'[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{name}"\nversion = "0.1.0"\n\n[tool.setuptools]\npackages = ["kern"]\n')


def _cmake_pin(dep: str, old: str) -> str:
    return ("cmake_minimum_required(VERSION 3.15)\nproject(kern LANGUAGES C)\ninclude(FetchContent)\n"
            "FetchContent_Declare(\n    repo-dep\n    GIT_REPOSITORY https://github.com/x/dep.git\n"
            f"    GIT_TAG {dep}\n)\n"
            f"FetchContent_Declare(repo-old GIT_REPOSITORY https://github.com/x/old.git GIT_TAG {old})\n")


def _cmake_main(dep: str) -> str:
    return ("cmake_minimum_required(VERSION 3.26)\nproject(kern LANGUAGES C)\ninclude(FetchContent)\n"
            'set(ARTIFACTORY "github.com" CACHE STRING "GitHub mirror URL")\n'
            "FetchContent_Declare(\n    repo-dep\n"
            f"    URL      https://${{ARTIFACTORY}}/x/dep/archive/{dep}.tar.gz\n"
            f"    URL_HASH SHA256={DEP_HASH}\n)\n"
            "FetchContent_Declare(\n    repo-new\n"
            "    URL      https://${ARTIFACTORY}/x/new/archive/v2.0.tar.gz\n"
            f"    URL_HASH SHA256={NEW_HASH}\n)\n")


@dataclass(frozen=True)
class Move:
    repo: Path
    url: str
    pin: str
    main: str
    dep_url: str  # file:// URLs of the FetchContent inputs' repositories
    dep: str
    old_url: str
    old: str
    patch: str  # the patch's text (made against pin)


def _one_file_repo(root: Path, name: str) -> tuple[Path, str]:
    repo = root / name
    init_repo(repo)
    write(repo, {"include/x.h": f"#define {name.upper()} 1\n"})
    return repo, commit_all(repo, f"{name}: one header")


def make_move(root: Path) -> Move:
    """The repositories under ``root``."""
    dep, dep_commit = _one_file_repo(root, "dep")
    old, old_commit = _one_file_repo(root, "old")
    repo = root / "up"
    init_repo(repo)
    write(repo, {"python/pyproject.toml": PY_PYPROJECT, "python/upapp/__init__.py": "", "python/upapp/comm.py": COMM,
                 "kernel/pyproject.toml": _kernel_pyproject("kern"), "kernel/kern/__init__.py": "",
                 "kernel/CMakeLists.txt": _cmake_pin(dep_commit, old_commit)})
    pin = commit_all(repo, "up: the pin")
    write(repo, {"python/upapp/comm.py": COMM_PATCHED})
    patch = ("Subject: add 12 to SIZES\nWhy: the fixture's patch.\nUpstream: fixture\n---\n"
             + git(repo, "diff", "--no-color", "--src-prefix=a/", "--dst-prefix=b/", raw=True))
    git(repo, "checkout", "-q", "--", ".")
    write(repo, {"python/upapp/comm.py": COMM_MAIN, "python/pyproject.toml": PY_PYPROJECT_MAIN,
                 "rust/grpc/Cargo.toml": '[package]\nname = "grpc"\nversion = "0.1.0"\n',
                 "kernel/pyproject.toml": _kernel_pyproject("kern-ng"),
                 "kernel/CMakeLists.txt": _cmake_main(dep_commit)})
    main = commit_all(repo, "up: moves on", date="2026-06-14T10:00:00+00:00")
    return Move(repo, repo.as_uri(), pin, main, dep.as_uri(), dep_commit, old.as_uri(), old_commit, patch)


def move_index(root: Path, backends: Path) -> IndexServer:
    """The build backends, ``tinydep``, and ``libbase`` / ``libbase-cu13`` (one file, different bytes); started."""
    server = IndexServer(root / "served")
    server.add_dir("pypi", backends)
    wheels = root / "wheels"
    server.add("pypi", build_wheel(wheels, "tinydep", "1.0"))
    for name, body in (("libbase", "BASE = 1\n"), ("libbase-cu13", "BASE = 13\n")):
        module = name.replace("-", "_")
        server.add("pypi", build_wheel(wheels, name, "4.3", files={f"{module}/__init__.py": "",
                                                                   "cutlass_dsl/_mlir/x.py": body}))
    return server.start()


def spec_text(move: Move, index: IndexServer, *, rev: str | None = None, kernel: str = "kern") -> str:
    """The env at ``rev`` (default: the pin), its kernel build named ``kernel``."""
    return f"""\
# An env on the move: every comment here must survive an upgrade.
[env]
python = "3.11"

[indexes.pypi]
url = "{index.url('pypi')}"
default = true

[packages]
upapp = {{ build = "upapp" }}
{kernel} = {{ build = "{kernel}" }}   # the kernel, built here

[sources.up]
git = "{move.url}"
rev = "{rev or move.pin}"   # the pin
patches = ["patches/up/0001-sizes.patch"]

[builds.upapp]
source = "up"
subdirectory = "python"

[builds.{kernel}]
source = "up"
subdirectory = "kernel"
env = {{ KERN_ARCH = "12.0a" }}

# Upstream's FetchContent inputs, pinned.
[builds.{kernel}.fetchcontent]
repo-dep = {{ git = "{move.dep_url}", rev = "{move.dep}" }}
repo-old = {{ git = "{move.old_url}", rev = "{move.old}" }}   # mscclpp's, say
"""
