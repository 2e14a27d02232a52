"""``lock_env`` against the real PyPI: opt in with `pytest --run-network` (the default run is hermetic)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from envlock.commands.lock import lock_env
from envlock.model.lockfile import read_lock
from envlock.workspace import Workspace
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


#: What the flagship spec reads besides PyPI: the nightly and flashinfer indexes, GitHub (sglang's source,
#: and `git ls-remote` of the triton tag).
FLAGSHIP_HOSTS = ("https://download.pytorch.org/whl/nightly/cu130/torch/", "https://flashinfer.ai/whl/cu130/",
                  "https://github.com/sgl-project/sglang")


def _unreachable(urls: tuple[str, ...]) -> list[str]:
    import urllib.request

    out = []
    for url in urls:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10).close()
        except Exception as exc:  # any failure to reach it: the test cannot run here
            out.append(f"{url} ({exc})")
    return out


def test_the_flagship_spec_locks_at_its_pin_against_today_and_relocks_byte_identical(
        ws: ScratchWorkspace, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`envlock lock qwen35-blackwell` at the pin: exit 0 (the build_backend.py allowance), a relock gives
    the same bytes, and a cold store downloads no FetchContent input (a commit pin needs no fetch, the
    triton tag only `git ls-remote`, the json archive's sha256 is in the spec): only sglang's source,
    whose metadata the resolution reads, and the nightly wheels it hashes."""
    if missing := _unreachable(FLAGSHIP_HOSTS):
        pytest.skip("the flagship spec's indexes and sources are not reachable from here: " + "; ".join(missing))
    import shutil

    shutil.copy(ROOT / "envs" / "qwen35-blackwell.toml", ws.root / "envs")
    shutil.copytree(ROOT / "patches", ws.root / "patches")
    home = tmp_path / "cold-home"
    monkeypatch.setenv("ENVLOCK_HOME", str(home))
    first = cli("lock", "qwen35-blackwell", "--json")
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
    print(f"lock downloaded {json.loads(first.out)['downloaded']} bytes to hash wheels; no FetchContent input")
    again = cli("lock", "qwen35-blackwell")
    assert again.code == 0, again.err
    assert ws.lock_text("qwen35-blackwell") == text
