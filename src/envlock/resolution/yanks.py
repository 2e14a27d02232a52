"""PEP 592 after the lock: which locked wheels are yanked, as the lock records it and as the index
says now.

A release is yanked when its authors withdraw it (a broken build, a security hole) without
deleting it: installers keep serving it to those who pinned it exactly, and never choose it
anew. ``resolve`` never chooses a yanked file unless an ``==`` pin names it, and the lock then
records that (``[packages.tool.envlock] yanked``): ``recorded`` reads it back. A release may be
yanked after it was locked, too: ``check_index`` reads the index page of each locked package
(once, in parallel, bounded as every page read) and names each locked file the index now marks
yanked, with the reason it gives. ``lock --check`` and ``diff --yanked`` say what it finds; it
is a note, never a failure: an index that cannot be read is a note as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envlock.errors import PackageIndexError
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Lock, LockedPackage

# envlock.net.indexes and envlock.net.http (socket, ssl) are imported where a page is read (docs/architecture.md).


@dataclass(frozen=True)
class Yanked:
    """A locked wheel that is yanked: its package, version and file, where that was read, and the
    reason the index gives ("" for none)."""

    package: str
    version: str
    filename: str
    index: str  # the index URL (no credentials): the one read, or the one the lock records
    reason: str
    recorded: bool = False  # the lock records it yanked (an exact == pin of a yanked release)
    live: bool = True  # the index said so in this run (else: as the lock records it)

    def text(self) -> str:
        why = f"reason: {self.reason}" if self.reason else "no reason given"
        if not self.live:
            return f"{self.package} {self.version}: {self.filename} was yanked on {self.index} when locked ({why})"
        return f"{self.package} {self.version}: {self.filename} is yanked on {self.index} ({why})"

    def line(self) -> str:
        """``text``, and whether it was yanked already when locked: a note of ``lock --check``, a line of ``diff``."""
        if not self.live:
            return f"{self.text()}; taken by an exact == pin"
        return self.text() + (" (yanked already when locked: pinned ==)" if self.recorded else "")

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"filename": "file"})


@dataclass(frozen=True)
class IndexCheck:
    """What ``check_index`` found: the yanked files, and the notes on what it could not read."""

    yanked: tuple[Yanked, ...] = ()
    notes: tuple[str, ...] = ()
    checked: int = 0  # the locked packages whose index page was read

    def lines(self) -> list[str]:
        """What to tell people, one note a line: each yanked file, then what was not checked."""
        return [y.line() for y in self.yanked] + list(self.notes)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


#: The note of a check not made: no network.
OFFLINE_NOTE = "--offline: no index read, so the locked files were not checked for yanks (PEP 592)"


def recorded(lock: Lock) -> tuple[Yanked, ...]:
    """The locked wheels ``lock`` records as yanked when it was made (an exact pin of a yanked release)."""
    return tuple(Yanked(str(p.name), p.version, p.wheels[0].filename, (p.index or "").rstrip("/"), p.yanked,
                        recorded=True, live=False)
                 for p in lock.packages if p.yanked is not None and p.wheels)


def checkable(lock: Lock) -> list[LockedPackage]:
    """The packages whose index can say whether their wheel is yanked: a wheel from an index, not a
    local build (a path into the wheelhouse, no index)."""
    return [p for p in lock.packages if p.index and p.wheels and p.wheels[0].url is not None]


def check_index(lock: Lock, *, read_at: Mapping[str, str] | None = None, jobs: int = 16) -> IndexCheck:
    """Each locked wheel of ``lock`` that its index marks yanked now (PEP 592), by package name.

    One index page per package, read in parallel (``jobs``) at the index the lock records for it,
    or at ``read_at[package]`` (a mirror of it). Each index's first package is read first: an index
    that cannot be read is then one note, and asked for nothing more; never an error.
    Credentials are the caller's block (``Mirrors.credentials``), netrc and keyring ``http``'s."""
    from concurrent.futures import ThreadPoolExecutor

    from envlock.net import http
    from envlock.net.indexes import IndexFile, project_files

    read_at = read_at or {}
    groups: dict[str, list[LockedPackage]] = {}  # index URL to read -> its packages, in the lock's order
    for pkg in checkable(lock):
        groups.setdefault(read_at.get(pkg.name) or str(pkg.index), []).append(pkg)

    def read(item: tuple[str, LockedPackage]) -> list[IndexFile] | PackageIndexError:
        try:
            return project_files(item[0], item[1].name)
        except PackageIndexError as exc:
            return exc

    firsts = [(url, pkgs[0]) for url, pkgs in groups.items()]
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, sum(map(len, groups.values()))))) as pool:
        got = dict(zip(firsts, pool.map(read, firsts), strict=True))
        rest = [(url, pkg) for url, pkgs in groups.items() if not isinstance(got[(url, pkgs[0])], PackageIndexError)
                for pkg in pkgs[1:]]
        got.update(zip(rest, pool.map(read, rest), strict=True))
    found, notes = [], []
    for url, pkgs in groups.items():
        shown = http.redact(url).rstrip("/")
        failed = [exc for pkg in pkgs if isinstance(exc := got.get((url, pkg)), PackageIndexError)]
        if failed:  # when the first package's page failed, none of the others was asked for
            unread = len(pkgs) if isinstance(got[(url, pkgs[0])], PackageIndexError) else len(failed)
            notes.append(f"{unread} locked {'file' if unread == 1 else 'files'} of {shown} not checked for yanks: "
                         f"{failed[0].message}")
        for pkg in pkgs:
            files = got.get((url, pkg))
            if isinstance(files, list):
                filename = pkg.wheels[0].filename
                listed = next((f for f in files if f.filename == filename), None)
                if listed is not None and listed.yanked is not None:
                    found.append(Yanked(str(pkg.name), pkg.version, filename, shown, listed.yanked,
                                        recorded=pkg.yanked is not None))
    return IndexCheck(tuple(sorted(found, key=lambda y: y.package)), tuple(sorted(notes)),
                      checked=sum(1 for files in got.values() if isinstance(files, list)))
