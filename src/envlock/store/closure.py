"""The closure of a lock in the store: every entry a sync or a rebuild of it reads.

A lock names its wheels by sha256, its local builds by input digest, its sources by commit (or
tree digest) and patch digests; a build's record in the store (``builds/<key>/recipe.json``)
names its FetchContent inputs by commit. A build record's requirements (``build-requirements``:
its backend and tools, ``name==version --hash=sha256:...``) name the wheels a build installs by
sha256: those of them the store holds (a build, or ``export``, brought in the one for this
machine; the other hashes are the release's sdist and other platforms' wheels). Those, with the
lock's venv and its manifest, are the closure: what ``export`` carries and what ``gc`` keeps for
a root.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import StoreError
from envlock.model.lockfile import Lock
from envlock.store.store import Store

_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, order=True)
class EntryRef:
    """A store entry by kind and key: ``wheels/<sha256>``, ``builds/<key>``, ``sources/git-<commit>`` ..."""

    kind: str
    key: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.key}"


@dataclass(frozen=True)
class Closure:
    """The entries a lock needs (``needed``) and, of those, the ones the store holds (``present``)."""

    needed: frozenset[EntryRef]
    present: frozenset[EntryRef]

    @property
    def missing(self) -> tuple[EntryRef, ...]:
        return tuple(sorted(self.needed - self.present))


def mirror_key(url: str) -> str:
    """The ``git-mirrors/`` key of a git URL (as ``sources.mirror_path`` names it: without its password)."""
    from envlock.errors import redact

    return hashlib.sha256(redact(url).encode()).hexdigest()[:32]


def venv_key(install_digest: str) -> str:
    """The ``venvs/`` key of an install digest (as ``install.venv_entry`` names it)."""
    return install_digest.replace(":", "-")


def lock_closure(store: Store, lock: Lock, *, venv: bool = True) -> Closure:
    """Every store entry ``lock`` reaches, and which of them ``store`` holds.

    ``venv``: the lock's installed venv and its manifest too (kept by gc; never exported,
    a sync rebuilds it from the wheels and checks the digest).
    """
    needed: set[EntryRef] = {EntryRef("wheels", a.sha256) for p in lock.packages for a in p.wheels}
    for build in lock.builds.values():
        key = build.input_digest.removeprefix("sha256:")
        needed.add(EntryRef("builds", key))
        needed |= _fetchcontent(store, key)
        needed |= {EntryRef("wheels", sha) for line in (*build.requirements, *build.toolchain)
                   for sha in pinned_requirement(line).hashes if _has(store, EntryRef("wheels", sha))}
    for source in lock.sources.values():
        needed |= _source_entries(store, source.kind, source.location, source.commit, source.tree_digest,
                                  [(p.path, p.sha256) for p in source.patches])
    if venv:
        needed.add(EntryRef("venvs", venv_key(lock.install_digest())))
        needed |= {EntryRef("manifests", d) for d in _venv_digests(lock)}
    present = frozenset(ref for ref in needed if _has(store, ref))
    return Closure(frozenset(needed), present)


@dataclass(frozen=True)
class PinnedRequirement:
    """One line of a build's locked requirements: ``name==version --hash=sha256:H ...``."""

    name: str
    version: str
    hashes: tuple[str, ...]  # every file of that release uv accepted: sdist and wheels

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


def pinned_requirement(line: str) -> PinnedRequirement:
    """``line`` read (as ``build._compile`` writes it and a lock records it); hashes that are not sha256 dropped."""
    first, *rest = line.split() or [""]
    name, _, version = first.partition("==")
    hashes = tuple(h.removeprefix("--hash=sha256:") for h in rest if h.startswith("--hash=sha256:"))
    return PinnedRequirement(name, version.partition(";")[0], tuple(h for h in hashes if _HEX64.fullmatch(h)))


def _has(store: Store, ref: EntryRef) -> bool:
    try:
        return store.has(ref.kind, ref.key)
    except StoreError:  # a key no entry can have (a lock's odd digest) is simply absent
        return False


def _venv_digests(lock: Lock) -> list[str]:
    return [lock.venv_digest] if lock.venv_digest else []


def _fetchcontent(store: Store, build_key: str) -> set[EntryRef]:
    """The FetchContent checkouts (and their git mirrors) and unpacked archives a stored build's recipe names."""
    try:
        recipe = json.loads((store.path("builds", build_key) / "recipe.json").read_text(encoding="utf-8"))
        entries = recipe.get("fetchcontent", [])
        inputs = [(str(d["git"]), str(d["rev"])) for d in entries if "git" in d]
        archives = [str(d["sha256"]) for d in entries if "git" not in d]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()  # not in this store (a closure from elsewhere): nothing more to name
    return {ref for git, rev in inputs for ref in (EntryRef("sources", f"git-{rev}"),
                                                   EntryRef("git-mirrors", mirror_key(git)))
            } | {EntryRef("sources", f"archive-{sha256}") for sha256 in archives}


def _source_entries(store: Store, kind: str, location: str, commit: str | None, tree_digest: str | None,
                    patches: Iterable[tuple[str, str]]) -> set[EntryRef]:
    """A locked source's checkout or snapshot, its git mirror, and its patched tree."""
    out: set[EntryRef] = set()
    base: str | None = None
    if kind == "git" and commit:
        out |= {EntryRef("sources", f"git-{commit}"), EntryRef("git-mirrors", mirror_key(location))}
        try:
            base = (store.path("sources", f"git-{commit}") / "tree-digest").read_text().strip()
        except OSError:
            base = None
    elif kind == "path" and tree_digest:
        out.add(EntryRef("sources", f"path-{tree_digest.removeprefix('sha256:')}"))
        base = tree_digest
    listed = list(patches)
    if base is not None and listed:
        # As patchapply.apply_all keys a patched tree: the base digest and each patch's sha256.
        text = base + "\n" + "".join(f"{path} {sha}\n" for path, sha in listed)
        out.add(EntryRef("sources", f"patched-{hashlib.sha256(text.encode()).hexdigest()}"))
    return out


def entry_size(path: Path) -> int:
    """Bytes under ``path`` (files and links, not followed)."""
    if path.is_symlink() or not path.is_dir():
        try:
            return path.lstat().st_size
        except OSError:
            return 0
    total = 0
    for sub in path.rglob("*"):
        try:
            total += sub.lstat().st_size
        except OSError:
            continue
    return total
