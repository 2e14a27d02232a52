"""What the tests hold a store to after a killed or concurrent command: every entry whole, every
generation's venv there; and how a store came by a build (built here, or taken from a cache)."""

from __future__ import annotations

from pathlib import Path

from envlock.install import generations
from envlock.install.digest import stored_manifest
from envlock.store.store import Store
from kit.locks import sha256_of


def assert_store_whole(store: Store) -> None:
    """Each wheel entry holds one file, whose sha256 is its key; each venv entry is sealed (its
    manifest written last); each generation of each env links to a venv that is there."""
    for entry in (store.root / "wheels").iterdir():
        (wheel,) = entry.iterdir()
        assert sha256_of(wheel) == entry.name, f"{wheel}: not the bytes of its key"
    for venv in (store.root / "venvs").iterdir():
        assert stored_manifest(venv) is not None, f"{venv}: incomplete venv entry"
    envs = store.root / "envs"
    for env in sorted(envs.iterdir()) if envs.is_dir() else ():
        for gen in generations.list_generations(store, env.name):
            assert gen.venv.resolve().is_dir(), f"env {env.name!r} generation {gen.number}: venv gone"


def how_made(home: Path, input_digest: str) -> str:
    """How the store at ``home`` got its build of ``input_digest``: its log's first line when a cache
    gave it ("not built here: ..."), else "built here" (a real build's log)."""
    log = (Store.open(home).path("builds", input_digest.removeprefix("sha256:")) / "build.log").read_text()
    return log.splitlines()[0] if log.startswith("not built here") else "built here"
