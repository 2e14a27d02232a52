"""The bundle format: store entries and a lock carried outside a store, with a manifest.

A bundle is a folder or an uncompressed tar holding::

    envlock-bundle.json           the manifest (below)
    pylock.ENV.toml               the lock the bundle was made for
    store/<kind>/<key>/<path>     the files of each store entry it carries

The manifest (``format = "envlock-bundle"``, ``version = 1``) names the env, the lock (its
member name and sha256) and every entry by kind and key, with, for each, its files (path
relative to the entry, sha256, size, executable bit), its folders and its symlinks (path,
target). Readers refuse anything else: a member the manifest does not list, a file whose bytes
are not its sha256 (named), a name that is absolute or holds ``..``, and in a tar, any member
that is not a regular file or a folder (links, devices, FIFOs). Symlinks live only in the
manifest, and are made after every file of their entry, pointing inside it.

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

from envlock.archives import tar_member
from envlock.errors import StoreError

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
        """Read a manifest, refusing what does not fit the format (naming the key)."""
        try:
            if doc.get("format") != FORMAT or doc.get("version") != VERSION:
                raise StoreError(f"{origin}: format {doc.get('format')!r} version {doc.get('version')!r}; "
                                 f"expected {FORMAT!r} version {VERSION}")
            entries = tuple(_entry(e, f"entries[{i}]", origin) for i, e in enumerate(doc["entries"]))
            lock = doc["lock"]
            bundle = cls(str(doc["env"]), _name(str(lock["path"]), "lock.path", origin), _sha(lock["sha256"], origin),
                         str(lock.get("label", "")), entries)
        except KeyError as exc:
            raise StoreError(f"{origin}: not an envlock bundle manifest (key {exc} missing)") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"{origin}: not an envlock bundle manifest (a value of the wrong type: {exc})") from None
        return bundle


def _sha(value: object, origin: str) -> str:
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise StoreError(f"{origin}: sha256 {value!r}: expected 64 lowercase hex digits")
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
    kind, entry_key = str(doc["kind"]), str(doc["key"])
    _name(f"{kind}/{entry_key}", key, origin)
    if "/" in entry_key or "/" in kind:
        raise StoreError(f"{origin}: {key}: {kind}/{entry_key}: expected a store kind and a key without '/'")
    files = tuple(FileMember(_name(str(f["path"]), f"{key}.files", origin), _sha(f["sha256"], origin),
                             int(f["size"]), bool(f.get("executable", False))) for f in doc["files"])
    dirs = tuple(_name(str(d), f"{key}.dirs", origin) for d in doc.get("dirs", []))
    links = tuple(LinkMember(_name(str(ln["path"]), f"{key}.links", origin), str(ln["target"]))
                  for ln in doc.get("links", []))
    for link in links:
        if link.target.startswith("/") or posixpath.normpath(posixpath.join(posixpath.dirname(link.path),
                                                                            link.target)).startswith(".."):
            raise StoreError(f"{origin}: {key}: symlink {kind}/{entry_key}/{link.path} -> {link.target} leads out "
                             "of its entry; expected links that stay inside it")
    return BundleEntry(kind, entry_key, files, dirs, links)


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
        if MANIFEST not in self.names():
            raise StoreError(f"{self.origin}: no {MANIFEST}; expected a folder or tar written by `envlock export`")
        with self.open(MANIFEST) as fh:
            data = fh.read(64 << 20)
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise StoreError(f"{self.origin}: {MANIFEST}: not JSON ({exc})") from None
        bundle = Bundle.from_dict(doc, f"{self.origin}: {MANIFEST}")
        listed = {*bundle.members(), MANIFEST}
        if extra := sorted(self.names() - listed):
            raise StoreError(f"{self.origin}: member {extra[0]} is not listed in {MANIFEST}; refused (a bundle "
                             "holds only what its manifest names)", details=extra[1:])
        return bundle


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
        return (self.root / name).open("rb")


class TarReader(Reader):
    def __init__(self, path: Path) -> None:
        self.origin = str(path)
        try:
            self._tar = tarfile.open(path, "r:")  # noqa: SIM115 - closed by close()
        except (OSError, tarfile.TarError) as exc:
            raise StoreError(f"{path}: cannot read as a tar ({exc})") from None
        self._members: dict[str, tarfile.TarInfo] = {}
        for info in self._tar.getmembers():
            name = info.name.removeprefix("./")
            if (problem := name_problem(name.rstrip("/"))) is not None:
                raise StoreError(f"{self.origin}: member {info.name} is {problem}; refused (it would be written "
                                 "outside the bundle)")
            if not (info.isreg() or info.isdir()):
                raise StoreError(f"{self.origin}: member {info.name} is a {_tar_kind(info)}; refused (a bundle "
                                 "holds regular files and folders only)")
            if info.isreg():
                self._members[name] = info

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
    """Copy member ``name`` to ``dest``, refusing (``StoreError`` naming it) bytes that are not ``sha256``/``size``."""
    if name not in reader.names():
        raise StoreError(f"{reader.origin}: member {name} is listed in {MANIFEST} but not in the bundle")
    h = hashlib.sha256()
    seen = 0
    with reader.open(name) as src, dest.open("wb") as out:
        while chunk := src.read(min(_CHUNK, size + 1 - seen)):
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
        data = fh.read(256 << 20)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise StoreError(f"{reader.origin}: member {name}: sha256 {hashlib.sha256(data).hexdigest()}, the manifest "
                         f"says {sha256}; refused")
    return data


# -- writing ---------------------------------------------------------------


class Writer:
    """Writes members into a folder or a tar being made (``open_writer``)."""

    def __init__(self, folder: Path | None, tar: tarfile.TarFile | None) -> None:
        self._folder, self._tar = folder, tar

    def add_file(self, name: str, src: Path, *, executable: bool = False) -> FileMember:
        """Copy ``src`` in as ``name``; its member record (sha256 taken while copying)."""
        h = hashlib.sha256()
        size = src.stat().st_size
        if self._folder is not None:
            dest = self._folder / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            with src.open("rb") as fh, dest.open("wb") as out:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
        else:
            with src.open("rb") as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
            assert self._tar is not None
            with src.open("rb") as fh:
                self._tar.addfile(tar_member(name, size), fh)
        return FileMember(name, h.hexdigest(), size, executable)

    def add_bytes(self, name: str, data: bytes) -> str:
        if self._folder is not None:
            (self._folder / name).parent.mkdir(parents=True, exist_ok=True)
            (self._folder / name).write_bytes(data)
        else:
            assert self._tar is not None
            self._tar.addfile(tar_member(name, len(data)), io.BytesIO(data))
        return hashlib.sha256(data).hexdigest()

    def add_entry(self, kind: str, key: str, folder: Path) -> BundleEntry:
        """Every file, folder and symlink of the store entry at ``folder``."""
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
        return BundleEntry(kind, key, tuple(files), tuple(dirs), tuple(links))


@contextmanager
def open_writer(dest: Path) -> Iterator[Writer]:
    """Write a bundle at ``dest`` (a ``.tar`` file, else a folder): under a temp name beside it,
    renamed into place only when the block ends without error (a partial export is never there)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
    try:
        if dest.suffix == ".tar":
            with tarfile.open(tmp, "w:", format=tarfile.PAX_FORMAT) as tar:
                yield Writer(None, tar)
            os.replace(tmp, dest)
        else:
            tmp.mkdir(parents=True)
            yield Writer(tmp, None)
            if dest.is_dir() and not any(dest.iterdir()):
                dest.rmdir()  # an empty folder made for it is taken; a full one is never replaced
            os.rename(tmp, dest)
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
    if kind == "sources" and (folder / "tree").is_dir():
        from envlock.trees import tree_digest

        if key.startswith("path-"):  # a snapshot is keyed by its digest
            recorded = "sha256:" + key.removeprefix("path-")
        elif (folder / "tree-digest").is_file():
            recorded = (folder / "tree-digest").read_text().strip()
        else:
            return f"sources/{key}: no tree-digest record"
        found = tree_digest(folder / "tree", links_inside=False)
        return None if found == recorded else f"sources/{key}: tree digest {found}, its record says {recorded}"
    return None
