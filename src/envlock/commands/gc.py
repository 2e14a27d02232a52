"""``envlock gc``: remove the store entries no root reaches, and say what that frees.

The recipe: under the store's writer lock (``Store.collecting``: no sync runs beside it),
gather the roots (``_roots``: each env's current generation and its newest N, the workspace's
lock files, the locks committed in its git history and its tags, the pins), take the union of
their closures (``closure.lock_closure``: wheels, builds, sources and their git mirrors, the
venv and its manifest) and the unpacked toolchains their builds record (``_toolchains``), plan
what falls outside it (generations past the N newest, entries, uv-cache archives no kept venv
links to, with the uv-cache entries that name them) with the bytes it frees, then remove each in
one step: renamed under ``tmp/`` (which the next store open clears of a killed gc's litter), then
deleted. A gc killed at any point leaves a store whose roots are all whole: only what no root
reaches is ever renamed away, generations first, the entries they named after. Last, the inode
hash cache keeps only the entries of files the store still holds (``inodehashes.drop_gone``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envlock import runner
from envlock.build import toolchain
from envlock.commands.pin import pinned_locks
from envlock.errors import EnvlockError, UsageError
from envlock.install import generations, uvcache
from envlock.install.inodehashes import drop_gone
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Lock
from envlock.store import noop
from envlock.store.closure import EntryRef, lock_closure, venv_key
from envlock.store.store import GC_KINDS, Store
from envlock.store.trees import file_inodes
from envlock.workspace import Workspace

KEEP_GIT = ("all", "tags", "none")
UV_ARCHIVES = uvcache.UV_ARCHIVES


@dataclass(frozen=True)
class GcOptions:
    """What ``envlock gc`` is asked: a dry run or not, and how many generations and how much git history stay roots."""

    dry_run: bool = False
    keep_generations: int = 3  # per env, the newest N (the current one always)
    keep_git: str = "all"  # all: commits down to git_depth and tags; tags: tags only; none
    git_depth: int = 50  # commits of history (that changed locks/) whose locks are roots


@dataclass(frozen=True)
class Root:
    """A gc root: its kind (a generation, a workspace lock, a lock in git history, a pin) and which one."""

    kind: str  # "generation", "workspace", "git", "pin"
    label: str

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class Usage:
    """What the store holds: its entry count and the bytes it takes (uv cache, generations and records too)."""

    entries: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class GcReport:
    """What gc found and removed (or, ``dry_run``, would remove); doubles as its ``--json``."""

    dry_run: bool
    roots: tuple[Root, ...]
    before: Usage
    after: Usage  # dry run: what the store would hold after
    removed: tuple[str, ...]  # "kind/key" of each entry (and uv-cache/archive-v0/<id>)
    generations: tuple[str, ...]  # "ENV/N" of each generation removed
    freed: int  # bytes
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class _Plan:
    """What gc is to remove (``_plan``, nothing written yet): generations, entries, uv-cache archives and entries,
    records, with the roots and the entries they keep."""

    roots: tuple[Root, ...]
    keep: frozenset[EntryRef]
    generations: tuple[tuple[str, int], ...]  # (env, number) to remove
    entries: tuple[EntryRef, ...]  # to remove, in removal order
    archives: tuple[Path, ...]  # uv-cache archives to remove
    notes: tuple[str, ...]
    records: tuple[Path, ...] = ()  # listings/ and guards/ records to remove (metadata, read again when needed)
    # uv-cache wheel entries naming an archive removed (or gone already): removed before the archives
    uv_entries: tuple[uvcache.UvCacheEntry, ...] = ()


def gc(ws: Workspace | None, options: GcOptions, on_wait: Callable[[], None] | None = None) -> GcReport:
    """Collect the store (``options.dry_run``: only say what would go); ``on_wait`` is called when
    a running sync holds the store's writer lock (gc waits for it)."""
    problems = []  # every bad option, each with the value given
    if options.keep_git not in KEEP_GIT:
        problems.append(f"--keep-git {options.keep_git}: expected one of {', '.join(KEEP_GIT)}")
    if options.keep_generations < 1:
        problems.append(f"--keep-generations {options.keep_generations}: expected 1 or more "
                        "(the current generation is always kept)")
    if options.git_depth < 0:
        problems.append(f"--git-depth {options.git_depth}: expected 0 or more")
    if problems:
        raise UsageError("; ".join(problems))
    store = Store.open()
    with store.collecting(on_wait):
        plan = _plan(ws, store, options)
        sizes = _Sizes(store)
        before = Usage(sizes.entry_count, sizes.total())
        doomed = [store.path(r.kind, r.key) for r in plan.entries] + list(plan.archives) + list(plan.records)
        doomed += [generations.env_dir(store, env) / str(n) for env, n in plan.generations]
        left = sizes.left_after(doomed)
        freed = sizes.bytes_except(left)
        if not options.dry_run:
            _carry_out(store, plan)
            after_sizes = _Sizes(store)
            after = Usage(after_sizes.entry_count, after_sizes.total())
            freed = max(before.bytes - after.bytes, 0)
            hashes = drop_gone(store.hash_cache, after_sizes.left_after(()) | _skeleton_files(store))
        else:
            after = Usage(before.entries - len(plan.entries), before.bytes - freed)
            hashes = drop_gone(store.hash_cache, left | _skeleton_files(store), dry_run=True)
    notes = plan.notes + ((f"{hashes} inode hash cache entries of files no longer in the store "
                           f"{'would be' if options.dry_run else 'were'} dropped (every warm sync loads them)",)
                          if hashes else ())
    return GcReport(options.dry_run, plan.roots, before, after,
                    tuple(str(r) for r in plan.entries) + tuple(f"uv-cache/{UV_ARCHIVES}/{p.name}"
                                                               for p in plan.archives),
                    tuple(f"{env}/{n}" for env, n in plan.generations), freed, notes)


def _plan(ws: Workspace | None, store: Store, options: GcOptions) -> _Plan:
    """Roots, what they keep, and what falls outside (no writes)."""
    notes: list[str] = []
    roots: list[Root] = []
    keep: set[EntryRef] = set()
    drop_gens: list[tuple[str, int]] = []
    locks: list[Lock] = []
    for root, lock, extra in _generation_roots(store, options.keep_generations, drop_gens):
        roots.append(root)
        keep |= extra
        if lock is not None:
            keep |= lock_closure(store, lock).needed
            locks.append(lock)
    for root, lock in [*_workspace_roots(ws, options, notes), *_pin_roots(store)]:
        roots.append(root)
        keep |= lock_closure(store, lock).needed
        locks.append(lock)
    keep |= _toolchains(store, locks)
    entries = [EntryRef(kind, key) for kind, key, _ in store.entries(_REMOVAL_ORDER)
               if EntryRef(kind, key) not in keep]
    kept_venvs = [store.path("venvs", r.key) for r in keep if r.kind == "venvs" and store.has("venvs", r.key)]
    records = _stale_records(store, keep)
    if records:
        notes.append(f"{len(records)} wheel file lists, guard results and venv hints of no kept lock "
                     f"{'would be' if options.dry_run else 'were'} removed too (read again when a lock needs them)")
    archives = tuple(_unlinked_archives(store, kept_venvs))
    doomed = {a.name for a in archives}
    # uv reads an entry's archive without looking: one left naming a removed archive would fail
    # every later install of its wheel. Gone with it (uv unpacks the wheel again when asked).
    uv_entries = tuple(e for e in uvcache.uv_cache_entries(store) if e.gone is not None or e.names_any(doomed))
    return _Plan(tuple(roots), frozenset(keep), tuple(drop_gens), tuple(entries), archives, tuple(notes), records,
                 uv_entries)


def _toolchains(store: Store, locks: Iterable[Lock]) -> set[EntryRef]:
    """The unpacked toolchains (``toolchains/<digest>``) a build of ``locks`` records: made of one
    stored wheel of each of its locked toolchain lines. (Not in a lock's closure: ``export`` carries
    the wheels, and a toolchain is unpacked again from them.)"""
    recorded = {tuple(b.toolchain) for lock in locks for b in lock.builds.values() if b.toolchain}
    return {EntryRef("toolchains", key) for key, wheels in toolchain.in_store(store).items()
            if wheels is not None and any(toolchain.made_from(wheels, lines) for lines in recorded)}


def _stale_records(store: Store, keep: Iterable[EntryRef]) -> tuple[Path, ...]:
    """The store's metadata no kept lock needs: ``listings/<sha256>.json`` of a wheel no root keeps
    (an index-only wheel a kept lock names is kept too: the closure names every locked sha256), every
    ``guards/`` result (keyed by a whole set of wheels; the next lock checks its set again, from the
    kept listings), and each hint naming the venv a lock's bytes were synced to (``store.noop``) when
    that venv is not kept."""
    keep = set(keep)
    wheels = {r.key for r in keep if r.kind == "wheels"}
    listings = store.root / "listings"
    stale = sorted(p for p in listings.glob("*.json") if p.stem not in wheels) if listings.is_dir() else []
    venvs = {r.key for r in keep if r.kind == "venvs"}
    hints = Path(noop.venvs_of_locks(str(store.home)))
    stale += sorted(p for p in (hints.iterdir() if hints.is_dir() else ())  # and a killed write's litter
                    if p.name.endswith(".tmp") or noop.hinted_entry(str(p)) not in venvs)
    return tuple(stale) + tuple(sorted((store.root / "guards").glob("*.json")))


#: Venvs (and their manifests) before what they were built from: a gc killed between two
#: removals never leaves a kept thing naming a removed one.
_REMOVAL_ORDER = ("venvs", "manifests", "builds", "toolchains", "sources", "git-mirrors", "wheels")
assert set(_REMOVAL_ORDER) == set(GC_KINDS)


def _generation_roots(store: Store, keep: int, drop: list[tuple[str, int]]
                      ) -> Iterator[tuple[Root, Lock | None, set[EntryRef]]]:
    """Each env's current generation and its ``keep`` newest; the others go into ``drop``."""
    envs = store.root / "envs"
    for folder in sorted(envs.iterdir()) if envs.is_dir() else ():
        try:
            gens = generations.list_generations(store, folder.name)
        except UsageError:
            continue  # not an env's folder
        cur = generations.current_number(store, folder.name)
        newest = {g.number for g in gens[-keep:]}
        for gen in gens:
            if gen.number != cur and gen.number not in newest:
                drop.append((gen.env, gen.number))
                continue
            extra = {EntryRef("venvs", venv_key(gen.install_digest)), EntryRef("manifests", gen.venv_digest)}
            yield Root("generation", f"{gen.env}/{gen.number}" + (" (current)" if gen.number == cur else "")), \
                _read_lock(gen.lock_copy), extra


def _read_lock(path: Path) -> Lock | None:
    try:
        return Lock.every_target(path.read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError, EnvlockError):
        return None


def _pin_roots(store: Store) -> Iterator[tuple[Root, Lock]]:
    for pin, lock in pinned_locks(store):
        yield Root("pin", f"{pin.env}: {pin.label}"), lock


def _workspace_roots(ws: Workspace | None, options: GcOptions, notes: list[str]) -> Iterator[tuple[Root, Lock]]:
    """The workspace's lock files, and the locks its git history holds (as ``--keep-git`` says)."""
    if ws is None or not (ws.root / "locks").is_dir():
        return
    for path in sorted((ws.root / "locks").glob("pylock.*.toml")):
        if (lock := _read_lock(path)) is not None:
            yield Root("workspace", ws.relative(path)), lock
    if options.keep_git == "none":
        return
    top = runner.git(["rev-parse", "--show-toplevel"], cwd=ws.root)
    if not top.ok:
        notes.append(f"{ws.root} is not in a git repository: no lock of its history is a root")
        return
    repo = Path(top.stdout.strip())
    prefix = (ws.root / "locks").resolve().relative_to(repo.resolve()).as_posix()
    seen: set[str] = set()
    for rev, label in _git_revisions(repo, prefix, options):
        listing = runner.git(["ls-tree", "-r", rev, "--", prefix + "/"], cwd=repo)
        for line in listing.stdout.splitlines() if listing.ok else ():
            meta, _, name = line.partition("\t")
            blob = meta.split()[-1]
            if not Path(name).name.startswith("pylock.") or not name.endswith(".toml") or blob in seen:
                continue
            seen.add(blob)
            shown = runner.git(["cat-file", "blob", blob], cwd=repo)
            try:
                lock = Lock.every_target(shown.stdout, f"{name}@{label}")
            except EnvlockError:
                continue
            yield Root("git", f"{name}@{label}"), lock


def _git_revisions(repo: Path, prefix: str, options: GcOptions) -> list[tuple[str, str]]:
    """(revision, label): the tags, and with ``all`` the commits down to ``git_depth`` that changed locks/."""
    out: list[tuple[str, str]] = []
    if options.keep_git == "all" and options.git_depth:
        log = runner.git(["rev-list", f"--max-count={options.git_depth}", "HEAD", "--", prefix + "/"], cwd=repo)
        out += [(rev, rev[:12]) for rev in log.stdout.split()] if log.ok else []
    tags = runner.git(["for-each-ref", "--format=%(refname:short)", "refs/tags"], cwd=repo)
    out += [(f"refs/tags/{t}", t) for t in tags.stdout.split()] if tags.ok else []
    return out


def _skeleton_files(store: Store) -> set[tuple[int, int]]:
    """(device, inode) of each file of the venv skeletons (``skeletons/``, which gc leaves: new venvs link them)."""
    return set(file_inodes(store.root / "skeletons"))


def _unlinked_archives(store: Store, kept_venvs: Iterable[Path]) -> list[Path]:
    """uv-cache archives none of whose files a kept venv links to (venv files are hard links into them)."""
    archives = store.root / "uv-cache" / UV_ARCHIVES
    if not archives.is_dir():
        return []
    linked = {ino for venv in kept_venvs for ino in file_inodes(venv)}
    return [a for a in sorted(archives.iterdir()) if a.is_dir() and not (set(file_inodes(a)) & linked)]



class _Sizes:
    """Bytes of the store's entries, generations and uv cache, each inode counted once (venv files
    are hard links into uv's cache; a wheel's second name links its first)."""

    def __init__(self, store: Store) -> None:
        self._owners: dict[tuple[int, int], set[str]] = {}
        self._size: dict[tuple[int, int], int] = {}
        self.entry_count = 0
        for _kind, _key, path in store.entries(_REMOVAL_ORDER):
            self.entry_count += 1
            self._add(path)
        for folder in ("uv-cache", "envs", "listings", "guards"):
            self._add(store.root / folder)

    def _add(self, top: Path) -> None:
        if top.is_file():  # a manifests/ entry is one file
            st = top.lstat()
            self._size[(st.st_dev, st.st_ino)] = st.st_size
            self._owners.setdefault((st.st_dev, st.st_ino), set()).add(str(top))
            return
        for dirpath, dirs, files in os.walk(top):
            for name in [*files, *dirs]:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                self._size[key] = st.st_size
                self._owners.setdefault(key, set()).add(path)

    def total(self) -> int:
        return sum(self._size.values())

    def left_after(self, doomed: Iterable[Path]) -> set[tuple[int, int]]:
        """The (device, inode) of each file that keeps a name if every path under ``doomed`` went."""
        exact = {str(p) for p in doomed}
        prefixes = tuple(str(p) + os.sep for p in doomed)
        return {key for key, names in self._owners.items()
                if not all(n in exact or n.startswith(prefixes) for n in names)}

    def bytes_except(self, left: set[tuple[int, int]]) -> int:
        """Bytes of every inode but those in ``left``: what goes with the paths ``left_after`` was given."""
        return sum(size for key, size in self._size.items() if key not in left)


def _carry_out(store: Store, plan: _Plan) -> None:
    """Remove the planned generations, entries and archives, each in one rename."""
    by_env: dict[str, list[int]] = {}
    for env, n in plan.generations:
        by_env.setdefault(env, []).append(n)
    for env, numbers in by_env.items():
        with generations.env_lock(store, env):
            cur = generations.current_number(store, env)
            for n in numbers:
                if n != cur:  # a rollback since the plan made it current: kept
                    store.remove_tree(generations.env_dir(store, env) / str(n))
    for ref in plan.entries:
        store.remove_entry(ref.kind, ref.key)
    for record in plan.records:
        record.unlink(missing_ok=True)
    if plan.archives or plan.uv_entries:
        with store.locked(uvcache.UV_CACHE_LOCK):  # as uvcache.clear_uv_cache: not under a running install
            # The entries first: a gc killed between leaves an archive no entry names (the next gc
            # takes it), never an entry naming no archive.
            uvcache.drop_uv_cache_entries(plan.uv_entries)
            for archive in plan.archives:
                store.remove_tree(archive)
