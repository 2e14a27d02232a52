"""``envlock pin``, ``pins`` and ``unpin``: locks the store keeps (roots of ``envlock gc``).

A pin is a copy of a lock's bytes in the store, ``pins/<env>/<sha256>.toml``, with a
``<sha256>.json`` saying how it was named and when. gc keeps its whole closure (wheels,
builds, sources, venv), so a known-good env can be synced again offline after the nightlies
it pinned left their index and the workspace's history moved on.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.commands.lockrefs import load_env_lock_ref
from envlock.errors import UsageError
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Lock
from envlock.store.store import Store, write_atomic
from envlock.workspace import Workspace, check_env_name

PINS = "pins"


@dataclass(frozen=True)
class Pin:
    """One pinned lock; doubles as an entry of ``envlock pins --json``."""

    env: str
    sha256: str  # of the lock's bytes
    label: str  # how it was named when pinned (PATH, PATH@REV, an import's bundle)
    created: str  # ISO 8601, UTC
    path: Path  # the pinned copy (sync it with `envlock sync ENV --lock PATH`)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


def pin_lock(store: Store, env: str, data: bytes, label: str) -> Pin:
    """Keep ``data`` (a lock of ``env``) as a pin; pinning the same bytes again keeps the first record."""
    check_env_name(env)
    sha = hashlib.sha256(data).hexdigest()
    folder = store.root / PINS / env
    record = folder / f"{sha}.json"
    if not record.is_file():
        write_atomic(folder / f"{sha}.toml", data)
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_atomic(record, (json.dumps({"label": label, "created": created}, sort_keys=True) + "\n").encode())
    found = _read(store, env, sha)
    assert found is not None
    return found


def pin_env(ws: Workspace, store: Store, env: str, ref: str | None) -> Pin:
    """``envlock pin ENV [--lock REF]``: pin the workspace's lock of ``env`` (or ``ref``)."""
    data, label = lock_bytes(ws, env, ref, "pin")
    return pin_lock(store, env, data, label)


def lock_bytes(ws: Workspace, env: str, ref: str | None, command: str) -> tuple[bytes, str]:
    """The bytes of ``ref`` (default: the workspace's lock of ``env``) and how to name it; another
    env's lock is refused."""
    # The file's bytes, whichever targets it has: the env is checked on any of them (``whole``).
    found = load_env_lock_ref(ws, ref if ref is not None else str(ws.lock_path(env)), env, command, whole=True)
    if found.path is not None and found.path.is_file():
        return found.path.read_bytes(), found.label if ref is not None else ws.relative(found.path)
    return found.lock.to_toml().encode(), found.label  # read from git: the writer gives the same bytes


def pins(store: Store, env: str | None = None) -> list[Pin]:
    """Every pin (of ``env``, if given), by env then date."""
    root = store.root / PINS
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(root.iterdir()):
        if env is not None and folder.name != env:
            continue
        for record in sorted(folder.glob("*.json")):
            if (found := _read(store, folder.name, record.stem)) is not None:
                out.append(found)
    return sorted(out, key=lambda p: (p.env, p.created, p.sha256))


def pinned_locks(store: Store) -> list[tuple[Pin, Lock]]:
    """Every pin with its lock parsed (a pin that no longer reads is left out: it keeps nothing)."""
    from envlock.errors import EnvlockError

    out = []
    for pin in pins(store):
        try:
            out.append((pin, Lock.from_toml(pin.path.read_text(encoding="utf-8"), pin.path)))
        except (OSError, UnicodeDecodeError, EnvlockError):
            continue
    return out


def unpin(ws: Workspace, store: Store, env: str, ref: str | None, *, everything: bool = False) -> list[Pin]:
    """``envlock unpin ENV [--lock REF | --all]``: remove the pin of that lock (or every pin of ``env``)."""
    held = pins(store, env)
    if everything:
        gone = held
    else:
        data, label = lock_bytes(ws, env, ref, "unpin")
        sha = hashlib.sha256(data).hexdigest()
        gone = [p for p in held if p.sha256 == sha]
        if not gone:
            listed = ", ".join(f"{p.label} ({p.sha256[:12]})" for p in held) or "none"
            raise UsageError(f"{label}: not pinned for env {env!r} (pins: {listed}); `envlock pins` lists them")
    for pin in gone:
        pin.path.with_suffix(".json").unlink(missing_ok=True)  # the record first: a pin without it is none
        pin.path.unlink(missing_ok=True)
    return gone


def _read(store: Store, env: str, sha: str) -> Pin | None:
    folder = store.root / PINS / env
    try:
        doc = json.loads((folder / f"{sha}.json").read_text(encoding="utf-8"))
        label, created = str(doc["label"]), str(doc["created"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    path = folder / f"{sha}.toml"
    return Pin(env, sha, label, created, path) if path.is_file() else None
