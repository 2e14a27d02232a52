"""PEP 592 on loopback: a yanked newest release is never chosen, unless pinned with == exactly:
not by uv's resolution (the index tells uv too), not by envlock's choice of a date's nightly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from envlock.lockfile import read_lock
from kit.index import IndexServer
from kit.wheels import build_wheel

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture
def index(tmp_path: Path):  # type: ignore[no-untyped-def]
    server = IndexServer(tmp_path / "served").start()
    server.add_index("pypi")
    server.add_index("nightly", hashes=False)  # PyTorch's: no hashes, envlock picks the date's build
    for version in ("1.0", "2.0"):
        server.add("pypi", build_wheel(tmp_path / "wheels", "tinydep", version))
    for version in ("2.12.0.dev20260310+cpu", "2.12.0.dev2026031001+cpu"):
        server.add("nightly", build_wheel(tmp_path / "wheels", "torch", version))
    server.yanked["tinydep-2.0-py3-none-any.whl"] = "broken"
    server.yanked["torch-2.12.0.dev2026031001+cpu-py3-none-any.whl"] = ""
    yield server
    server.stop()


def _spec(server: IndexServer, tinydep: str) -> str:
    return (f'[env]\npython = "{PY}"\n[indexes.pypi]\nurl = "{server.url("pypi")}"\ndefault = true\n'
            f'[indexes.nightly]\nurl = "{server.url("nightly")}"\n'
            f'[packages]\ntinydep = "{tinydep}"\n'
            'torch = { nightly = "2026-03-10", local = "cpu", index = "nightly" }\n')


@pytest.mark.parametrize(("tinydep", "locked"), [(">=1.0", "1.0"), ("==2.0", "2.0")])
def test_a_yanked_newest_release_is_taken_only_when_pinned_exactly(index: IndexServer, ws, cli,  # type: ignore[no-untyped-def]
                                                                   tinydep: str, locked: str) -> None:
    ws.write_spec("e", _spec(index, tinydep))
    result = cli("-q", "lock", "e")
    assert result.code == 0, result.err
    lock = read_lock(ws.root / "locks" / "pylock.e.toml")
    versions = {p.name: p.version for p in lock.packages}
    assert versions["tinydep"] == locked
    # The date's newest build is yanked: the one before it on that date is the pin.
    assert versions["torch"] == "2.12.0.dev20260310+cpu"
    assert lock.nightlies["torch"].version == "2.12.0.dev20260310+cpu"
