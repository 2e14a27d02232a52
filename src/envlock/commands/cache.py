"""``envlock cache push`` and ``envlock cache keygen``: the recipes (``cache verify``: ``cache.caches``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from envlock.cache.backends import open_backend
from envlock.cache.caches import CacheConfig, Pushed, PushUrls, closure_manifest, push_entries, secret_key
from envlock.cache.signing import PublicKey
from envlock.store.store import Store
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.model.mirrors import MirrorOptions
from typing import TYPE_CHECKING

from envlock.cache.buildsources import locked, push_sources


def push_closure(ws: Workspace, env: str, to: str, *, lock_ref: str | None = None, key_file: Path | None = None,
                 url_records: PushUrls | None = None, asked: MirrorOptions | None = None) -> Pushed:
    """``envlock cache push ENV --to URL``: the lock's closure (every wheel, each build's signed
    record, the closure manifest) uploaded where ``to`` lacks it, then each wheel's signed URL
    record (``url_records``). The wheels are brought into the store first (from the index where
    the store lacks them, through the mirrors ``asked`` or ``ENVLOCK_INDEX_*`` name, as a sync)."""
    from envlock.commands.lockrefs import load_env_lock_ref
    from envlock.install.fetch import fetch_mirrored

    ref = load_env_lock_ref(ws, lock_ref or env, env, "cache push")
    key = secret_key(key_file or CacheConfig.of(ws).key_file)
    backend = open_backend(to)
    store = Store.open()
    got = fetch_mirrored(ws, env, ref.lock, [p.wheels[0] for p in ref.lock.packages], store, base_dir=ref.folder,
                         asked=asked)
    builds = [(n, b.input_digest, b.requirements) for n, b in sorted(ref.lock.builds.items())]
    paths = got.paths()
    sizes = {sha: path.stat().st_size for sha, path in paths.items()}
    pushed = push_entries(backend, store, paths, builds, key, closure_manifest(ref.lock, ref.label, sizes))
    if url_records is None:
        return pushed
    more = url_records(backend, [(p.wheels[0], paths[p.wheels[0].sha256]) for p in ref.lock.packages], key)
    return Pushed(pushed.url, pushed.uploaded + more.uploaded, pushed.present + more.present, pushed.notes + more.notes)


def keygen(name: str, out: Path) -> tuple[PublicKey, bool]:
    """``envlock cache keygen NAME --out FILE``: a new key's secret written to ``out`` (0600; its
    folder made, 0700, if missing); its public key, and whether the folder was made."""
    from envlock.cache.signing import generate, write_secret

    key = generate(name)
    made = write_secret(key, out)
    return key.public(), made


def push_env(ws: Workspace, env: str, to: str, *, lock_ref: str | None = None,
             key_file: Path | None = None, url_records: PushUrls | None = None,
             asked: MirrorOptions | None = None) -> Pushed:
    """``envlock cache push ENV --to URL``: the lock's closure (``caching.push_env``), then every fetched
    source its lock pins (git commits, FetchContent inputs) that ``to`` lacks."""
    from envlock.commands.lockrefs import load_env_lock_ref

    store = Store.open()
    with store.writing():  # a gc beside waits: no entry is removed while it is read (a tar made of half a tree)
        pushed = push_closure(ws, env, to, lock_ref=lock_ref, key_file=key_file, url_records=url_records,
                              asked=asked)
        ref = load_env_lock_ref(ws, lock_ref or env, env, "cache push")
        got = push_sources(open_backend(to), store, locked(ref.lock))
    return replace(pushed, uploaded=pushed.uploaded + got.uploaded, present=pushed.present + got.present,
                   notes=pushed.notes + got.notes)
