"""Make ``envlock.model.lockfile.Lock`` objects straight from wheels published on a fixture index (and a
sample lock with one of each part, for the lock file's own tests).

Sync tests need a lock, not a resolver: every wheel becomes one locked package
pointing at its URL on the loopback index (or at a local path), with its sha256 and size.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from envlock.model.lockfile import (
    Artifact,
    Lock,
    LockedBuild,
    LockedFetchContent,
    LockedPackage,
    LockedPatch,
    LockedSource,
    NightlyPin,
)
from kit.index import IndexServer

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def artifact(path: Path, *, url: str | None = None, rel: str | None = None) -> Artifact:
    return Artifact(sha256=sha256_of(path), url=url, path=rel, size=path.stat().st_size)


def lock_for(
    server: IndexServer | None,
    index: str,
    wheels: Iterable[Path],
    *,
    env: str = "demo",
    python: str = PYTHON,
    local: Iterable[tuple[Path, str]] = (),
) -> Lock:
    """A lock of ``wheels`` served from ``index`` on ``server``, plus ``local`` (path, rel) wheels."""
    packages = []
    for wheel in wheels:
        assert server is not None
        name, version, _, _ = parse_wheel_filename(wheel.name)
        art = artifact(wheel, url=server.file_url(index, wheel.name))
        packages.append(LockedPackage(name=name, version=str(version), wheels=(art,),
                                      index=server.url(index)))
    for wheel, rel in local:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        packages.append(LockedPackage(name=name, version=str(version), wheels=(artifact(wheel, rel=rel),)))
    return Lock(
        env=env,
        python=python,
        platform=None,
        spec_digest="sha256:" + "0" * 64,
        spec_keys={},
        packages=tuple(sorted(packages, key=lambda p: p.name)),
    )


def sample_lock(**changes: object) -> Lock:
    """A lock with one of each part (an index nightly, a local build, a git source with a patch, FetchContent
    inputs, a venv digest), ``changes`` replaced: the lock file and diff tests' sample."""
    base = Lock(
        env="e",
        python="3.12",
        platform="x86_64-manylinux_2_28",
        spec_digest="sha256:" + "1" * 64,
        spec_keys={"packages.torch": "abc", "env": "def"},
        packages=(
            LockedPackage(canonicalize_name("torch"), "2.12.0.dev20260307+cu130",
                          (Artifact("a" * 64, url="https://x/torch-2.12.0.dev20260307%2Bcu130-cp312-cp312-linux_x86_64.whl"),),
                          index="https://x/simple"),
            LockedPackage(canonicalize_name("sgl-kernel"), "0.3.21",
                          (Artifact("b" * 64, path="../wheelhouse/sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl",
                                    size=10),)),
        ),
        requires_python="==3.12.*",
        nightlies={"torch": NightlyPin("2026-03-07", "2.12.0.dev20260307+cu130")},
        sources={"sglang": LockedSource("git", "https://github.com/sgl-project/sglang", commit="f" * 40,
                                        rev="main", patches=(LockedPatch("patches/sglang/0001-x.patch", "c" * 64),))},
        builds={"sgl-kernel": LockedBuild("sha256:" + "d" * 64, "sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl",
                                          "b" * 64)},
        fetchcontent={"sgl-kernel": {
            "repo-triton": LockedFetchContent(git="https://github.com/triton-lang/triton", commit="7" * 40,
                                              rev="v3.5.1"),
            "repo-cutlass": LockedFetchContent(git="https://github.com/NVIDIA/cutlass", commit="5" * 40),
            "json": LockedFetchContent(url="https://github.com/nlohmann/json/archive/v3.11.3.tar.gz", sha256="9" * 64),
        }},
        venv_digest="sha256:" + "e" * 64,
        requires={"sgl-kernel": ("torch",)},
    )
    base = replace(base, venv_install=base.install_digest())
    return replace(base, **changes)  # type: ignore[arg-type]


def sync_workspace(server: IndexServer, tmp_path: Path, wheel: Path) -> tuple[Path, Path]:
    """A workspace under ``tmp_path`` whose env ``demo`` has a lock of ``wheel`` on ``server``'s ``pypi``
    index and no spec: (the workspace, the lock), for a sync that only fetches and installs."""
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "locks").mkdir()
    lock = ws / "locks" / "pylock.demo.toml"
    lock.write_text(lock_for(server, "pypi", [wheel]).to_toml())
    return ws, lock
