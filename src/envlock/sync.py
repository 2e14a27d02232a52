"""``sync``, ``path``, ``verify``, ``generations``, ``rollback`` and ``run`` for one env.

``sync_lock`` chains fetch -> install -> verify -> new generation -> flip, under
the env's file lock. Its no-op path (the current generation already is this lock's
venv) reads one symlink and two small files and imports nothing heavy: install and
verify are imported only when there is work (fetch, for a stat of each locked wheel). Either way it ends by
writing the env's no-op stamp, which lets the next ``envlock sync`` answer before
the pipeline is even imported (``envlock.quick``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from envlock import generations, quick
from envlock.errors import CommandError, LockError, StoreError, UsageError, VerifyError
from envlock.store import Store, replace_if_unchanged, write_atomic

if TYPE_CHECKING:
    # Type names only: importing these at run time would pull packaging onto the no-op path.
    from envlock.fetch import Progress
    from envlock.lockfile import Lock
    from envlock.verify import VerifyResult

#: Test hook: sleep at the named point(s) so a test can SIGKILL a real sync there.
PAUSE_ENV = "ENVLOCK_TEST_PAUSE_AT"


@dataclass(frozen=True)
class SyncResult:
    """What ``envlock sync`` did; doubles as its ``--json`` output."""

    env: str
    path: Path  # the stable path (``current`` symlink)
    generation: int
    install_digest: str
    venv_digest: str
    noop: bool
    downloaded: int = 0  # bytes
    fetched: int = 0  # artifacts brought into the store this run
    built: bool = False  # a new venv entry was installed (False: reused from the store)
    recorded: bool = False  # the venv digest was written into the lock
    seconds: float = 0.0
    note: str = ""  # e.g. why the recorded venv digest was not compared
    relocked: bool = False  # the lock file was stale (or missing) and was written anew first

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "path": str(self.path),
            "generation": self.generation,
            "install_digest": self.install_digest,
            "venv_digest": self.venv_digest,
            "noop": self.noop,
            "downloaded": self.downloaded,
            "fetched": self.fetched,
            "built": self.built,
            "recorded": self.recorded,
            "seconds": round(self.seconds, 3),
            "note": self.note,
            "relocked": self.relocked,
        }


def sync_lock(
    store: Store,
    env: str,
    lock: Lock,
    *,
    lock_path: Path | None,
    frozen: bool = False,
    offline: bool = False,
    progress: Progress | None = None,
    inputs: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
    mirrors: Mapping[str, str] | None = None,
    local_wheels: Mapping[str, Sequence[Path]] | None = None,
    spec_input: Mapping[str, str] | None = None,
) -> SyncResult:
    """Make ``env``'s current generation the venv of ``lock``, verified, and return what happened.

    ``lock_path`` is where the lock was read from (``path`` wheels are relative to
    its folder); the venv digest is written back there on first sync unless
    ``frozen`` or ``lock_path`` is None. A digest differing from the recorded one
    is a ``VerifyError`` listing the files, and nothing is flipped. ``inputs`` (path
    -> sha256) are the files whose bytes made the lock current for its spec, kept in
    the fast no-op stamp (see ``envlock.quick``). ``base_dir``: where the lock's relative
    ``path`` wheels are found (default: the lock file's folder). ``mirrors``: package name ->
    the mirror (an index URL) to download its wheel from instead of the lock's URL.
    ``local_wheels``: sha256 -> the files to copy a ``path`` wheel from instead of ``base_dir``'s,
    in the order to try them. ``spec_input`` (path -> sha256): the spec and patches a frozen sync
    found this lock made for, kept in the stamp for the next frozen no-op.
    """
    started = time.monotonic()
    key = lock.install_digest()
    with generations.env_lock(store, env):
        cur = generations.current(store, env)
        cur_python = venv_python(cur.venv) if cur is not None else None
        # A venv folder named sha256:<hex> (envlock 0.1.0 made those) is built again at its
        # colon-free name: a colon in its real path breaks PATH once activated.
        renamed = cur is not None and cur.colon_named
        if (
            cur is not None
            and cur.install_digest == key
            and lock.venv_digest_for(cur_python) in (None, cur.venv_digest)
            and (cur.venv / quick.MANIFEST_NAME).is_file()
            and not renamed
        ):
            from envlock.fetch import check_stored_sizes

            check_stored_sizes([p.wheels[0] for p in lock.packages], store)
            data, on_disk, recorded = _record(lock, lock_path, cur.venv_digest, cur_python, frozen)
            unstamped = _stamp(store, env, cur.number, lock, cur.venv_digest, data, on_disk, inputs, spec_input)
            return SyncResult(env, generations.stable_path(store, env), cur.number, key,
                              cur.venv_digest, noop=True, recorded=recorded, seconds=time.monotonic() - started,
                              note="; ".join(filter(None, [_recorded_note(lock, cur_python, recorded, env, lock_path),
                                                           unstamped])))

        from envlock import digest, fetch, install

        if base_dir is None:
            base_dir = lock_path.parent if lock_path is not None else Path.cwd()
        got = fetch.fetch([p.wheels[0] for p in lock.packages], store, base_dir=base_dir,
                          offline=offline, progress=progress, local_sources=local_wheels,
                          locate=fetch.mirror_locator(lock.packages, mirrors) if mirrors else None, env=env)
        # Generations pointing at the venv entry while it is missing (its folder removed to
        # rebuild it): if this sync builds it and it fails, they had no venv before either.
        entry = install.venv_path(store, key)
        stale = frozenset() if (entry / quick.MANIFEST_NAME).is_file() else frozenset(generations.users(store, entry))
        inst = install.install(store, lock, got.paths(), on_stage=pause)
        actual = inst.manifest  # walked just now, whether built or reused
        built_with = venv_python(inst.venv)
        expected = lock.venv_digest_for(built_with)
        from_store = False  # ``expected`` is the newest generation's digest here, not the lock's
        if expected is None and not _holds_digest(lock) and (seen := generations.digests_seen(store, key, built_with)):
            # A first digest is recorded as found: held to what this lock gave here before,
            # an edit that reached uv's cache is not written into the lock as the truth.
            expected, from_store = seen[0], True
        whose = "this store's earlier generations'" if from_store else "the lock's"
        if (expected is not None and actual.digest != expected and not from_store and lock.venv_install is None
                and (others := generations.installs_with_digest(store, expected) - {key})):
            # A lock of before venv-install-digest whose packages were edited by hand: the store
            # built its recorded venv from other packages (said before a repair clears uv's cache
            # for nothing). The venv just built is this lock's: kept.
            raise LockError(
                f"{lock_path or env}: the lock's venv digest {expected} was taken for other packages (this store "
                f"built it from install digest {sorted(others)[0]}; the lock's packages now give {key}): they were "
                f"edited by hand since. `envlock lock {env}` locks the spec anew; to keep the edit, delete "
                "venv-digest and venv-python from its [tool.envlock] and sync it to record this venv's")
        repaired = ""
        if expected is not None and actual.digest != expected and inst.built:
            # uv installs from its cache, whose files are the venvs' (hard links): a file
            # edited in a venv (root can, read-only or not) is in every venv built after.
            # Once: without that cache, uv unpacks the store's verified wheels again.
            _discard(store, key, inst.venv, actual.digest, stale=stale)
            install.clear_uv_cache(store)
            inst = install.install(store, lock, got.paths(), on_stage=pause)
            actual = inst.manifest
            if actual.digest == expected:
                repaired = (f"the first build differed from {whose} digest; with uv's cache cleared (a file "
                            "edited in a venv had reached it), the rebuild matches")
        # Said besides a note on the lock's own digest (which ``_recorded_note`` gives, after _record).
        other = repaired or (f"{generations.colon_note(cur.number)}: this generation's is {inst.venv.name}"
                             if renamed and cur is not None and cur.install_digest == key else "")
        if from_store and actual.digest != expected and inst.built:
            # Rebuilt without uv's cache: if the store's wheels still are their sha256 (read
            # once, here), this venv is what the lock gives, and the newest generation's digest
            # was the suspect one (taken while an edit sat in that cache).
            try:
                fetch.check_stored_bytes(got.paths())
            except StoreError:
                _discard(store, key, inst.venv, actual.digest, stale=stale)  # built from them
                raise
            other = (f"this store's earlier generations of this lock have venv digest {expected}, but a build "
                     f"without uv's cache (from the verified wheels) gives {actual.digest}: recorded that one; "
                     "verify those generations")
            expected = actual.digest
        if expected is not None and actual.digest != expected:
            reference = digest.recorded_manifest(store.path("manifests", expected), expected)
            lines = digest.differing_lines(reference, actual, expected)
            raise VerifyError(
                f"{lock_path or env}: not reproducible: {whose} venv digest is "
                f"{expected}, this sync built {actual.digest}; the env was not switched; "
                + _discard(store, key, inst.venv, actual.digest, stale=stale if inst.built else frozenset()),
                details=lines,
            )
        # Record first, so the generation keeps the lock text as it stands after this sync.
        lock_bytes, on_disk, recorded = _record(lock, lock_path, actual.digest, built_with, frozen)
        note = "; ".join(filter(None, [_recorded_note(lock, built_with, recorded, env, lock_path), other]))
        # The file's text when it holds the synced lock (with the digest just recorded);
        # if it holds another lock now, the generation keeps the one it was built from.
        lock_text = lock_bytes.decode("utf-8") if lock_bytes is not None and on_disk is not None else lock.to_toml()
        generations.check_link(store, env)  # refused before a generation is added, not after
        newest = generations.newest(store, env)
        if (newest is not None and (cur is None or newest.number > cur.number)
                and (newest.install_digest, newest.venv_digest, newest.lock_sha256)
                == (key, actual.digest, hashlib.sha256(lock_text.encode()).hexdigest())
                and newest.store_venv == inst.venv):  # not a venv of old
            gen = newest  # written by a sync killed just before its flip: finish its job
        else:
            gen = generations.add(store, env, venv=inst.venv, install_digest=key,
                                  venv_digest=actual.digest, lock_text=lock_text, venv_python=built_with)
        try:
            _still_there(store, key, inst.venv, gen.number)
        except VerifyError:
            generations.discard(store, env, gen.number)  # never to be listed with its venv gone
            raise
        pause("before-flip")
        generations.flip(store, env, gen.number)
        # Switched now: nothing after this may fail the sync (it would say "nothing switched").
        unstamped = _stamp(store, env, gen.number, lock, actual.digest, lock_bytes, on_disk, inputs, spec_input)
        note = "; ".join(filter(None, [note, unstamped]))
        return SyncResult(
            env, generations.stable_path(store, env), gen.number, key, actual.digest, noop=False,
            downloaded=got.downloaded, fetched=sum(1 for a in got.artifacts if a.source != "store"),
            built=inst.built, recorded=recorded, seconds=time.monotonic() - started, note=note,
        )


def _recorded_note(lock: Lock, python: str | None, recorded: bool | None, env: str,
                   lock_path: Path | None) -> str:
    """``_other_python``'s note, saying for a digest taken for other packages whether this
    sync recorded its own in its place (``recorded`` None: not known yet), and how to."""
    note = _other_python(lock, python)
    if lock.venv_digest_stale and recorded is not None:
        if recorded:
            note += "; this venv's digest is recorded in its place"
        elif lock_path is None:
            note += ("; this lock is not written (read from git, or a generation's copy in the store), so it keeps "
                     f"it; `envlock lock {env}` locks the spec anew")
        else:
            note += (f"; the lock keeps it (`envlock sync {env} --lock {lock_path}` records this venv's; "
                     f"`envlock lock {env}` locks the spec anew)")
    return note


def _other_python(lock: Lock, python: str | None) -> str:
    """The note for a venv of another interpreter build than the one the lock's digest was
    recorded with ("" when it is the same, or none was recorded): its pyvenv.cfg differs by
    design, so the digests say nothing about each other. Or for a digest taken for other
    packages (the lock edited by hand since)."""
    if lock.venv_digest_stale:
        return (f"the lock's venv digest was taken for other packages (install digest {lock.venv_install}, the "
                f"lock's now {lock.install_digest()}: edited by hand since), so it was not compared")
    if lock.venv_digest is None or lock.venv_digest_for(python) is not None:
        return ""
    return (f"the lock's venv digest was recorded with Python {lock.venv_python}; this venv was built "
            f"with {python}, so it was not compared (the lock keeps the recorded one)")


def _discard(store: Store, key: str, venv: Path, digest: str, *,
             stale: frozenset[tuple[str, int]] = frozenset()) -> str:
    """After a reproducibility failure: remove the venv entry ``venv``, so the next sync
    builds it anew instead of reusing it and failing the same way; return what was done,
    for the message.

    It is kept, and named, when a generation uses it. Not counted as using it: the
    ``stale`` generations, given when this sync built the entry, which pointed at it
    while it was missing (its folder removed, as the repair of an edited venv asks):
    they had no venv before this sync and must not now resolve to an unverified one. A
    generation another env's sync made meanwhile, reusing this build, does count.
    """
    from envlock import install
    from envlock.digest import stored_manifest

    with store.locked(install.venv_lock(key)):
        found = stored_manifest(venv)
        if found is None:
            return "that venv was removed by another sync meanwhile"
        if found.digest != digest:
            # Another sync removed it and built it anew meanwhile: that one is not ours to judge.
            return "that venv was rebuilt by another sync meanwhile and is left to it"
        users = [u for u in generations.users(store, venv) if u not in stale]
        if not users:
            store.remove_entry("venvs", install.venv_entry(key))
            return "that venv was removed from the store, so the next sync builds it anew"
    used = ", ".join(f"env {e!r} generation {n}" for e, n in users)
    uses = "uses" if len(users) == 1 else "use"
    return (f"that venv was kept in the store, as {used} {uses} it: once the cause is fixed, "
            f"remove {venv} and sync again to build it anew")


def _still_there(store: Store, key: str, venv: Path, number: int) -> None:
    """Refuse to flip to generation ``number`` if its venv entry is gone.

    A concurrent sync of another env that found this entry not reproducible removes it
    (``_discard``) unless a generation points at it: the generation exists now, so either
    that sync saw it, or the entry is already gone and seen here.
    """
    from envlock import install

    with store.locked(install.venv_lock(key)):
        if (venv / quick.MANIFEST_NAME).is_file():
            return
    raise VerifyError(f"{venv}: the venv for generation {number} was removed from the store meanwhile "
                      "(a concurrent sync found it not reproducible); the env was not switched")


def quick_noop(store: Store, env: str, lock_path: Path, spec_path: Path | None = None,
               frozen_spec: Path | None = None) -> SyncResult | None:
    """The no-op answer from the env's stamp (see ``envlock.quick``), else None.

    ``spec_path`` given: the stamp must also vouch that the lock is current for it.
    No TOML parsing and no packaging import: an up-to-date sync costs little more
    than starting Python.
    """
    started = time.monotonic()
    found = quick.check(str(store.home), env, str(lock_path), None if spec_path is None else str(spec_path),
                        None if frozen_spec is None else str(frozen_spec))
    if found is None:
        return None
    number, install_digest, venv_digest = found
    return SyncResult(env, generations.stable_path(store, env), number, install_digest, venv_digest,
                      noop=True, seconds=time.monotonic() - started)


def _read_optional(path: Path | None) -> bytes | None:
    if path is None:
        return None
    from envlock.lockfile import read_lock_bytes

    try:
        return read_lock_bytes(path)
    except OSError:
        return None


def _record(lock: Lock, lock_path: Path | None, digest: str, python: str | None,
            frozen: bool) -> tuple[bytes | None, Lock | None, bool]:
    """Read the lock file once; write ``digest`` (taken with ``python``) into it when it has
    none yet and still holds the synced lock (not ``frozen``).

    Returns the file's bytes as they stand after, the lock they hold (None if not the
    synced one, see ``_held``) and whether the digest was recorded.
    """
    data = _read_optional(lock_path)
    on_disk = _held(lock, data, lock_path)
    if frozen or lock_path is None or on_disk is None or _holds_digest(on_disk) or _holds_digest(lock):
        return data, on_disk, False
    recorded = on_disk.with_venv_digest(digest, python)
    text = recorded.to_toml().encode()
    if not replace_if_unchanged(lock_path, data, text):  # another envlock wrote it just now: its lock stands
        data = _read_optional(lock_path)
        return data, _held(lock, data, lock_path), False
    return text, recorded, True


def _holds_digest(lock: Lock) -> bool:
    """Whether ``lock`` records a venv digest for its packages (one taken for others is replaced)."""
    return lock.venv_digest is not None and not lock.venv_digest_stale


def _held(lock: Lock, data: bytes | None, lock_path: Path | None) -> Lock | None:
    """The lock the file's ``data`` holds, if it has the synced lock's wheels, else None.

    ``envlock lock`` may have rewritten the file meanwhile. Our writer is deterministic,
    so a file holding exactly the synced lock's text needs no second parse.
    """
    from envlock.lockfile import Lock as _Lock

    if data is None or lock_path is None:
        return None
    if data == lock.to_toml().encode():
        return lock
    try:
        on_disk = _Lock.from_toml(data.decode("utf-8"), lock_path)
    except (LockError, UnicodeDecodeError):
        return None
    return on_disk if on_disk.install_digest() == lock.install_digest() else None


def _stamp(store: Store, env: str, number: int, lock: Lock, venv_digest: str, data: bytes | None,
           on_disk: Lock | None, inputs: Mapping[str, str] | None, spec: Mapping[str, str] | None = None) -> str:
    """Write the fast no-op stamp for generation ``number`` (call under the env lock).

    Only when the lock file's bytes (``data``, holding ``on_disk``) still hold the lock
    just synced; otherwise the stamp is removed and the next sync takes the full path.
    Returns a note when it could not be written ("" else): the env is current by then, and
    a missing stamp costs only the next no-op its fast path.
    """
    stamp = generations.env_dir(store, env) / quick.STAMP
    if (
        data is None
        or on_disk is None
        or on_disk.venv_digest not in (None, venv_digest)
        or (on_disk.spec_digest, on_disk.sources) != (lock.spec_digest, lock.sources)
        or any("\n" in p for p in [*(inputs or {}), *(spec or ())])
    ):
        stamp.unlink(missing_ok=True)
        return ""
    text = quick.stamp_text(number, lock.install_digest(), venv_digest, hashlib.sha256(data).hexdigest(),
                            dict(inputs) if inputs is not None else None, dict(spec) if spec else None)
    try:
        write_atomic(stamp, text.encode())
    except OSError as exc:  # a full disk, say
        return f"{stamp}: not written ({exc.strerror or exc}); the next sync takes the full path, not the fast no-op"
    return ""


def venv_python(venv: Path) -> str | None:
    """The interpreter version a venv was built with (``version_info`` in its ``pyvenv.cfg``)."""
    return quick.pyvenv_value(venv, "version_info")


def pause(point: str) -> None:
    """Test hook: sleep when ``$ENVLOCK_TEST_PAUSE_AT`` names ``point`` (the one place it is read)."""
    wanted = os.environ.get(PAUSE_ENV, "")
    if point in wanted.split(","):
        marker = os.environ.get("ENVLOCK_TEST_PAUSE_MARKER")
        if marker:
            Path(marker).write_text(point)
        time.sleep(float(os.environ.get("ENVLOCK_TEST_PAUSE_SECONDS", "60")))


def env_path(store: Store, env: str) -> Path:
    """The env's stable path; ``UsageError`` when it was never synced or its venv is gone."""
    number = generations.current_number(store, env)
    if number is None:
        raise generations.never_synced(store, env)
    path = generations.stable_path(store, env)
    if not (generations.env_dir(store, env) / str(number)).is_dir():
        generations.current_or_error(store, env)  # raises: the link names no generation there is
    if not path.is_dir():
        # A dangling path would run the host's python (PATH falls through to it).
        others = generations.rollback_targets(store, env, besides=number)
        back = f", or `envlock rollback {env} --to {others[-1]}`" if others else ""
        copy = generations.lock_copy(generations.env_dir(store, env) / str(number))
        raise StoreError(f"{path}: generation {number}'s venv is gone from the store ({path.resolve()}); "
                         f"run `envlock sync {env} --lock {copy}` to build it again (the lock it was built from; "
                         f"`envlock sync {env}` syncs the workspace's){back}")
    return path


def verify_env(store: Store, env: str, lock: Lock | None = None, lock_ref: str | None = None, *,
               lock_writable: bool = True) -> VerifyResult:
    """Recompute the current generation's venv digest; compare with the lock's (else the recorded one).

    ``lock_ref``: how the lock was named (``verify --lock``), for the next steps said; None for the
    env's own lock file. ``lock_writable``: whether a sync may write into it (``LockRef.writable``).
    """
    from dataclasses import replace

    from envlock import digest, verify

    env_path(store, env)  # the current generation and its venv are there, else says how to get them back
    cur = generations.current_or_error(store, env)
    venv = cur.venv.resolve()
    same_lock = lock is not None and lock.install_digest() == cur.install_digest
    # A generation of another lock (a rollback, a --lock sync) is checked against its own digest.
    recorded = lock.venv_digest_for(venv_python(cur.venv)) if lock is not None and same_lock else None
    expected = recorded or cur.venv_digest
    reference = digest.recorded_manifest(store.path("manifests", expected), expected, venv)
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


def run_environ(store: Store, env: str) -> tuple[Path, dict[str, str]]:
    """The venv a command run in ``env`` uses, and the environment to run it with (its
    ``bin`` first on PATH, ``VIRTUAL_ENV`` set).

    The venv is the current generation's own link, ``envs/NAME/N/venv``, not the stable
    path: a sync or rollback while the command runs flips ``current``, and a program
    importing lazily (a server) must not load half its modules from another generation.
    (Not the store entry it points at either: one envlock 0.1.0 named holds a ``:``, which PATH cannot.)
    """
    stable = env_path(store, env)
    root = stable.parent / os.readlink(stable)  # one level: generation N's link is never flipped
    environ = dict(os.environ)
    environ["VIRTUAL_ENV"] = str(root)
    environ["PATH"] = os.pathsep.join([str(root / "bin"), environ.get("PATH", "")])
    environ.pop("PYTHONHOME", None)
    return root, environ


def exec_in_env(store: Store, env: str, argv: Sequence[str]) -> NoReturn:
    """Replace this process with ``argv`` run in the env (see ``run_environ``).

    exec, not a child process: a Ctrl-C or a SIGTERM (``docker stop``, Slurm) reaches
    the command itself, whose handlers run to their end (a checkpoint gets saved), no
    child is orphaned, and the exit status is the command's own, as a shell gives it.
    Returns only by raising, when the command cannot be started (127, 126, as ``sh``).
    """
    if not argv:
        raise UsageError("envlock run ENV -- CMD...: no command given")
    if not argv[0]:  # execvpe refuses it with a ValueError; sh says "not found"
        raise CommandError("'': command not found (the command name is empty)", exit_code=127)
    import signal

    root, environ = run_environ(store, env)
    sys.stdout.flush()
    sys.stderr.flush()
    # Python ignores these at start-up, and an ignored signal stays ignored across exec:
    # `yes | head` in the command would print "Broken pipe" instead of ending quietly.
    # Put back if the exec fails: this process goes on, and must not die of a closed pipe.
    ignored = [getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)]
    saved = [(sig, signal.signal(sig, signal.SIG_DFL)) for sig in ignored]
    try:
        os.execvpe(argv[0], list(argv), environ)
    except FileNotFoundError:
        import shutil

        found = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=environ["PATH"])
        if found is not None and os.path.isfile(found):
            # The file is there: what is missing is the interpreter its #! line names (a
            # console script whose venv python link dangles, say).
            raise CommandError(f"{found}: cannot be run: the interpreter its #! line names was not found",
                               exit_code=126) from None
        raise CommandError(f"{argv[0]}: command not found (in {root / 'bin'} or on PATH)", exit_code=127) from None
    except PermissionError:
        import shutil

        if "/" not in argv[0] and shutil.which(argv[0], path=environ["PATH"]) is None:
            # execvp's EACCES from a PATH folder it may not search: found nowhere, as sh says.
            raise CommandError(f"{argv[0]}: command not found (in {root / 'bin'} or on PATH)", exit_code=127) from None
        raise CommandError(f"{argv[0]}: not executable (permission denied)", exit_code=126) from None
    except OSError as exc:  # found but cannot run: no #! line, another machine's binary (ENOEXEC)
        raise CommandError(f"{argv[0]}: cannot be run ({exc.strerror})", exit_code=126) from None
    finally:
        for sig, handler in saved:
            signal.signal(sig, handler)
