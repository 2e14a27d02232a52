"""Stand-ins for what the flagship spec (``envs/qwen35-blackwell.toml``) reads besides PyPI, for the opt-in
network tests that lock it against today's PyPI (``pytest --run-network -k flagship``).

- ``pytorch-nightly`` (download.pytorch.org/whl/nightly/cu130: PEP 503 pages, links with no ``#sha256=``):
  torch ``2.11.0.devYYYYMMDD+cu130``, torchvision ``0.26.0.dev…+cu130`` and torchaudio ``2.11.0.dev…+cu130``
  for the spec's date (2026-03-07) and a few around it, each as x86_64 and aarch64 manylinux_2_28 wheels for
  cp311-cp313, and ``pytorch-triton 3.6.0+git5e7b3f4e`` for both machines.
- ``flashinfer`` (flashinfer.ai/whl/cu130: links with sha256): ``flashinfer-jit-cache 0.6.5+cu130``,
  ``cp39-abi3`` for x86_64 (as /work/shared/facts-qwen35-blackwell.md reads it) and aarch64.

The wheels are small (no binaries), but their ``Requires-Dist`` are what the real wheels declare, so PyPI
resolves the real dependency tree of everything else. Where the facts file says nothing, these are what the
torch 2.9/2.10 ``+cu130`` wheels declare (the CUDA 13.0 component wheels pinned, ``pytorch-triton`` pinned,
all under ``platform_system == "Linux"``, for x86_64 and aarch64 alike), torchvision's (numpy, pillow, its
torch pinned) and torchaudio's (its torch pinned); ``pytorch-triton`` and ``flashinfer-jit-cache`` declare
none. That the aarch64 cu130 nightlies and an aarch64 jit-cache exist is how the real indexes are laid out
for GB200 machines, as best known here.

``sglang_source`` and ``triton_source`` give the git repositories the spec's source and its ``repo-triton``
tag are read from: ``ENVLOCK_TEST_SGLANG_GIT`` (a local clone or mirror holding commit f016738f, e.g. the
fork ``modal-projects/sglang``) and ``ENVLOCK_TEST_TRITON_GIT``, else GitHub when it answers; for triton
without either, a one-commit stand-in repository tagged ``v3.5.1`` (``git ls-remote`` is all a lock reads of
it). They are handed to envlock as its own mirrors (``ENVLOCK_SOURCE_<NAME>``, ``ENVLOCK_INDEX_<NAME>``), so
the spec file stays as committed.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

from kit.index import IndexServer
from kit.sglike import commit_all, git, init_repo, write
from kit.wheels import build_wheel

#: The spec's nightly date and the days around it (one nightly a day, as the real index lists them).
DATES = ("20260304", "20260305", "20260306", "20260307", "20260308", "20260309", "20260310")
PYTHONS = ("cp311", "cp312", "cp313")
MACHINES = ("x86_64", "aarch64")
TRITON = "3.6.0+git5e7b3f4e"

_LINUX = 'platform_system == "Linux"'
#: The CUDA 13.0 component wheels a ``+cu130`` torch requires (as the 2.9/2.10 cu130 wheels declare them).
CUDA_REQUIRES = (
    "nvidia-cuda-nvrtc==13.0.88", "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cupti==13.0.85",
    "nvidia-cudnn-cu13==9.13.0.50", "nvidia-cublas==13.1.0.3", "nvidia-cufft==12.0.0.61",
    "nvidia-curand==10.4.0.35", "nvidia-cusolver==12.0.4.66", "nvidia-cusparse==12.6.3.3",
    "nvidia-cusparselt-cu13==0.8.0", "nvidia-nccl-cu13==2.27.7", "nvidia-nvshmem-cu13==3.4.5",
    "nvidia-nvtx==13.0.85", "nvidia-nvjitlink==13.0.88", "nvidia-cufile==1.15.1.6",
)
TORCH_REQUIRES = (
    "filelock", "typing-extensions>=4.10.0", 'setuptools; python_version >= "3.12"', "sympy>=1.13.3",
    "networkx>=2.5.1", "jinja2", "fsspec>=0.8.5", *(f"{r}; {_LINUX}" for r in CUDA_REQUIRES),
    f"pytorch-triton=={TRITON}; {_LINUX}",
)


def _tag(py: str, machine: str) -> str:
    return f"{py}-{py}-manylinux_2_28_{machine}"


def flagship_indexes(root: Path) -> IndexServer:
    """The stand-in ``pytorch-nightly`` and ``flashinfer`` indexes, started on 127.0.0.1 (stop it)."""
    server = IndexServer(root / "served")
    server.add_index("pytorch-nightly", hashes=False)  # download.pytorch.org gives no #sha256=
    server.add_index("flashinfer", hashes=True)
    wheels = root / "wheels"
    for date in DATES:
        torch = f"2.11.0.dev{date}+cu130"
        for machine in MACHINES:
            for py in PYTHONS:
                tag = _tag(py, machine)
                server.add("pytorch-nightly", build_wheel(wheels, "torch", torch, tag=tag, requires=TORCH_REQUIRES,
                                                          requires_python=">=3.10"))
                server.add("pytorch-nightly", build_wheel(
                    wheels, "torchvision", f"0.26.0.dev{date}+cu130", tag=tag,
                    requires=["numpy", f"torch=={torch}", "pillow!=8.3.*,>=5.3.0"], requires_python=">=3.10"))
                server.add("pytorch-nightly", build_wheel(
                    wheels, "torchaudio", f"2.11.0.dev{date}+cu130", tag=tag, requires=[f"torch=={torch}"]))
    for machine in MACHINES:
        for py in PYTHONS:
            server.add("pytorch-nightly", build_wheel(wheels, "pytorch-triton", TRITON, tag=_tag(py, machine)))
        server.add("flashinfer", build_wheel(wheels, "flashinfer-jit-cache", "0.6.5+cu130",
                                             tag=f"cp39-abi3-manylinux_2_28_{machine}"))
    return server.start()


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10).close()
    except Exception:  # any failure to reach it
        return False
    return True


def sglang_source() -> str | None:
    """Where to read sglang's repository: ``ENVLOCK_TEST_SGLANG_GIT``, else GitHub if it answers, else None."""
    given = os.environ.get("ENVLOCK_TEST_SGLANG_GIT")
    if given:
        return given
    github = "https://github.com/sgl-project/sglang"
    return github if _answers(github) else None


def triton_source(root: Path) -> str:
    """Where to ``git ls-remote`` triton's tag v3.5.1: ``ENVLOCK_TEST_TRITON_GIT``, else GitHub if it
    answers, else a stand-in repository under ``root`` with that tag (its commit is then not upstream's)."""
    given = os.environ.get("ENVLOCK_TEST_TRITON_GIT")
    if given:
        return given
    github = "https://github.com/triton-lang/triton"
    if _answers(github):
        return github
    repo = root / "triton"
    init_repo(repo)
    write(repo, {"README.md": "a stand-in for triton-lang/triton: only its tag v3.5.1 is read\n"})
    commit_all(repo, "stand-in")
    git(repo, "tag", "v3.5.1")
    return str(repo)


def mirror_env(server: IndexServer, sglang: str, triton: str) -> dict[str, str]:
    """The envlock variables that read the flagship spec's indexes and sources from these stand-ins."""
    return {"ENVLOCK_INDEX_PYTORCH_NIGHTLY": server.url("pytorch-nightly"),
            "ENVLOCK_INDEX_FLASHINFER": server.url("flashinfer"),
            "ENVLOCK_SOURCE_SGLANG": sglang, "ENVLOCK_SOURCE_REPO_TRITON": triton}
