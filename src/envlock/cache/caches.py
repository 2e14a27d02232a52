"""Binary caches: substitution before an index or a build, ``cache push`` and ``cache verify``.

A cache (``cachestore``) holds, under its root::

    wheels/<sha256>                  a wheel's bytes (any wheel of a lock: index or local build)
    builds/<input digest hex>.json   a signed build record (``signing``): input digest -> wheel
                                     file name, sha256, size, the build's recipe and requirements,
                                     toolchain fingerprint, builder key name
    closures/<env>/<install hex>/      what ``cache push`` uploaded for one lock: the lock and its
                                     ``envlock-bundle.json``, the manifest ``envlock export`` writes
                                     (``bundle``), its members at the keys above

Nothing a cache serves is believed: a wheel is taken only when its bytes hash to the lock's
sha256 (and size); a build record only when a trusted key's signature verifies AND it is the
build asked for (the lock's input digest, and its wheel sha256 when the lock records one).
Anything else is refused by name in a one-line note, and envlock goes on with the next
cache, the index or a build. A cache that cannot be reached (or answers 5xx, or hangs past
its timeout) is noted once and not asked again in that command: a cache never fails a sync.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envlock.cache.backends import Backend, CacheError, TooLargeError, check_key, get_bytes, open_backend, put_bytes
from envlock.cache.signing import (
    RECORD_FORMAT,
    PublicKey,
    RecordRefusedError,
    SecretKey,
    read_secret,
    sign_record,
    trusted_keys,
    verify_record,
)
from envlock.errors import UsageError, redact
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Artifact, Lock
from envlock.model.tomlio import load_toml
from envlock.store.store import STORE_MTIME, Store, copy_atomic, store_file, stored
from envlock.urlcheck import is_file_url
from envlock.workspace import CACHE_URLS_ENV, CONFIG_FILE, Workspace

if TYPE_CHECKING:
    pass

TRUSTED_ENV = "ENVLOCK_TRUSTED_KEYS"
KEY_ENV = "ENVLOCK_CACHE_KEY"
JOBS = 8  # wheels downloaded from a cache at once (8 beat 4 on loopback; fetch takes 4 from an index)


def wheel_key(sha256: str) -> str:
    return f"wheels/{sha256}"


def record_key(input_digest: str) -> str:
    return f"builds/{input_digest.removeprefix('sha256:')}.json"


# -- configuration -------------------------------------------------------------


@dataclass(frozen=True)
class CacheConfig:
    """Which caches to ask (in order), which keys to trust, where each build is pushed, signed how."""

    urls: tuple[str, ...] = ()
    trusted: Mapping[str, PublicKey] = field(default_factory=dict)
    push: str | None = None
    key_file: Path | None = None

    @property
    def active(self) -> bool:
        return bool(self.urls or self.push)

    @classmethod
    def of(cls, ws: Workspace | None, trusted: Sequence[str] = ()) -> CacheConfig:
        """From ``ws``'s ``envlock.toml`` ``[cache]``, the environment (``ENVLOCK_CACHE_URLS``,
        ``ENVLOCK_TRUSTED_KEYS``, ``ENVLOCK_CACHE_KEY``) and ``--trusted-key`` (``trusted``)."""
        table = _config_table(ws.root / CONFIG_FILE) if ws is not None else {}
        where = f"{ws.root / CONFIG_FILE}" if ws is not None else CONFIG_FILE
        urls = [*os.environ.get(CACHE_URLS_ENV, "").split(), *table.get("urls", [])]
        keys = [(f"--trusted-key {k[:24]}", k) for k in trusted]
        keys += [(TRUSTED_ENV, k) for k in os.environ.get(TRUSTED_ENV, "").replace(",", " ").split()]
        keys += [(f"{where}: cache.trusted-keys[{i}]", k) for i, k in enumerate(table.get("trusted-keys", []))]
        key_file = os.environ.get(KEY_ENV) or table.get("key")
        if key_file and ws is not None and not os.environ.get(KEY_ENV):
            key_file = str(ws.root / Path(key_file).expanduser())  # envlock.toml's: from the workspace
        return cls(tuple(dict.fromkeys(urls)), trusted_keys(keys), table.get("push"),
                   Path(key_file).expanduser() if key_file else None)


def _config_table(path: Path) -> dict[str, Any]:
    """``[cache]`` of ``envlock.toml`` (empty without one), its keys' types checked."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    table = load_toml(text, path, UsageError).get("cache", {})
    if not isinstance(table, dict):
        raise UsageError(f"{path}: cache: expected a table [cache]")
    for name, want in (("urls", list), ("trusted-keys", list), ("push", str), ("key", str)):
        value = table.get(name)
        if value is not None and (not isinstance(value, want)
                                  or (want is list and not all(isinstance(v, str) for v in value))):
            what = "an array of strings" if want is list else "a string"
            raise UsageError(f"{path}: cache.{name}: expected {what}")
    return table


# -- substitution ----------------------------------------------------------------


class _WrongBytesError(Exception):
    """Bytes a cache served that are not what was asked for (said in the note)."""


@dataclass
class Caches:
    """The caches of one command, asked in order; what they gave and what was refused (``notes``)."""

    config: CacheConfig
    notes: list[str] = field(default_factory=list)
    wheels: int = 0  # taken from a cache this command
    builds: int = 0
    sources: int = 0  # fetched sources taken (``cachesources``)
    pushed: int = 0
    _backends: dict[str, Backend | None] = field(default_factory=dict)
    _refused: set[tuple[str, str]] = field(default_factory=set)  # (cache, build) refused: not asked again
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def configured(cls, ws: Workspace | None, trusted: Sequence[str] = (), *, push: bool = True) -> Caches | None:
        """The caches ``envlock.toml`` and the environment name (None: none); ``push`` False: asked,
        never written to (a dry run)."""
        config = CacheConfig.of(ws, trusted)
        if not push:
            config = replace(config, push=None)
        return cls(config) if config.active else None

    def backends(self) -> Iterable[Backend]:
        """Each cache still usable (one that failed this command is not asked again)."""
        for url in self.config.urls:
            if url not in self._backends:
                try:
                    self._backends[url] = open_backend(url)
                except UsageError as exc:
                    self.notes.append(exc.message)
                    self._backends[url] = None
            if (backend := self._backends[url]) is not None:
                yield backend

    def down(self, backend: Backend, exc: CacheError) -> None:
        """Say in the notes that ``backend`` failed (``exc``), and ask it nothing more this command."""
        with self._lock:
            if not self._live(backend):
                return  # another thread said it already
            self.notes.append(f"{exc.message}: not used for the rest of this command")
            self._backends = {u: (None if b is backend else b) for u, b in self._backends.items()}

    def refuse(self, backend: Backend, what: str) -> None:
        """Say in the notes that ``backend``'s ``what`` was refused (and why, in ``what``)."""
        with self._lock:
            self.notes.append(f"cache {backend.label}: refused {what}")

    def summary(self) -> str:
        """One line of what the caches gave, then every refusal (the sync's note)."""
        took = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((self.wheels, "wheel"), (self.builds, "build"),
                                                                 (self.sources, "source"), (self.pushed, "upload"))
                if n]
        return "; ".join([*(["caches: " + ", ".join(took)] if took else []), *self.notes])

    def wheels_into_store(self, store: Store, artifacts: Sequence[Artifact]) -> tuple[int, int]:
        """Bring what the store lacks of ``artifacts`` (those downloaded by URL) from the caches;
        what none has is left for the index. Returns how many wheels came, and their bytes (a sync
        counts them as fetched and downloaded)."""
        wanted = [a for a in {a.sha256: a for a in artifacts}.values()
                  if a.url is not None and not is_file_url(a.url)
                  and not stored(a, store_file(store, a))[0]
                  and not store.has("wheels", a.sha256)]  # its bytes under another name: fetch links this one
        backends = list(self.backends())  # opened once, here: the threads below only read the list
        came: list[int] = []  # the bytes of each wheel a cache gave

        def one(artifact: Artifact) -> None:
            for backend in backends:
                if self._live(backend) and self._wheel(store, backend, artifact):
                    size = (store.path("wheels", artifact.sha256) / artifact.filename).stat().st_size
                    with self._lock:
                        self.wheels += 1
                        came.append(size)
                    return

        if backends and wanted:
            from concurrent.futures import ThreadPoolExecutor  # as fetch: a few downloads at once

            with ThreadPoolExecutor(max_workers=min(JOBS, len(wanted))) as pool:
                list(pool.map(one, wanted))
        return len(came), sum(came)

    def _live(self, backend: Backend) -> bool:
        return any(b is backend for b in self._backends.values())

    def _wheel(self, store: Store, backend: Backend, artifact: Artifact, absent: str = "") -> bool:
        """``artifact`` from ``backend`` into the store, verified; False when it has none (refused as
        ``absent`` if given) or a wrong one."""
        try:
            with store.new_entry("wheels", artifact.sha256) as work:
                target = work / artifact.filename
                with open(target, "wb") as fh:
                    if not _get_verified(backend, wheel_key(artifact.sha256), fh, artifact.sha256, artifact.size):
                        raise FileNotFoundError
                    fh.flush()
                    os.fsync(fh.fileno())  # durable before it is an entry, as fetch's downloads
                os.chmod(target, 0o444)
                os.utime(target, (STORE_MTIME, STORE_MTIME))
            os.utime(store.path("wheels", artifact.sha256), (STORE_MTIME, STORE_MTIME))
        except FileNotFoundError:
            if absent:
                self.refuse(backend, absent)
            return False
        except _WrongBytesError as exc:
            self.refuse(backend, f"{artifact.filename}: {exc}")
            return False
        except CacheError as exc:
            self.down(backend, exc)
            return False
        return True

    def build_into_store(self, store: Store, name: str, input_digest: str, sha256: str | None) -> bool:
        """The build of ``input_digest`` (of wheel ``sha256`` when given) from the first cache with a
        trusted record of it, into the store's ``builds/`` entry; False when none has one."""
        key = input_digest.removeprefix("sha256:")
        if (store.path("builds", key) / "wheel.json").is_file():
            return True
        for backend in self.backends():
            if (backend.label, input_digest) in self._refused:
                continue
            self._refused.add((backend.label, input_digest))  # until it proves good, below
            try:
                data = get_bytes(backend, record_key(input_digest))
                if data is None:
                    continue
                record = self._check_record(backend, data, name, input_digest, sha256)
                if record is None:
                    continue
                with store.new_entry("builds", key) as work:
                    with open(work / record["wheel"], "wb") as fh:
                        if not _get_verified(backend, wheel_key(record["sha256"]), fh, record["sha256"],
                                             record["size"]):
                            self.refuse(backend, f"build record of {name}: its wheel {record['sha256']} is "
                                                  "not in the cache")
                            raise FileNotFoundError
                        fh.flush()
                        os.fsync(fh.fileno())
                    _write_entry(work, record, data, backend.label)
            except FileNotFoundError:
                continue
            except _WrongBytesError as exc:
                self.refuse(backend, f"{name}'s wheel: {exc}")
                continue
            except CacheError as exc:
                self.down(backend, exc)
                continue
            self._refused.discard((backend.label, input_digest))
            self.builds += 1
            return True
        return False

    def _check_record(self, backend: Backend, data: bytes, name: str, input_digest: str,
                      sha256: str | None) -> dict[str, Any] | None:
        """The record in ``data`` if it is trusted and the build asked for; else None, refused by name."""
        where = f"build record of {name} ({input_digest[:19]})"
        try:
            record = verify_record(data, self.config.trusted, where)
        except RecordRefusedError as exc:
            self.refuse(backend, exc.message)
            return None
        if record.get("input-digest") != input_digest:
            self.refuse(backend, f"{where}: it records input digest {str(record.get('input-digest'))[:19]}, "
                                  f"the lock's is {input_digest[:19]}")
            return None
        if sha256 is not None and record.get("sha256") != sha256:
            self.refuse(backend, f"{where}: it records wheel sha256 {record.get('sha256')}, the lock's is {sha256}")
            return None
        wheel = record.get("wheel")
        if (not isinstance(wheel, str) or not wheel.endswith(".whl") or "/" in wheel or wheel.startswith(".")
                or not isinstance(record.get("sha256"), str) or not isinstance(record.get("size"), int)):
            self.refuse(backend, f"{where}: no plain wheel file name, sha256 and size in it")
            return None
        return record

    # -- for the other kinds of record (``cacheurls``: signed URL records) -----------------

    def read(self, backend: Backend, key: str) -> bytes | None:
        """A small entry (a record) of ``backend`` if it is still usable; None when it has none, or
        failed (noted, and not asked again)."""
        if not self._live(backend):
            return None
        try:
            return get_bytes(backend, key)
        except CacheError as exc:
            self.down(backend, exc)
            return None

    def take_wheel(self, store: Store, backend: Backend, artifact: Artifact, *, absent: str) -> bool:
        """``artifact`` from ``backend`` into the store, held to its sha256 and size, and counted;
        False when the cache has none (refused as ``absent``) or other bytes (noted)."""
        if not (self._live(backend) and self._wheel(store, backend, artifact, absent)):
            return False
        with self._lock:
            self.wheels += 1
        return True


def _get_verified(backend: Backend, key: str, fh: IO[bytes], sha256: str, size: int | None) -> bool:
    """``key``'s bytes into ``fh``, held to ``sha256`` and ``size``: False when the cache has none;
    ``_WrongBytesError`` naming what it served instead."""
    hasher = HashingWriter(fh)
    try:
        if not backend.get(key, hasher.write, limit=size if size is not None else 16 << 30):
            return False
    except TooLargeError:
        raise _WrongBytesError(f"served more than the locked {size} bytes for sha256 {sha256}") from None
    if hasher.sha.hexdigest() != sha256 or (size is not None and hasher.size != size):
        raise _WrongBytesError(f"served bytes of sha256 {hasher.sha.hexdigest()} ({hasher.size} bytes), expected "
                     f"{sha256}" + (f" ({size} bytes)" if size is not None else ""))
    return True


class HashingWriter:
    """A sink that hashes (and counts) what it writes on to ``fh``."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.fh.write(data)


def _write_entry(work: Path, record: Mapping[str, Any], signed: bytes, label: str) -> None:
    """The store's ``builds/`` entry files beside the wheel, as ``build.build_wheel`` writes them."""
    (work / "wheel.json").write_text(json.dumps({"wheel": record["wheel"], "sha256": record["sha256"]},
                                                sort_keys=True) + "\n")
    (work / "recipe.json").write_text(json.dumps(record.get("recipe", {}), indent=2, sort_keys=True) + "\n")
    (work / "record.json").write_bytes(signed)
    (work / "build.log").write_text(f"not built here: substituted from cache {label}, signed by "
                                    f"{record.get('builder')!r}\n")


def builds_into_wheelhouse(caches: Caches, store: Store, lock: Lock, lock_path: Path,
                           names: Sequence[str]) -> tuple[str, ...]:
    """Before a sync's builds: each of ``names`` whose lock record a trusted cache holds, placed at
    the lock's path for its wheel (held to the lock's sha256); the names still to build."""
    from envlock.store.home import file_sha256

    left = []
    for name in names:
        recorded, package = lock.builds.get(name), lock.package(name)
        art = package.wheels[0] if package is not None else None
        if (recorded is None or art is None or art.path is None or art.sha256 != recorded.sha256
                or not caches.build_into_store(store, name, recorded.input_digest, recorded.sha256)):
            left.append(name)
            continue
        entry = store.path("builds", recorded.input_digest.removeprefix("sha256:"))
        wheel = entry / json.loads((entry / "wheel.json").read_text())["wheel"]
        if file_sha256(str(wheel)) != art.sha256:  # the store entry is another's: the build says so
            left.append(name)
            continue
        copy_atomic(wheel, lock_path.parent / art.path)
    return tuple(left)


# -- push ----------------------------------------------------------------------------


def build_record(store: Store, name: str, input_digest: str, requirements: Sequence[str]) -> dict[str, Any] | None:
    """The record of the store's build of ``input_digest`` (None: not built in this store)."""
    entry = store.path("builds", input_digest.removeprefix("sha256:"))
    try:
        info = json.loads((entry / "wheel.json").read_text())
        recipe = json.loads((entry / "recipe.json").read_text())
    except (OSError, ValueError):
        return None
    wheel = entry / info["wheel"]
    return {"input-digest": input_digest, "name": name, "wheel": info["wheel"], "sha256": info["sha256"],
            "size": wheel.stat().st_size, "requirements": list(requirements), "recipe": recipe,
            "toolchain": recipe.get("toolchain", {})}


def _put_file(backend: Backend, key: str, path: Path) -> None:
    with open(path, "rb") as fh:
        backend.put(key, fh, os.fstat(fh.fileno()).st_size)


@dataclass(frozen=True)
class Pushed:
    """What one push uploaded (``to_dict``: ``cache push --json``)."""

    url: str
    uploaded: tuple[str, ...]
    present: int  # keys the cache had already
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


def push_entries(backend: Backend, store: Store, wheels: Mapping[str, Path],
                 builds: Sequence[tuple[str, str, Sequence[str]]], key: SecretKey | None,
                 closure: Sequence[tuple[str, bytes]] = ()) -> Pushed:
    """Upload what ``backend`` lacks: ``wheels`` (sha256 -> file) and the records of ``builds``
    ((name, input digest, requirements), signed with ``key``), then ``closure`` ((key, bytes), in order)."""
    uploaded: list[str] = []
    present, notes = 0, []
    for sha, path in sorted(wheels.items()):
        if backend.exists(wheel_key(sha)):
            present += 1
            continue
        _put_file(backend, wheel_key(sha), path)
        uploaded.append(wheel_key(sha))
    for name, digest, requirements in builds:
        record = build_record(store, name, digest, requirements)
        if record is None:
            notes.append(f"{name}: not built in this store ({digest[:19]}), so no record of it was pushed")
            continue
        if backend.exists(record_key(digest)):
            present += 1
            continue
        if key is None:
            notes.append(f"{name}: no record pushed: a build record must be signed (--key FILE, or "
                         f"{KEY_ENV}, or [cache] key in envlock.toml)")
            continue
        if not backend.exists(wheel_key(record["sha256"])):
            _put_file(backend, wheel_key(record["sha256"]),
                      store.path("builds", digest.removeprefix("sha256:")) / record["wheel"])
            uploaded.append(wheel_key(record["sha256"]))
        put_bytes(backend, record_key(digest), sign_record(record, key))
        uploaded.append(record_key(digest))
    for name, data in closure:  # the manifest last: once it is there, all it lists is
        if not backend.exists(name):
            put_bytes(backend, name, data)
            uploaded.append(name)
    return Pushed(backend.label, tuple(uploaded), present, tuple(notes))


def closure_manifest(lock: Lock, label: str, sizes: Mapping[str, int]) -> list[tuple[str, bytes]]:
    """The keys and bytes of ``lock``'s closure in a cache: the lock, then its manifest in the format
    ``envlock export`` writes (``bundle``): an entry per wheel (``wheels``/sha256) and per local build
    (``builds``/input digest hex, its wheel), whose bytes the cache holds at ``wheel_key``."""
    from envlock.store import bundle

    folder = f"closures/{check_key(lock.env)}/{lock.install_digest().removeprefix('sha256:')}"
    lock_name = f"pylock.{lock.env}.toml"
    text = lock.to_toml().encode()
    built = {b.sha256: b.input_digest.removeprefix("sha256:") for b in lock.builds.values()}
    entries = []
    for pkg in lock.packages:
        art = pkg.wheels[0]
        member = bundle.FileMember(art.filename, art.sha256, art.size if art.size is not None else sizes[art.sha256])
        kind, key = ("builds", built[art.sha256]) if art.sha256 in built else ("wheels", art.sha256)
        entries.append(bundle.BundleEntry(kind, key, (member,)))
    manifest = bundle.Bundle(lock.env, lock_name, hashlib.sha256(text).hexdigest(), label, tuple(entries))
    return [(f"{folder}/{lock_name}", text), (f"{folder}/{bundle.MANIFEST}", bundle.manifest_bytes(manifest))]


def secret_key(path: Path | None) -> SecretKey | None:
    return read_secret(path) if path is not None else None


def after_build(caches: Caches | None, store: Store, built: Iterable[Any]) -> None:
    """The post-build hook: each build this command ran pushed to ``[cache] push`` (a failure is a note)."""
    if caches is None or caches.config.push is None:
        return
    fresh = [(b.name, b.input_digest, b.build_requirements) for b in built if b.rebuilt]
    if not fresh:
        return
    try:
        backend = open_backend(caches.config.push)
        pushed = push_entries(backend, store, {}, fresh, secret_key(caches.config.key_file))
    except (CacheError, UsageError) as exc:
        caches.notes.append(f"push to {redact(caches.config.push)}: {exc.message}")
        return
    caches.pushed += len(pushed.uploaded)
    caches.notes.extend(pushed.notes)


# -- the commands ---------------------------------------------------------------------


#: What pushes the URL records of a lock's wheels (``cacheurls.push_url_records``, handed in by
#: ``clicache``: it asks the caches by way of ``Caches``, so ``caching`` cannot import it).
PushUrls = Callable[[Backend, Sequence[tuple[Artifact, Path]], SecretKey | None], Pushed]


@dataclass(frozen=True)
class CacheCheck:
    """What ``cache verify`` found (``to_dict``: its ``--json``)."""

    url: str
    checked: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, extra={"ok": self.ok})


def check_records(backend: Backend, trusted: Mapping[str, PublicKey], prefix: str, fmt: str,
                  key_of: Callable[[str], str], says: Callable[[dict[str, Any]], str], *, subject: str) -> CacheCheck:
    """``cache verify``'s look at the signed records under ``prefix`` (of format ``fmt``): each signed
    by a key of ``trusted``, stored under the key of what it is about (``key_of(record[subject])``;
    ``says``: how a message names that), its wheel present."""
    problems: list[str] = []
    checked = 0
    for key in backend.keys(prefix):
        checked += 1
        try:
            record = verify_record(get_bytes(backend, key) or b"", trusted, key, fmt)
        except RecordRefusedError as exc:
            problems.append(exc.message)
            continue
        if key_of(str(record.get(subject))) != key:
            problems.append(f"{key}: records {says(record)}, not its key's")
        elif not backend.exists(wheel_key(str(record.get("sha256")))):
            problems.append(f"{key}: its wheel {wheel_key(str(record.get('sha256')))} is not in the cache")
    return CacheCheck(backend.label, checked, tuple(problems))


def verify_cache(url: str, trusted: Mapping[str, PublicKey]) -> CacheCheck:
    """``envlock cache verify URL``: every wheel's bytes against its sha256, every build record's
    signature (by a key of ``trusted``), name and wheel, every closure's keys present."""
    from envlock.store import bundle

    backend = open_backend(url)
    problems: list[str] = []
    checked = 0
    for key in backend.keys("wheels/"):
        checked += 1
        sha = key.removeprefix("wheels/")
        with tempfile.TemporaryFile() as fh:
            try:
                _get_verified(backend, key, fh, sha, None)
            except _WrongBytesError as exc:
                problems.append(f"{key}: {exc}")
    found = check_records(backend, trusted, "builds/", RECORD_FORMAT, record_key,
                          lambda record: f"input digest {str(record.get('input-digest'))[:19]}",
                          subject="input-digest")
    checked += found.checked
    problems += found.problems
    for key in backend.keys("closures/"):
        if key.endswith("/" + bundle.MANIFEST):
            checked += 1
            problems += _closure_problems(backend, key)
    return CacheCheck(backend.label, checked, tuple(problems))


def _closure_problems(backend: Backend, key: str) -> list[str]:
    """What a closure manifest lists that the cache lacks (or holds with other bytes: its lock)."""
    from envlock.errors import StoreError
    from envlock.store import bundle

    try:
        manifest = bundle.Bundle.from_dict(json.loads(get_bytes(backend, key) or b""), key)
    except StoreError as exc:
        return [exc.message]
    except ValueError:
        return [f"{key}: not JSON; expected an {bundle.FORMAT} manifest"]
    folder = key.rpartition("/")[0]
    wanted = [wheel_key(f.sha256) for e in manifest.entries for f in e.files]
    wanted += [record_key(e.key) for e in manifest.entries if e.kind == "builds"]
    problems = [f"{key}: lists {k}, which is not in the cache" for k in wanted if not backend.exists(k)]
    text = get_bytes(backend, f"{folder}/{manifest.lock}")
    if text is None or hashlib.sha256(text).hexdigest() != manifest.lock_sha256:
        problems.append(f"{key}: its lock {folder}/{manifest.lock} is "
                        + ("not in the cache" if text is None else f"not the sha256 {manifest.lock_sha256} it lists"))
    return problems


