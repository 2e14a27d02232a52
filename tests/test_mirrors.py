"""Mirrors: which locked packages a mirror of a spec index serves."""

from __future__ import annotations

from pathlib import Path

from envlock.model.lockfile import Artifact, Lock, LockedPackage
from envlock.model.mirrors import Mirrors
from envlock.model.spec import load_spec


def test_sync_mirrors_go_by_the_index_the_lock_records_else_the_spec_pins(tmp_path: Path) -> None:
    # `sync --lock PATH@REV`: an older lock may have taken a package from an index today's spec
    # no longer pins it to; a lock made through another mirror records a URL the spec does not name.
    nightly = "https://download.pytorch.org/whl/nightly/cu130"
    spec_file = tmp_path / "e.toml"
    spec_file.write_text(f'[env]\npython = "3.11"\n[indexes.pypi]\nurl = "https://pypi.org/simple"\ndefault = true\n'
                         f'[indexes.pytorch]\nurl = "{nightly}"\n'
                         '[packages]\ntorch = { nightly = "2026-03-07", index = "pytorch" }\n')
    spec = load_spec(spec_file)

    def pkg(name: str, index: str) -> LockedPackage:
        return LockedPackage(name=name, version="1.0", index=index,  # type: ignore[arg-type]
                             wheels=(Artifact(sha256=name[0] * 64, url=f"{index}/{name}-1.0-py3-none-any.whl"),))

    lock = Lock(env="e", python="3.11", platform=None, spec_digest="sha256:" + "0" * 64, spec_keys={},
                packages=(pkg("filelock", nightly), pkg("torch", "https://mirror.other/pytorch"),
                          pkg("idna", "https://pypi.org/simple")))
    assert Mirrors(spec, {"pytorch": "https://m/pt"}).for_packages(lock) == {"filelock": "https://m/pt",
                                                                          "torch": "https://m/pt"}
    assert Mirrors(spec, {"pypi": "https://m/pypi"}).for_packages(lock) == {"idna": "https://m/pypi"}
    # Two spec indexes at one URL: the one the spec pins the package to, not the first declared.
    spec_file.write_text(spec_file.read_text().replace(
        "[packages]", '[indexes.internal]\nurl = "https://pypi.org/simple/"\n'
                      '[packages]\nidna = { version = "==1.0", index = "internal" }'))
    both = {"pypi": "https://m/pypi", "internal": "https://m/internal"}
    assert Mirrors(load_spec(spec_file), both).for_packages(lock) == {"idna": "https://m/internal"}
