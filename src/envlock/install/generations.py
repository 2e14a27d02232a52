"""Numbered generations of an env and the stable ``current`` link.

Layout, under the store's ``envs/<name>/``::

    .lock                 flock: one writer (sync, rollback) per env at a time
    <N>/venv              relative symlink to ``../../../venvs/sha256-<hex>``
    <N>/generation.json   number, created (UTC), install digest, venv digest
    <N>/pylock.toml       the lock this generation was built from
    <N>/pending           while it was never current: its sync was killed or refused before the switch
    current               symlink to ``<N>/venv``: ``envlock path`` prints it
    noop-stamp            what the last sync found current (``envlock.store.noop``)
    lock-doc              the lock document the last sync read, to read it again (``envlock.store.lockdocs``)

A generation folder is written under a temp name and renamed; ``current`` is
flipped by making a new symlink and ``os.replace``-ing it over the old one (a
single ``rename(2)``), so a reader always sees one whole generation and a killed
sync leaves the previous one current.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from envlock.errors import UsageError, VerifyError, did_you_mean
from envlock.model.jsondoc import json_doc
from envlock.store import noop
from envlock.store.durable import fsync_dir, sync_tree
from envlock.store.store import LAYOUT_VERSION, Store, exclusive_lock, temp_beside

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

CURRENT = "current"
_RECORD = "generation.json"
_LOCK_COPY = "pylock.toml"
_PENDING = "pending"


@dataclass(frozen=True)
class Generation:
    """One generation of an env; doubles as an entry of ``envlock generations --json``."""

    env: str
    number: int
    created: str  # ISO 8601, UTC
    install_digest: str
    venv_digest: str
    path: Path  # the generation folder
    current: bool = False
    lock_sha256: str = ""  # sha256 of the lock text this generation was synced from (its pylock.toml)
    venv_python: str | None = None  # the interpreter version the venv was built with (None: not recorded)
    pending: bool = False  # never made current (its sync stopped before the switch); set by ``scan`` only

    @property
    def venv(self) -> Path:
        return self.path / "venv"

    @property
    def store_venv(self) -> Path | None:
        """The store venv its link names, as install named it (one readlink, not resolved);
        None when the link is not there."""
        try:
            return Path(os.path.normpath(self.path / os.readlink(self.venv)))
        except OSError:
            return None

    @property
    def lock_copy(self) -> Path:
        return lock_copy(self.path)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class Switch:
    """Result of a rollback: which generation was current, which is now."""

    env: str
    previous: int | None
    current: int
    path: Path

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


def env_dir(store: Store, env: str) -> Path:
    """The folder holding ``env``'s generations (``UsageError`` for a name that is no env name)."""
    from envlock.workspace import check_env_name

    check_env_name(env)
    return store.path("envs", env)


def stable_path(store: Store, env: str) -> Path:
    """The env's stable path: the ``current`` symlink (``<path>/bin/python`` is its python)."""
    return env_dir(store, env) / CURRENT


@contextlib.contextmanager
def env_lock(store: Store, env: str) -> Iterator[None]:
    """Serialize writers of one env (``fcntl.flock`` on ``envs/<name>/.lock``)."""
    with exclusive_lock(env_dir(store, env) / ".lock"):
        yield


def current_number(store: Store, env: str) -> int | None:
    """The current generation's number, or None when the env has none (one readlink)."""
    try:
        target = os.readlink(stable_path(store, env))
    except (FileNotFoundError, OSError):
        return None
    head = target.split("/", 1)[0]
    return int(head) if head.isdigit() else None


def read(store: Store, env: str, number: int, *, current: int | None = None) -> Generation | None:
    """Generation ``number`` of ``env``, or None when it is not there (or not whole)."""
    folder = env_dir(store, env) / str(number)
    try:
        doc = json.loads((folder / _RECORD).read_text(encoding="utf-8"))
        return Generation(
            env=env,
            number=number,
            created=str(doc["created"]),
            install_digest=str(doc["install_digest"]),
            venv_digest=str(doc["venv_digest"]),
            path=folder,
            current=number == current,
            lock_sha256=str(doc.get("lock_sha256", "")),
            venv_python=str(doc["venv_python"]) if doc.get("venv_python") else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def current(store: Store, env: str) -> Generation | None:
    """The current generation (cheap: a readlink and one small JSON file)."""
    number = current_number(store, env)
    return None if number is None else read(store, env, number, current=number)


def current_or_error(store: Store, env: str) -> Generation:
    """The current generation; else the ``UsageError`` that says why there is none: never
    synced (or a typo), its link removed by hand, or its link naming a generation whose
    record is gone or unreadable."""
    number = current_number(store, env)
    if number is None:
        raise never_synced(store, env)
    found = read(store, env, number, current=number)
    if found is not None:
        return found
    record = env_dir(store, env) / str(number) / _RECORD
    others = rollback_targets(store, env, besides=number)
    how = (f"`envlock rollback {env} --to {others[-1]}` makes another one current, or run `envlock sync {env}`"
           if others else f"run `envlock sync {env}`")
    state = "cannot be read" if record.parent.is_dir() else "is gone"
    raise UsageError(f"env {env!r}: its current link names generation {number}, whose record {record} {state} "
                     f"(generations: {', '.join(map(str, others)) or 'none'}); {how}")


def rollback_targets(store: Store, env: str, *, besides: int | None = None) -> list[int]:
    """The generations ``rollback`` can make current (readable, venv still there, current once), but ``besides``."""
    return [g.number for g in list_generations(store, env)
            if g.number != besides and not g.pending and g.venv.is_dir()]


def newest(store: Store, env: str) -> Generation | None:
    """The highest-numbered generation (current or not), or None."""
    numbers = _numbers(env_dir(store, env))
    return read(store, env, numbers[-1], current=current_number(store, env)) if numbers else None


def _numbers(folder: Path) -> list[int]:
    """The generation numbers in an env's ``folder`` (its numbered subfolders), ascending."""
    # Only names envlock writes: "007" is not generation 7's folder (7 is).
    return sorted(int(p.name) for p in folder.iterdir()
                  if p.name.isascii() and p.name.isdigit() and p.name == str(int(p.name))) if folder.is_dir() else []


def scan(store: Store, env: str) -> tuple[tuple[Generation, ...], tuple[Path, ...]]:
    """Every whole generation of ``env``, oldest first, and the records of the folders left out
    (damaged by hand, say), in one pass."""
    folder = env_dir(store, env)
    cur = current_number(store, env)
    numbers = _numbers(folder)
    pending = _pending(folder, numbers, cur)
    found: list[Generation] = []
    damaged: list[Path] = []
    for n in numbers:
        gen = read(store, env, n, current=cur)
        if gen is None:
            damaged.append(folder / str(n) / _RECORD)
        else:
            found.append(replace(gen, pending=True) if n in pending else gen)
    return tuple(found), tuple(damaged)


def _pending(folder: Path, numbers: list[int], cur: int | None) -> set[int]:
    """The generations never made current: still marked ``pending`` (``flip`` unmarks a generation
    before it switches to it), and not current."""
    return {n for n in numbers if n != cur and (folder / str(n) / _PENDING).exists()}


def list_generations(store: Store, env: str) -> tuple[Generation, ...]:
    """Every whole generation of ``env``, oldest first."""
    return scan(store, env)[0]


def digest_seen(store: Store, install_digest: str, python: str | None, venv: Path) -> str | None:
    """The venv digest the newest generation in this store (any env) recorded for ``install_digest``
    built with ``python``: what a build of that lock gave here last; None when none did. ``venv``: the
    store entry of that lock's venv. Only generations linking to it are read (one ``readlink`` for
    each of the others), each env's from its newest down, until one older than its newest match."""
    newest: tuple[str, str] | None = None  # (created, venv digest); equal times: the greater digest
    by_env: dict[str, list[int]] = {}
    for env, number in users(store, venv) if python else ():
        by_env.setdefault(env, []).append(number)
    for env, numbers in by_env.items():
        first: str | None = None
        for number in sorted(numbers, reverse=True):
            try:
                gen = read(store, env, number)
            except UsageError:
                break  # not an env's folder (a file manager's .Trash, say)
            if gen is None or gen.install_digest != install_digest or gen.venv_python != python:
                continue
            if first is not None and gen.created < first:
                break  # numbers are made in time order: the rest of this env's are older still
            first = gen.created
            seen = (gen.created, gen.venv_digest)
            newest = seen if newest is None else max(newest, seen)
    return newest[1] if newest is not None else None


def lock_copy(generation_dir: Path) -> Path:
    """The copy of the lock a generation was built from, in its folder (``envs/ENV/N/``)."""
    return generation_dir / _LOCK_COPY


def is_lock_copy(path: Path) -> bool:
    """Whether ``path`` is a generation's copy of its lock (``.../envs/ENV/N/pylock.toml`` in a
    store, this one or another ``ENVLOCK_HOME``'s): a store entry, never written."""
    parents = path.parents
    return (path.name == _LOCK_COPY and len(parents) > 4 and parents[0].name.isdigit() and parents[2].name == "envs"
            and parents[3].name == f"v{LAYOUT_VERSION}" and (parents[4] / "layout").is_file())


def users(store: Store, venv: Path) -> list[tuple[str, int]]:
    """Every (env, generation number), in any env, whose venv link points at the store entry ``venv``."""
    found = []
    envs = store.root / "envs"
    want = os.path.normpath(venv)
    for folder in sorted(envs.iterdir()) if envs.is_dir() else ():
        where = str(folder)
        for number in _numbers(folder):
            link = f"{where}/{number}"
            try:
                target = os.readlink(f"{link}/venv")
            except OSError:
                continue
            if os.path.normpath(os.path.join(link, target)) == want:
                found.append((folder.name, number))
    return found


def add(store: Store, env: str, *, venv: Path, install_digest: str, venv_digest: str,
        lock_text: str, venv_python: str | None = None) -> Generation:
    """Write the next generation pointing at ``venv`` (call under ``env_lock``); does not flip."""
    folder = env_dir(store, env)
    folder.mkdir(parents=True, exist_ok=True)
    for litter in folder.glob(".new-*"):  # left by a killed sync; we hold the env lock
        store.remove_tree(litter)
    for litter in folder.glob(".current*"):  # a link never renamed into place (earlier envlocks: ".current-*")
        litter.unlink(missing_ok=True)
    # Generations a killed or refused sync left before its switch: never current, so never
    # the env someone had; a rollback must not land on one (their venvs stay in the store).
    for n in sorted(_pending(folder, _numbers(folder), current_number(store, env))):
        store.remove_tree(folder / str(n))
    # The fast no-op stamp names a generation by number; a number can come back (an
    # old generation folder removed by hand), so no stamp may outlive this point.
    (folder / noop.STAMP).unlink(missing_ok=True)  # written by sync, read by the fast no-op
    number = max(_numbers(folder), default=0) + 1
    work = folder / f".new-{number}-{os.urandom(4).hex()}"
    work.mkdir()
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # Relative, so the store can be moved as a whole (the venvs are relocatable too).
    os.symlink(os.path.relpath(venv, work), work / "venv")
    # Plain writes: the folder is not a generation until the rename below, and sync_tree makes
    # every file in it durable first (a write_atomic each would sync each file twice).
    (work / _LOCK_COPY).write_bytes(lock_text.encode())
    lock_sha256 = hashlib.sha256(lock_text.encode()).hexdigest()
    record = {"created": created, "install_digest": install_digest, "venv_digest": venv_digest,
              "lock_sha256": lock_sha256, "venv_python": venv_python}
    (work / _RECORD).write_bytes((json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    (work / _PENDING).touch()  # until flip
    sync_tree(work)  # its link and records on disk before the rename names it a generation
    os.rename(work, folder / str(number))
    fsync_dir(folder)
    return Generation(env, number, created, install_digest, venv_digest, folder / str(number),
                      lock_sha256=lock_sha256, venv_python=venv_python, pending=True)


def discard(store: Store, env: str, number: int) -> None:
    """Remove generation ``number``, never made current (call under ``env_lock``): its venv is gone."""
    if current_number(store, env) == number:
        raise ValueError(f"generation {number} of {env!r} is current")
    store.remove_tree(env_dir(store, env) / str(number))


def check_link(store: Store, env: str) -> None:
    """``UsageError`` when the env's ``current`` is there but is not envlock's symlink (a folder
    or file put there by hand): no command replaces it. A sync asks before it adds a generation."""
    link = env_dir(store, env) / CURRENT
    if os.path.lexists(link) and not os.path.islink(link):
        raise UsageError(f"{link}: not the symlink envlock keeps there (a {'folder' if link.is_dir() else 'file'}); "
                         "move it away (it is not envlock's) and run the command again")


def flip(store: Store, env: str, number: int) -> None:
    """Point ``current`` at generation ``number`` in one atomic rename."""
    check_link(store, env)
    folder = env_dir(store, env)
    # Unmarked first: killed between the two steps, it is a generation never current that a
    # rollback may still pick, never one that was current but is taken for pending.
    (folder / str(number) / _PENDING).unlink(missing_ok=True)
    tmp = temp_beside(folder / CURRENT)
    os.symlink(f"{number}/venv", tmp)
    try:
        # The new link (a symlink's target is in its inode, made durable with its folder) and the
        # unmarking are on disk before the rename; the rename after it: a power cut must neither
        # bring the old link back nor leave a link to nowhere.
        fsync_dir(folder / str(number))
        fsync_dir(folder)
        os.replace(tmp, folder / CURRENT)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(folder)


def no_current(store: Store, env: str) -> str | None:
    """Why an env with generations has none current (its ``current`` link removed or replaced
    by hand), and what to do; None when it has no generation."""
    numbers = _numbers(env_dir(store, env))
    if not numbers:
        return None
    link = env_dir(store, env) / CURRENT
    whole = rollback_targets(store, env)
    listed = ", ".join(map(str, whole)) or "none with its venv"
    how = (f"`envlock rollback {env} --to {whole[-1]}` makes one current, or run `envlock sync {env}`" if whole
           else f"run `envlock sync {env}`")
    if os.path.lexists(link):  # neither command replaces what is not envlock's link
        return f"({link} is not the link envlock keeps; generations: {listed}); move it away, then {how}"
    return f"({link} is missing; generations: {listed}); {how}"


def never_synced(store: Store, env: str) -> UsageError:
    """The error for an env with no current generation in ``store``: a typo of a synced
    env's name is named as one, rather than sent to sync a new env."""
    if (why := no_current(store, env)) is not None:
        return UsageError(f"env {env!r}: no current generation in {store.home} {why}")
    hint = (did_you_mean(env, [e for e in _synced(store) if e != env], before="; ",
                         after=f" (else run `envlock sync {env}`)") or f"; run `envlock sync {env}`")
    return UsageError(f"env {env!r}: no current generation in {store.home}{hint}")


def _synced(store: Store) -> list[str]:
    """The envs with a current generation in ``store``, sorted."""
    folder = store.root / "envs"
    return sorted(p.name for p in folder.iterdir() if (p / CURRENT).is_symlink()) if folder.is_dir() else []


def unknown_env(store: Store, env: str, workspace: Path, declared: list[str]) -> UsageError:
    """The error for an env neither synced in ``store`` nor declared in ``workspace``'s envs/
    (``declared``): a typo, which `envlock sync ENV` would only fail on as well."""
    known = sorted(set(_synced(store)) | set(declared))
    hint = did_you_mean(env, known, after=" ")
    return UsageError(f"env {env!r}: not synced in {store.home}, and {workspace / 'envs'} declares no such env "
                      f"({hint}envs: {', '.join(known) or 'none'})")


def rollback(store: Store, env: str, to: int | None = None) -> Switch:
    """Make generation ``to`` (default: the newest one older than the current) current."""
    if not env_dir(store, env).is_dir():
        raise never_synced(store, env)  # before the env lock, which would make its folder
    with env_lock(store, env):
        gens = list_generations(store, env)
        if not gens:
            raise never_synced(store, env)
        cur = current_number(store, env)
        numbers = [g.number for g in gens]
        if to is None:
            if cur is None:  # nothing to go back from: which one is for the user to say
                raise never_synced(store, env)
            older = [g.number for g in gens if g.number < cur and not g.pending]
            if not older:
                raise UsageError(
                    f"env {env!r}: generation {cur} is the oldest; nothing to roll back to "
                    f"(generations: {', '.join(map(str, numbers))})"
                )
            to = older[-1]
        elif to not in numbers:
            raise UsageError(
                f"env {env!r}: no generation {to} (generations: {', '.join(map(str, numbers))})"
            )
        target = next(g for g in gens if g.number == to)
        if not target.venv.resolve().is_dir():
            raise UsageError(f"{target.venv}: generation {to}'s venv is gone from the store; `envlock sync {env} "
                             f"--lock {target.lock_copy}` builds it again (the lock it was "
                             "built from) and makes it current")
        _check_unchanged(store, target)
        flip(store, env, to)
        return Switch(env, cur, to, stable_path(store, env))


def _check_unchanged(store: Store, gen: Generation) -> None:
    """``VerifyError`` listing the files when ``gen``'s venv no longer has the digest it was built with.

    The walk a sync makes of a reused store venv (inode hash cache included): a venv
    changed since it was built (``pip install`` into the env) must not become current
    by a rollback either.
    """
    # Here, not at the top: a sync's no-op imports this module, and never walks a venv.
    from envlock.install import digest

    venv = gen.store_venv or gen.venv  # as install named it, unresolved
    snapshot = store.stat_snapshot("venvs", venv.name) if venv.parent == store.root / "venvs" else None
    if snapshot is not None and digest.unchanged(venv, snapshot, gen.venv_digest) is not None:
        return
    actual = digest.manifest(venv, cache_dir=store.hash_cache)
    if actual.digest == gen.venv_digest:
        built = digest.stored_manifest(venv)
        if snapshot is not None and built is not None and built.digest == actual.digest:  # as built
            digest.keep_snapshot(snapshot, actual)
        return
    reference = digest.recorded_manifest(store.path("manifests", gen.venv_digest), gen.venv_digest, venv)
    lines = digest.differing_lines(reference, actual, gen.venv_digest)
    raise VerifyError(
        f"{venv}: generation {gen.number} of env {gen.env!r} was modified after it was built "
        f"(recorded {gen.venv_digest}, found {actual.digest}); the env was not switched; "
        f"`envlock verify {gen.env} --repair` builds it anew (and every venv sharing its modified files), "
        "then roll back again",
        details=lines,
    )
