"""Fetched sources in binary caches: the git trees and FetchContent archives a build reads.

A builder whose store lacks a source asks the caches before git or the URL (``sources_into_store``,
the hook ``building`` calls before it prepares the sources); ``cache push`` and the post-build push
upload what the cache lacks (``push_sources``). Keys, by what the lock pins each source to (the lock
records no tree digest of a fetched source, only of a path source, which is in the workspace and
never cached):

    sources/git-<commit>.tar     a git source or git FetchContent input at its commit: a tar made
                                 the same way every time (sorted, mtime 0, owner 0, no dir members)
                                 of ``commit`` (the raw commit object) and ``tree/...`` (the checkout)
    sources/archive-<sha256>     a FetchContent archive input's own bytes (the store keeps them)

Nothing needs a signature, because each entry is checked against the lock's pin: an archive's
bytes must hash to the lock's sha256; a git tar must hold a commit object whose id is the lock's
commit and files whose git tree id (git computes it, as ``git add`` + ``write-tree`` in a scratch
repository) is the tree that commit names, and the store keeps git's checkout of that tree (``git
add`` cleans what it reads: an ``ident`` or ``text`` attribute lets other bytes make it); the
committer time (the build's SOURCE_DATE_EPOCH) is read from that verified object. Every member is
checked before any is unpacked (``archives``: ``..``, absolute paths, links out, devices refused;
and here a ``.git`` path, which neither digest would cover). A refused entry is one note naming
the cache and the entry; envlock goes on with the next cache, then git or the URL. A cache that
cannot be reached is a note, never a failure.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envlock.build import inputs as build_inputs
from envlock.build import sources
from envlock.cache.backends import Backend, CacheError, TooLargeError, open_backend
from envlock.cache.caches import Caches, HashingWriter
from envlock.errors import SourceError, UsageError, redact
from envlock.model.lockfile import Lock
from envlock.model.spec import BuildSpec, EnvSpec
from envlock.store import archives
from envlock.store.store import Store
from envlock.store.trees import tree_digest, walk_tree

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class Pinned:
    """A fetched source as the lock pins it: a git commit or an archive's sha256."""

    kind: str  # "git" or "archive"
    pin: str  # the 40-hex commit, or the archive's sha256
    location: str  # the git URL or the archive URL (as the spec names it)

    @property
    def key(self) -> str:
        """Its key in a cache."""
        return f"sources/git-{self.pin}.tar" if self.kind == "git" else f"sources/archive-{self.pin}"

    @property
    def entry(self) -> str:
        """Its entry in the store (``sources/<entry>``), as ``sources.checkout``/``fetch_archive`` name it."""
        return f"{self.kind}-{self.pin}"


class _RefusedError(Exception):
    """What a cache served is not the pinned source (the message says why)."""


# -- what a build reads ----------------------------------------------------------------------------


def wanted(spec: EnvSpec, lock: Lock | None, builds: Sequence[BuildSpec],
           commits: Mapping[str, str | None]) -> list[Pinned]:
    """The fetched sources ``builds`` read whose pin is known without the network: the git sources of
    ``commits`` (name -> the commit the lock or spec pins, None: not known) and each FetchContent input."""
    out = [Pinned("git", commit, spec.sources[name].git or "")
           for name, commit in sorted(commits.items()) if commit and spec.sources[name].git]
    for b in builds:
        recorded = lock.fetchcontent.get(b.name, {}) if lock is not None else {}
        for dep in b.fetchcontent:
            pin = build_inputs.known_pin(dep, recorded.get(dep.name))
            if pin is not None and pin.commit and dep.git:
                out.append(Pinned("git", pin.commit, dep.git))
            elif pin is not None and pin.sha256 and dep.url:
                out.append(Pinned("archive", pin.sha256, dep.url))
    return list(dict.fromkeys(out))


def locked(lock: Lock, builds: Sequence[BuildSpec] | None = None) -> list[Pinned]:
    """The fetched sources ``lock`` pins: all of them, or those ``builds`` read (their source, their
    FetchContent inputs)."""
    names = None if builds is None else {b.source for b in builds}
    out = [Pinned("git", s.commit, s.location) for name, s in sorted(lock.sources.items())
           if s.kind == "git" and s.commit and (names is None or name in names)]
    for build_name, inputs in sorted(lock.fetchcontent.items()):
        if builds is not None and build_name not in {b.name for b in builds}:
            continue
        for _dep, pin in sorted(inputs.items()):
            if pin.git and pin.commit:
                out.append(Pinned("git", pin.commit, pin.git))
            elif pin.url and pin.sha256:
                out.append(Pinned("archive", pin.sha256, pin.url))
    return list(dict.fromkeys(out))


# -- substitution ------------------------------------------------------------------------------


def sources_into_store(caches: Caches, store: Store, pins: Sequence[Pinned]) -> int:
    """Each of ``pins`` the store lacks, from the first cache that has it and passes the checks
    (refusals and unreachable caches are notes in ``caches``); how many were taken."""
    taken = 0
    for pinned in pins:
        if (store.path("sources", pinned.entry) / "tree").is_dir():
            continue
        for backend in caches.backends():
            if _one(caches, store, backend, pinned):
                taken += 1
                break
    caches.sources += taken
    return taken


def _one(caches: Caches, store: Store, backend: Backend, pinned: Pinned) -> bool:
    """``pinned`` from ``backend`` into the store, checked; False when it has none or a wrong one."""
    scratch = store.temp_dir("cache-source")
    try:
        part = scratch / "entry"
        with open(part, "wb") as fh:
            sha = HashingWriter(fh)
            if not backend.get(pinned.key, sha.write, limit=sources.ARCHIVE_LIMIT):
                return False
        if pinned.kind == "archive":
            if sha.sha.hexdigest() != pinned.pin:
                raise _RefusedError(f"served bytes of sha256 {sha.sha.hexdigest()}, expected the lock's {pinned.pin}")
            sources.store_archive(store, pinned.location, part, pinned.pin, what=pinned.key)
        else:
            _store_git(store, backend, pinned, part, scratch)
    except TooLargeError:
        caches.refuse(backend, f"{pinned.key}: longer than {sources.ARCHIVE_LIMIT} bytes, more than any source")
        return False
    except _RefusedError as exc:
        caches.refuse(backend, f"{pinned.key}: {exc}")
        return False
    except SourceError as exc:  # a member that could escape, or no tar: archives says which, naming the key
        caches.refuse(backend, exc.message)
        return False
    except CacheError as exc:
        caches.down(backend, exc)
        return False
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return True


def _store_git(store: Store, backend: Backend, pinned: Pinned, part: Path, scratch: Path) -> None:
    """The git tar ``part`` unpacked, held to ``pinned``'s commit, made the store's ``sources/git-<commit>``."""
    unpacked = scratch / "unpacked"
    # Plain, as envlock writes it: it is checked only once unpacked, and a few kB of gzip unpack to GBs.
    archives.unpack(part, unpacked, what=pinned.key, plain=True)
    extra = sorted(p.name for p in unpacked.iterdir() if p.name not in ("commit", "tree"))
    tree, commit_file = unpacked / "tree", unpacked / "commit"
    if extra or not tree.is_dir() or tree.is_symlink() or not commit_file.is_file() or commit_file.is_symlink():
        raise _RefusedError("expected the members commit and tree/ alone" + (f", found {extra[0]!r}" if extra else ""))
    try:
        checkout, when = sources.commit_checkout(tree, commit_file.read_bytes(), pinned.pin, scratch, what=pinned.key)
    except sources.NotThePinError as exc:
        raise _RefusedError(str(exc)) from None
    with store.new_entry("sources", pinned.entry) as work:
        os.rename(checkout, work / "tree")
        shutil.copyfile(commit_file, work / sources.COMMIT_OBJECT)
        (work / "commit-time").write_text(f"{when}\n")
        (work / "tree-digest").write_text(tree_digest(work / "tree", links_inside=False) + "\n")
        (work / "url").write_text(redact(pinned.location) + "\n")


# -- push --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourcesPushed:
    """What one push of sources uploaded, found there already, or could not upload (notes)."""

    uploaded: tuple[str, ...]
    present: int
    notes: tuple[str, ...]


def push_sources(backend: Backend, store: Store, pins: Sequence[Pinned]) -> SourcesPushed:
    """Upload each of ``pins`` that ``backend`` lacks and the store holds; the rest are notes."""
    uploaded: list[str] = []
    present, notes = 0, []
    for pinned in pins:
        if backend.exists(pinned.key):
            present += 1
            continue
        entry = store.path("sources", pinned.entry)
        scratch = store.temp_dir("push-source")
        try:
            if not (entry / "tree").is_dir():
                notes.append(f"{pinned.key}: not pushed: the store has no {redact(pinned.location)} at "
                             f"{pinned.pin[:12]}")
                continue
            if pinned.kind == "archive":
                path = entry / sources.ARCHIVE_BYTES
                if not path.is_file():
                    notes.append(f"{pinned.key}: not pushed: the store keeps the tree of {redact(pinned.location)}, "
                                 "not its bytes (fetched by an older envlock)")
                    continue
            else:
                raw = sources.commit_object(store, pinned.location, pinned.pin)
                if raw is None:
                    notes.append(f"{pinned.key}: not pushed: the store's git mirror of {redact(pinned.location)} "
                                 f"lacks commit {pinned.pin[:12]} (removed by gc?)")
                    continue
                path = scratch / "git.tar"
                write_git_tar(path, raw, entry / "tree")
            with open(path, "rb") as fh:
                backend.put(pinned.key, fh, os.fstat(fh.fileno()).st_size)
            uploaded.append(pinned.key)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return SourcesPushed(tuple(uploaded), present, tuple(notes))


def write_git_tar(dest: Path, commit: bytes, tree: Path) -> None:
    """``commit`` and ``tree``'s files as one tar, the same bytes for the same tree on every machine:
    sorted, mtime 0, owner 0, mode 0644 or 0755, symlinks as symlinks, no folder members."""
    with tarfile.open(dest, "w:", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(archives.tar_member("commit", len(commit), 0o644), io.BytesIO(commit))
        for rel, path in walk_tree(tree):
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                info = archives.tar_member(f"tree/{rel}", 0, 0o777)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                tar.addfile(info)
            else:
                mode = 0o755 if st.st_mode & 0o100 else 0o644
                with open(path, "rb") as fh:
                    tar.addfile(archives.tar_member(f"tree/{rel}", st.st_size, mode), fh)


def after_build(caches: Caches | None, store: Store, lock: Lock, built: Sequence[BuildSpec]) -> None:
    """The post-build hook for sources: those of the builds that ran (``built``), pushed to ``[cache] push``."""
    if caches is None or caches.config.push is None or not built:
        return
    try:
        pushed = push_sources(open_backend(caches.config.push), store, locked(lock, built))
    except (CacheError, UsageError) as exc:
        caches.notes.append(f"push to {redact(caches.config.push)}: {exc.message}")
        return
    caches.pushed += len(pushed.uploaded)
    caches.notes.extend(pushed.notes)


