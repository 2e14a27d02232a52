"""The store's own uv cache, which every store venv is installed from: where it is, the lock that keeps it
from being cleared under an install, its repair when uv fails on it (an unpacked wheel gone, an unreadable
file in it), and the check of what it gave a new venv against the wheels' RECORDs (an edited file in it).
"""

from __future__ import annotations

import binascii
import contextlib
import os
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envlock.errors import InstallError
from envlock.model.lockfile import Lock, canonicalize_name
from envlock.store.store import Store


def uv_cache_dir(store: Store) -> Path:
    """The uv cache store venvs are installed from: the store's own.

    A venv's files are hard links to the files of this cache. In the user's uv cache
    they would be shared with every other uv venv on the machine, and an edit in an
    envlock venv would reach those, and the reverse.
    """
    return store.root / "uv-cache"


def clear_uv_cache(store: Store) -> None:
    """Remove the store's uv cache (renamed away first, so it goes in one step).

    For a venv whose files differ from its wheels': uv had them from its cache, which
    someone edited through a venv's hard link. Venvs built from it keep their files.
    """
    with store.locked(UV_CACHE_LOCK):  # not under a running install (they hold it shared)
        cache = uv_cache_dir(store)
        if cache.exists():
            store.remove_tree(cache)


#: Held shared by every install from the store's uv cache, exclusively to clear it.
UV_CACHE_LOCK = "uv-cache"

#: The folder of uv's cache that holds unpacked wheels, one ``archive-v0/<id>`` each (uv 0.13). A
#: wheel entry under ``wheels-v*/`` names one: a link ``…/<name>/<version-tag>`` to it, beside
#: ``<version-tag>.rev`` (or ``.http``), the pointer uv reads, which holds the same id, and uv's
#: ``<version-tag>.lock``. An entry whose archive is gone fails every install of its wheel ("failed
#: to read directory `…/archive-v0/<id>`: No such file or directory"); without the entry, uv
#: unpacks the wheel again.
UV_ARCHIVES = "archive-v0"
_POINTERS = (".rev", ".http")
_ARCHIVE_ID = rb"[A-Za-z0-9_-]{16,}"  # an id in a pointer's msgpack: a run of its own (compiled at first use)


@dataclass(frozen=True)
class UvCacheEntry:
    """One wheel entry of the store's uv cache and the archives it names."""

    files: tuple[Path, ...]  # its link, pointer and lock file
    archives: frozenset[str]  # ids it names that are in archive-v0/, by its link or its pointer
    gone: str | None  # what it names that is not there (archive-v0/<id>, else the entry), None: whole

    def names_any(self, ids: Collection[str]) -> bool:
        return not self.archives.isdisjoint(ids)


def uv_cache_entries(store: Store) -> list[UvCacheEntry]:
    """Every wheel entry of the store's uv cache (``UV_ARCHIVES``), grouped by its file name stem."""
    cache = uv_cache_dir(store)
    archives = cache / UV_ARCHIVES
    present = {p.name for p in archives.iterdir()} if archives.is_dir() else set()
    groups: dict[Path, list[Path]] = {}
    for bucket in sorted(cache.glob("wheels-v*")):
        for folder, _dirs, names in os.walk(bucket):
            for name in names + [d for d in _dirs if os.path.islink(os.path.join(folder, d))]:
                base = next((name[: -len(x)] for x in (*_POINTERS, ".lock") if name.endswith(x)), name)
                groups.setdefault(Path(folder, base), []).append(Path(folder, name))
    out = []
    for stem, files in sorted(groups.items()):
        named: set[str] = set()
        gone = None
        link = Path(os.readlink(stem)) if stem.is_symlink() else None
        if link is not None and link.parent.name == UV_ARCHIVES:
            named.add(link.name)
            if link.name not in present:
                gone = f"uv-cache/{UV_ARCHIVES}/{link.name}"
        for pointer in (f for f in files if f.name.endswith(_POINTERS)):
            try:
                ids = {m.decode() for m in re.findall(_ARCHIVE_ID, pointer.read_bytes())} & present
            except OSError:
                ids = set()
            named |= ids
            if not ids and gone is None:  # it names no archive there is (or in a form not known here)
                gone = str(stem.relative_to(cache.parent))
        out.append(UvCacheEntry(tuple(sorted(files)), frozenset(named & present), gone))
    return out


def drop_uv_cache_entries(entries: Iterable[UvCacheEntry]) -> None:
    """Remove these entries' files (under the store's ``uv-cache`` lock, held exclusively): uv then
    unpacks their wheels again when an install needs them."""
    for entry in entries:
        for path in entry.files:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def repair_uv_cache(store: Store, failure: InstallError) -> str:
    """After uv failed to install from the store's cache: drop the entries whose archive is gone,
    else, when uv's output names its cache, the whole cache; what was done, "" when neither applies
    (uv failed for another reason)."""
    with store.locked(UV_CACHE_LOCK):  # no install runs from the cache while it is repaired
        broken = [e for e in uv_cache_entries(store) if e.gone is not None]
        if broken:
            drop_uv_cache_entries(broken)
            one = len(broken) == 1
            return (f"uv's cache named {len(broken)} unpacked wheel{'' if one else 's'} that "
                    f"{'is' if one else 'are'} gone ({', '.join(str(e.gone) for e in broken)}); dropped "
                    f"{'its entry' if one else 'their entries'} and installed again")
        cache = uv_cache_dir(store)
        said = [line.strip().removeprefix("cause: ") for line in (failure.message, *failure.details)
                if str(cache) in line]
        if not said or not cache.exists():
            return ""
        store.remove_tree(cache)
    return f"uv could not read its own cache ({said[-1]}); cleared it and installed again"


#: The standard base64 alphabet's two letters as a RECORD spells them (urlsafe, PEP 376).
_URLSAFE = bytes.maketrans(b"+/", b"-_")


@dataclass
class RecordHashes:
    """The sha256 the RECORDs of a new venv's dists give their files (``sha256=<urlsafe base64>``, as RECORD
    spells it): what uv's cache must have given the venv.

    uv links a wheel's files from the archive it unpacked into its cache once, and nobody reads them
    again: a file edited through a venv that links it (``chmod u+w``, as root) reached every venv built
    after, and a digest walk of a new lock took it for the truth. uv checks no RECORD hash (0.13: a
    wheel whose RECORD lies installs), but copies each file's hash from the wheel's RECORD into the
    venv's; the files it writes itself (INSTALLER, REQUESTED, scripts) it records with their own hash.
    Read and compared in bulk (C loops over whole files and strings, ~7k lines in a venv): a few ms.
    """

    #: Each dist's RECORD lines: (folder, paths in it, the sha256 each): its site-packages folder (venv path and
    #: "/"); and "", venv paths, for its files outside it (``../../../bin/tool``: scripts, headers).
    listed: list[tuple[str, list[str], list[str]]] = field(default_factory=list)

    def add(self, site: str, dist: str, record: bytes) -> None:
        """Take in the RECORD of the dist ``dist`` (its dist-info folder's name) in ``site``."""
        text = record.decode("utf-8", "surrogateescape")
        fields = text.replace("\n", ",").split(",")  # path, hash, size, path, ..., "" (after the last newline)
        if '"' in text or len(fields) % 3 != 1 or fields[-1]:  # a CSV-quoted name (a comma in it), or odd lines
            paths, given = _csv_rows(text)
        else:
            paths, given = fields[0:-1:3], fields[1::3]
        with contextlib.suppress(ValueError):
            at = paths.index(f"{dist}/RECORD")  # its own line gives no hash (other such lines: ``unlike``)
            del paths[at], given[at]
        if "../" in text:
            out = [i for i, path in enumerate(paths) if path.startswith("../")]
            self.listed.append(("", [os.path.normpath(site + paths[i]) for i in out], [given[i] for i in out]))
            for i in reversed(out):
                del paths[i], given[i]
        self.listed.append((site, paths, given))

    def unlike(self, entries: Mapping[str, str]) -> list[tuple[str, str, str]]:
        """Each file of a walk's ``entries`` whose sha256 is none a RECORD gives it: (path, the RECORDs' sha256,
        the file's), as RECORD spells them."""
        get = entries.get
        found: list[str] = []
        given: list[str] = []
        for folder, paths, hashes in self.listed:
            found += [(get(folder + path) or "----")[4:] for path in paths]  # "f <x|-> <hex>" for a file
            given += hashes
        # All at once, not a conversion per file: a sha256 and a zero byte are 33 bytes, 44 base64 letters,
        # the 43 RECORD spells the sha256 with and "A". Equal: every file is as its RECORD says.
        with contextlib.suppress(ValueError):  # a path not in the walk, or not a file: one by one, below
            if _spelled("00".join(found) + "00") == ("A".join(given) + "A").replace("sha256=", "").encode():
                return []
        accepted: dict[str, set[str]] = {}  # a path two dists install (an allowed overlap): either's bytes
        for folder, paths, hashes in self.listed:
            for path, value in zip(paths, hashes, strict=True):
                if value.startswith("sha256="):  # not RECORD's own line, nor another algorithm
                    accepted.setdefault(folder + path, set()).add(value.rstrip("="))
        out = []
        for rel, values in accepted.items():
            entry = get(rel)
            if entry is not None and entry[0] == "f":  # not a file the walk found: nothing to hold to it
                mine = _record_hash(entry[4:])
                if mine not in values:
                    out.append((rel, " or ".join(sorted(values)), mine))
        return out


def _record_hash(sha256: str) -> str:
    """A file's hex ``sha256`` as its RECORD line gives it: ``sha256=`` and 43 letters of urlsafe base64."""
    return f"sha256={_spelled(sha256 + '00')[:43].decode()}"


def _spelled(hexes: str) -> bytes:
    """The bytes of ``hexes`` in urlsafe base64, as RECORD spells a hash."""
    return binascii.b2a_base64(bytes.fromhex(hexes), newline=False).translate(_URLSAFE)


def _csv_rows(text: str) -> tuple[list[str], list[str]]:
    """The paths and hashes of a RECORD's lines, read as CSV (a quoted name: a comma in it)."""
    import csv
    import io

    # Lines are CSV's, not str.splitlines's (which also cuts at \x0c, \x85, \u2028: a name may hold them).
    rows = [row for row in csv.reader(io.StringIO(text, newline="")) if len(row) > 1]
    return [row[0] for row in rows], [row[1] for row in rows]


def _dists_listing(venv: Path, path: str) -> list[str]:
    """The dists whose RECORDs in ``venv`` list the venv path ``path`` (two: an allowed overlap)."""
    found: list[str] = []
    for record in venv.glob("lib/python*/site-packages/*.dist-info/RECORD"):
        inside = os.path.relpath(venv / path, record.parent.parent).encode("utf-8", "surrogateescape")
        if b"\n" + inside + b"," in b"\n" + record.read_bytes():
            found.append(canonicalize_name(record.parent.name.split("-")[0]))
    return found


def wheels_listing(venv: Path, lock: Lock, paths: list[str]) -> str:
    """The locked wheels whose dists' RECORDs in ``venv`` list any of ``paths`` (venv paths), by file name."""
    dists = {dist for path in paths for dist in _dists_listing(venv, path)}
    return ", ".join(p.wheels[0].filename for p in lock.packages if p.name in dists) or "the locked wheels"


def record_lies(venv: Path, lock: Lock, wheels: Mapping[str, Path], unlike: list[tuple[str, str, str]]) -> bool:
    """Whether the wheel itself holds a file unlike its RECORD (the wheel's fault, not uv's cache's: clearing the
    cache for it, for every venv, would change nothing): the first of ``unlike`` (``RecordHashes.unlike``) in
    site-packages, read from its store wheel (``wheels``: sha256 -> file) as one zip member."""
    import hashlib
    import zipfile

    path, given, _ = next((u for u in unlike if "/site-packages/" in u[0]), ("", "", ""))
    dists = _dists_listing(venv, path) if path else []  # a script or data file: its member is under .data/
    wheel = next((wheels.get(p.wheels[0].sha256) for p in lock.packages if dists and p.name == dists[0]), None)
    if wheel is None:
        return False
    try:
        with zipfile.ZipFile(wheel) as whl:
            member = whl.read(path.partition("/site-packages/")[2])
    except (OSError, KeyError, zipfile.BadZipFile):
        return False  # not to be told from here: the cache is cleared, as for an edit
    return _record_hash(hashlib.sha256(member).hexdigest()) not in given
