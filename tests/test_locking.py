"""Against the real PyPI: opt in with `pytest --run-network` (the default run is hermetic)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from envlock import indexes
from envlock.fetch import fetch_unhashed
from envlock.lockfile import read_lock
from envlock.locking import lock_env
from envlock.store import Store
from envlock.workspace import Workspace

pytestmark = pytest.mark.network
ROOT = Path(__file__).resolve().parents[1]


def test_https_index_page_and_streamed_hash(tmp_path: Path) -> None:
    files = indexes.project_files("https://pypi.org/simple", "six")
    wheel = next(f for f in files if f.filename == "six-1.17.0-py2.py3-none-any.whl")
    assert wheel.sha256 is not None
    got = fetch_unhashed(wheel.url, Store.open(tmp_path / "home"))
    assert (got.sha256, got.downloaded) == (wheel.sha256, 11050)
    assert got.path.read_bytes()[:2] == b"PK"


def test_demo_lock_resolves_the_same_from_pypi(ws) -> None:  # type: ignore[no-untyped-def]
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
