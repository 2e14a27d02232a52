"""Tar archives unpacked safely: no member may land outside the folder it is unpacked into.

An archive input (a FetchContent ``url``: GitHub's ``.../archive/<commit>.tar.gz``) comes from
a server, or a mirror of it, so every member is checked before a byte is written: a name that
is absolute or climbs out (``..``), a link whose target is absolute or leads outside, a hard
link to something not in the archive, a device or FIFO -- each refuses the whole archive,
naming the member. What is left is extracted with tarfile's ``data`` filter as a second guard.

As CMake's FetchContent does, an archive whose members all sit under one top folder
(``cutlass-57e3cfb4.../``) unpacks to that folder's contents.
"""

from __future__ import annotations

import posixpath
import tarfile
from pathlib import Path

from envlock.errors import SourceError


def _problem(member: tarfile.TarInfo, names: set[str]) -> str | None:
    """Why ``member`` could write or point outside the folder it is unpacked into (None: it cannot)."""
    name = member.name
    if name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return "a path that climbs out (..)"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return "a device, FIFO or other special file"
    if member.issym():
        target = member.linkname
        if target.startswith("/"):
            return f"a symlink to the absolute path {target!r}"
        where = posixpath.normpath(posixpath.join(posixpath.dirname("/".join(parts)), target))
        if where == ".." or where.startswith("../"):
            return f"a symlink to {target!r}, outside the archive"
    if member.islnk():
        target = posixpath.normpath(member.linkname)
        if target.startswith(("/", "../")) or target == ".." or target not in names:
            return f"a hard link to {member.linkname!r}, which is no earlier member of the archive"
    return None


def _checked(tar: tarfile.TarFile, what: str, plain: bool = False) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    seen: set[str] = set()
    for member in members:
        # plain: a sparse member could declare a TB in a few kB (and git would then hash it all)
        problem = "a sparse file" if plain and member.sparse is not None else _problem(member, seen)
        if problem is not None:
            raise SourceError(f"{what}: archive member {member.name!r} is {problem}; the archive is refused, "
                              "nothing was unpacked")
        seen.add(posixpath.normpath(member.name))
    return members


def unpack(archive: Path, dest: Path, *, what: str, plain: bool = False) -> None:
    """Unpack tar ``archive`` (any compression tarfile reads; ``plain``: none, and no sparse member, so
    it unpacks to no more than its own size) into ``dest``, which must not exist: every member checked before any is
    written, a single top folder unwrapped (as FetchContent does). ``SourceError`` naming ``what``
    and the first member that could escape, or an archive that is no tar."""
    work = dest.with_name(dest.name + ".unpack")
    try:
        with tarfile.open(archive, "r:" if plain else "r:*") as tar:
            checked = _checked(tar, what, plain)
            work.mkdir(parents=True)
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later: a second guard
                tar.extractall(work, members=checked, filter="data")
            else:  # pragma: no cover - the checks above are the guard there
                tar.extractall(work, members=checked)
    except (tarfile.TarError, EOFError, OSError) as exc:  # FilterError is a TarError
        raise SourceError(f"{what}: not a tar archive envlock can unpack ({exc}); nothing was kept") from None
    entries = list(work.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        entries[0].rename(dest)
        work.rmdir()
    else:
        work.rename(dest)


def tar_member(name: str, size: int, mode: int = 0o644) -> tarfile.TarInfo:
    """A tar member header the same on every machine (one content, one tar): mtime 0, owner 0 and
    no owner names, the ``mode`` given."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = size, mode, 0, 0, 0, "", ""
    return info
