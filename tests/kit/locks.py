"""Make ``envlock.lockfile.Lock`` objects straight from wheels published on a fixture index.

Sync tests need a lock, not a resolver: every wheel becomes one locked package
pointing at its URL on the loopback index (or at a local path), with its sha256 and size.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.utils import parse_wheel_filename

from envlock.lockfile import Artifact, Lock, LockedPackage
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
