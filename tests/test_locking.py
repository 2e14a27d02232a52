"""``lock_env`` against the real PyPI: opt in with `pytest --run-network` (the default run is hermetic)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from envlock.commands.lock import lock_env
from envlock.model.lockfile import read_lock
from envlock.workspace import Workspace
from kit.workspaces import ScratchWorkspace

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
