"""``envlock verify``: the current generation's venv digest recomputed and held to the lock's; what a modified
file touches beyond it (hard links), and ``--repair``, which rebuilds every venv it touched."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envlock.commands.realize import venv_python
from envlock.commands.run import env_path
from envlock.errors import UsageError, VerifyError
from envlock.install import generations, venvcheck
from envlock.install.digest import recorded_manifest
from envlock.install.venvcheck import VerifyResult
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Lock, read_lock
from envlock.model.targets import runs_here
from envlock.store.store import Store
from envlock.store.trees import file_inodes
from envlock.workspace import Workspace


def verify_env(store: Store, env: str, lock: Lock | None = None, lock_ref: str | None = None, *,
               lock_writable: bool = True) -> VerifyResult:
    """Recompute the current generation's venv digest; compare with the lock's (else the recorded one).

    ``lock_ref``: how the lock was named (``verify --lock``), for the next steps said; None for the
    env's own lock file. ``lock_writable``: whether a sync may write into it (``LockRef.writable``).
    """
    env_path(store, env)  # the current generation and its venv are there, else says how to get them back
    cur = generations.current_or_error(store, env)
    venv = cur.venv.resolve()
    same_lock = lock is not None and lock.install_digest() == cur.install_digest
    # A generation of another lock (a rollback, a --lock sync) is checked against its own digest.
    recorded = lock.venv_digest_for(venv_python(cur.venv)) if lock is not None and same_lock else None
    expected = recorded or cur.venv_digest
    reference = recorded_manifest(store.path("manifests", expected), expected, venv)
    result = venvcheck.check(venv, expected, reference, env=env, cache_dir=store.hash_cache)
    if not result.intact and result.difference is not None:
        result = replace(result, shared=shared_damage(store, venv, result.difference.changed)[1])
    sync = f"envlock sync {env}" + (f" --lock {lock_ref}" if lock_ref else "")
    if lock is not None and not same_lock:
        return replace(result, other_lock=True,
                       note=f"the current generation ({cur.number}) was built from another lock (install digest "
                       f"{cur.install_digest}), so it was checked against its own digest; `{sync}` makes the env "
                       f"this lock's" + ("" if lock_ref else f", `envlock verify {env} --lock PATH[@REV]` checks it "
                                         "against the lock it was built from"))
    if lock is not None and lock.venv_digest_stale:
        how = ("this lock is not written (read from git, or a generation's copy in the store), so it keeps it"
               if not lock_writable else f"`{sync}` records this venv's in its place")
        return replace(result, note="compared with this generation's own digest: the lock's was taken for other "
                       f"packages (edited by hand since; {how})")
    if lock is not None and lock.venv_digest is None:
        how = ("this lock is not written (read from git, or a generation's copy in the store)"
               if not lock_writable else f"`{sync}` records it; a --frozen sync does not")
        return replace(result, note=f"compared with this generation's own digest: the lock records no venv digest "
                       f"({how})")
    if lock is not None and lock.venv_digest is not None and recorded is None:
        return replace(result, note=f"compared with this generation's own digest: the lock's was recorded "
                       f"with Python {lock.venv_python}, this venv has {venv_python(cur.venv)}")
    return result


def verify_workspace_env(ws: Workspace, store: Store, env: str, lock_ref: str | None = None, *,
                         target: str | None = None) -> VerifyResult:
    """``envlock verify ENV [--lock REF]``: the current generation checked against the lock named
    (default: the workspace's lock of the env, if there is one; else its own digest, and said); ``target``:
    of a lock of several targets, the one (this machine's: the venvs here are of it) to compare with."""
    from envlock.commands.lockrefs import load_env_lock_ref

    lock: Lock | None
    writable = True
    if lock_ref is not None:
        found = load_env_lock_ref(ws, lock_ref, env, "verify", target)
        lock, writable = found.lock, found.writable
    else:
        lock_path = ws.lock_path(env)
        lock = read_lock(lock_path, target) if lock_path.exists() else None
    if lock is not None and lock.target is not None and lock.platform and not runs_here(lock.platform):
        raise UsageError(f"{ws.relative(ws.lock_path(env))}: target {lock.target} ({lock.platform}) does not run on "
                         "this machine: its venv is made, and verified, on a machine of its platform")
    # A lock whose packages were edited by hand: a plain `sync ENV` would lock the spec anew over
    # the edit, so the next step names the file.
    ref = lock_ref or (ws.relative(ws.lock_path(env)) if lock is not None and lock.venv_digest_stale else None)
    result = verify_env(store, env, lock, ref, lock_writable=writable)
    if lock is None:  # intact or not, whether it is the lock's cannot be said
        result = replace(result, note="; ".join(filter(None, [
            result.note, f"no lock at {ws.relative(ws.lock_path(env))} to compare with: checked against the "
            "current generation's own digest (--lock PATH[@REV] names a lock)"])))
    return result


# -- what a modified file touches, and the repair ----------------------------------


def shared_damage(store: Store, venv: Path, changed: Sequence[str]) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """The other store venvs holding one of ``venv``'s ``changed`` files (its paths, relative): the same
    inode, since a venv's files are hard links into the store's uv cache, so an edit of one is an edit
    of all; and each generation (``ENV/N``) that uses ``venv`` or one of them. Stats only, reads nothing."""
    wanted = set()
    for rel in changed:
        try:
            st = os.lstat(venv / rel)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            wanted.add((st.st_dev, st.st_ino))
    others: list[Path] = []
    folder = store.root / "venvs"
    for entry in sorted(folder.iterdir()) if wanted and folder.is_dir() else ():
        if entry.resolve() != venv.resolve() and any(inode in wanted for inode in file_inodes(entry)):
            others.append(entry)
    users = {f"{env}/{n}" for v in (venv, *others) for env, n in generations.users(store, v)}
    return tuple(others), tuple(sorted(users, key=lambda u: (u.rsplit("/", 1)[0], int(u.rsplit("/", 1)[1]))))


@dataclass(frozen=True)
class Repaired:
    """What ``envlock verify ENV --repair`` rebuilt; doubles as its ``repair`` in ``--json``."""

    venvs: tuple[str, ...]  # the store venv entries rebuilt (each to the digest it was built with)
    generations: tuple[str, ...]  # ENV/N of every generation using one of them, whole again
    removed: tuple[str, ...] = ()  # damaged entries no generation used: removed, not rebuilt

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


def repair_env(store: Store, env: str) -> Repaired:
    """Rebuild every venv of ``env``'s generations that no longer has the digest it was built with,
    and every store venv sharing a modified file with one (another generation's, another env's):
    the store's uv cache cleared first (it held the edited file too), each rebuilt from its
    generation's lock and the store's wheels, and held to its recorded digest."""
    from envlock.install.digest import compare, manifest, recorded_manifest, stored_manifest
    from envlock.install.uvcache import clear_uv_cache

    damaged: dict[Path, None] = {}
    for gen in generations.list_generations(store, env):
        venv = gen.venv.resolve()
        if venv in damaged or not venv.is_dir():
            continue
        actual = manifest(venv, cache_dir=store.hash_cache, reuse=False)
        if actual.digest == gen.venv_digest:
            continue
        damaged[venv] = None
        reference = recorded_manifest(store.path("manifests", gen.venv_digest), gen.venv_digest, venv)
        changed = compare(reference.entries, actual.entries).changed if reference is not None else tuple(
            actual.entries)
        damaged.update(dict.fromkeys(p.resolve() for p in shared_damage(store, venv, changed)[0]))
    if not damaged:
        return Repaired((), ())
    clear_uv_cache(store)  # else uv links the edited file into the rebuilt venvs again
    rebuilt, removed, users = [], [], set()
    for venv in damaged:
        used = generations.users(store, venv)
        expected = stored_manifest(venv)
        if not used or expected is None:
            store.remove_entry("venvs", venv.name)  # nothing points at it: no lock to rebuild it from
            removed.append(venv.name)
            continue
        _rebuild(store, venv, used, expected.digest)
        rebuilt.append(venv.name)
        users |= {f"{e}/{n}" for e, n in used}
    return Repaired(tuple(rebuilt), tuple(sorted(users)), tuple(removed))


def _rebuild(store: Store, venv: Path, used: Sequence[tuple[str, int]], expected: str) -> None:
    """Build the store venv ``venv`` anew from the lock of a generation that uses it; ``VerifyError``
    unless it has the digest ``expected`` again."""
    from envlock.install import fetch, install

    env, number = used[0]
    gen = generations.read(store, env, number, current=generations.current_number(store, env))
    assert gen is not None
    lock = read_lock(gen.lock_copy)
    with store.writing():  # no gc beside: it would see the entry gone
        with store.locked(install.venv_lock(lock.install_digest())):
            store.remove_entry("venvs", venv.name)
        got = fetch.fetch([p.wheels[0] for p in lock.packages], store, base_dir=gen.lock_copy.parent,
                          options=fetch.FetchOptions(offline=True, env=env))
        built = install.install(store, lock, got.paths())
    if built.manifest.digest != expected:
        raise VerifyError(f"{venv}: rebuilt from {gen.lock_copy} and the store's wheels, it has digest "
                          f"{built.manifest.digest}, not {expected} as when it was built; `envlock sync {env}` "
                          "makes a new generation")
