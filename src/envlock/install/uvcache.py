"""The store's own uv cache, which every store venv is installed from: where it is, the lock that keeps it
from being cleared under an install, and its repair when uv fails on it (an unpacked wheel gone, an
edited file in it).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import InstallError
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
