"""Source trees as content: a digest of a tree, the links that lead out of it, and a faithful copy;
and the inodes of a tree's files (what hard links share).

Tree digest: ``sha256:`` over a sorted walk of the tree (POSIX relative path, entry type,
executable bit, file bytes or symlink target). ``.git`` and ``__pycache__`` are left out.
A symlink is hashed by its text, so a tree whose links lead out of it (an absolute target,
or ``..`` past its top, also through other links) is refused: the digest would not cover the
content a build reads through them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import SourceError, SourceTreeError

IGNORED_NAMES = frozenset({".git", "__pycache__"})

# Linux's limit on symlinks followed in one path lookup (ELOOP): a chain longer than this
# is not followed by the build either.
_MAX_LINKS = 40

# SOURCE_DATE_EPOCH for trees without a commit (path sources, overrides): a fixed value
# (1980-01-01T00:00:00Z, the earliest a zip file can record) rather than the newest mtime,
# so two trees with one digest build the same wheel whatever their files' mtimes.
PATH_SOURCE_EPOCH = 315532800


def walk_tree(root: Path) -> Iterator[tuple[str, Path]]:
    """Every file and symlink under ``root`` as (POSIX relative path, path), sorted by relative path."""
    entries: list[tuple[str, Path]] = []

    def visit(folder: Path, prefix: str) -> None:
        with os.scandir(folder) as it:
            for entry in it:
                if entry.name in IGNORED_NAMES:
                    continue
                rel = f"{prefix}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    visit(Path(entry.path), rel + "/")
                else:
                    entries.append((rel, Path(entry.path)))

    visit(root, "")
    yield from sorted(entries)


def tree_digest(root: Path, *, within: Path | None = None, name: str | None = None,
                links_inside: bool = True) -> str:
    """Content digest of a tree: sorted paths, entry type, exec bit, bytes or symlink target.

    ``SourceTreeError`` (naming every such link) when a symlink leads out of ``within`` (default:
    ``root``; a build's subdirectory passes its source tree: it may be a link itself, and its
    links may lead elsewhere in the source). ``name`` names the tree in that message.
    ``links_inside=False``: digest only, for a git commit's tree (see ``sources.checkout``).
    """
    if not links_inside:
        return _digest(root, [])
    top = within if within is not None else root
    shown = name or str(top)
    lexical = root.relative_to(top).parts
    # Links are followed from where the files really are: a subdirectory may be a link.
    base = resolve_within(top, lexical)
    if isinstance(base, Escape):
        through = f" (through the symlink {base})" if base.link else ""
        raise SourceTreeError(f"{shown}: subdirectory {'/'.join(lexical)} leads outside the source tree{through}; "
                              "expected a folder inside it")
    links: list[tuple[str, str]] = []
    digest = _digest(root, links)
    # A link that stays in the source but leaves the subdirectory is hashed by its text, as
    # it is copied: a build gets the whole source tree (build._run_build), where such a link
    # leads where it leads in the source.
    _check_links(top, base, lexical, links, shown)
    return digest


def check_links(root: Path, *, name: str | None = None) -> None:
    """``SourceTreeError`` when a symlink under ``root`` leads out of it (see ``tree_digest``),
    without reading any file: for a tree that is pinned otherwise (a FetchContent commit)."""
    links = [(rel, os.readlink(path)) for rel, path in walk_tree(root) if path.is_symlink()]
    _check_links(root, (), (), links, name or str(root))


def _check_links(top: Path, base: tuple[str, ...], lexical: tuple[str, ...], links: list[tuple[str, str]],
                 shown: str) -> None:
    """Raise ``SourceTreeError`` naming every link (relative path, target) under ``base`` (where
    the tree really is, relative to ``top``) that leads out of ``top``."""
    escapes: list[str] = []
    for rel, target in links:
        real = (*base, *rel.split("/"))
        leads = resolve_within(top, real)
        if isinstance(leads, Escape):
            through = "" if leads.link == "/".join(real) else f" (through the symlink {leads})"
            escapes.append(f"symlink {'/'.join((*lexical, rel))} -> {target} leads outside the source tree{through}")
    # The digest would pin a link's text while a build reads what it points to: a file
    # outside could change (or differ on another machine) under the same digest.
    expected = "expected links that stay inside it (a link is hashed by its text, not by what it points to)"
    if len(escapes) == 1:
        raise SourceTreeError(f"{shown}: {escapes[0]}; {expected}")
    if escapes:
        raise SourceTreeError(f"{shown}: {len(escapes)} symlinks lead outside the source tree; {expected}",
                              details=escapes)


def _digest(root: Path, links: list[tuple[str, str]]) -> str:
    """The digest of the tree at ``root``; each symlink's (relative path, target) is added to ``links``."""
    h = hashlib.sha256()
    for rel, path in walk_tree(root):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            links.append((rel, target))
            kind, data = b"l", os.fsencode(target)
        elif stat.S_ISREG(st.st_mode):
            kind = b"x" if st.st_mode & 0o100 else b"f"
            data = path.read_bytes()
        else:
            raise SourceError(f"{path}: not a regular file, directory or symlink")
        name = os.fsencode(rel)  # raw bytes: a name need not be UTF-8
        h.update(kind + len(name).to_bytes(4, "big") + name + len(data).to_bytes(8, "big") + data)
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True)
class Escape:
    """The symlink by which a path leaves its tree (``link`` relative to the tree; empty if none)."""

    link: str
    target: str

    def __str__(self) -> str:
        return f"{self.link} -> {self.target}"


def resolve_within(top: Path, parts: Sequence[str]) -> tuple[str, ...] | Escape:
    """Where ``parts`` (relative to ``top``) lead with every symlink on the way followed, as parts
    relative to ``top``; or the link whose target leaves ``top`` (``Escape``).

    Step by step, as the kernel resolves a path, not lexically: ``a/b/..`` is not ``a`` when
    ``a/b`` is a link. A way that leaves the tree and comes back in (``../tree/x``) leaves it
    too: a copy of the tree (the store's, the build's) has another name and another parent.
    """
    no_link = Escape("", "")
    todo = [(part, no_link) for part in parts]  # each part with the link whose target it came from
    here: list[str] = []
    hops = 0
    while todo:
        part, origin = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                return origin
            here.pop()
            continue
        path = top.joinpath(*here, part)
        if not path.is_symlink():
            here.append(part)
            continue
        hops += 1
        if hops > _MAX_LINKS:  # a loop, or a chain too long: the build cannot follow it either
            return tuple(here)
        target = os.readlink(path)
        link = Escape("/".join([*here, part]), target)
        if os.path.isabs(target):
            return link
        todo = [(p, link) for p in target.split("/")] + todo  # relative to the link's folder, ``here``
    return tuple(here)


def links_out(root: Path) -> list[str]:
    """The symlinks under ``root`` (POSIX relative paths) that lead out of it (see ``tree_digest``)."""
    out = []
    for rel, path in walk_tree(root):
        if path.is_symlink() and isinstance(resolve_within(root, rel.split("/")), Escape):
            out.append(rel)
    return out


def copy_tree(src: Path, dest: Path, *, leave_out: Sequence[str] = ()) -> None:
    """Copy a tree (symlinks as symlinks, modes kept, ``.git``/``__pycache__`` left out, and the
    relative paths ``leave_out``) into ``dest``."""
    skipped = {src / rel for rel in leave_out}

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in IGNORED_NAMES or Path(folder, n) in skipped}

    shutil.copytree(src, dest, symlinks=True, ignore=ignore, dirs_exist_ok=True)


def settle_mtimes(root: Path, when: int) -> int:
    """Give every file, symlink and folder under ``root`` (``root`` too) the mtime ``when``, never
    following a link; return how many were changed (one already at ``when`` is not written).

    A compiler can write a file's mtime into its output: ptxas records each source file's mtime and
    size in the cubin's DWARF line table (``-lineinfo``, ``-G``), so a tree checked out or unpacked
    at another moment would build other bytes. ``OSError`` when one cannot be set."""
    changed = 0
    for top, dirs, files in os.walk(root):
        for name in (*dirs, *files):  # a symlink to a folder is listed in dirs, never entered
            changed += _settle(os.path.join(top, name), when)
    return changed + _settle(str(root), when)


def _settle(path: str, when: int) -> int:
    if os.lstat(path).st_mtime_ns == when * 1_000_000_000:
        return 0
    os.utime(path, (when, when), follow_symlinks=False)
    return 1


def file_inodes(top: Path) -> Iterator[tuple[int, int]]:
    """``(st_dev, st_ino)`` of each file under ``top`` (links not followed; one that vanishes is passed
    over): a venv's files are hard links into the store's uv cache, so two trees share a file by inode."""
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            yield st.st_dev, st.st_ino
