"""Bundles on disk (the format: ``envlock.store.bundle``): read from a folder or a tar, member by
member, each held to its manifest's sha256 and size; an entry assembled from them (folders made
never through a link, then an lstat walk against its manifest); written under a temp name beside
the bundle, synced, renamed into place when whole.
"""

from __future__ import annotations

import abc
import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from envlock.errors import StoreError, UsageError
from envlock.store.archives import tar_member
from envlock.store.bundle import MANIFEST, Bundle, BundleEntry, FileMember, LinkMember, name_problem
from envlock.store.durable import fsync_dir, sync_file, sync_tree
from envlock.store.store import temp_beside
from envlock.store.trees import Escape, resolve_within

_CHUNK = 1 << 20


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
        """The manifest, read whole and checked (``Bundle.from_dict``) before any member is read. A
        bundle without one is no bundle: bad input (``UsageError``, exit 2), as a path that is no tar."""
        if MANIFEST not in self.names():
            raise UsageError(f"{self.origin}: no {MANIFEST}; expected a folder or tar written by `envlock export`")
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
            raise UsageError(f"{path}: not a whole tar ({exc}); expected a .tar written by `envlock export`") from None
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({_strerror(exc)})") from None
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
            raise UsageError(f"{path}: not a whole tar ({exc}); expected a .tar written by `envlock export`") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read ({_strerror(exc)})") from None
        if not whole:
            raise UsageError(f"{path}: not a whole tar (cut short: no end-of-archive blocks after its last member); "
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
    """A reader of the bundle at ``path`` (a folder, or a tar file); ``UsageError`` (bad input, exit 2) when
    ``path`` is missing, cannot be opened or is not a whole tar. A bundle refused for what it holds is a
    ``StoreError`` (exit 1: docs/security.md)."""
    if path.is_dir():
        reader: Reader = DirReader(path)
    elif path.is_file():
        reader = TarReader(path)
    else:
        raise UsageError(f"{path}: no such bundle (expected a folder or a .tar written by `envlock export`)")
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
    ``Bundle.from_dict`` has refused already: this is the second guard); its path."""
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
    tmp = temp_beside(dest)
    try:
        if dest.suffix == ".tar":
            tmp.parent.mkdir(parents=True, exist_ok=True)  # as a folder's are (below)
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
