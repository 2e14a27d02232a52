"""``envlock cache push`` and ``envlock cache keygen``: the recipes (``cache verify``: ``cache.caches``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from envlock.cache.backends import open_backend
from envlock.cache.buildsources import locked, push_sources
from envlock.cache.caches import CacheConfig, Pushed, PushUrls, closure_manifest, push_entries, secret_key
from envlock.cache.signing import PublicKey
from envlock.store.store import Store
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.model.mirrors import MirrorOptions


@dataclass(frozen=True)
class PushOptions:
    """What ``envlock cache push`` is asked besides the env and the cache."""

    lock_ref: str | None = None  # --lock PATH[@REV]: this lock's closure instead of the workspace's
    key_file: Path | None = None  # --key: signs the build and URL records (default: ENVLOCK_CACHE_KEY, [cache] key)
    url_records: PushUrls | None = None  # pushes each wheel's signed URL record (``cache.urlrecords``)
    asked: MirrorOptions | None = None  # --index: where the wheels the store lacks are downloaded from
    target: str | None = None  # --target: of a lock of several targets, the one pushed (None: this machine's)


def push_closure(ws: Workspace, env: str, to: str, store: Store, options: PushOptions | None = None) -> Pushed:
    """The lock's closure (every wheel, each build's signed record, the closure manifest) uploaded
    where ``to`` lacks it, then each wheel's signed URL record (``options.url_records``). The wheels
    are brought into ``store`` first (from the index where it lacks them, through the mirrors
    ``options.asked`` or ``ENVLOCK_INDEX_*`` name, as a sync)."""
    from envlock.commands.lockrefs import load_env_lock_ref
    from envlock.install.fetch import fetch_mirrored

    options = options or PushOptions()
    ref = load_env_lock_ref(ws, options.lock_ref or env, env, "cache push", options.target)
    key = secret_key(options.key_file or CacheConfig.of(ws).key_file)
    backend = open_backend(to)
    got = fetch_mirrored(ws, env, ref.lock, [p.wheels[0] for p in ref.lock.packages], store, base_dir=ref.folder,
                         asked=options.asked)
    builds = [(n, b.input_digest, b.requirements) for n, b in sorted(ref.lock.builds.items())]
    paths = got.paths()
    sizes = {sha: path.stat().st_size for sha, path in paths.items()}
    pushed = push_entries(backend, store, paths, builds, key, closure_manifest(ref.lock, ref.label, sizes))
    if options.url_records is None:
        return pushed
    more = options.url_records(backend, [(p.wheels[0], paths[p.wheels[0].sha256]) for p in ref.lock.packages], key)
    return Pushed(pushed.url, pushed.uploaded + more.uploaded, pushed.present + more.present, pushed.notes + more.notes)


def keygen(name: str, out: Path) -> tuple[PublicKey, bool]:
    """``envlock cache keygen NAME --out FILE``: a new key's secret written to ``out`` (0600; its
    folder made, 0700, if missing); its public key, and whether the folder was made."""
    from envlock.cache.signing import generate, write_secret

    key = generate(name)
    made = write_secret(key, out)
    return key.public(), made


def push_env(ws: Workspace, env: str, to: str, options: PushOptions | None = None) -> Pushed:
    """``envlock cache push ENV --to URL``: the lock's closure (``push_closure``), then every fetched
    source its lock pins (git commits, FetchContent inputs) that ``to`` lacks."""
    from envlock.commands.lockrefs import load_env_lock_ref

    options = options or PushOptions()
    store = Store.open()
    with store.writing():  # a gc beside waits: no entry is removed while it is read (a tar made of half a tree)
        pushed = push_closure(ws, env, to, store, options)
        ref = load_env_lock_ref(ws, options.lock_ref or env, env, "cache push", options.target)
        got = push_sources(open_backend(to), store, locked(ref.lock))
    return replace(pushed, uploaded=pushed.uploaded + got.uploaded, present=pushed.present + got.present,
                   notes=pushed.notes + got.notes)
