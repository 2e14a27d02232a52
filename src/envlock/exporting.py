"""``envlock export`` and ``envlock import``: a lock's closure carried to another store.

Export (``export_env``): read the lock (the workspace's, ``PATH`` or ``PATH@REV``), plan its
closure in the store (``closure.lock_closure``: wheels, local builds and their records, the
sources and FetchContent checkouts they were built from, the wheels of each build's recorded
requirements and toolchain), fetch the wheels the store lacks (a build's backend wheels for this machine from
the spec's default index, as a build does), then write the bundle (``bundle``: the lock, each
entry, a manifest with every member's sha256) under a temp name and rename it into place.

Import (``import_bundle``): read the manifest, check that it carries every wheel its lock
names, copy each entry the store lacks into a temp folder, holding each file to its sha256
(a member that does not match, or whose name would escape, is refused by name), check the
entry against its kind and key, and rename them all into place only once every one is whole.
The lock is pinned, so gc keeps what was imported.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock import buildinputs, bundle, fetch
from envlock.closure import EntryRef, lock_closure, pinned_requirement
from envlock.errors import EnvlockError, LockError, StoreError, UsageError
from envlock.lockfile import Lock
from envlock.mirrors import MirrorOptions, Mirrors, package_locator
from envlock.pinning import Pin, lock_bytes, pin_lock
from envlock.progress import Progress
from envlock.resolve import index_urls
from envlock.spec import load_env_spec
from envlock.store import Store
from envlock.workspace import Workspace

#: What a bundle carries: enough to sync (wheels) and to rebuild (builds, sources) offline. Not
#: venvs (a sync rebuilds one from the wheels and checks its digest), nor git mirrors (whole
#: histories; the checkouts are what a build reads).
CARRIED = ("wheels", "builds", "sources")


@dataclass(frozen=True)
class ExportResult:
    """What ``envlock export`` wrote; doubles as its ``--json``."""

    env: str
    lock: str  # the lock as named
    to: Path
    entries: dict[str, int]  # kind -> count
    files: int
    bytes: int
    fetched: int  # wheels brought into the store first
    pending: tuple[str, ...] = ()  # local builds the lock has not built (--allow-pending): not carried

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(f"{name}: not built for this lock, so the bundle carries no wheel of it (nor a build record or "
                     f"backend wheels): a sync of it, offline too, needs `envlock build {self.env}` first"
                     for name in self.pending)

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "lock": self.lock, "to": str(self.to), "entries": dict(self.entries),
                "files": self.files, "bytes": self.bytes, "fetched": self.fetched, "pending": list(self.pending),
                "notes": list(self.notes)}


@dataclass(frozen=True)
class ImportResult:
    """What ``envlock import`` added; doubles as its ``--json``."""

    source: Path
    env: str
    added: dict[str, int]  # kind -> entries added
    present: int  # entries the store held already
    bytes: int  # of the entries added
    pin: Pin

    def to_dict(self) -> dict[str, Any]:
        return {"source": str(self.source), "env": self.env, "added": dict(self.added), "present": self.present,
                "bytes": self.bytes, "pin": self.pin.to_dict(), "lock": str(self.pin.path)}


def export_env(ws: Workspace, env: str, ref: str | None, to: Path, *, progress: Progress | None = None,
               allow_pending: bool = False, asked: MirrorOptions | None = None) -> ExportResult:
    """Write the closure of ``env``'s lock (or ``ref``) to ``to`` (a folder, or ``*.tar``). A lock whose
    local builds are pending (locked, not built) is refused: the bundle could not rebuild nor sync them
    (``allow_pending``: written without them, and the result's ``notes`` say so)."""
    if to.exists() and not (to.is_dir() and not any(to.iterdir())):
        raise UsageError(f"--to {to}: already exists; expected a new path (a folder, or FILE.tar)")
    data, label = lock_bytes(ws, env, ref, "export")
    lock = Lock.from_toml(data.decode("utf-8"), label)
    if (pending := lock.unbuilt()) and not allow_pending:
        many = len(pending) != 1
        raise LockError(f"{label}: {len(pending)} local build{'s' if many else ''} not built for this lock "
                        f"({', '.join(pending)}): the bundle would carry no wheel of {'them' if many else 'it'} "
                        "(nor a build record or backend wheels), and a sync of it (`--offline` too) would be refused; "
                        f"build first (`envlock build {env}`), or export the rest with --allow-pending")
    store = Store.open()
    with store.writing():  # no gc while the entries are read
        mirrors = _mirrors(ws, env, asked)
        with mirrors.credentials():
            fetched = _fetch_wheels(store, lock, ws, mirrors) + _fetch_backends(store, lock, ws, env, label, mirrors)
        needed = _plan(store, lock, label, env)
        counts: dict[str, int] = {}
        with bundle.open_writer(to) as writer:
            lock_sha = writer.add_bytes(f"pylock.{env}.toml", data)
            entries = []
            for ref_ in needed:
                entries.append(writer.add_entry(ref_.kind, ref_.key, store.path(ref_.kind, ref_.key)))
                counts[ref_.kind] = counts.get(ref_.kind, 0) + 1
            manifest = bundle.Bundle(env, f"pylock.{env}.toml", lock_sha, label, tuple(entries))
            writer.add_bytes(bundle.MANIFEST, bundle.manifest_bytes(manifest))
    return ExportResult(env, label, to, counts, sum(len(e.files) for e in entries) + 2,
                        sum(e.size for e in entries) + len(data), fetched, pending)


def _mirrors(ws: Workspace, env: str, asked: MirrorOptions | None) -> Mirrors:
    """The mirrors of the workspace's spec of ``env`` (``asked`` and the environment's); none without a spec
    that reads (then a mirror asked for is an error: mirrors are named by the spec's indexes)."""
    try:
        spec = load_env_spec(ws, env, check_paths=False)
    except EnvlockError:
        if asked is not None and (asked.indexes or asked.sources):
            raise
        return Mirrors()
    return Mirrors.of(spec, asked)


def _fetch_wheels(store: Store, lock: Lock, ws: Workspace, mirrors: Mirrors) -> int:
    """Bring the lock's wheels the store lacks into it (local ones from the wheelhouse, mirrored ones from
    their mirror); how many."""
    wheels = [p.wheels[0] for p in lock.packages]
    missing = [a for a in wheels if not store.has("wheels", a.sha256)]
    if not missing:
        return 0
    by_package = mirrors.for_packages(lock)
    locate = package_locator(lock.packages, by_package) if by_package else None
    got = fetch.fetch(missing, store, base_dir=ws.root / "locks", env=lock.env or "ENV", locate=locate)
    return sum(1 for a in got.artifacts if a.source != "store")


def _fetch_backends(store: Store, lock: Lock, ws: Workspace, env: str, label: str, mirrors: Mirrors) -> int:
    """Bring into the store a wheel of each build requirement the lock records that it holds none
    of (for this machine: a bundle is for a machine like the one that built), from the default index of
    the workspace's spec of ``env``, held to the locked hashes, as a build brings them in; how many."""
    lacking = {name: [line for line in (*b.requirements, *b.toolchain)
                      if buildinputs.stored_backend(store, pinned_requirement(line), lock.python) is None]
               for name, b in sorted(lock.builds.items())}
    if not any(lacking.values()):
        return 0
    spec = mirrors.spec
    # No spec to read the index from: the error below names what is missing.
    url = index_urls(spec, mirrors.indexes)[spec.default_index.name] if spec is not None else None
    for name, lines in lacking.items():
        try:
            buildinputs.backend_wheels(lines, store, python=lock.python, index_url=url, offline=False,
                                       what=f"{label}: builds.{name}", env=env)
        except EnvlockError as exc:
            raise StoreError(f"{exc.message}; the bundle would not rebuild it offline, so nothing was written",
                             details=exc.details) from None
    return sum(len(lines) for lines in lacking.values())


def _plan(store: Store, lock: Lock, label: str, env: str) -> list[EntryRef]:
    """The entries to carry, sorted; ``StoreError`` naming those the store lacks."""
    closure = lock_closure(store, lock, venv=False)
    missing = [ref for ref in closure.missing if ref.kind in CARRIED]
    if missing:
        raise StoreError(f"{label}: {len(missing)} store entries it needs are not in {store.home}; expected its "
                         f"closure there (`envlock build {env}` brings a build's sources and record in)",
                         details=[str(m) for m in missing])
    return sorted(ref for ref in closure.present if ref.kind in CARRIED)


def import_bundle(source: Path) -> ImportResult:
    """Add the entries of the bundle at ``source`` to the store, all checked, and pin its lock."""
    store = Store.open()
    with bundle.open_bundle(source) as reader, store.writing():
        manifest = reader.manifest()
        data = bundle.read_member(reader, manifest.lock, manifest.lock_sha256)
        lock = Lock.from_toml(data.decode("utf-8"), f"{source}: {manifest.lock}")
        if lock.env and lock.env != manifest.env:
            raise LockError(f"{source}: {manifest.lock} is the lock of env {lock.env!r}, the manifest says "
                            f"{manifest.env!r}")
        _check_carries(source, manifest, lock, store)
        todo = [e for e in manifest.entries if not store.has(e.kind, e.key)]
        with contextlib.ExitStack() as stack:
            # Every entry assembled under tmp/ first; renamed into place together, only once
            # each one is whole (a refused member leaves the store as it was).
            for entry in todo:
                _assemble(reader, store, entry, stack.enter_context(store.new_entry(entry.kind, entry.key)))
        pin = pin_lock(store, manifest.env, data, f"imported from {source} ({manifest.label})")
    added: dict[str, int] = {}
    for entry in todo:
        added[entry.kind] = added.get(entry.kind, 0) + 1
    return ImportResult(source, manifest.env, added, len(manifest.entries) - len(todo),
                        sum(e.size for e in todo), pin)


def _check_carries(source: Path, manifest: bundle.Bundle, lock: Lock, store: Store) -> None:
    """Refuse kinds a bundle does not carry, and a bundle lacking a wheel its lock names."""
    for entry in manifest.entries:
        if entry.kind not in CARRIED:
            raise StoreError(f"{source}: entry {entry.kind}/{entry.key}: bundles carry {', '.join(CARRIED)}; "
                             "refused")
    carried = {e.key for e in manifest.entries if e.kind == "wheels"}
    lacking = [f"{p.wheels[0].filename} (sha256 {p.wheels[0].sha256})" for p in lock.packages
               if p.wheels[0].sha256 not in carried and not store.has("wheels", p.wheels[0].sha256)]
    if lacking:
        raise StoreError(f"{source}: {len(lacking)} wheels its lock names are neither in the bundle nor in the "
                         "store", details=lacking)


def _assemble(reader: bundle.Reader, store: Store, entry: bundle.BundleEntry, work: Path) -> None:
    """Write ``entry``'s folders, files (each held to its sha256) and links into ``work``; then check it."""
    for rel in entry.dirs:
        (work / rel).mkdir(parents=True, exist_ok=True)
    for f in entry.files:
        dest = work / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        bundle.copy_member(reader, entry.member(f.path), f.sha256, f.size, dest, executable=f.executable)
    for link in entry.links:  # after every file: nothing is ever written through one
        (work / link.path).parent.mkdir(parents=True, exist_ok=True)
        (work / link.path).symlink_to(link.target)
    if problem := bundle.entry_problem(entry.kind, entry.key, work, {f.path: f.sha256 for f in entry.files}):
        raise StoreError(f"{reader.origin}: {problem}; refused, nothing of the bundle was stored")

