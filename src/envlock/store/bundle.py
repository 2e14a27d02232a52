"""The bundle format: store entries and a lock carried outside a store, with a manifest.

A bundle is a folder or an uncompressed tar holding::

    envlock-bundle.json           the manifest (below)
    pylock.ENV.toml               the lock the bundle was made for
    store/<kind>/<key>/<path>     the files of each store entry it carries

The manifest (``format = "envlock-bundle"``, ``version = 1``) names the env, the lock (its
member name and sha256) and every entry by kind and key, with, for each, its files (path
relative to the entry, sha256, size, executable bit), its folders and its symlinks (path,
target). A bundle is input from anyone, so readers refuse anything else, by name: a manifest out of
format (``Bundle.from_dict``: an unknown key, a value of another type, an env that is no env name, a
path listed twice or running through a link or file of its entry, a link that leads out on paper), a
tar cut short or holding a member twice, a member the manifest does not list, a file whose bytes are
not its sha256, a name that is absolute or holds ``..``, and in a tar, any member that is not a
regular file or a folder (links, devices, FIFOs). Symlinks live only in the manifest, and are made
after every file of their entry, in real folders of it only (``make_folders``); once an entry is
made, an lstat walk holds it to its manifest and follows each link on disk (``assembled_problem``).

``envlock export`` writes it, ``envlock import`` reads it; a binary cache serves the same
manifest and members over HTTP.
"""

from __future__ import annotations

import abc
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from envlock.errors import StoreError, UsageError
from envlock.store.archives import tar_member
from envlock.store.store import fsync_dir, sync_file, sync_tree
from envlock.store.trees import Escape, resolve_within, tree_digest
from envlock.workspace import check_env_name

_HEX64 = re.compile(r"[0-9a-f]{64}")
FORMAT = "envlock-bundle"
VERSION = 1
MANIFEST = "envlock-bundle.json"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileMember:
    path: str  # relative to its entry, '/'-separated
    sha256: str
    size: int
    executable: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size, "executable": self.executable}


@dataclass(frozen=True)
class LinkMember:
    path: str
    target: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "target": self.target}


@dataclass(frozen=True)
class BundleEntry:
    """One store entry: ``kind/key`` and what is in it."""

    kind: str
    key: str
    files: tuple[FileMember, ...]
    dirs: tuple[str, ...] = ()
    links: tuple[LinkMember, ...] = ()

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def member(self, rel: str) -> str:
        """The bundle member name of the entry's file ``rel``."""
        return f"store/{self.kind}/{self.key}/{rel}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "files": [f.to_dict() for f in self.files],
                "dirs": list(self.dirs), "links": [ln.to_dict() for ln in self.links]}


@dataclass(frozen=True)
class Bundle:
    """The manifest of a bundle (``to_dict`` is its JSON)."""

    env: str
    lock: str  # member name of the lock
    lock_sha256: str
    label: str  # how the lock was named when exported (PATH, PATH@REV)
    entries: tuple[BundleEntry, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "env": self.env,
                "lock": {"path": self.lock, "sha256": self.lock_sha256, "label": self.label},
                "entries": [e.to_dict() for e in self.entries]}

    def members(self) -> dict[str, str]:
        """Every file member's name -> sha256 (the lock's too)."""
        out = {self.lock: self.lock_sha256}
        for e in self.entries:
            out.update({e.member(f.path): f.sha256 for f in e.files})
        return out

    @classmethod
    def from_dict(cls, doc: Any, origin: str) -> Bundle:
        """Read a manifest, refusing (``StoreError`` naming the key path, what was found and what was
        expected) anything that does not fit the format: a missing or unknown key, a value of another
        type, a size that is no whole number, an env that is no env name, a path that is absolute or
        holds ``..``, and an entry whose paths run through one of its links or files."""
        top = _table(doc, "", _TOP, origin)
        if top["format"] != FORMAT or top["version"] != VERSION:
            raise StoreError(f"{origin}: format {top['format']!r} version {top['version']!r}; "
                             f"expected {FORMAT!r} version {VERSION}")
        env = _text(top["env"], "env", origin)
        try:
            check_env_name(env)
        except UsageError:
            raise StoreError(f"{origin}: env: found {env!r}; expected an env name (letters, digits, '.', '_', "
                             "'-')") from None
        lock = _table(top["lock"], "lock", _LOCK, origin)
        entries = tuple(_entry(e, f"entries[{i}]", origin) for i, e in enumerate(_array(top["entries"], "entries",
                                                                                        origin)))
        seen: set[tuple[str, str]] = set()
        for i, e in enumerate(entries):
            if (e.kind, e.key) in seen:
                raise StoreError(f"{origin}: entries[{i}]: {e.kind}/{e.key} is listed twice")
            seen.add((e.kind, e.key))
        return cls(env, _name(_text(lock["path"], "lock.path", origin), "lock.path", origin),
                   _sha(lock["sha256"], "lock.sha256", origin), _text(lock.get("label", ""), "lock.label", origin),
                   entries)


#: Each object of a manifest: its keys, required ones first (``_table``).
_TOP = (("entries", "env", "format", "lock", "version"), ())
_LOCK = (("path", "sha256"), ("label",))
_ENTRY = (("files", "key", "kind"), ("dirs", "links"))
_FILE = (("path", "sha256", "size"), ("executable",))
_LINK = (("path", "target"), ())
#: What a bundle carries: enough to sync (wheels) and to rebuild (builds, sources) offline.
KINDS = ("builds", "sources", "wheels")
#: A ``sources`` entry's key, as ``sources`` and ``patchapply`` name them.
_SOURCE_KEY = re.compile(r"git-[0-9a-f]{40}|(path|archive|patched)-[0-9a-f]{64}")


def _json(value: object) -> str:
    """A JSON value as a message names what was found."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return repr(value)


def _where(key: str) -> str:
    return f"{key}: " if key else ""


def _table(value: object, key: str, keys: tuple[tuple[str, ...], tuple[str, ...]], origin: str) -> dict[str, Any]:
    """``value`` as an object of ``keys`` (required, optional): none missing, none other."""
    required, optional = keys
    if not isinstance(value, dict):
        raise StoreError(f"{origin}: {_where(key)}found {_json(value)}; expected an object")
    for name in value:
        if name not in (*required, *optional):
            raise StoreError(f"{origin}: {_where(key)}unknown key {name!r}; expected only "
                             f"{', '.join(sorted((*required, *optional)))}")
    for name in required:
        if name not in value:
            raise StoreError(f"{origin}: {_where(key)}key {name!r} missing; expected a manifest written by "
                             "`envlock export`")
    return value


def _array(value: object, key: str, origin: str) -> list[Any]:
    if not isinstance(value, list):
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected an array")
    return value


def _text(value: object, key: str, origin: str) -> str:
    if not isinstance(value, str):
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected a string")
    return value


def _sha(value: object, key: str, origin: str) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected 64 lowercase hex digits (a sha256)")
    return value


def _size(value: object, key: str, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected a whole number of bytes (0 or more)")
    return value


def _flag(value: object, key: str, origin: str) -> bool:
    if not isinstance(value, bool):
        raise StoreError(f"{origin}: {key}: found {_json(value)}; expected true or false")
    return value


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a member name (absolute, ``..``, empty parts), or None."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        return "an absolute or malformed path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "a path with '..', '.' or an empty part"
    return None


def _name(name: str, key: str, origin: str) -> str:
    if (problem := name_problem(name)) is not None:
        raise StoreError(f"{origin}: {key}: {name!r} is {problem}; expected a relative path inside the bundle")
    return name


def _entry(doc: Any, key: str, origin: str) -> BundleEntry:
    doc = _table(doc, key, _ENTRY, origin)
    kind, entry_key = _text(doc["kind"], f"{key}.kind", origin), _text(doc["key"], f"{key}.key", origin)
    if kind not in KINDS:
        raise StoreError(f"{origin}: {key}.kind: found {kind!r}; expected {', '.join(KINDS[:-1])} or {KINDS[-1]}")
    if kind != "sources":
        _sha(entry_key, f"{key}.key", origin)
    elif not _SOURCE_KEY.fullmatch(entry_key):
        raise StoreError(f"{origin}: {key}.key: found {entry_key!r}; expected git-<commit>, path-<digest>, "
                         "archive-<sha256> or patched-<digest>")
    files = []
    for i, f in enumerate(_array(doc["files"], f"{key}.files", origin)):
        where = f"{key}.files[{i}]"
        f = _table(f, where, _FILE, origin)
        files.append(FileMember(_name(_text(f["path"], f"{where}.path", origin), f"{where}.path", origin),
                                _sha(f["sha256"], f"{where}.sha256", origin), _size(f["size"], f"{where}.size", origin),
                                _flag(f.get("executable", False), f"{where}.executable", origin)))
    dirs = [_name(_text(d, f"{key}.dirs[{i}]", origin), f"{key}.dirs[{i}]", origin)
            for i, d in enumerate(_array(doc.get("dirs", []), f"{key}.dirs", origin))]
    links = []
    for i, ln in enumerate(_array(doc.get("links", []), f"{key}.links", origin)):
        where = f"{key}.links[{i}]"
        ln = _table(ln, where, _LINK, origin)
        links.append(LinkMember(_name(_text(ln["path"], f"{where}.path", origin), f"{where}.path", origin),
                                _text(ln["target"], f"{where}.target", origin)))
    entry = BundleEntry(kind, entry_key, tuple(files), tuple(dirs), tuple(links))
    if problem := _layout_problem(entry):
        raise StoreError(f"{origin}: {key}: {problem}")
    return entry


def _layout_problem(entry: BundleEntry) -> str | None:
    """Why ``entry``'s paths cannot be made as listed: a path listed twice, one that runs through a
    link or a file of the entry, a link whose target is absolute, empty or leads out on paper (None: none).
    What its links lead to on disk is checked once they are made (``assembled_problem``)."""
    what: dict[str, str] = {}
    for noun, paths in (("file", [f.path for f in entry.files]), ("folder", entry.dirs),
                        ("symlink", [ln.path for ln in entry.links])):
        for path in paths:
            if path in what:
                return f"{entry.kind}/{entry.key}/{path} is listed twice"
            what[path] = noun
    for path, noun in what.items():
        parts = path.split("/")
        for n in range(1, len(parts)):
            if (through := what.get("/".join(parts[:n]))) in ("file", "symlink"):
                made = "link" if noun == "symlink" else noun
                return (f"{noun} {entry.kind}/{entry.key}/{path} runs through the {through} {'/'.join(parts[:n])}; "
                        f"refused (a {made} is made only in real folders of its entry)")
    for link in entry.links:
        lands = posixpath.normpath(posixpath.join(posixpath.dirname(link.path), link.target))
        if not link.target or "\0" in link.target or link.target.startswith("/") or lands == ".." or \
                lands.startswith("../"):
            return (f"symlink {entry.kind}/{entry.key}/{link.path} -> {link.target} leads out of its entry; expected "
                    "links that stay inside it")
    return None


# -- reading ---------------------------------------------------------------


class Reader(abc.ABC):
    """Members of a bundle, by name: a folder (``DirReader``) or a tar (``TarReader``)."""

    origin: str

    @abc.abstractmethod
    def names(self) -> set[str]:
        """Every member's name."""

    @abc.abstractmethod
    def open(self, name: str) -> IO[bytes]:
        """Member ``name``'s bytes, to read."""

    def close(self) -> None:
        return None

    def manifest(self) -> Bundle:
        """The manifest, read whole and checked (``Bundle.from_dict``) before any member is read."""
        if MANIFEST not in self.names():
            raise StoreError(f"{self.origin}: no {MANIFEST}; expected a folder or tar written by `envlock export`")
        with self.open(MANIFEST) as fh:
            data = self.read(fh, MANIFEST, 64 << 20)
        try:
            doc = json.loads(data)
        except RecursionError:  # arrays or objects nested thousands deep: the parser recurses per level
            raise StoreError(f"{self.origin}: {MANIFEST}: not JSON (nested too deeply)") from None
        except ValueError as exc:
            raise StoreError(f"{self.origin}: {MANIFEST}: not JSON ({exc})") from None
        bundle = Bundle.from_dict(doc, f"{self.origin}: {MANIFEST}")
        listed = {*bundle.members(), MANIFEST}
        if extra := sorted(self.names() - listed):
            raise StoreError(f"{self.origin}: member {extra[0]} is not listed in {MANIFEST}; refused (a bundle "
                             "holds only what its manifest names)", details=extra[1:])
        return bundle

    def read(self, fh: IO[bytes], name: str, size: int) -> bytes:
        """Up to ``size`` bytes of member ``name`` from ``fh``; ``StoreError`` naming it when it cannot be read."""
        try:
            return fh.read(size)
        except (OSError, tarfile.TarError) as exc:
            raise StoreError(f"{self.origin}: member {name} cannot be read ({_strerror(exc)}); the bundle is "
                             "damaged, nothing of it was stored") from None


def _strerror(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


class DirReader(Reader):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.origin = str(root)
        found = set()
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                path = Path(dirpath) / name
                rel = path.relative_to(root).as_posix()
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    raise StoreError(f"{self.origin}: member {rel} is a {_kind(mode)}; refused (a bundle holds "
                                     "regular files and folders only)")
                if stat.S_ISREG(mode):
                    found.add(rel)
        self._names = found

    def names(self) -> set[str]:
        return self._names

    def open(self, name: str) -> IO[bytes]:
        # Not through a link put there since the folder was read (its folders were read as folders).
        return open(os.open(self.root / name, os.O_RDONLY | os.O_NOFOLLOW), "rb")


class TarReader(Reader):
    def __init__(self, path: Path) -> None:
        self.origin = str(path)
        try:
            self._tar = tarfile.open(path, "r:")  # noqa: SIM115 - closed by close()
        except tarfile.TarError as exc:
            raise StoreError(f"{path}: not a whole tar ({exc}); expected a .tar written by `envlock export`") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read ({_strerror(exc)})") from None
        try:
            self._members = self._read_members(path)
        except BaseException:
            self._tar.close()
            raise

    def _read_members(self, path: Path) -> dict[str, tarfile.TarInfo]:
        """Every member, checked: the archive whole, each name once, inside the bundle, a file or a folder."""
        try:
            infos = self._tar.getmembers()
            # tarfile takes a header cut short for the end of the archive: a whole tar ends with two
            # zero blocks where its last member ends (POSIX), a cut one does not.
            with open(path, "rb") as fh:
                fh.seek(self._tar.offset)
                whole = fh.read(2 * tarfile.BLOCKSIZE) == bytes(2 * tarfile.BLOCKSIZE)
        except tarfile.TarError as exc:
            raise StoreError(f"{path}: not a whole tar ({exc}); expected a .tar written by `envlock export`") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read ({_strerror(exc)})") from None
        if not whole:
            raise StoreError(f"{path}: not a whole tar (cut short: no end-of-archive blocks after its last member); "
                             "expected a .tar written by `envlock export`")
        members: dict[str, tarfile.TarInfo] = {}
        seen: set[str] = set()
        for info in infos:
            name = info.name.removeprefix("./")
            if (problem := name_problem(name.rstrip("/"))) is not None:
                raise StoreError(f"{self.origin}: member {info.name} is {problem}; refused (it would be written "
                                 "outside the bundle)")
            if not (info.isreg() or info.isdir()):
                raise StoreError(f"{self.origin}: member {info.name} is a {_tar_kind(info)}; refused (a bundle "
                                 "holds regular files and folders only)")
            if name.rstrip("/") in seen:  # tar keeps both; which one a reader takes is the reader's choice
                raise StoreError(f"{self.origin}: member {name.rstrip('/')} appears twice; refused (a bundle holds "
                                 "each member once)")
            seen.add(name.rstrip("/"))
            if info.isreg():
                members[name] = info
        return members

    def names(self) -> set[str]:
        return set(self._members)

    def open(self, name: str) -> IO[bytes]:
        fh = self._tar.extractfile(self._members[name])
        assert fh is not None  # a regular member
        return fh

    def close(self) -> None:
        self._tar.close()


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    return "special file"


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.issym():
        return "symlink"
    if info.islnk():
        return "hard link"
    if info.ischr() or info.isblk():
        return "device"
    if info.isfifo():
        return "FIFO"
    return "special member"


@contextmanager
def open_bundle(path: Path) -> Iterator[Reader]:
    """A reader of the bundle at ``path`` (a folder, or a tar file)."""
    if path.is_dir():
        reader: Reader = DirReader(path)
    elif path.is_file():
        reader = TarReader(path)
    else:
        raise StoreError(f"{path}: no such bundle (expected a folder or a .tar written by `envlock export`)")
    try:
        yield reader
    finally:
        reader.close()


def copy_member(reader: Reader, name: str, sha256: str, size: int, dest: Path, *, executable: bool = False) -> None:
    """Copy member ``name`` to the new file ``dest`` (never through a link, never over a file), refusing
    (``StoreError`` naming it) bytes that are not ``sha256``/``size``."""
    if name not in reader.names():
        raise StoreError(f"{reader.origin}: member {name} is listed in {MANIFEST} but not in the bundle")
    h = hashlib.sha256()
    seen = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with reader.open(name) as src, open(fd, "wb") as out:
        while chunk := reader.read(src, name, min(_CHUNK, size + 1 - seen)):
            seen += len(chunk)
            h.update(chunk)
            out.write(chunk)
            if seen > size:
                break
    if seen != size or h.hexdigest() != sha256:
        dest.unlink(missing_ok=True)
        raise StoreError(f"{reader.origin}: member {name}: sha256 {h.hexdigest()} ({seen} bytes), the manifest says "
                         f"{sha256} ({size} bytes); refused, nothing of the bundle was stored")
    os.chmod(dest, 0o755 if executable else 0o644)


def read_member(reader: Reader, name: str, sha256: str) -> bytes:
    """A small member's bytes, held to ``sha256`` (``StoreError`` naming it)."""
    if name not in reader.names():
        raise StoreError(f"{reader.origin}: member {name} is listed in {MANIFEST} but not in the bundle")
    with reader.open(name) as fh:
        data = reader.read(fh, name, 256 << 20)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise StoreError(f"{reader.origin}: member {name}: sha256 {hashlib.sha256(data).hexdigest()}, the manifest "
                         f"says {sha256}; refused")
    return data


def make_folders(root: Path, rel: str) -> Path:
    """``root/rel`` made a folder, with each folder on the way (never through a link, which
    ``_layout_problem`` has refused already: this is the second guard); its path."""
    here = root
    for part in rel.split("/"):
        here = here / part
        try:
            os.mkdir(here, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                raise StoreError(f"{here}: expected a folder of the entry being assembled, found a "
                                 f"{_kind(os.lstat(here).st_mode)}") from None
    return here


def assembled_problem(entry: BundleEntry, work: Path) -> str | None:
    """Why the entry just made at ``work`` is not what its manifest lists (an lstat walk: every path
    of the kind listed, nothing else), or has a link that leads out of it on disk, each link followed
    step by step as the kernel would (``trees.resolve_within``); None when it is whole."""
    expected: dict[str, str] = {f.path: "file" for f in entry.files}
    expected |= {ln.path: "symlink" for ln in entry.links}
    for path in [*entry.dirs, *expected]:
        parts = path.split("/")
        expected |= {"/".join(parts[:n]): "folder" for n in range(1, len(parts))}
    expected |= {d: "folder" for d in entry.dirs}
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(work):  # links are not followed
        for name in [*dirnames, *filenames]:
            made = Path(dirpath, name)
            mode = made.lstat().st_mode
            found[made.relative_to(work).as_posix()] = ("folder" if stat.S_ISDIR(mode) else "file" if
                                                        stat.S_ISREG(mode) else "symlink" if stat.S_ISLNK(mode)
                                                        else _kind(mode))
    if odd := sorted(p for p in {*found, *expected} if found.get(p) != expected.get(p)):
        return (f"{entry.kind}/{entry.key}/{odd[0]}: made a {found.get(odd[0], 'nothing')}, the manifest lists "
                f"{expected.get(odd[0], 'nothing')} there")
    for link in entry.links:
        if os.readlink(work / link.path) != link.target:
            return f"symlink {entry.kind}/{entry.key}/{link.path}: made other than listed"
        leads = resolve_within(work, link.path.split("/"))
        if isinstance(leads, Escape):
            through = "" if leads.link == link.path else f" (through {leads})"
            return (f"symlink {entry.kind}/{entry.key}/{link.path} -> {link.target} leads out of its entry on "
                    f"disk{through}")
    return None


# -- writing ---------------------------------------------------------------


class Writer:
    """Writes members into a folder or a tar being made (``open_writer``) at ``tmp``, to become ``dest``."""

    def __init__(self, dest: Path, tmp: Path, folder: Path | None, tar: tarfile.TarFile | None) -> None:
        self.dest, self._tmp = dest, tmp
        self._folder, self._tar = folder, tar
        self.last = MANIFEST  # the member written last (its bytes may still be buffered)

    @contextmanager
    def writing(self, name: str) -> Iterator[None]:
        """A failure to write the bundle (a full disk: ENOSPC, a file-size limit: EFBIG) while member
        ``name`` is written, as a ``StoreError`` naming the bundle and the member; a failure to read
        a store file (which names that file) as it is."""
        self.last = name
        try:
            yield
        except OSError as exc:
            if exc.filename is not None and not str(exc.filename).startswith(str(self._tmp)):
                raise
            raise StoreError(f"{self.dest}: cannot write member {name} ({_strerror(exc)}); nothing was written, "
                             "the partial bundle was removed") from None

    def add_file(self, name: str, src: Path, *, executable: bool = False) -> FileMember:
        """Copy ``src`` in as ``name``; its member record (sha256 taken while copying)."""
        h = hashlib.sha256()
        size = src.stat().st_size
        if self._folder is not None:
            dest = self._folder / name
            with src.open("rb") as fh, self.writing(name):
                dest.parent.mkdir(parents=True, exist_ok=True)
                with dest.open("wb") as out:
                    while chunk := fh.read(_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
        else:
            with src.open("rb") as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
            assert self._tar is not None
            with src.open("rb") as fh, self.writing(name):
                self._tar.addfile(tar_member(name, size), fh)
        return FileMember(name, h.hexdigest(), size, executable)

    def add_bytes(self, name: str, data: bytes) -> str:
        with self.writing(name):
            if self._folder is not None:
                (self._folder / name).parent.mkdir(parents=True, exist_ok=True)
                (self._folder / name).write_bytes(data)
            else:
                assert self._tar is not None
                self._tar.addfile(tar_member(name, len(data)), io.BytesIO(data))
        return hashlib.sha256(data).hexdigest()

    def add_entry(self, kind: str, key: str, folder: Path, extra: Mapping[str, bytes] | None = None) -> BundleEntry:
        """Every file, folder and symlink of the store entry at ``folder``, and the files ``extra``
        (relative path -> bytes) that the entry lacks."""
        files: list[FileMember] = []
        dirs: list[str] = []
        links: list[LinkMember] = []
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            base = Path(dirpath)
            for name in [*sorted(dirnames), *sorted(filenames)]:
                path = base / name
                rel = path.relative_to(folder).as_posix()
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode):
                    links.append(LinkMember(rel, os.readlink(path)))
                elif stat.S_ISDIR(mode):
                    dirs.append(rel)
                elif stat.S_ISREG(mode):
                    member = self.add_file(f"store/{kind}/{key}/{rel}", path, executable=bool(mode & 0o100))
                    files.append(FileMember(rel, member.sha256, member.size, member.executable))
                else:
                    raise StoreError(f"{path}: a {_kind(mode)} in a store entry; expected files, folders and links")
        for rel, data in sorted((extra or {}).items()):
            files.append(FileMember(rel, self.add_bytes(f"store/{kind}/{key}/{rel}", data), len(data)))
        return BundleEntry(kind, key, tuple(files), tuple(dirs), tuple(links))


@contextmanager
def open_writer(dest: Path) -> Iterator[Writer]:
    """Write a bundle at ``dest`` (a ``.tar`` file, else a folder): under a temp name beside it, synced,
    renamed into place only when the block ends without error (a partial export is never there)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
    try:
        if dest.suffix == ".tar":
            with tarfile.open(tmp, "w:", format=tarfile.PAX_FORMAT) as tar:
                writer = Writer(dest, tmp, None, tar)
                yield writer
                with writer.writing(writer.last):
                    tar.close()  # its end-of-archive blocks, and what is still buffered
                    sync_file(tmp)
            os.replace(tmp, dest)
        else:
            tmp.mkdir(parents=True)
            writer = Writer(dest, tmp, tmp, None)
            yield writer
            with writer.writing(writer.last):
                sync_tree(tmp)
            if dest.is_dir() and not any(dest.iterdir()):
                dest.rmdir()  # an empty folder made for it is taken; a full one is never replaced
            os.rename(tmp, dest)
        fsync_dir(dest.parent)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def manifest_bytes(bundle: Bundle) -> bytes:
    return (json.dumps(bundle.to_dict(), indent=1, sort_keys=True) + "\n").encode()


def entry_problem(kind: str, key: str, folder: Path, files: Mapping[str, str]) -> str | None:
    """Why an entry just assembled is not what its kind and key say (``files``: rel -> sha256), or None.

    A wheel's key is its sha256; a build's record names its wheel's sha256; a source tree
    records its own digest. What is checked here is what a forged manifest could not keep
    consistent with the lock it came with.
    """
    if kind in ("wheels", "builds") and not _HEX64.fullmatch(key):
        return f"{kind}/{key}: expected a key of 64 hex digits (a sha256)"
    if kind == "wheels":
        if not files:
            return f"wheels/{key}: no wheel in it"
        wrong = [rel for rel, sha in files.items() if sha != key]
        return f"wheels/{key}: file {wrong[0]} has sha256 {files[wrong[0]]}" if wrong else None
    if kind == "builds":
        try:
            info = json.loads((folder / "wheel.json").read_text())
            wheel, sha = str(info["wheel"]), str(info["sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            return f"builds/{key}: no readable wheel.json"
        return None if files.get(wheel) == sha else f"builds/{key}: wheel.json names {wheel} sha256 {sha}, not in it"
    if kind == "sources" and (not (folder / "tree").is_dir() or (folder / "tree").is_symlink()):
        return f"sources/{key}: no tree in it"
    if kind == "sources":
        if key.startswith("path-"):  # a snapshot is keyed by its digest
            recorded = "sha256:" + key.removeprefix("path-")
        else:
            try:
                recorded = (folder / "tree-digest").read_text(encoding="utf-8").strip()
            except (OSError, ValueError):
                return f"sources/{key}: no readable tree-digest record"
        found = tree_digest(folder / "tree", links_inside=False)
        return None if found == recorded else f"sources/{key}: tree digest {found}, its record says {recorded}"
    return None
