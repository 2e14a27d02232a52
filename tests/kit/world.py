"""The example world: every walkthrough in ``docs/`` runs against it (``examples/world/serve.py`` serves
it for a reader, ``tests/test_docs.py`` for the tests).

Built from the test kit's fixture worlds, under one folder ``root``:

- ``index/``: one loopback server (``kit.index``) with the universe's three indexes (``kit.universe``):
  ``pypi`` (hashes), ``pytorch`` (torch, torchvision and torchaudio nightlies, no hashes, as
  download.pytorch.org) and ``flashinfer``. The world's torch nightlies carry a
  ``torch.distributed.all_reduce`` that breaks from ``BROKEN_FROM`` on (what ``smoke.py`` checks), and a
  seventh date, ``ODD_DATE``, has wheels for python 3.12 only: missing for the world's python 3.11.
- ``upstream/sglike``: the SGLang-shaped repository (``kit.sglike``) with its three patches, its
  ``python/`` package built by an in-tree backend (``kit.inbackend``: no build backend to download),
  and upstream moves after the pin: a ``release`` branch the patches apply to; on ``main``, a commit
  that merges patch 0001 and conflicts with 0002 (tagged ``v0.6.0``), then one that renames the
  package the env builds (``sglike`` -> ``sglike-core``).
- ``work/``: the workspace, a git checkout with one commit: ``envs/qwen35.toml`` (the flagship's
  shape), ``envs/demo.toml`` (the README's), the patches, ``kernels/mini-kernel`` (a path source) and
  ``smoke.py``. Nothing is locked yet: the docs start with ``envlock lock``.
- ``home/`` (``ENVLOCK_HOME``) and ``uv-cache/`` (``UV_CACHE_DIR``): empty.

Everything but the port and ``root`` is the same on every run: wheels and commits are byte-identical.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kit.inbackend import project_files, write_project
from kit.index import IndexServer
from kit.sglike import SgLike, commit_all, git, init_repo, make_sglike, write
from kit.universe import NIGHTLY_DATES, PYTHONS, populate
from kit.wheels import build_wheel

BROKEN_FROM = "20260305"  # the first nightly whose all_reduce is wrong
ODD_DATE = "20260311"  # a nightly built for python 3.12 only
RENAMED = "sglike-core"  # what upstream's last commit renames the built package to


def _torch_files(name: str, version: str) -> Mapping[str, str] | None:
    if name != "torch":
        return None
    date = version.split(".dev", 1)[1][:8]
    total = "sum(values)" if date < BROKEN_FROM else "sum(values[1:])  # drops rank 0's part"
    return {
        "torch/__init__.py": f'"""A stand-in for a torch nightly."""\n\n__version__ = {version!r}\n',
        "torch/distributed.py": f"def all_reduce(values):\n    return {total}\n",
    }


def _odd_date(server: IndexServer, wheels: Path) -> None:
    """``ODD_DATE``'s nightlies, for python 3.12 only (the build for 3.11 failed that night)."""
    tag = "cp312-cp312-manylinux_2_28_x86_64"
    for local in ("cu130", "cpu"):
        version = f"2.12.0.dev{ODD_DATE}+{local}"
        server.add("pytorch", build_wheel(wheels, "torch", version, tag=tag, files=_torch_files("torch", version),
                                          requires=["pytorch-triton==3.6.0+git5e7b3f4e", "tinydep>=1.0"]))
        server.add("pytorch", build_wheel(wheels, "torchvision", f"0.27.0.dev{ODD_DATE}+{local}", tag=tag,
                                          requires=[f"torch=={version}"]))
        server.add("pytorch", build_wheel(wheels, "torchaudio", f"2.11.0.dev{ODD_DATE}+{local}", tag=tag,
                                          requires=[f"torch=={version}"]))
    assert "cp312" in PYTHONS


@dataclass(frozen=True)
class Upstream:
    sg: SgLike
    release: str  # the ``release`` branch: the pin and a README fix
    renamed: str  # main's head: the package renamed


def _upstream(root: Path) -> Upstream:
    sg = make_sglike(root, python_files=project_files("sglike", "0.5.9", ("sglike-kernel==0.1.0",)))
    repo = sg.repo
    git(repo, "checkout", "-q", "-b", "release", sg.pin)
    write(repo, {"README.md": "sglike: a stand-in for SGLang (the example world's)\n"})
    release = commit_all(repo, "README: say what sglike is", date="2026-03-09T12:00:00+00:00")
    git(repo, "checkout", "-q", "main")
    pyproject = repo / "python/pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('name = "sglike"', f'name = "{RENAMED}"'))
    renamed = commit_all(repo, f"python: rename the package to {RENAMED}", date="2026-03-11T09:00:00+00:00")
    return Upstream(sg, release, renamed)


MINI_KERNEL = {
    "mini_kernel/__init__.py": '"""The demo\'s kernel: a stand-in for a local build of a patched source."""\n\n'
                               "from mini_kernel.core import add\n\n__all__ = [\"add\"]\n",
    "mini_kernel/core.py": "def add(a, b):\n    return a + b\n",
}


def _mini_kernel_patch(root: Path) -> str:
    """The demo's recorded patch (adds ``dot``), made with git against the kernel's files."""
    repo = root / "mini-kernel-upstream"
    init_repo(repo)
    write_project(repo, "mini-kernel", "0.1.0", MINI_KERNEL)
    commit_all(repo, "mini-kernel")
    write(repo, {
        "mini_kernel/__init__.py": MINI_KERNEL["mini_kernel/__init__.py"].replace(
            "import add\n\n__all__ = [\"add\"]", "import add, dot\n\n__all__ = [\"add\", \"dot\"]"),
        "mini_kernel/core.py": MINI_KERNEL["mini_kernel/core.py"]
        + "\n\ndef dot(a, b):\n    return sum(x * y for x, y in zip(a, b, strict=True))\n",
    })
    diff = git(repo, "diff", "--no-color", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/", raw=True)
    return ("Subject: mini-kernel: add dot(a, b)\nWhy: the demo shows a recorded patch on a local build:\n"
            "  dot() exists only when the patch was applied before the build.\nUpstream: none (demo code)\n---\n"
            + diff)


QWEN35 = """\
# The shape of envlock's flagship env (qwen35-blackwell), served by the example world:
# a dated torch nightly from a hash-less index, flashinfer's three wheels, and SGLang
# built from a pinned commit with our recorded patches.
[env]
python = "3.11"
platform = "x86_64-manylinux_2_28"

[indexes.pypi]
url = "{pypi}"
default = true

# Every non-default index is explicit: a package comes from it only if it names it.
[indexes.pytorch-nightly]
url = "{pytorch}"   # no hashes, as download.pytorch.org

[indexes.flashinfer]
url = "{flashinfer}"

[packages]
# one nightly date for the whole PyTorch stack
torch = {{ nightly = "2026-03-07", local = "cu130", index = "pytorch-nightly" }}
torchvision = {{ nightly = "2026-03-07", local = "cu130", index = "pytorch-nightly" }}
torchaudio = {{ nightly = "2026-03-07", local = "cu130", index = "pytorch-nightly" }}
pytorch-triton = {{ index = "pytorch-nightly" }}   # what torch requires, from its index only
flashinfer-python = "==0.6.4"
flashinfer-cubin = "==0.6.4"
flashinfer-jit-cache = {{ version = "==0.6.4+cu130", index = "flashinfer" }}
sglike = {{ build = "sglike" }}   # SGLang's python package, built here

[sources.sglang]   # the SGLang-shaped repository
git = "{git}"
rev = "{pin}"   # the pin the patches were made on
patches = [
    "patches/sglang/0001-sm12-max-sizes.patch",
    "patches/sglang/0002-kernel-mul.patch",
    "patches/sglang/0003-soft-kernel-import.patch",
]

[builds.sglike]
source = "sglang"
subdirectory = "python"

[resolution]
# sgl-fa4: not imported on the NVFP4 path; sglike-kernel: not built in this world (patch 0003
# makes its import soft).
exclude = ["sgl-fa4", "sglike-kernel"]
same-version = [["flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"]]
"""

DEMO = """\
# The README's demo, served by the example world: packages from an index, and a local build
# of a path source with a recorded patch.
[env]
python = "3.11"
platform = "x86_64-manylinux_2_28"

[indexes.pypi]
url = "{pypi}"
default = true

[packages]
otherdep = "==2.0"             # pulls tinydep
filelock-lite = ">=3"
mini-kernel = {{ build = "mini-kernel" }}   # built here, from a patched source

[sources.mini-kernel]
path = "kernels/mini-kernel"
patches = ["patches/mini-kernel/0001-add-dot.patch"]

[builds.mini-kernel]
source = "mini-kernel"
"""

SMOKE = '''\
"""The regression check: exit 0 when the env's torch all-reduces right, 1 when not."""

import sys

import torch
from torch.distributed import all_reduce

ok = all_reduce([1, 2, 3]) == 6
print(f"torch {torch.__version__}: all-reduce {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
'''


@dataclass
class World:
    root: Path
    server: IndexServer
    upstream: Upstream

    @property
    def workspace(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def environ(self) -> dict[str, str]:
        """What a shell in the world sets: the store and uv's cache inside the world."""
        return {"ENVLOCK_HOME": str(self.home), "UV_CACHE_DIR": str(self.root / "uv-cache")}

    def stop(self) -> None:
        self.server.stop()


def build_world(root: Path, *, port: int = 0) -> World:
    """Make the world under ``root`` (a new or empty folder) and start its index on 127.0.0.1."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise FileExistsError(f"{root}: expected a new or empty folder for the world")
    # Bound first: a port in use fails before anything is written (the index serves what is added later).
    server = IndexServer(root / "index" / "served").start(port=port)
    try:
        return _fill(root, server)
    except BaseException:
        server.stop()
        raise


def _fill(root: Path, server: IndexServer) -> World:
    populate(server, root / "index" / "wheels", torch_files=_torch_files, dates=NIGHTLY_DATES, backends=False)
    _odd_date(server, root / "index" / "wheels")
    upstream = _upstream(root / "upstream")
    work = root / "work"
    init_repo(work)
    urls = {"pypi": server.url("pypi"), "pytorch": server.url("pytorch"), "flashinfer": server.url("flashinfer")}
    files = {
        "envs/qwen35.toml": QWEN35.format(**urls, git=upstream.sg.url, pin=upstream.sg.pin),
        "envs/demo.toml": DEMO.format(**urls),
        "patches/mini-kernel/0001-add-dot.patch": _mini_kernel_patch(root / "upstream"),
        "smoke.py": SMOKE,
        ".gitignore": "/wheelhouse/\n",
    }
    files |= {f"patches/sglang/{name}": (upstream.sg.patches_dir / name).read_text() for name in upstream.sg.patches}
    write(work, files)
    write_project(work / "kernels/mini-kernel", "mini-kernel", "0.1.0", MINI_KERNEL)
    (work / "locks").mkdir()
    commit_all(work, "the example world's workspace", date="2026-03-07T12:00:00+00:00")
    for sub in ("home", "uv-cache"):
        (root / sub).mkdir()
    world = World(root, server, upstream)
    (root / "env.sh").write_text(environ_script(world))
    return world


def environ_script(world: World) -> str:
    """``env.sh``: what to source in a shell to work in the world."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in world.environ().items()]
    return "\n".join([*lines, f"cd {shlex.quote(str(world.workspace))}", ""])

