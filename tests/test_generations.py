"""Generations, the current link, rollback, and realize end to end (real uv, loopback index)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from envlock.commands.realize import SyncResult, SyncTarget, realize
from envlock.commands.run import env_path, exec_in_env, run_environ
from envlock.commands.verify import verify_env
from envlock.errors import CommandError, FetchError, StoreError, UsageError, VerifyError
from envlock.install import digest, generations, install
from envlock.install.generations import Generation
from envlock.model.lockfile import Lock, read_lock
from envlock.store import noop as store_noop
from envlock.store.store import Store
from kit.index import IndexServer
from kit.locks import lock_for, sha256_of
from kit.processes import envlock
from kit.wheels import build_wheel


@pytest.fixture(scope="module")
def locks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IndexServer, Lock, Lock]]:
    root = tmp_path_factory.mktemp("gen-index")
    server = IndexServer(root / "served").start()
    w = root / "wheels"
    one = build_wheel(w, "alpha", "1.0")
    two = build_wheel(w, "alpha", "2.0")
    beta = build_wheel(w, "beta", "1.0")
    server.add("pypi", one, two, beta)
    yield server, lock_for(server, "pypi", [one, beta]), lock_for(server, "pypi", [two, beta])
    server.stop()


def _write(lock: Lock, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(lock.to_toml())
    return path


def _realize(store: Store, env: str, lock: Lock, **how: Any) -> SyncResult:
    """``realize`` of ``lock`` for ``env`` (``how``: the other ``SyncTarget`` fields)."""
    return realize(store, SyncTarget(env, lock, **how))


def _home_with_lock(tmp_path: Path, lock: Lock) -> tuple[Store, Path]:
    """A fresh store, and ``lock`` written as the workspace's lock of env "demo"."""
    return Store.open(tmp_path / "home"), _write(lock, tmp_path / "ws" / "locks" / "pylock.demo.toml")


def _synced_home(tmp_path: Path, lock: Lock, *, frozen: bool = False) -> tuple[Store, Path, SyncResult]:
    """``_home_with_lock``, and env "demo" synced once from that lock file."""
    store, lock_path = _home_with_lock(tmp_path, lock)
    return store, lock_path, _realize(store, "demo", read_lock(lock_path), lock_path=lock_path, frozen=frozen)


def _python(store: Store, env: str, code: str) -> str:
    py = generations.stable_path(store, env) / "bin" / "python"
    return subprocess.run([py, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_sync_records_digest_then_noop_then_new_generation_and_rollback(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path
) -> None:
    server, v1, v2 = locks
    store, lock_path, first = _synced_home(tmp_path, v1)
    assert (first.generation, first.noop, first.built, first.recorded) == (1, False, True, True)
    assert read_lock(lock_path).venv_digest == first.venv_digest
    assert env_path(store, "demo") == first.path == store.path("envs", "demo") / "current"
    assert os.readlink(first.path) == "1/venv"
    assert _python(store, "demo", "import alpha; print(alpha.VERSION)") == "1.0"

    downloads = len(server.downloads())
    noop = _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)
    assert noop.noop and noop.generation == 1 and noop.venv_digest == first.venv_digest
    assert len(server.downloads()) == downloads

    second = _realize(store, "demo", v2, lock_path=_write(v2, tmp_path / "ws" / "locks" / "v2.toml"))
    assert (second.generation, second.noop) == (2, False)
    assert _python(store, "demo", "import alpha; print(alpha.VERSION)") == "2.0"
    assert verify_env(store, "demo", read_lock(tmp_path / "ws" / "locks" / "v2.toml")).ok

    gens = generations.list_generations(store, "demo")
    assert [(g.number, g.current, g.install_digest) for g in gens] == [
        (1, False, v1.install_digest()), (2, True, v2.install_digest()),
    ]
    python = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    assert gens[0].lock_copy.read_text() == v1.with_venv_digest(first.venv_digest, python).to_toml()
    assert gens[0].to_dict()["created"].endswith("Z")

    back = generations.rollback(store, "demo")
    assert (back.previous, back.current) == (2, 1)
    assert _python(store, "demo", "import alpha; print(alpha.VERSION)") == "1.0"
    assert verify_env(store, "demo", read_lock(lock_path)).ok
    # Syncing v1 again while generation 1 is current is a no-op.
    assert _realize(store, "demo", read_lock(lock_path), lock_path=lock_path).noop
    assert generations.rollback(store, "demo", to=2).current == 2


def test_a_generation_never_made_current_is_no_rollback_target(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync killed (or refused) before its switch leaves a whole generation behind: the env
    never was it, so `rollback` after a later sync goes back to what the env was."""
    _, v1, v2 = locks
    store, _, first = _synced_home(tmp_path, v1)

    def killed(*args: object) -> None:
        raise KeyboardInterrupt  # where a SIGKILL just before the flip stops a sync

    with monkeypatch.context() as m:
        m.setattr(generations, "flip", killed)
        with pytest.raises(KeyboardInterrupt):
            _realize(store, "demo", v2, lock_path=None)
    assert [(g.number, g.current, g.pending) for g in generations.list_generations(store, "demo")] == [
        (1, True, False), (2, False, True)]
    assert generations.rollback_targets(store, "demo", besides=1) == []
    beta_only = replace(v1, packages=v1.packages[1:])  # another lock synced next (v2 again would reuse 2)
    later = _realize(store, "demo", beta_only, lock_path=None)
    # The pending one is gone (its venv stays in the store): numbers go on from the ones that were current.
    assert [(g.number, g.pending) for g in generations.list_generations(store, "demo")] == [(1, False), (2, False)]
    current = generations.current(store, "demo")
    assert later.generation == 2 and current is not None and current.install_digest == beta_only.install_digest()
    assert generations.rollback(store, "demo").current == 1
    assert _python(store, "demo", "import alpha; print(alpha.VERSION)") == "1.0"
    # A sync refused because `current` is not envlock's link adds no generation first.
    link = store.path("envs", "demo") / "current"
    link.unlink()
    link.mkdir()
    with pytest.raises(UsageError, match="not the symlink envlock keeps there"):
        _realize(store, "demo", v2, lock_path=None)
    assert [g.number for g in generations.list_generations(store, "demo")] == [1, 2]
    assert first.generation == 1


def test_a_stamp_not_written_does_not_fail_a_switched_sync(locks: tuple[IndexServer, Lock, Lock], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The no-op stamp is written after the switch: a full disk then made the sync exit 1,
    # whose message says nothing was switched, while the env had been.
    import errno

    import envlock.commands.realize

    _, v1, v2 = locks
    store, _, _ = _synced_home(tmp_path, v1)

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(envlock.commands.realize, "write_atomic", full)
    stamp = store.path("envs", "demo") / store_noop.STAMP
    v2_path = _write(v2, tmp_path / "ws" / "locks" / "v2.toml")
    for _ in range(2):  # a new generation, then a no-op
        result = _realize(store, "demo", read_lock(v2_path), lock_path=v2_path)
        assert result.note == (f"{stamp}: not written (No space left on device); the next sync takes the full "
                               "path, not the fast no-op")
        current = generations.current(store, "demo")
        assert current is not None and current.install_digest == v2.install_digest()
        assert not stamp.exists()


def test_rollback_errors(locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    _, v1, _ = locks
    store = Store.open(tmp_path / "home")
    with pytest.raises(UsageError) as info:
        generations.rollback(store, "demo")
    assert str(info.value) == f"env 'demo': no current generation in {store.home}; run `envlock sync demo`"
    _realize(store, "demo", v1, lock_path=None)
    # A typo of a synced env is named as one, not sent to sync a new env.
    for call in (lambda: env_path(store, "demoo"), lambda: verify_env(store, "demoo"),
                 lambda: generations.rollback(store, "demoo")):
        with pytest.raises(UsageError) as info:
            call()
        assert str(info.value) == (f"env 'demoo': no current generation in {store.home}; did you mean 'demo'? "
                                   "(else run `envlock sync demoo`)")
    with pytest.raises(UsageError) as info:
        generations.rollback(store, "demo")
    assert str(info.value) == "env 'demo': generation 1 is the oldest; nothing to roll back to (generations: 1)"
    with pytest.raises(UsageError) as info:
        generations.rollback(store, "demo", to=7)
    assert str(info.value) == "env 'demo': no generation 7 (generations: 1)"


def test_frozen_never_writes_the_lock(locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    _, v1, _ = locks
    lock_path = _write(v1, tmp_path / "pylock.demo.toml")
    result = _realize(Store.open(tmp_path / "home"), "demo", v1, lock_path=lock_path, frozen=True)
    assert not result.recorded and lock_path.read_text() == v1.to_toml()


def test_a_different_recorded_digest_fails_and_does_not_flip(locks: tuple[IndexServer, Lock, Lock],
                                                              tmp_path: Path) -> None:
    _, v1, v2 = locks
    store = Store.open(tmp_path / "home")
    good = _realize(store, "demo", v1, lock_path=None)
    # A lock claiming alpha 2.0 builds to alpha 1.0's venv: a reproducibility failure.
    lying = v2.with_venv_digest(good.venv_digest)
    with pytest.raises(VerifyError) as info:
        _realize(store, "demo", lying, lock_path=None)
    message = str(info.value)
    assert f"not reproducible: the lock's venv digest is {good.venv_digest}, this sync built " in message
    assert "the env was not switched" in message
    assert "~ lib/python3.11/site-packages/alpha/__init__.py" in message
    assert "+ lib/python3.11/site-packages/alpha-2.0.dist-info/METADATA" in message
    assert generations.current_number(store, "demo") == 1
    # The venv it built is not left in the store to be reused (and fail the same way) by
    # every later sync: once the cause is fixed, the next sync builds it anew.
    assert info.value.message.endswith(
        "the env was not switched; that venv was removed from the store, so the next sync builds it anew"
    )
    assert not store.has("venvs", install.venv_entry(v2.install_digest()))
    fixed = _realize(store, "demo", v2, lock_path=None)
    assert fixed.built and fixed.generation == 2


def test_a_not_reproducible_venv_a_generation_uses_is_kept_and_named(locks: tuple[IndexServer, Lock, Lock],
                                                                     tmp_path: Path) -> None:
    _, v1, v2 = locks
    store = Store.open(tmp_path / "home")
    good = _realize(store, "demo", v1, lock_path=None)
    _realize(store, "other", v2, lock_path=None)  # other's generation 1 is v2's venv
    lying = v2.with_venv_digest(good.venv_digest)
    venv = store.path("venvs", install.venv_entry(v2.install_digest()))
    with pytest.raises(VerifyError) as info:
        _realize(store, "demo", lying, lock_path=None)
    assert info.value.message.endswith(
        "the env was not switched; that venv was kept in the store, as env 'other' generation 1 uses it: "
        f"once the cause is fixed, remove {venv} and sync again to build it anew"
    )
    assert "+ lib/python3.11/site-packages/alpha-2.0.dist-info/METADATA" in str(info.value)
    assert generations.current(store, "other") is not None and venv.is_dir()
    # Reused, but no generation points at it any more: nothing stops its removal.
    shutil.rmtree(generations.env_dir(store, "other"))
    with pytest.raises(VerifyError, match="that venv was removed from the store"):
        _realize(store, "demo", lying, lock_path=None)
    assert not venv.exists()


def test_a_venv_removed_before_the_flip_is_not_made_current(locks: tuple[IndexServer, Lock, Lock],
                                                             tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # A concurrent sync of another env found the entry not reproducible and removed it
    # between this sync's install and its flip.
    _, v1, v2 = locks
    store = Store.open(tmp_path / "home")
    _realize(store, "demo", v1, lock_path=None)
    real = install.install

    def then_removed(*args: Any, **kwargs: Any) -> install.InstallResult:
        result = real(*args, **kwargs)
        store.remove_entry("venvs", install.venv_entry(result.install_digest))
        return result

    monkeypatch.setattr(install, "install", then_removed)
    with pytest.raises(VerifyError) as info:
        _realize(store, "demo", v2, lock_path=None)
    assert str(info.value) == (
        f"{install.venv_path(store, v2.install_digest())}: the venv for generation 2 was removed from the store "
        "meanwhile (a concurrent sync found it not reproducible); the env was not switched"
    )
    assert generations.current_number(store, "demo") == 1
    assert [g.number for g in generations.list_generations(store, "demo")] == [1]  # none left pointing at nothing


def test_verify_lists_tampered_files_and_sync_refuses_a_modified_store_venv(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path
) -> None:
    _, v1, _ = locks
    store = Store.open(tmp_path / "home")
    result = _realize(store, "demo", v1, lock_path=None)
    init = result.path / "lib" / "python3.11" / "site-packages" / "alpha" / "__init__.py"
    init.chmod(0o644)  # sealed read-only (root writes anyway)
    init.write_text("tampered\n")
    checked = verify_env(store, "demo", v1.with_venv_digest(result.venv_digest))
    assert not checked.ok
    assert checked.to_dict()["changed"] == ["lib/python3.11/site-packages/alpha/__init__.py"]
    # A new env on the same lock reuses the store venv: it is re-walked and refused.
    with pytest.raises(VerifyError) as info:
        _realize(store, "other", v1, lock_path=None)
    assert "store venv was modified after it was built" in str(info.value)
    assert generations.current_number(store, "other") is None


def test_an_edit_that_reached_uv_cache_is_repaired_by_a_rebuild_without_it(locks: tuple[IndexServer, Lock, Lock],
                                                                              tmp_path: Path) -> None:
    # A venv's files are uv's cache files (hard links): root editing one in place edits
    # the cache, and the next venv built from it. The lock's digest catches that; the
    # rebuild without the cache (uv unpacks the store's wheels again) repairs it.
    server, v1, _ = locks
    gamma = build_wheel(tmp_path / "wheels", "gamma", "1.0")
    server.add("pypi", gamma)
    v3 = replace(v1, packages=tuple(sorted([*v1.packages, *lock_for(server, "pypi", [gamma]).packages],
                                           key=lambda p: p.name)))
    clean = _realize(Store.open(tmp_path / "clean-home"), "demo", v3, lock_path=None)  # another store, its own cache
    store = Store.open(tmp_path / "home")
    first = _realize(store, "demo", v1, lock_path=None)
    init = first.path / "lib" / "python3.11" / "site-packages" / "alpha" / "__init__.py"
    init.chmod(0o644)
    init.write_text("edited in place\n")  # so in the store's uv cache too
    lock_path = _write(v3.with_venv_digest(clean.venv_digest, clean_python := _python_version(clean.path)),
                       tmp_path / "ws" / "locks" / "pylock.demo.toml")
    assert clean_python
    repaired = _realize(store, "other", read_lock(lock_path), lock_path=lock_path)
    assert repaired.venv_digest == clean.venv_digest
    assert repaired.note.startswith("the first build differed from the lock's digest; with uv's cache cleared")
    assert repaired.note.count("a file of uv's cache differed") == 1  # said once, not again after it
    assert (repaired.path / "lib" / "python3.11" / "site-packages" / "alpha" / "__init__.py").read_text() != (
        "edited in place\n")
    assert init.read_text() == "edited in place\n"  # the edited venv keeps its files (verify names them)


def test_removing_an_edited_venv_and_syncing_again_repairs_it(locks: tuple[IndexServer, Lock, Lock],
                                                              tmp_path: Path) -> None:
    # The documented repair of a venv edited in place: remove its store folder, sync again.
    # Its generation still points at that folder; the rebuild must still go without uv's
    # (edited) cache, and the generation must never resolve to an unverified venv.
    _, v1, _ = locks
    store, lock_path, first = _synced_home(tmp_path, v1)  # records the digest
    venv = first.path.resolve()
    init = venv / "lib" / "python3.11" / "site-packages" / "alpha" / "__init__.py"
    original = init.read_text()
    init.chmod(0o644)
    init.write_text("edited in place\n")  # so in the store's uv cache too
    assert not verify_env(store, "demo", read_lock(lock_path)).ok
    shutil.rmtree(venv)
    again = _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)
    assert again.venv_digest == first.venv_digest
    assert again.note.startswith("the first build differed from the lock's digest; with uv's cache cleared")
    assert init.read_text() == original
    assert verify_env(store, "demo", read_lock(lock_path)).ok


def test_verify_after_a_rollback_checks_the_generation_against_its_own_digest(
        locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    _, v1, v2 = locks
    store, lock_path, _ = _synced_home(tmp_path, v1)
    _write(v2, lock_path)
    _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)  # records v2's digest
    generations.rollback(store, "demo")  # back to v1's generation; the workspace lock is v2's
    checked = verify_env(store, "demo", read_lock(lock_path))
    # Intact as built, but not this lock's env: not ok (exit 1), and not a list of every file.
    assert checked.intact and checked.other_lock and not checked.ok, checked.to_dict()
    assert checked.note.startswith("the current generation (1) was built from another lock")
    assert "checked against its own digest" in checked.note
    assert verify_env(store, "demo", v1).ok  # against its own lock


def test_a_venv_another_sync_rebuilt_meanwhile_is_not_discarded(locks: tuple[IndexServer, Lock, Lock],
                                                                 tmp_path: Path) -> None:
    from envlock.commands.realize import _discard

    _, v1, _ = locks
    store = Store.open(tmp_path / "home")
    built = install.install(store, v1, _fetched(store, v1))
    # This sync judged a venv with another digest at that key: the entry there now is not it.
    said = _discard(store, built.install_digest, built.venv, "sha256:" + "0" * 64, stale=frozenset())
    assert said == "that venv was rebuilt by another sync meanwhile and is left to it"
    assert digest.stored_manifest(built.venv) is not None
    assert _discard(store, built.install_digest, built.venv, built.manifest.digest,
                    stale=frozenset()).startswith("that venv was removed")
    assert not built.venv.exists()


def test_an_edit_in_the_uv_cache_is_not_recorded_as_a_locks_first_digest(locks: tuple[IndexServer, Lock, Lock],
                                                                         tmp_path: Path) -> None:
    # CI syncs --frozen (no digest recorded); someone edits the venv, removes it to rebuild,
    # and syncs: the first digest the lock gets must not be the edit's.
    _, v1, _ = locks
    store, lock_path, first = _synced_home(tmp_path, v1, frozen=True)
    assert read_lock(lock_path).venv_digest is None
    venv = first.path.resolve()
    init = venv / "lib" / "python3.11" / "site-packages" / "alpha" / "__init__.py"
    original = init.read_text()
    init.chmod(0o644)
    init.write_text("edited in place\n")  # so in the store's uv cache too
    shutil.rmtree(venv)
    again = _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)
    assert again.note.startswith("the first build differed from this store's earlier generations' digest; "
                                 "with uv's cache cleared")
    assert again.venv_digest == first.venv_digest == read_lock(lock_path).venv_digest
    assert init.read_text() == original


def test_a_generation_that_recorded_a_bad_digest_does_not_block_a_clean_rebuild(
        locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    # A generation whose digest was taken while an edit sat in uv's cache: a build without
    # that cache, from the verified wheels, is the truth, and is recorded with a note.
    _, v1, _ = locks
    store, lock_path = _home_with_lock(tmp_path, v1)
    built = install.install(store, v1, _fetched(store, v1))
    bad = "sha256:" + "1" * 64
    generations.add(store, "other", venv=built.venv, install_digest=built.install_digest, venv_digest=bad,
                    lock_text=v1.to_toml(), venv_python=_python_version(built.venv))
    store.remove_entry("venvs", install.venv_entry(built.install_digest))
    (store.root / "envs" / ".Trash-1000").mkdir()  # not an env's folder: passed over
    synced = _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)
    assert synced.venv_digest == built.manifest.digest == read_lock(lock_path).venv_digest
    assert synced.note == (f"this store's earlier generations of this lock have venv digest {bad}, but a build "
                           f"without uv's cache (from the verified wheels) gives {built.manifest.digest}: recorded "
                           "that one; verify those generations")


def test_a_store_wheel_changed_at_its_size_is_not_taken_for_the_locks_venv(locks: tuple[IndexServer, Lock, Lock],
                                                                            tmp_path: Path) -> None:
    # The newest generation's digest yields only to a build from wheels that still are their sha256.
    from envlock.store.store import store_file

    _, v1, _ = locks
    store, lock_path, first = _synced_home(tmp_path, v1, frozen=True)
    alpha = next(p for p in v1.packages if p.name == "alpha").wheels[0]
    stored = store_file(store, alpha)
    forged = build_wheel(tmp_path / "forged", "alpha", "1.0",
                         files={"alpha/__init__.py": "NAME = 'alpha'\nVERSION = '6.6'\n"})
    assert forged.stat().st_size == stored.stat().st_size
    stored.chmod(0o644)
    stored.write_bytes(forged.read_bytes())
    store.remove_entry("venvs", install.venv_entry(first.install_digest))
    with pytest.raises(StoreError, match=r"^1 store wheel\(s\) damaged"):
        _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)
    assert read_lock(lock_path).venv_digest is None
    assert generations.current(store, "demo") == generations.read(store, "demo", 1, current=1)
    assert not store.has("venvs", install.venv_entry(first.install_digest))  # nothing built from the forged wheel stays
    # As the error says: remove the damaged folder and sync again; the wheel is fetched anew.
    store.remove_tree(stored.parent)
    again = _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)
    assert again.venv_digest == first.venv_digest and not again.noop


def _created_at(store: Store, gen: Generation, created: str) -> None:
    """Rewrite ``gen``'s record (written read-only) to say it was created at ``created``."""
    record = gen.path / "generation.json"
    doc = json.loads(record.read_text())
    record.chmod(0o644)
    record.write_text(json.dumps({**doc, "created": created}, indent=2, sort_keys=True) + "\n")
    again = generations.read(store, gen.env, gen.number)
    assert again is not None and again.created == created


def test_a_lock_without_a_digest_is_held_to_its_newest_generations(locks: tuple[IndexServer, Lock, Lock],
                                                                    tmp_path: Path) -> None:
    # An older generation's digest does not count: a build matching only it is rebuilt without
    # uv's cache, and the result (from verified wheels) is what gets recorded.
    _, v1, _ = locks
    store, lock_path = _home_with_lock(tmp_path, v1)
    built = install.install(store, v1, _fetched(store, v1))
    python = _python_version(built.venv)
    newest = "sha256:" + "2" * 64
    # The older one is this build's. Generations are ordered by the creation time their records
    # hold, in seconds: each record says its own second, rather than the test waiting one out.
    for second, venv_digest in enumerate((built.manifest.digest, newest)):
        gen = generations.add(store, "other", venv=built.venv, install_digest=built.install_digest,
                              venv_digest=venv_digest, lock_text=v1.to_toml(), venv_python=python)
        _created_at(store, gen, f"2026-03-07T10:00:0{second}Z")
    store.remove_entry("venvs", install.venv_entry(built.install_digest))
    synced = _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)
    assert synced.note.startswith(f"this store's earlier generations of this lock have venv digest {newest}")


def test_the_digest_seen_is_the_newest_of_the_generations_linking_to_that_venv(locks: tuple[IndexServer, Lock, Lock],
                                                                              tmp_path: Path) -> None:
    # Across envs, by creation time (equal seconds: the greater digest); generations of another
    # lock's venv and another interpreter's builds do not count.
    _, v1, v2 = locks
    store, _ = _home_with_lock(tmp_path, v1)
    built = install.install(store, v1, _fetched(store, v1))
    other = install.install(store, v2, _fetched(store, v2))
    python = _python_version(built.venv)
    plan = [("a", built, "1", "01", python), ("b", built, "2", "02", python), ("b", built, "4", "03", python),
            ("b", built, "3", "03", python), ("a", built, "5", "04", "2.7.18"), ("a", other, "9", "09", python)]
    for env, inst, digit, second, made_with in plan:
        gen = generations.add(store, env, venv=inst.venv, install_digest=inst.install_digest,
                              venv_digest="sha256:" + digit * 64, lock_text="", venv_python=made_with)
        generations.flip(store, env, gen.number)  # current once: the next add keeps it
        _created_at(store, gen, f"2026-03-07T10:00:{second}Z")
    assert generations.digest_seen(store, built.install_digest, python, built.venv) == "sha256:" + "4" * 64
    assert generations.digest_seen(store, built.install_digest, "2.7.18", built.venv) == "sha256:" + "5" * 64
    assert generations.digest_seen(store, other.install_digest, python, other.venv) == "sha256:" + "9" * 64
    assert generations.digest_seen(store, built.install_digest, "3.99.0", built.venv) is None
    assert generations.users(store, other.venv) == [("a", 3)]


def test_a_venv_this_sync_built_is_kept_when_another_env_took_it_meanwhile(locks: tuple[IndexServer, Lock, Lock],
                                                                          tmp_path: Path) -> None:
    from envlock.commands.realize import _discard

    _, v1, _ = locks
    store = Store.open(tmp_path / "home")
    built = install.install(store, v1, _fetched(store, v1))
    # Env "a" reused this build and made it current before this sync judged it: kept.
    gen = generations.add(store, "a", venv=built.venv, install_digest=built.install_digest,
                          venv_digest=built.manifest.digest, lock_text=v1.to_toml())
    said = _discard(store, built.install_digest, built.venv, built.manifest.digest, stale=frozenset())
    assert said.startswith(f"that venv was kept in the store, as env 'a' generation {gen.number} uses it")
    assert built.venv.is_dir()
    # A generation that pointed at the entry while it was missing (before this build) does not count.
    said = _discard(store, built.install_digest, built.venv, built.manifest.digest,
                    stale=frozenset({("a", gen.number)}))
    assert said == "that venv was removed from the store, so the next sync builds it anew"
    assert not built.venv.exists()


def _fetched(store: Store, lock: Lock) -> dict[str, Path]:
    from envlock.install.fetch import fetch

    return fetch([p.wheels[0] for p in lock.packages], store, base_dir=store.root).paths()


def _python_version(venv: Path) -> str:
    from envlock.commands.realize import venv_python

    found = venv_python(venv)
    assert found is not None
    return found


@pytest.mark.parametrize("to", [1, None])
def test_rollback_refuses_a_generation_whose_venv_was_modified(locks: tuple[IndexServer, Lock, Lock],
                                                               tmp_path: Path, to: int | None) -> None:
    _, v1, v2 = locks
    store = Store.open(tmp_path / "home")
    first = _realize(store, "demo", v1, lock_path=None)
    _realize(store, "demo", v2, lock_path=None)
    venv = store.path("venvs", install.venv_entry(v1.install_digest()))
    init = venv / "lib" / "python3.11" / "site-packages" / "alpha" / "__init__.py"
    built = init.read_bytes()
    init.unlink()  # a new file, not an edit of the inode uv's cache shares
    init.write_text("tampered\n")
    (venv / "lib" / "python3.11" / "site-packages" / "extra.py").write_text("")
    with pytest.raises(VerifyError) as info:
        generations.rollback(store, "demo", to)
    found = digest.manifest(venv).digest
    assert str(info.value) == (
        f"{venv}: generation 1 of env 'demo' was modified after it was built (recorded {first.venv_digest}, "
        f"found {found}); the env was not switched; `envlock verify demo --repair` builds it anew (and every venv "
        "sharing its modified files), then roll back again\n"
        "  + lib/python3.11/site-packages/extra.py\n"
        "  ~ lib/python3.11/site-packages/alpha/__init__.py"
    )
    assert generations.current_number(store, "demo") == 2
    # Put back as it was built: the rollback goes through.
    init.unlink()
    init.write_bytes(built)
    (venv / "lib" / "python3.11" / "site-packages" / "extra.py").unlink()
    assert generations.rollback(store, "demo", to).current == 1


def test_a_noop_sync_trusts_the_current_venv_verify_reads_it_and_removing_it_repairs(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path
) -> None:
    # What docs/reproducibility.md tells a user whose `envlock verify` failed.
    _, v1, _ = locks
    store, lock_path, first = _synced_home(tmp_path, v1)
    (first.path / "lib" / "python3.11" / "site-packages" / "stray.py").write_text("")  # pip install, say
    assert _realize(store, "demo", read_lock(lock_path), lock_path=lock_path).noop  # not re-read
    checked = verify_env(store, "demo", read_lock(lock_path))
    assert not checked.ok and checked.to_dict()["added"] == ["lib/python3.11/site-packages/stray.py"]
    shutil.rmtree(checked.path)
    again = _realize(store, "demo", read_lock(lock_path), lock_path=lock_path)
    assert (again.noop, again.built, again.generation, again.venv_digest) == (False, True, 2, first.venv_digest)
    assert verify_env(store, "demo", read_lock(lock_path)).ok


def test_concurrent_syncs_of_one_env_serialize(locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    _, v1, v2 = locks
    store = Store.open(tmp_path / "home")
    results: list[object] = []

    def run(lock: Lock) -> None:
        try:
            results.append(_realize(store, "demo", lock, lock_path=None))
        except Exception as exc:  # pragma: no cover - reported below
            results.append(exc)

    threads = [threading.Thread(target=run, args=(lock,)) for lock in (v1, v2, v1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(not isinstance(r, Exception) for r in results), results
    gens = generations.list_generations(store, "demo")
    assert [g.number for g in gens] == list(range(1, len(gens) + 1))
    assert sum(g.current for g in gens) == 1
    assert verify_env(store, "demo").ok


def test_run_puts_the_env_first_and_exits_with_the_commands_status(
        locks: tuple[IndexServer, Lock, Lock], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    _, v1, _ = locks
    store = Store.open(tmp_path / "home")
    _realize(store, "demo", v1, lock_path=None)
    # Generation 1's own venv link, not the stable path a later sync or rollback flips.
    venv = generations.env_dir(store, "demo") / "1" / "venv"
    root, environ = run_environ(store, "demo")
    assert root == venv and environ["VIRTUAL_ENV"] == str(venv)
    assert environ["PATH"].split(os.pathsep)[0] == str(venv / "bin")
    probe = ("import os, sys, alpha; env = os.environ['VIRTUAL_ENV']; "
             f"sys.exit(7 if env == {str(venv)!r} and sys.prefix == env else 0)")
    proc = envlock(None, store.home, "run", "demo", "--", "python", "-c", probe)
    assert proc.wait(60) == 7, proc.communicate()
    with pytest.raises(UsageError) as info:
        exec_in_env(store, "nope", [sys.executable])
    assert str(info.value) == f"env 'nope': no current generation in {store.home}; run `envlock sync nope`"
    # What cannot be started raises before anything is replaced: exit 127 and 126, as a shell says.
    with pytest.raises(CommandError, match=r"^no-such-tool: command not found \(in .*/bin or on PATH\)$") as info:
        exec_in_env(store, "demo", ["no-such-tool"])
    assert info.value.exit_code == 127
    with pytest.raises(CommandError) as info:  # `envlock run demo -- "$UNSET_VAR"`
        exec_in_env(store, "demo", ["", "x"])
    assert (str(info.value), info.value.exit_code) == ("'': command not found (the command name is empty)", 127)
    # This process goes on after a failed exec: still shielded from a closed pipe, as Python set it.
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(CommandError, match=r"noexec.sh: not executable \(permission denied\)$") as info:
        exec_in_env(store, "demo", [str(script)])
    assert info.value.exit_code == 126
    # A PATH folder execvp may not search answers EACCES: found nowhere, so 127, as sh says.
    with monkeypatch.context() as m:
        def denied(*args: object) -> None:
            raise PermissionError(13, "Permission denied")

        m.setattr(os, "execvpe", denied)
        with pytest.raises(CommandError, match=r"^no-such-tool: command not found") as info:
            exec_in_env(store, "demo", ["no-such-tool"])
        assert info.value.exit_code == 127
    script.write_text("#!/no/such/python\n")
    script.chmod(0o755)
    with pytest.raises(CommandError, match=r"noexec.sh: cannot be run: the interpreter its #! line names was not "
                                           r"found$") as info:
        exec_in_env(store, "demo", [str(script)])
    assert info.value.exit_code == 126
    # Found on PATH by name, as a console script is: the same answer, naming the file found.
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(CommandError, match=rf"^{re.escape(str(script))}: cannot be run: the interpreter") as info:
        exec_in_env(store, "demo", ["noexec.sh"])
    assert info.value.exit_code == 126
    monkeypatch.undo()
    script.write_text("echo no #! line\n")
    with pytest.raises(CommandError, match=r"noexec.sh: cannot be run \(Exec format error\)$") as info:
        exec_in_env(store, "demo", [str(script)])
    assert info.value.exit_code == 126
    # The venv removed from under the env: the host's python must not answer instead.
    shutil.rmtree(venv.resolve())
    copy = generations.env_dir(store, "demo") / "1" / "pylock.toml"
    gone = (rf"generation 1's venv is gone from the store .*; run `envlock sync demo --lock {re.escape(str(copy))}` "
            r"to build it again \(the lock it was built from; `envlock sync demo` syncs the workspace's\)$")
    with pytest.raises(StoreError, match=gone):  # no rollback offered: there is no other one
        exec_in_env(store, "demo", ["python", "-c", "pass"])
    with pytest.raises(StoreError, match=gone):
        env_path(store, "demo")
    with pytest.raises(StoreError, match=gone):  # verify says the same, not "no venv there"
        verify_env(store, "demo")


def test_run_hands_signals_to_the_command_itself(locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    # A training job under `envlock run`: Ctrl-C must let its handler save a checkpoint, and
    # a SIGTERM (docker stop, Slurm) must reach it, not orphan it. The command is the process.
    import signal

    _, v1, _ = locks
    store = Store.open(tmp_path / "home")
    _realize(store, "demo", v1, lock_path=None)
    saved = tmp_path / "checkpoint"
    # The pid is printed inside the try: an interrupt right after it still finds the handler.
    job = ("import os, sys, time\n"
           "try:\n    print(os.getpid(), flush=True)\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
           f"    time.sleep(0.5)\n    open({str(saved)!r}, 'w').write('ok')\n    sys.exit(3)\n")
    proc = envlock(None, store.home, "run", "demo", "--", "python", "-c", job, start_new_session=True)
    assert proc.stdout is not None
    assert int(proc.stdout.readline()) == proc.pid  # exec'd: no child to orphan or to outlive
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 3
    assert saved.read_text() == "ok"
    proc = envlock(None, store.home, "run", "demo", "--", "python", "-c", "import time; print(1, flush=True); "
                    "time.sleep(60)", start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == "1\n"
    proc.terminate()
    assert proc.wait(30) == -signal.SIGTERM  # killed by the signal, as the command would be
    # Signals Python ignores for itself are not passed on ignored: `yes | head` ends quietly.
    proc = envlock(None, store.home, "run", "demo", "--", "sh", "-c", "grep SigIgn /proc/self/status; yes | head -n1")
    out, err = proc.communicate(timeout=30)
    ignored = int(out.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1)) and not ignored & (1 << (signal.SIGXFSZ - 1)), out
    assert (proc.returncode, out.splitlines()[-1], err) == (0, "y", "")


def test_generation_records_survive_unreadable_litter(locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    _, v1, _ = locks
    store = Store.open(tmp_path / "home")
    _realize(store, "demo", v1, lock_path=None)
    folder = generations.env_dir(store, "demo")
    (folder / ".new-2-deadbeef").mkdir()  # a killed sync's half-written generation
    (folder / "9").mkdir()  # no record: not a generation
    assert [g.number for g in generations.list_generations(store, "demo")] == [1]
    assert _realize(store, "demo", replace(v1, python=v1.python), lock_path=None).noop
    # A folder that is a generation but whose record cannot be read is named, not hidden.
    assert generations.scan(store, "demo")[1] == (folder / "9" / "generation.json",)
    (folder / "1" / "generation.json").chmod(0o644)
    (folder / "1" / "generation.json").write_text("{not json")
    assert generations.scan(store, "demo") == ((), (folder / "1" / "generation.json", folder / "9" / "generation.json"))


def test_noop_stamp_vouches_only_for_unchanged_lock_spec_and_patch_bytes(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path
) -> None:
    _server, v1, v2 = locks
    store, lock_path = _home_with_lock(tmp_path, v1)
    spec = tmp_path / "ws" / "envs" / "demo.toml"
    patch = tmp_path / "ws" / "patches" / "src" / "0001-fix.patch"
    for path, text in ((spec, "[env]\n"), (patch, "--- a\n+++ b\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    inputs = {str(spec): sha256_of(spec), str(patch): sha256_of(patch)}
    first = _realize(store, "demo", v1, lock_path=lock_path, inputs=inputs)
    assert first.recorded  # the stamp holds the lock's bytes after the digest was written

    def check(spec_file: Path | None = spec) -> tuple[int, str, str] | None:
        return store_noop.check(str(store.home), "demo", str(lock_path), None if spec_file is None else str(spec_file))

    answer = (first.generation, first.install_digest, first.venv_digest)
    assert check() == check(None) == answer
    spec.write_text("[env]\n# edited\n")
    assert (check(), check(None)) == (None, answer)  # plain sync: re-check; --frozen: the lock is the lock
    spec.write_text("[env]\n")
    assert check() == answer
    patch.write_text("--- a\n+++ c\n")
    assert check() is None
    patch.write_text("--- a\n+++ b\n")
    assert check(tmp_path / "elsewhere" / "demo.toml") is None  # it checked another spec

    # A sync that did not check the spec keeps the lock answer, but vouches for no spec.
    assert _realize(store, "demo", read_lock(lock_path), lock_path=lock_path, frozen=True).noop
    assert (check(), check(None)) == (None, answer)
    lock_path.write_text(lock_path.read_text() + "# touched\n")
    assert check(None) is None  # other lock bytes: the full path decides

    # A new generation: the stamp follows it; rolled back, the old generation has none.
    second = _realize(store, "demo", v2, lock_path=_write(v2, lock_path), frozen=True)
    assert check(None) == (second.generation, second.install_digest, second.venv_digest)
    generations.rollback(store, "demo")
    assert check(None) is None
    generations.rollback(store, "demo", 2)
    assert check(None) is not None
    (store.path("envs", "demo") / "2" / "venv").unlink()  # its venv is gone: not a no-op
    assert check(None) is None


def _lock_only_workspace(lock: Lock, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A workspace holding ``lock`` and no spec, its lock file, and the environment of a home in ``tmp_path``."""
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    lock_path = _write(lock, ws / "locks" / "pylock.demo.toml")
    return ws, lock_path, {**os.environ, "ENVLOCK_HOME": str(tmp_path / "home")}


def test_fast_noop_prints_what_the_full_path_prints_and_imports_nothing_heavy(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path
) -> None:
    ws, lock_path, env = _lock_only_workspace(locks[1], tmp_path)
    probe = (
        "import sys\nfrom envlock.cli.main import main\ncode = main(sys.argv[1:])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'packaging', 'tomllib', 'requests', "
        "'rich', 'dataclasses', 'pathlib', 'platformdirs', 'cryptography'} or m in {'envlock.commands.sync', "
        "'envlock.model.lockfile', 'envlock.commands.realize', 'envlock.store.store', "
        "'envlock.cache.caches'})\nprint('heavy:', *heavy)\n"
        "sys.exit(code)\n"
    )

    def sync(*extra: str) -> tuple[str, str]:
        proc = subprocess.run([sys.executable, "-c", probe, "sync", "demo", "--lock", str(lock_path), *extra],
                              cwd=ws, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        *out, heavy = proc.stdout.splitlines()
        return "\n".join(out), heavy

    built, heavy = sync()
    assert "venv built" in built and heavy != "heavy:"
    assert "envlock.cache.caches" not in heavy.split() and "cryptography" not in heavy  # no cache named anywhere
    stamp = tmp_path / "home" / "v1" / "envs" / "demo" / store_noop.STAMP
    stamp.unlink()
    full, heavy = sync("--frozen")  # no stamp: argparse, the sync recipe, realize's no-op (writes one)
    assert full.startswith("demo: up to date (generation 1)") and heavy != "heavy:"
    fast, heavy = sync("--frozen")
    assert (fast, heavy) == (full, "heavy:")
    assert sync("-q")[0] == full  # not --frozen, --lock PATH: the lock is taken as is either way


def test_digest_recorded_with_another_interpreter_is_not_compared(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path
) -> None:
    """A venv holds its interpreter's version: a digest from 3.11.2 says nothing about a 3.11.7 venv."""
    _, v1, _ = locks
    other = v1.with_venv_digest("sha256:" + "0" * 64, "3.11.0")
    lock_path = _write(other, tmp_path / "ws" / "locks" / "pylock.demo.toml")
    store = Store.open(tmp_path / "home")
    result = _realize(store, "demo", other, lock_path=lock_path)
    assert not result.noop and result.venv_digest != other.venv_digest
    assert result.note.startswith("the lock's venv digest was recorded with Python 3.11.0; this venv was built with 3.")
    assert lock_path.read_text() == other.to_toml()  # the other machine's record is kept
    checked = verify_env(store, "demo", other)
    assert checked.ok and "recorded with Python 3.11.0" in checked.note
    again = _realize(store, "demo", other, lock_path=lock_path)  # a no-op says it too
    assert again.noop and again.note == result.note
    # The same interpreter and a wrong digest is still a reproducibility failure.
    python = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    lying = v1.with_venv_digest("sha256:" + "0" * 64, python)
    with pytest.raises(VerifyError, match="not reproducible"):
        _realize(Store.open(tmp_path / "home2"), "demo", lying, lock_path=_write(lying, tmp_path / "l2.toml"))


def test_an_up_to_date_sync_refuses_a_lock_whose_sizes_disagree_with_the_store(
        locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    # A fresh machine refuses this lock when it downloads the wheel; so must one that has the env.
    _, v1, _ = locks
    store = Store.open(tmp_path / "home")
    assert not _realize(store, "demo", v1, lock_path=None).noop
    first = v1.packages[0]
    wrong = replace(first, wheels=(replace(first.wheels[0], size=(first.wheels[0].size or 0) + 1),))
    bad = replace(v1, packages=(wrong, *v1.packages[1:]))
    assert bad.install_digest() == v1.install_digest()  # the same venv: only the size claim differs
    with pytest.raises(FetchError, match=r"the lock says \d+: the lock's size is wrong \(the store file is intact\)"):
        _realize(store, "demo", bad, lock_path=None)
    assert _realize(store, "demo", v1, lock_path=None).noop


def test_a_generation_keeps_the_lock_it_was_built_from_when_the_file_holds_another(
        locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    _, v1, v2 = locks
    store, lock_path = _home_with_lock(tmp_path, v2)  # `envlock lock` wrote v2 since v1 was read
    result = _realize(store, "demo", v1, lock_path=lock_path)
    gen = generations.read(store, "demo", result.generation)
    assert gen is not None and gen.lock_copy.read_text() == v1.to_toml()
    assert read_lock(lock_path).install_digest() == v2.install_digest()  # and the file keeps v2


def test_an_up_to_date_sync_is_answered_before_the_cli_is_imported(locks: tuple[IndexServer, Lock, Lock],
                                                                    tmp_path: Path) -> None:
    _, v1, _ = locks
    store, lock_path, first = _synced_home(tmp_path, v1)
    (tmp_path / "ws" / "envs").mkdir()
    probe = ("import atexit, sys\nfrom envlock.__main__ import main\n"  # printed at exit: the console script's
             "atexit.register(lambda: print('argparse' in sys.modules, 'envlock.cli.main' in sys.modules))\n"
             "sys.exit(main())\n")
    out = subprocess.run([sys.executable, "-c", probe, "sync", "demo", "--lock", str(lock_path)], cwd=tmp_path / "ws",
                         env={**os.environ, "ENVLOCK_HOME": str(store.home)}, capture_output=True, text=True)
    assert out.stdout.splitlines() == [f"demo: up to date (generation {first.generation})",
                                       f"  venv digest {first.venv_digest}", str(first.path), "False False"], out
    assert out.returncode == 0


def test_a_switch_by_the_console_script_takes_the_venvs_snapshot_ahead_and_still_refuses_an_edit(
        locks: tuple[IndexServer, Lock, Lock], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, v1, _ = locks
    store, lock_path, first = _synced_home(tmp_path, v1)
    (tmp_path / "ws" / "envs").mkdir()
    monkeypatch.setenv("ENVLOCK_HOME", str(store.home))
    monkeypatch.chdir(tmp_path / "ws")
    argv = ["sync", "demo", "--lock", str(lock_path)]
    venv = store.root / "venvs" / os.path.basename(os.readlink(first.path.parent / os.readlink(first.path)))
    # The sync kept which venv the lock's bytes were synced to: the console script's hint.
    home, lock_sha256 = str(store.home), sha256_of(lock_path)
    assert store_noop.venv_last_synced(home, lock_sha256) == str(venv)
    hint = store.root / "hashes" / "venv-of-lock" / lock_sha256
    kept = hint.read_text()
    for hostile in ("../../../../etc", "sha256-" + "g" * 64, "a" * 64, "sha256-" + "a" * 64, ""):
        hint.write_text(hostile + "\n")  # never a path out of venvs/, never a venv that is not there
        assert store_noop.venv_last_synced(home, lock_sha256) is None, hostile
    hint.write_text(kept)
    # A switch through the console script: the snapshot taken ahead, in the child, is the one used (the
    # probe counts the walks the parent takes itself; the child's are its own).
    probe = ("import atexit, os, sys\nfrom envlock import ahead\nfrom envlock.install.digest import Snapshot\n"
             "real, parent, here = Snapshot.taken, os.getpid(), []\n"
             "def taken(venv):\n    here.append(os.getpid() == parent)\n    return real(venv)\n"
             "Snapshot.taken = staticmethod(taken)\n"
             "atexit.register(lambda: print('walked here', sum(here), 'ahead', ahead._children == {}))\n"
             "from envlock.__main__ import main\nsys.exit(main())\n")
    first.path.unlink()
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "venv reused from the store" in out.stdout and out.stdout.splitlines()[-1] == "walked here 0 ahead True"
    # Without the hint the parent walks the venv itself: the probe sees that walk.
    hint.unlink()
    first.path.unlink()
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "walked here 1 ahead True", out.stderr
    assert hint.read_text() == kept  # and the sync kept it again
    # A sync of the same lock again leaves it as it is (no write per sync).
    written = hint.stat()
    first.path.unlink()
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "walked here 0 ahead True", out.stderr
    assert (hint.stat().st_ino, hint.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    # A venv edited since is refused all the same: its snapshot (taken ahead) is not the one kept.
    edited = next(venv.rglob("alpha/__init__.py"))
    os.chmod(edited, 0o644)
    edited.write_text(edited.read_text() + "EDITED = True\n")
    first.path.unlink()
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "store venv was modified after it was built" in out.stderr, out.stderr
    assert "alpha/__init__.py" in out.stderr and out.stdout.splitlines()[-1] == "walked here 0 ahead True"


def test_an_activated_env_is_on_path(locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> None:
    # activate resolves its own folder: a colon in the store path (venvs/sha256:<hex>) split
    # that PATH entry in two, and `python` was the system's.
    _, v1, _ = locks
    store, _, result = _synced_home(tmp_path, v1)
    real = Path(os.path.realpath(result.path))
    assert ":" not in str(real) and real.parent == store.root / "venvs"
    shell = subprocess.run(["bash", "--norc", "-c", 'source "$1/bin/activate" && command -v python', "_",
                            str(result.path)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert shell.stdout.strip() == str(real / "bin" / "python"), shell.stderr


def _two_generations_without_current(locks: tuple[IndexServer, Lock, Lock], tmp_path: Path) -> tuple[Store, Path]:
    """A store where env "demo" has generations 1 and 2, and its ``current`` link (returned) removed."""
    _, v1, v2 = locks
    store = Store.open(tmp_path / "home")
    _realize(store, "demo", v1, lock_path=None)
    _realize(store, "demo", v2, lock_path=None)
    link = store.path("envs", "demo") / "current"
    link.unlink()
    return store, link


def test_an_env_whose_current_link_was_removed_says_so_and_how_to_pick_one(
        locks: tuple[IndexServer, Lock, Lock], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store, link = _two_generations_without_current(locks, tmp_path)
    monkeypatch.setenv("ENVLOCK_HOME", str(store.home))
    monkeypatch.chdir(tmp_path)
    from envlock.cli.main import main

    assert main(["generations", "demo"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"  current: none ({link} is missing; generations: 1, 2); `envlock rollback demo --to 2` makes one "
        "current, or run `envlock sync demo`")
    assert main(["generations", "demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["current"] is None
    (store.path("envs", "demo") / "007").mkdir()  # not generation 7's folder: not listed, not reported
    (store.path("envs", "demo") / "3").mkdir()  # a generation whose record is damaged: not one to roll back to
    (store.path("envs", "demo") / "3" / "generation.json").write_text("junk")
    generations.add(store, "demo", venv=tmp_path / "gone", install_digest="sha256:" + "4" * 64,
                    venv_digest="sha256:" + "4" * 64, lock_text="")  # nor one whose venv is gone (4)
    expected = (f"env 'demo': no current generation in {store.home} ({link} is missing; generations: 1, 2); "
                "`envlock rollback demo --to 2` makes one current, or run `envlock sync demo`")
    for call in (lambda: env_path(store, "demo"), lambda: verify_env(store, "demo"),
                 lambda: generations.rollback(store, "demo")):  # not a guess at which one
        with pytest.raises(UsageError) as info:
            call()
        assert str(info.value) == expected
    assert [g.number for g in generations.list_generations(store, "demo")] == [1, 2, 4]
    assert generations.scan(store, "demo")[1] == (store.path("envs", "demo") / "3" / "generation.json",)
    switched = generations.rollback(store, "demo", to=1)
    assert (switched.previous, switched.current) == (None, 1)
    # A folder where the link belongs is not envlock's to replace.
    link.unlink()
    link.mkdir()
    with pytest.raises(UsageError) as info:
        generations.rollback(store, "demo", to=2)
    assert str(info.value) == (f"{link}: not the symlink envlock keeps there (a folder); move it away (it is not "
                               "envlock's) and run the command again")
    with pytest.raises(UsageError) as info:
        env_path(store, "demo")
    assert str(info.value) == (f"env 'demo': no current generation in {store.home} ({link} is not the link envlock "
                               "keeps; generations: 1, 2); move it away, then `envlock rollback demo --to 2` makes "
                               "one current, or run `envlock sync demo`")


def test_a_current_link_naming_a_generation_that_is_not_there_says_so(
        locks: tuple[IndexServer, Lock, Lock], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store, link = _two_generations_without_current(locks, tmp_path)
    link.symlink_to("7/venv")
    gone = (f"env 'demo': its current link names generation 7, whose record {link.parent / '7' / 'generation.json'} "
            "is gone (generations: 1, 2); `envlock rollback demo --to 2` makes another one current, or run "
            "`envlock sync demo`")
    for call in (lambda: env_path(store, "demo"), lambda: verify_env(store, "demo")):
        with pytest.raises(UsageError) as info:
            call()
        assert str(info.value) == gone
    # A generation whose venv is gone is not offered: rollback would refuse it.
    hidden = link.parent / "2" / "venv"
    target = os.readlink(hidden)
    hidden.unlink()
    hidden.symlink_to("../../../venvs/nowhere")
    with pytest.raises(UsageError) as info:
        verify_env(store, "demo")
    assert "(generations: 1); `envlock rollback demo --to 1` makes another one current" in str(info.value)
    hidden.unlink()
    hidden.symlink_to(target)
    monkeypatch.setenv("ENVLOCK_HOME", str(store.home))
    monkeypatch.chdir(tmp_path)
    from envlock.cli.main import main

    assert main(["generations", "demo"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "  current: the link names generation 7, which is not there"
    link.unlink()
    link.symlink_to("2/venv")
    record = link.parent / "2" / "generation.json"
    record.write_text("{bad")
    with pytest.raises(UsageError) as info:
        verify_env(store, "demo")
    assert str(info.value) == (f"env 'demo': its current link names generation 2, whose record {record} cannot be "
                               "read (generations: 1); `envlock rollback demo --to 1` makes another one current, "
                               "or run `envlock sync demo`")


def test_only_a_store_generations_lock_copy_is_taken_for_one(locks: tuple[IndexServer, Lock, Lock],
                                                             tmp_path: Path) -> None:
    _, v1, _ = locks
    store, _, _ = _synced_home(tmp_path, v1)
    copy = generations.env_dir(store, "demo") / "1" / "pylock.toml"
    assert copy.is_file() and generations.is_lock_copy(copy)
    lookalike = tmp_path / "ws" / "archive" / "v1" / "envs" / "demo" / "3" / "pylock.toml"
    lookalike.parent.mkdir(parents=True)
    lookalike.write_bytes(copy.read_bytes())
    assert not generations.is_lock_copy(lookalike)  # no store layout file above it


def test_a_switch_to_a_venv_in_the_store_imports_no_packaging_and_no_spec(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path
) -> None:
    """``sync --lock`` of a lock whose venv is in the store (no spec in the workspace): the lock is
    parsed, the stored venv walked, a generation made, and packaging's parsers (~40 ms) never loaded,
    nor what only a build, a download, git or a spec needs; once the lock's document is kept, no TOML."""
    ws, lock_path, env = _lock_only_workspace(locks[1], tmp_path)
    probe = (
        "import sys\nfrom envlock.cli.main import main\ncode = main(sys.argv[1:])\n"
        "print('loaded:', *sorted(m for m in sys.modules if m.split('.')[0] in {'packaging', 'email', 'socket', "
        "'ssl', 'http', 'subprocess', 'tomllib'} or m in {'envlock.model.spec', 'envlock.model.target', "
        "'envlock.gpu.drivers', 'envlock.runner', 'envlock.resolution.drift', 'envlock.install.partial', "
        "'envlock.store.urlhashes', 'envlock.model.multilock', 'envlock.model.overlaps', "
        "'envlock.model.lockbuilds', 'envlock.install.fetch'}))\n"
        "sys.exit(code)\n"
    )
    argv = [sys.executable, "-c", probe, "sync", "demo", "--frozen", "--lock", str(lock_path)]
    first = subprocess.run(argv, cwd=ws, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    (tmp_path / "home" / "v1" / "envs" / "demo" / "current").unlink()  # its venv stays in the store
    switched = subprocess.run(argv, cwd=ws, env=env, capture_output=True, text=True)
    assert switched.returncode == 0, switched.stderr
    *said, loaded = switched.stdout.splitlines()
    # Generation 1 again: the newest, of this very venv and lock, never current since (see _new_generation).
    assert said[0].startswith("demo: generation 1 (0 fetched, 0 B downloaded; venv reused from the store)")
    # The TOML read: the env's folder is there now, and its lock document kept (store.lockdocs).
    assert loaded == "loaded: tomllib tomllib._parser tomllib._re tomllib._types"
    (tmp_path / "home" / "v1" / "envs" / "demo" / "current").unlink()
    again = subprocess.run(argv, cwd=ws, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0].startswith("demo: generation 1 (0 fetched, 0 B downloaded; venv reused")
    assert again.stdout.splitlines()[-1] == "loaded:"


def test_a_new_venv_of_wheels_all_in_the_store_is_built_without_fetch(
    locks: tuple[IndexServer, Lock, Lock], tmp_path: Path
) -> None:
    """A sync whose venv the store lacks but whose every wheel it has (a warm sync): one stat per wheel
    says so, and fetch's machinery is not loaded; the venv is built and verified as ever."""
    ws, lock_path, env = _lock_only_workspace(locks[1], tmp_path)
    probe = ("import sys\nfrom envlock.cli.main import main\ncode = main(sys.argv[1:])\n"
             "print('fetch loaded:', 'envlock.install.fetch' in sys.modules)\nsys.exit(code)\n")
    argv = [sys.executable, "-c", probe, "sync", "demo", "--frozen", "--lock", str(lock_path)]
    first = subprocess.run(argv, cwd=ws, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "fetch loaded: True"  # the store had none of them
    digest_line = first.stdout.splitlines()[1]
    store = Store.open(tmp_path / "home")
    store.remove_entry("venvs", install.venv_entry(locks[1].install_digest()))
    warm = subprocess.run(argv, cwd=ws, env=env, capture_output=True, text=True)
    assert warm.returncode == 0, warm.stderr
    said = warm.stdout.splitlines()
    assert said[0].startswith("demo: generation 2 (0 fetched, 0 B downloaded; venv built)")
    assert said[1] == digest_line  # the same venv digest, walked anew
    assert said[-1] == "fetch loaded: False"
