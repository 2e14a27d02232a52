"""``lock_env`` against the real PyPI: opt in with `pytest --run-network` (the default run is hermetic)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from envlock.commands.lock import lock_env
from envlock.model.lockfile import read_lock
from envlock.workspace import Workspace
from kit.index import IndexServer
from kit.workspaces import Cli, ScratchWorkspace

pytestmark = pytest.mark.network
ROOT = Path(__file__).resolve().parents[1]


def test_demo_lock_resolves_the_same_from_pypi(ws: ScratchWorkspace) -> None:
    """The committed demo lock's PyPI part is what PyPI resolves today (pins are exact)."""
    spec = tomllib.loads((ROOT / "envs" / "demo.toml").read_text())
    lines = ['[env]\npython = "3.11"\nplatform = "x86_64-manylinux_2_28"',
             '[indexes.pypi]\nurl = "https://pypi.org/simple"\ndefault = true', "[packages]"]
    lines += [f'{name} = "{value}"' for name, value in spec["packages"].items() if isinstance(value, str)]
    ws.write_spec("pypi-part", "\n".join(lines) + "\n")
    lock_env(Workspace(ws.root), "pypi-part")
    fresh = read_lock(ws.root / "locks" / "pylock.pypi-part.toml")
    committed = read_lock(ROOT / "locks" / "pylock.demo.toml")
    assert fresh.package("requests") == committed.package("requests")
    for pkg in fresh.packages:
        (wheel,) = pkg.wheels
        assert wheel.url is not None and wheel.url.startswith("https://files.pythonhosted.org/")
        assert len(wheel.sha256) == 64


def test_the_flagship_spec_locks_at_its_pin_against_today_and_relocks_byte_identical(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        flagship_mirrors: IndexServer) -> None:
    """`envlock lock qwen35-blackwell` at the pin against today's PyPI: exit 0 (the build_backend.py
    allowance), a relock gives the same bytes, and a cold store downloads no FetchContent input (a commit pin
    needs no fetch, the triton tag only `git ls-remote`, the json archive's sha256 is in the spec): only
    sglang's source, whose metadata the resolution reads, and the nightly wheels it hashes.

    The nightly and flashinfer indexes are loopback stand-ins and sglang comes from a local repository
    (``tests/kit/flagship.py``, the ``flagship_mirrors`` fixture), read through envlock's mirror variables:

        ENVLOCK_TEST_SGLANG_GIT=/path/to/sglang.git nice .venv/bin/pytest --run-network -k flagship -s
    """
    import shutil
    import time

    shutil.copy(ROOT / "envs" / "qwen35-blackwell.toml", ws.root / "envs")
    shutil.copytree(ROOT / "patches", ws.root / "patches")
    home = tmp_path / "cold-home"
    monkeypatch.setenv("ENVLOCK_HOME", str(home))
    began = time.monotonic()
    first = cli("lock", "qwen35-blackwell", "--json")
    took = time.monotonic() - began
    assert first.code == 0, first.err
    text = ws.lock_text("qwen35-blackwell")
    lock = read_lock(ws.root / "locks" / "pylock.qwen35-blackwell.toml")
    assert lock.sources["sglang"].commit == "f016738f4c21043d0d8e4e407cb10a45ea7116b9"
    assert [o.path for o in lock.allowed_overlaps] == ["build_backend.py"]
    pins = lock.fetchcontent["sgl-kernel"]
    assert pins["repo-triton"].rev == "v3.5.1" and pins["repo-triton"].commit is not None
    stored = sorted(p.name for p in (home / "v1" / "sources").iterdir())
    fetched = [name for name in stored if any(pin.commit and name == f"git-{pin.commit}" for pin in pins.values())
               or name.startswith("archive-")]
    assert fetched == [], stored  # no FetchContent input in the store: none was downloaded
    folder = home / "v1" / "git-mirrors"
    mirrors = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    assert len(mirrors) <= 1, mirrors  # sglang's alone
    # Every nightly and jit-cache file downloaded was a stand-in's; the rest came from PyPI, with hashes.
    served = [path for path, _ in flagship_mirrors.requests if "/files/" in path]
    doc = json.loads(first.out)
    said = (f"\nlock: exit 0 in {took:.1f} s, {len(lock.packages)} packages, downloaded {doc['downloaded']} bytes "
          f"to hash {len(served)} stand-in files; store sources {stored}, git mirrors {mirrors}")
    began = time.monotonic()
    again = cli("lock", "qwen35-blackwell")
    assert again.code == 0, again.err
    assert ws.lock_text("qwen35-blackwell") == text
    # Printed last: the cli fixture's capsys takes what is printed before a command.
    print(f"{said}\nrelock: exit 0 in {time.monotonic() - began:.1f} s, byte-identical ({len(text)} bytes)")
