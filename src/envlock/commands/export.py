"""``envlock export`` and ``envlock import``: a lock's closure carried to another store.

Export (``export_env``): read the lock (the workspace's, ``PATH`` or ``PATH@REV``), plan its
closure in the store (``closure.lock_closure``: wheels, local builds and their records, the
sources and FetchContent checkouts they were built from, the wheels of each build's recorded
requirements and toolchain), fetch the wheels the store lacks (a build's backend wheels for this machine from
the spec's default index, as a build does), then write the bundle (``bundle``: the lock, each
entry, a manifest with every member's sha256) under a temp name and rename it into place.

Import (``import_bundle``), a bundle being input from anyone: before anything is copied, the
manifest whole (``bundle.Bundle.from_dict``: every key, type, size, the env name, every path and
link as listed), the lock, every wheel it names carried, and every build vouched for as a cache's
is (the bundle's lock records that wheel for that input digest, or a build record signed by a
trusted key comes with it). Then each entry the store lacks is assembled in a temp folder under
the store's ``tmp/``, each file held to its sha256 (a member that does not match is refused by
name), and checked: an lstat walk, its links followed on disk (``bundleio.assembled_problem``), its
key, a git source against its commit (``sources.checked_entry_problem``); they are renamed into place
together only once every one passed. A patched tree is never taken (nothing here can check it: it
is made again from its source and the workspace's patches). The lock is pinned, so gc keeps what
was imported. Every refusal names the bundle.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock.build import inputs, sources
from envlock.commands.pin import Pin, lock_bytes, pin_lock
from envlock.errors import EnvlockError, LockError, StoreError, UsageError
from envlock.install.fetch import fetch_mirrored
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Lock
from envlock.model.mirrors import MirrorOptions, Mirrors
from envlock.model.spec import load_env_spec
from envlock.progress import Progress
from envlock.resolution.resolve import index_urls
from envlock.store import bundle, bundleio
from envlock.store.closure import EntryRef, lock_closure, pinned_requirement
from envlock.store.store import Store
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.cache.signing import PublicKey

#: What a bundle carries: enough to sync (wheels) and to rebuild (builds, sources) offline. Not
#: venvs (a sync rebuilds one from the wheels and checks its digest), nor git mirrors (whole
#: histories; the checkouts are what a build reads), nor patched trees (no importer could check one:
#: a build makes it again from its source and the workspace's patches).
CARRIED = bundle.KINDS


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
    notes: tuple[str, ...] = ()  # entries left out (a pending build among them), and why

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class ImportResult:
    """What ``envlock import`` added; doubles as its ``--json``."""

    source: Path
    env: str
    added: dict[str, int]  # kind -> entries added
    present: int  # entries the store held already
    bytes: int  # of the entries added
    pin: Pin
    notes: tuple[str, ...] = ()  # entries not stored, and why

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, extra={"lock": str(self.pin.path)})


def export_env(ws: Workspace, env: str, ref: str | None, to: Path, *, progress: Progress | None = None,
               allow_pending: bool = False, asked: MirrorOptions | None = None,
               target: str | None = None) -> ExportResult:
    """Write the closure of ``env``'s lock (or ``ref``) to ``to`` (a folder, or ``*.tar``); what the store
    lacks is downloaded through the mirrors ``asked`` (``--index``, ``--source``) as a sync does. A lock
    whose local builds are pending (locked, not built) is refused: the bundle could not rebuild nor sync
    them (``allow_pending``: written without them, and the result's ``notes`` say so). ``target``: of a
    lock of several targets, the one whose closure is written (None: this machine's); the bundle's lock
    is the whole file."""
    if to.exists() and not (to.is_dir() and not any(to.iterdir())):
        raise UsageError(f"--out {to}: already exists; expected a new path (a folder, or FILE.tar)")
    if (file := next((p for p in to.parents if p.exists() and not p.is_dir()), None)) is not None:
        raise UsageError(f"--out {to}: {file} is not a folder; expected a new path (a folder, or FILE.tar) "
                         "under a folder")
    data, label = lock_bytes(ws, env, ref, "export")
    lock = Lock.from_toml(data.decode("utf-8"), label, target)
    if (pending := lock.unbuilt()) and not allow_pending:
        many = len(pending) != 1
        raise LockError(f"{label}: {len(pending)} local build{'s' if many else ''} not built for this lock "
                        f"({', '.join(pending)}): the bundle would carry no wheel of {'them' if many else 'it'} "
                        "(nor a build record or backend wheels), and a sync of it (`--offline` too) would be refused; "
                        f"build first (`envlock build {env}`), or export the rest with --allow-pending")
    store = Store.open()
    with store.writing():  # no gc while the entries are read
        mirrors = _mirrors(ws, env, asked)  # every mirror asked for is checked, used or not
        fetched = _fetch_wheels(store, lock, ws, asked) + _fetch_backends(store, lock, ws, env, label, mirrors)
        needed, notes = _plan(store, lock, label, env)
        counts: dict[str, int] = {}
        with bundleio.open_writer(to) as writer:
            lock_sha = writer.add_bytes(f"pylock.{env}.toml", data)
            entries = []
            for ref_ in needed:
                extra = _commit_object(store, lock, label, ref_)
                entries.append(writer.add_entry(ref_.kind, ref_.key, store.path(ref_.kind, ref_.key), extra))
                counts[ref_.kind] = counts.get(ref_.kind, 0) + 1
            manifest = bundle.Bundle(env, f"pylock.{env}.toml", lock_sha, label, tuple(entries))
            writer.add_bytes(bundle.MANIFEST, bundle.manifest_bytes(manifest))
    return ExportResult(env, label, to, counts, sum(len(e.files) for e in entries) + 2,
                        sum(e.size for e in entries) + len(data), fetched, pending,
                        tuple(_pending_note(env, name) for name in pending) + tuple(notes))


def _pending_note(env: str, name: str) -> str:
    return (f"{name}: not built for this lock, so the bundle carries no wheel of it (nor a build record or "
            f"backend wheels): a sync of it, offline too, needs `envlock build {env}` first")


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


def _commit_object(store: Store, lock: Lock, label: str, ref: EntryRef) -> dict[str, bytes] | None:
    """For a git checkout the store keeps without its commit object (an older envlock's), that object
    from the store's mirror, to carry beside it: an import holds the tree to it. None: not needed."""
    if ref.kind != "sources" or not ref.key.startswith("git-"):
        return None
    if (store.path(ref.kind, ref.key) / sources.COMMIT_OBJECT).is_file():
        return None
    commit = ref.key.removeprefix("git-")
    urls = [s.location for s in lock.sources.values() if s.commit == commit]
    urls += [p.git for pins in lock.fetchcontent.values() for p in pins.values() if p.commit == commit and p.git]
    for url in urls:
        if (raw := sources.commit_object(store, url, commit)) is not None:
            return {sources.COMMIT_OBJECT: raw}
    raise StoreError(f"{label}: sources/{ref.key} in {store.home} keeps no commit object, and no git mirror of the "
                     "store holds it (removed by gc?); an import could not check the tree against its commit",
                     details=[f"remove {store.path(ref.kind, ref.key)}; the next `envlock build` fetches it again, "
                              "with its commit object"])


def _fetch_wheels(store: Store, lock: Lock, ws: Workspace, asked: MirrorOptions | None) -> int:
    """Bring the lock's wheels the store lacks into it (local ones from the wheelhouse; the others through
    the mirrors, as a sync downloads them); how many."""
    wheels = [p.wheels[0] for p in lock.packages]
    missing = [a for a in wheels if not store.has("wheels", a.sha256)]
    if not missing:
        return 0
    got = fetch_mirrored(ws, lock.env or "ENV", lock, missing, store, base_dir=ws.root / "locks", asked=asked)
    return sum(1 for a in got.artifacts if a.source != "store")


def _fetch_backends(store: Store, lock: Lock, ws: Workspace, env: str, label: str, mirrors: Mirrors) -> int:
    """Bring into the store a wheel of each build requirement the lock records that it holds none
    of (for this machine: a bundle is for a machine like the one that built), from the default index of
    the workspace's spec of ``env``, held to the locked hashes, as a build brings them in; how many."""
    lacking = {name: [line for line in (*b.requirements, *b.toolchain)
                      if inputs.stored_backend(store, pinned_requirement(line), lock.python) is None]
               for name, b in sorted(lock.builds.items())}
    if not any(lacking.values()):
        return 0
    spec = mirrors.spec
    # No spec to read the index from: the error below names what is missing.
    url = index_urls(spec, mirrors.indexes)[spec.default_index.name] if spec is not None else None
    with mirrors.credentials():
        for name, lines in lacking.items():
            try:
                inputs.backend_wheels(lines, store, python=lock.python, index_url=url, offline=False,
                                           what=f"{label}: builds.{name}", env=env)
            except EnvlockError as exc:
                raise StoreError(f"{exc.message}; the bundle would not rebuild it offline, so nothing was written",
                                 details=exc.details) from None
    return sum(len(lines) for lines in lacking.values())


def _plan(store: Store, lock: Lock, label: str, env: str) -> tuple[list[EntryRef], list[str]]:
    """The entries to carry, sorted, and notes on those left out; ``StoreError`` naming those the store lacks."""
    closure = lock_closure(store, lock, venv=False)
    missing = [ref for ref in closure.missing if ref.kind in CARRIED and not ref.key.startswith("patched-")]
    if missing:
        raise StoreError(f"{label}: {len(missing)} store entries it needs are not in {store.home}; expected its "
                         f"closure there (`envlock build {env}` brings a build's sources and record in)",
                         details=[str(m) for m in missing])
    wanted = sorted(ref for ref in closure.present if ref.kind in CARRIED and not ref.key.startswith("patched-"))
    notes = []
    for name, recorded in sorted(lock.builds.items()):
        ref = EntryRef("builds", recorded.input_digest.removeprefix("sha256:"))
        entry = store.path(ref.kind, ref.key)
        if ref in wanted and _built_sha(entry) != recorded.sha256 and not (entry / "record.json").is_file():
            wanted.remove(ref)  # an importer would refuse it: the lock does not vouch for it, no signature does
            notes.append(f"builds/{ref.key} left out: the store's build of {name} is wheel sha256 "
                         f"{_built_sha(entry)}, the lock's is {recorded.sha256} (the build is not reproducible?)")
    return wanted, notes


def _built_sha(entry: Path) -> str | None:
    try:
        return str(json.loads((entry / "wheel.json").read_text())["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def import_bundle(source: Path, ws: Workspace | None = None, trusted: Sequence[str] = ()) -> ImportResult:
    """Add the entries of the bundle at ``source`` to the store, all checked, and pin its lock.

    ``ws`` and ``trusted`` (``--trusted-key``): the keys a build record that comes with a build
    may be signed by (as for a binary cache: ``cache.caches.CacheConfig``)."""
    store = Store.open()
    with bundleio.open_bundle(source) as reader, store.writing():
        manifest = reader.manifest()  # all of it checked before anything is read of the rest
        data = bundleio.read_member(reader, manifest.lock, manifest.lock_sha256)
        lock = _bundled_lock(source, manifest, data)
        _check_carries(source, manifest, lock, store)
        _check_builds(reader, manifest, lock, lambda: _trusted_keys(ws, trusted))
        left_out = [e for e in manifest.entries if e.kind == "sources" and e.key.startswith("patched-")]
        todo = [e for e in manifest.entries if e not in left_out and not store.has(e.kind, e.key)]
        with contextlib.ExitStack() as stack:
            # Every entry assembled under tmp/ first; renamed into place together, only once
            # each one is whole (a refused member leaves the store as it was).
            for entry in todo:
                _assemble(reader, store, entry, stack.enter_context(store.new_entry(entry.kind, entry.key)))
        pin = pin_lock(store, manifest.env, data, f"imported from {source} ({manifest.label})")
    added: dict[str, int] = {}
    for entry in todo:
        added[entry.kind] = added.get(entry.kind, 0) + 1
    notes = tuple(f"{source}: {e.kind}/{e.key} not stored: a patched tree is made again from its source and the "
                  "workspace's patches when a build needs it" for e in left_out)
    return ImportResult(source, manifest.env, added, len(manifest.entries) - len(todo) - len(left_out),
                        sum(e.size for e in todo), pin, notes)


def _bundled_lock(source: Path, manifest: bundle.Bundle, data: bytes) -> Lock:
    """The bundle's lock (``data``), read; ``StoreError``/``LockError`` naming the bundle when it is none."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreError(f"{source}: {manifest.lock}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); expected a lock written by `envlock lock`") from None
    lock = Lock.from_toml(text, f"{source}: {manifest.lock}")
    if lock.env and lock.env != manifest.env:
        raise LockError(f"{source}: {manifest.lock} is the lock of env {lock.env!r}, the manifest says "
                        f"{manifest.env!r}")
    return lock


def _check_carries(source: Path, manifest: bundle.Bundle, lock: Lock, store: Store) -> None:
    """Refuse a bundle lacking a wheel its lock names."""
    carried = {e.key for e in manifest.entries if e.kind == "wheels"}
    lacking = [f"{p.wheels[0].filename} (sha256 {p.wheels[0].sha256})" for p in lock.packages
               if p.wheels[0].sha256 not in carried and not store.has("wheels", p.wheels[0].sha256)]
    if lacking:
        raise StoreError(f"{source}: {len(lacking)} wheels its lock names are neither in the bundle nor in the "
                         "store", details=lacking)


def _trusted_keys(ws: Workspace | None, trusted: Sequence[str]) -> Mapping[str, PublicKey]:
    from envlock.cache.caches import CacheConfig  # only for a build the lock does not vouch for

    return CacheConfig.of(ws, trusted).trusted


def _check_builds(reader: bundleio.Reader, manifest: bundle.Bundle, lock: Lock,
                  trusted: Callable[[], Mapping[str, PublicKey]]) -> None:
    """Refuse a ``builds/<input digest>`` entry that nothing vouches for, as a cache's build would be:
    its wheel must be the one the bundle's lock records for that input digest, or a build record signed
    by a trusted key must come with it naming that digest and wheel. A ``build`` would otherwise take
    the wheel for those inputs from the store, whatever a lock says."""
    for entry in (e for e in manifest.entries if e.kind == "builds"):
        wheel, sha = _built_wheel(reader, entry)
        digest = f"sha256:{entry.key}"
        recorded = [(name, b) for name, b in sorted(lock.builds.items()) if b.input_digest == digest]
        if any(b.sha256 == sha for _, b in recorded):
            continue
        why = _unsigned(reader, entry, digest, wheel, sha, trusted)
        if why is None:
            continue
        said = (f"the bundle's lock records sha256 {recorded[0][1].sha256} for this input digest "
                f"(builds.{recorded[0][0]})" if recorded else "the bundle's lock records no build of this input digest")
        raise StoreError(f"{reader.origin}: builds/{entry.key}: wheel {wheel} sha256 {sha}: {said}, and {why}; "
                         "refused, nothing of the bundle was stored")


def _built_wheel(reader: bundleio.Reader, entry: bundle.BundleEntry) -> tuple[str, str]:
    """(file name, sha256) of the wheel a build entry's ``wheel.json`` names, which the entry must hold."""
    files = {f.path: f for f in entry.files}
    try:
        info = json.loads(bundleio.read_member(reader, entry.member("wheel.json"), files["wheel.json"].sha256))
        wheel, sha = info["wheel"], info["sha256"]
    except (KeyError, ValueError, TypeError, RecursionError):
        raise StoreError(f"{reader.origin}: builds/{entry.key}: no readable wheel.json; refused, nothing of the "
                         "bundle was stored") from None
    if not isinstance(wheel, str) or not isinstance(sha, str) or wheel not in files or files[wheel].sha256 != sha:
        raise StoreError(f"{reader.origin}: builds/{entry.key}: wheel.json names {wheel!r} sha256 {sha!r}, which the "
                         "entry does not hold; refused, nothing of the bundle was stored")
    return wheel, sha


def _unsigned(reader: bundleio.Reader, entry: bundle.BundleEntry, digest: str, wheel: str, sha: str,
              trusted: Callable[[], Mapping[str, PublicKey]]) -> str | None:
    """Why no trusted build record vouches for ``entry``'s wheel; None when one does."""
    from envlock.cache.signing import RecordRefusedError, verify_record

    record = next((f for f in entry.files if f.path == "record.json"), None)
    if record is None:
        return "no build record signed by a trusted key comes with it"
    data = bundleio.read_member(reader, entry.member(record.path), record.sha256)
    try:
        body = verify_record(data, trusted(), "record.json")
    except RecordRefusedError as exc:
        return f"its build record is refused ({exc.message})"
    except RecursionError:
        return "its build record is refused (record.json: nested too deeply)"
    if (body.get("input-digest"), body.get("wheel"), body.get("sha256")) != (digest, wheel, sha):
        return (f"its signed build record is of another build (input digest {str(body.get('input-digest'))[:23]}, "
                f"wheel sha256 {body.get('sha256')})")
    return None


def _assemble(reader: bundleio.Reader, store: Store, entry: bundle.BundleEntry, work: Path) -> None:
    """Write ``entry``'s folders, files (each held to its sha256) and links into ``work``, never through a
    link; then check what was made (an lstat walk, the links on disk, its key, a source against its pin)."""
    try:
        _make(reader, entry, work)
    except OSError as exc:  # a name too long for this file system, a full store
        where = Path(exc.filename) if exc.filename else work
        made = f"/{where.relative_to(work)}" if where.is_relative_to(work) and where != work else ""
        raise StoreError(f"{reader.origin}: {entry.kind}/{entry.key}{made}: cannot be made in the store "
                         f"({exc.strerror or exc}); refused, nothing of the bundle was stored") from None
    problem = (bundleio.assembled_problem(entry, work)
               or bundle.entry_problem(entry.kind, entry.key, work, {f.path: f.sha256 for f in entry.files}))
    if problem is None and entry.kind == "sources":
        scratch = store.temp_dir("import-source")
        try:
            if why := sources.checked_entry_problem(work, entry.key, scratch, what=f"{reader.origin}: {entry.key}"):
                problem = f"sources/{entry.key}: {why}"
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if problem:
        raise StoreError(f"{reader.origin}: {problem}; refused, nothing of the bundle was stored")


def _make(reader: bundleio.Reader, entry: bundle.BundleEntry, work: Path) -> None:
    """``entry``'s folders, files and links made in ``work`` (an ``OSError`` as the file system gives it)."""
    for rel in entry.dirs:
        bundleio.make_folders(work, rel)
    for f in entry.files:
        if "/" in f.path:
            bundleio.make_folders(work, f.path.rpartition("/")[0])
        bundleio.copy_member(reader, entry.member(f.path), f.sha256, f.size, work / f.path, executable=f.executable)
    for link in entry.links:  # after every file: nothing is ever written through one
        if "/" in link.path:
            bundleio.make_folders(work, link.path.rpartition("/")[0])
        os.symlink(link.target, work / link.path)
