"""``envlock verify``: the current generation's venv digest recomputed and held to the lock's."""

from __future__ import annotations

from dataclasses import replace

from envlock import generations, verify
from envlock.digest import recorded_manifest
from envlock.lockfile import Lock, read_lock
from envlock.realize import venv_python
from envlock.running import env_path
from envlock.store import Store
from envlock.verify import VerifyResult
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
    result = verify.check(venv, expected, reference, env=env, cache_dir=store.hash_cache)
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


def verify_workspace_env(ws: Workspace, store: Store, env: str, lock_ref: str | None = None) -> VerifyResult:
    """``envlock verify ENV [--lock REF]``: the current generation checked against the lock named
    (default: the workspace's lock of the env, if there is one; else its own digest, and said)."""
    from envlock.lockrefs import load_env_lock_ref

    lock: Lock | None
    writable = True
    if lock_ref is not None:
        found = load_env_lock_ref(ws, lock_ref, env, "verify")
        lock, writable = found.lock, found.writable
    else:
        lock_path = ws.lock_path(env)
        lock = read_lock(lock_path) if lock_path.exists() else None
    # A lock whose packages were edited by hand: a plain `sync ENV` would lock the spec anew over
    # the edit, so the next step names the file.
    ref = lock_ref or (ws.relative(ws.lock_path(env)) if lock is not None and lock.venv_digest_stale else None)
    result = verify_env(store, env, lock, ref, lock_writable=writable)
    if lock is None:  # intact or not, whether it is the lock's cannot be said
        result = replace(result, note="; ".join(filter(None, [
            result.note, f"no lock at {ws.relative(ws.lock_path(env))} to compare with: checked against the "
            "current generation's own digest (--lock PATH[@REV] names a lock)"])))
    return result
