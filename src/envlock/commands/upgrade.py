"""``envlock upgrade``: move a spec's nightlies, source revs or versions in place, relock, and report.

The recipe (``upgrade``): read the spec (its text and its value) and the lock it replaces; plan
the edits (``plan_upgrade``): each nightly index's new date (``latest`` read from the index), each
source's new commit (a branch or tag resolved through the store's git mirror), each version of a
``same-version`` set, applied to the spec's text by ``model.specmoves`` (the nightlies and versions)
and ``specedit`` (comments and layout kept); carry
the moved sources' patches to their new commits (``carry_patches``: today their status, and one that
does not apply stops the upgrade); relock the edited spec without writing
(``commands.lock.lock_spec``, ``write=False``); diff the two locks; and, unless ``--dry-run``, write the spec
and the lock together at the end (``_write_together``), restoring both on any failure. Nothing
before that last step writes into the workspace, so a failure part-way, or a dry run, leaves the
spec, the lock and the patches byte for byte as they were.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envlock.build import sources
from envlock.commands import lock as commands_lock
from envlock.commands import upgradereport
from envlock.commands.buildsession import pinned_commit
from envlock.commands.nightlies import list_nightlies
from envlock.errors import (
    EnvlockError,
    LockChangedError,
    LockError,
    PatchError,
    ResolveError,
    SpecError,
    UpgradeError,
    UsageError,
)
from envlock.model import specedit
from envlock.model.jsondoc import json_doc
from envlock.model.lockdiff import LockDiff
from envlock.model.lockfile import Lock, LockFile
from envlock.model.mirrors import MirrorOptions, Mirrors
from envlock.model.spec import EnvSpec, parse_spec, read_spec
from envlock.model.specedit import SpecChange
from envlock.model.specmoves import LATEST, NightlyMove, move_nightlies, move_versions
from envlock.model.targets import reported_note
from envlock.model.tomlio import load_toml
from envlock.patches.patchapply import PatchStatus, status
from envlock.patches.patchfile import load_patches
from envlock.progress import Progress
from envlock.resolution.nightly import target_words
from envlock.store.store import Store, replace_if_unchanged, write_atomic
from envlock.workspace import Workspace


@dataclass(frozen=True)
class UpgradeOptions:
    """What ``envlock upgrade`` is asked to move."""

    nightlies: Mapping[str, str] = field(default_factory=dict)  # index ("" = every nightly index) -> date | latest
    revs: Mapping[str, str] = field(default_factory=dict)  # source -> branch, tag or commit
    versions: Mapping[str, str] = field(default_factory=dict)  # package -> version or specifier
    dry_run: bool = False
    mirrors: MirrorOptions = field(default_factory=MirrorOptions)
    fix_renames: bool = False  # move each build upstream renamed (its tables and package entry) to its new name
    target: str | None = None  # of a spec of several targets, the one reported (None: this machine's)

    @classmethod
    def given(cls, nightly: Sequence[str], rev: Sequence[str], version: Sequence[str], dry_run: bool,
              mirrors: MirrorOptions, fix_renames: bool = False) -> UpgradeOptions:
        """The options from the command line's ``NAME=VALUE`` strings (a bare ``--nightly`` VALUE: every index)."""
        return cls(_pairs(nightly, "--nightly", "[INDEX=]DATE or [INDEX=]latest"),
                   _pairs(rev, "--rev", "SOURCE=REV (a spec source and a branch, tag or commit)"),
                   _pairs(version, "--version", "PKG=SPEC (a package and a version or specifier)"),
                   dry_run=dry_run, mirrors=mirrors, fix_renames=fix_renames)

    def command(self, env: str) -> str:
        """The command line these options were given as (for a fix to repeat it)."""
        words = [f"--nightly {i + '=' if i else ''}{v}" for i, v in sorted(self.nightlies.items())]
        words += [f"--rev {s}={r}" for s, r in sorted(self.revs.items())]
        words += [f"--version {p}={v}" for p, v in sorted(self.versions.items())]
        return " ".join(["envlock upgrade", env, *words])


def _pairs(pairs: Sequence[str], option: str, what: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if option == "--nightly" and not sep:
            name, value = "", pair
        elif not sep or not name or not value:
            raise UsageError(f"{option} {pair!r}: expected {what}")
        out[name] = value
    return out


@dataclass(frozen=True)
class SourceMove:
    """A git source moved to the commit a rev names now."""

    source: str
    old: str | None  # the commit the lock had (else the spec's rev)
    new: str  # full 40-hex commit
    rev: str  # as asked: a branch, a tag or a commit

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class UpgradePlan:
    """The spec's text before and after, and why: each value changed, each nightly index and source moved."""

    old_text: str
    new_text: str
    changes: tuple[SpecChange, ...]
    nightlies: tuple[NightlyMove, ...]
    sources: tuple[SourceMove, ...]
    renames: tuple[Rename, ...] = ()  # builds moved to the name upstream gave them (--fix-renames)
    notes: tuple[str, ...] = ()  # what the edits left for a person to check (a comment kept after a moved rev)

    @property
    def spec_changed(self) -> bool:
        return self.new_text != self.old_text


@dataclass(frozen=True)
class UpgradeResult:
    """What ``envlock upgrade`` did (or, dry, would do); doubles as its ``--json`` output."""

    env: str
    spec: Path
    lock: Path
    dry_run: bool
    written: bool  # the spec and the lock were written (never under --dry-run)
    plan: UpgradePlan
    patches: Mapping[str, tuple[PatchStatus, ...]]  # each moved source's patches at its new commit
    report: upgradereport.UpgradeReport  # the old lock against the new one (``envlock diff``'s report)
    lock_changed: bool  # the new lock's bytes differ from the old one's
    unbuilt: tuple[str, ...] = ()  # local builds the new lock has not built yet
    note: str = ""
    notes: tuple[str, ...] = ()  # the relock's guards: a dead exclude, an override that now wins, ...

    @property
    def diff(self) -> LockDiff:
        return self.report.diff

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env, "spec": str(self.spec), "lock": str(self.lock), "dry_run": self.dry_run,
            "written": self.written, "spec_changed": self.plan.spec_changed,
            "changes": [c.to_dict() for c in self.plan.changes],
            "nightlies": [m.to_dict() for m in self.plan.nightlies],
            "sources": [m.to_dict() for m in self.plan.sources],
            "renames": [r.to_dict() for r in self.plan.renames],
            "patches": {name: [s.to_dict() for s in st] for name, st in sorted(self.patches.items())},
            "diff": self.report.to_dict(), "lock_changed": self.lock_changed, "unbuilt": list(self.unbuilt),
            "note": self.note, "notes": [*self.plan.notes, *self.notes],
        }


def upgrade(ws: Workspace, env: str, options: UpgradeOptions, progress: Progress | None = None) -> UpgradeResult:
    """``envlock upgrade ENV``: plan the spec's edits, carry the patches, relock, diff, then write (unless dry).
    Every problem found on the way (patches that do not apply, builds upstream renamed, a resolution that
    fails) is gathered, the relock tried as the fixes would leave the spec, and all of them raised together."""
    if not (options.nightlies or options.revs or options.versions or options.fix_renames):
        raise UsageError(f"envlock upgrade {env}: nothing to move; expected --nightly DATE|latest, "
                         "--rev SOURCE=REV, --version PKG=SPEC or --fix-renames")
    spec_path, lock_path = ws.spec_path(env), ws.lock_path(env)
    spec, spec_bytes = read_spec(spec_path, name=env, root=ws.root)
    old_file = LockFile.read(lock_path)
    # Every target is relocked, so a machine of none of them upgrades too: the report is of the first, said so.
    old = old_file.lock_of(whole=True) if options.target is None else \
        Lock.from_toml(old_file.text or "", lock_path, options.target)
    if old is None:
        raise LockError(f"{ws.relative(lock_path)}: no lock of env {env!r} to upgrade from (missing, or not a lock); "
                        f"create it with `envlock lock {env}`")
    mirrors = Mirrors.of(spec, options.mirrors)
    store = Store.open()
    plan = plan_upgrade(ws, spec, spec_bytes.decode("utf-8"), old, options, mirrors, store)
    renames = find_renames(ws, _edited_spec(ws, env, spec_path, plan.new_text), plan, old, store, mirrors)
    renamed = _renamed(plan.new_text, renames, ws.relative(spec_path))
    problems: list[EnvlockError] = []
    if options.fix_renames:
        plan = replace(plan, new_text=renamed, renames=renames)
    else:
        problems += [r.error(ws.relative(spec_path), options.command(env)) for r in renames]
    new_spec = _edited_spec(ws, env, spec_path, plan.new_text)
    carried, stuck = carry_patches(ws, new_spec, plan.sources, store, mirrors)
    problems += stuck
    from envlock.cache.caches import Caches  # a hash-less index's wheels from the caches' signed URL records

    # A dry run writes nowhere, a cache neither; nor does a relock that only looks for more problems.
    caches = Caches.configured(ws, push=not (options.dry_run or problems))
    # With problems, the relock is a trial of the spec as their fixes would leave it (the builds renamed,
    # the patches that do not apply left out), for the problems it finds further on.
    trial = _trial_spec(ws, env, spec_path, renamed, stuck) if problems else new_spec
    try:
        relocked = commands_lock.lock_spec(ws, env, trial, mirrors, store,
                                           commands_lock.LockOptions(write=False, progress=progress, caches=caches,
                                                                     target=options.target))
    except EnvlockError as exc:
        if not problems:
            raise
        # No report to read them from: what upstream's CMake files no longer declare, from the store's mirrors.
        moves = {m.source: (m.old or "", m.new) for m in plan.sources}
        dropped = upgradereport.dropped_inputs(trial, moves, old, store)
        raise _stopped(ws, spec, options, [*problems, exc], dropped, stuck, renames) from None
    assert relocked.lock is not None  # lock_spec always returns the lock it made
    label = ws.relative(lock_path)
    report = upgradereport.upgrade_report(
        ws, old, relocked.lock, old_label=label, new_label=f"{label} ({'dry run' if options.dry_run else 'upgraded'})",
        store=store,
        # A moved source's commit range is read from the store's mirror, fetched as the move was.
        options=upgradereport.ReportOptions(fetch=bool(plan.sources), fetch_from=dict(mirrors.sources),
                                            mirrors=options.mirrors, old_spec=spec, new_spec=trial,
                                            planned_toolchains=relocked.planned_toolchains))
    if problems:  # what the report notes (an input upstream no longer declares) is said with them
        raise _stopped(ws, spec, options, problems, (*relocked.notes, *report.notes), stuck, renames)
    if not options.dry_run:
        _write_together(ws, env, [(spec_path, spec_bytes, plan.new_text.encode("utf-8")),
                                  (lock_path, old_file.data, relocked.lock.to_toml().encode("utf-8"))])
    return UpgradeResult(env=env, spec=spec_path, lock=lock_path, dry_run=options.dry_run,
                         written=not options.dry_run, plan=plan, patches=carried, report=report,
                         lock_changed=relocked.changed, unbuilt=relocked.lock.unbuilt(), note=relocked.note,
                         notes=(*relocked.notes, *(_elsewhere(relocked.lock) if options.target is None else ())))


def _elsewhere(lock: Lock) -> tuple[str, ...]:
    """The note of a report of a target this machine is not (none of the lock's runs here)."""
    note = reported_note(lock.target, lock.platform) if lock.target is not None else None
    return (note,) if note is not None else ()


@dataclass(frozen=True)
class _Editing:
    """What the edits of one upgrade read: the spec as it was, how messages name it, the lock it
    replaces, and where a source's rev is resolved."""

    spec: EnvSpec
    origin: str  # the spec's path, relative to the workspace
    old: Lock
    mirrors: Mirrors
    store: Store


def plan_upgrade(ws: Workspace, spec: EnvSpec, text: str, old: Lock, options: UpgradeOptions, mirrors: Mirrors,
                 store: Store) -> UpgradePlan:
    """The spec's text with every asked move applied, and what each changed. Reads indexes (for
    ``latest``) and git remotes (for a branch or tag); writes nothing into the workspace."""
    e = _Editing(spec, ws.relative(spec.path), old, mirrors, store)
    changes: list[SpecChange] = []
    newest = _newest(ws, spec, mirrors, store, e.origin) if LATEST in options.nightlies.values() else None
    edited, nightlies = move_nightlies(spec, e.origin, text, options.nightlies, newest, changes)
    notes: list[str] = []
    edited, moved = _rev_edits(e, edited, options.revs, changes, notes)
    edited = move_versions(spec, e.origin, edited, options.versions, changes)
    return UpgradePlan(old_text=text, new_text=edited, changes=tuple(changes), nightlies=nightlies, sources=moved,
                       notes=tuple(notes))


def _newest(ws: Workspace, spec: EnvSpec, mirrors: Mirrors, store: Store, origin: str) -> Callable[[str], str]:
    """The newest date each index lists with a wheel for the target of every nightly of it that shares
    its date (``envlock nightlies``' listing, read once, for ``--nightly latest``)."""
    listing = list_nightlies(ws, spec, mirrors, store=store)

    def newest(index: str) -> str:
        date = listing.newest_usable(index)
        if date is None:
            names = ", ".join(p.name for p in listing.packages if p.index == index and p.same_date)
            url = next(p.index_url for p in listing.packages if p.index == index)
            raise ResolveError(f"{origin}: --nightly {LATEST}: index {index!r} ({url}) lists no nightly date with a "
                               f"wheel for {target_words(spec.python, spec.platform)} of every one of {names} "
                               f"(`envlock nightlies {spec.name}` lists them)")
        return date

    return newest


def carry_patches(ws: Workspace, spec: EnvSpec, moves: Sequence[SourceMove], store: Store,
                  mirrors: Mirrors) -> tuple[dict[str, tuple[PatchStatus, ...]], list[PatchError]]:
    """Each moved source's patches checked at its new commit, and a ``PatchError`` for each source with a
    patch that does not apply there (a conflict, or already upstream), naming each, with its fix.

    The seam for carrying patches over by itself: ``envlock patch rebase`` (``commands.rebase``) does the
    3-way work in a work dir the user may have to finish; an upgrade that rebased here would hand
    the rewritten patch files to ``_write_together`` with the spec and the lock instead of stopping.
    """
    out: dict[str, tuple[PatchStatus, ...]] = {}
    stuck: list[PatchError] = []
    for move in moves:
        src = spec.sources[move.source]
        if not src.patches:
            continue
        with mirrors.source_hint(move.source, src.git):
            prepared = sources.prepare(src, store, ws.root, commit=move.new,
                                       fetch_from=mirrors.sources.get(move.source))
        out[move.source] = found = tuple(status(prepared.tree, load_patches(ws.root, src.patches)))
        if not (bad := [s for s in found if s.state != "applies"]):
            continue
        details = []
        for s in found:
            details.append(f"{s.state:16} {s.patch}" + (f"  -- {s.advice}" if s.advice else ""))
            details += [f"    {line}" for line in (s.failure.describe() if s.failure else ())]
        details.append(f"carry them with `envlock patch rebase {spec.name} {move.source} --to {move.rev}` "
                       "(3-way; it stops at a real conflict), then run the upgrade again")
        stuck.append(PatchError(f"{ws.relative(spec.path)}: sources.{move.source}: {len(bad)} of {len(found)} patches "
                                f"do not apply at {move.new} (--rev {move.source}={move.rev}); nothing was changed",
                                details=details))
    return out, stuck


# -- renamed builds and the problems gathered --------------------------------------


@dataclass(frozen=True)
class Rename:
    """A build whose project upstream gave another name: its spec tables and package entry move with it."""

    build: str
    project: str  # the name its pyproject.toml gives now (what the build must be named)
    where: str  # "kernel/pyproject.toml at 4d265c646f75"
    tables: tuple[str, ...]  # the spec's tables that move: builds.NAME, builds.NAME.fetchcontent, ...
    package: str | None  # the [packages] key that names the build

    def moves(self) -> list[str]:
        out = [f"[{t}] -> [{t.replace(f'builds.{self.build}', f'builds.{self.project}', 1)}]" for t in self.tables]
        if self.package is not None:
            out.append(f"packages.{self.package} -> packages.{self.project} = {{ build = \"{self.project}\" }}")
        return out

    def error(self, origin: str, command: str) -> SpecError:
        return SpecError(f"{origin}: builds.{self.build}: {self.where} names the project {self.project!r}: upstream "
                         f"renamed it, so the build, its package and every table under it move to that name",
                         details=[*self.moves(), f"fix: `{command} --fix-renames` moves them in one step (every "
                                  "comment kept)"])

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, omit=("tables", "package"), extra={"moves": self.moves()})


def find_renames(ws: Workspace, spec: EnvSpec, plan: UpgradePlan, old: Lock, store: Store,
                 mirrors: Mirrors) -> tuple[Rename, ...]:
    """Each build whose project (its ``pyproject.toml``'s ``[project] name``, unpatched) at the commit the
    upgrade moves its source to (else at its pin) is no longer the build's name."""
    moved = {m.source: m.new for m in plan.sources}
    out = []
    for name, b in sorted(spec.builds.items()):
        src = spec.sources.get(b.source)
        if src is None:
            continue
        commit = moved.get(b.source) or _pinned(src, old)
        with mirrors.source_hint(b.source, src.git):
            prepared = sources.prepare(src, store, ws.root, commit=commit, fetch_from=mirrors.sources.get(b.source))
        rel = f"{b.subdirectory.strip('/')}/pyproject.toml" if b.subdirectory else "pyproject.toml"
        project = _project_name(prepared.tree / rel)
        if project is None or canonicalize_name(project) == canonicalize_name(name):
            continue
        at = f" at {prepared.commit[:12]}" if prepared.commit else ""
        package = next((str(p.name) for p in spec.packages.values() if p.build == name), None)
        key = specedit.package_key(plan.new_text, package, origin=str(spec.path)) if package else None
        tables = tuple(specedit.build_tables(plan.new_text, name)) or (f"builds.{name}",)
        out.append(Rename(name, project, f"source {b.source}'s {rel}{at}", tables, key))
    return tuple(out)


def _pinned(src: Any, old: Lock) -> str | None:
    return pinned_commit(src, old)


def _project_name(path: Path) -> str | None:
    try:
        name = load_toml(path.read_text(encoding="utf-8"), path, SpecError).get("project", {}).get("name")
    except (OSError, UnicodeDecodeError, SpecError, AttributeError):
        return None
    return name if isinstance(name, str) and name else None


def _renamed(text: str, renames: Sequence[Rename], origin: str) -> str:
    for r in renames:
        text = specedit.rename_build(text, r.build, r.project, origin=origin)
    return text


def _trial_spec(ws: Workspace, env: str, path: Path, text: str, stuck: Sequence[PatchError]) -> EnvSpec:
    """The spec as the fixes of the problems found would leave it: ``text`` (the builds renamed), without the
    patches of the sources whose patches do not apply (they would apply once carried over)."""
    spec = _edited_spec(ws, env, path, text)
    unpatched = {m.group(1) for e in stuck if (m := re.search(r": sources\.([^:]+): ", e.message))}
    return replace(spec, sources={name: replace(src, patches=()) if name in unpatched else src
                                  for name, src in spec.sources.items()})


def _stopped(ws: Workspace, spec: EnvSpec, options: UpgradeOptions, problems: Sequence[EnvlockError],
             notes: Sequence[str], stuck: Sequence[PatchError], renames: Sequence[Rename]) -> EnvlockError:
    """The one error of an upgrade that found ``problems``: the problem itself when it is one, else an
    ``UpgradeError`` naming each with its fix; then how the rest was checked, and the relock's notes."""
    origin = ws.relative(spec.path)
    checked = [f"sources.{m.group(1)} without its patches" for e in stuck
               if (m := re.search(r": sources\.([^:]+): ", e.message))]
    checked += [f"builds.{r.build} as {r.project}" for r in renames if not options.fix_renames]
    tail = [f"the relock was tried with {' and '.join(checked)}, as the fixes would leave them"] if checked else []
    # What a stopped relock noted (an input the CMake files declare, and the spec not) is said once, last.
    said = [*(f"note: {n}" for n in notes), *(d for p in problems for d in p.details if d.startswith("note: "))]
    tail += list(dict.fromkeys(said))
    if len(problems) == 1:
        problem = problems[0].with_details(*tail)
        problem.details = tuple(d for d in problem.details if not d.startswith("note: ")) + tuple(
            d for d in tail if d.startswith("note: "))
        return problem
    details = []
    for i, problem in enumerate(problems, start=1):
        message = problem.message.removeprefix(f"{spec.path}: ").removeprefix(f"{origin}: ").removesuffix(
            "; nothing was changed")
        details += [f"{i}. {message}", *(f"   {line}" for line in problem.details if not line.startswith("note: "))]
    return UpgradeError(f"{origin}: {len(problems)} problems stop `{options.command(spec.name)}`; nothing was "
                        "changed", details=[*details, *tail])


# -- sources ---------------------------------------------------------------------


def _rev_edits(e: _Editing, text: str, revs: Mapping[str, str], changes: list[SpecChange],
               notes: list[str]) -> tuple[str, tuple[SourceMove, ...]]:
    """Each asked source's ``rev`` set to the full commit its REV names now, REV (a branch or tag)
    in a comment after it."""
    spec, origin, mirrors = e.spec, e.origin, e.mirrors
    moves = []
    for name, rev in sorted(revs.items()):
        src = spec.sources.get(name)
        if src is None:
            known = ", ".join(sorted(spec.sources)) or "none"
            raise UsageError(f"--rev {name}={rev}: {origin} has no [sources.{name}]; sources: {known}")
        if src.git is None:
            raise UsageError(f"--rev {name}={rev}: sources.{name} is a path source (no commits); expected a git source")
        if not rev.strip() or rev.startswith("-"):
            raise UsageError(f"--rev {name}={rev}: expected a branch, a tag or a commit")
        with mirrors.source_hint(name, src.git):
            commit = sources.resolve_rev(src.git, rev, store=e.store, fetch_from=mirrors.sources.get(name))
        # A branch or tag is said after the commit it named; a hash needs no comment (and an old
        # branch name there would now mislead). A comment of the user's own (more than a name) stays, as
        # `patch rebase` keeps it, and is noted: it may speak of the old commit.
        written = specedit.comment_of(text, ("sources", name, "rev"), origin=origin)
        comment: str | None = "" if commit.startswith(rev) else rev
        if len(written.split()) > 1:
            comment = specedit.KEEP
            named = "" if commit.startswith(rev) else f"; {rev} names {commit[:12]}"
            notes.append(f"sources.{name}.rev: the comment after it is kept as it was ({written}): check it still "
                         f"holds{named}")
        edited = specedit.set_rev(text, name, commit, origin=origin, comment=comment)
        if edited != text:  # else pinned there already, and said so
            changes.append(SpecChange(f"sources.{name}.rev", src.rev or "", commit, comment))
        text = edited
        locked = e.old.sources.get(name)
        moves.append(SourceMove(name, locked.commit if locked is not None else src.rev, commit, rev))
    return text, tuple(moves)


# -- the spec and the writes -------------------------------------------------------


def _edited_spec(ws: Workspace, env: str, path: Path, text: str) -> EnvSpec:
    """The edited text read as the spec (named by its file, which is not written yet)."""
    try:
        return parse_spec(load_toml(text, path, SpecError), name=env, origin=path, root=ws.root)
    except SpecError as exc:
        raise exc.with_details(f"(the spec as this upgrade would edit it; {ws.relative(path)} is unchanged)") from None


def _write_together(ws: Workspace, env: str, files: Sequence[tuple[Path, bytes | None, bytes]]) -> None:
    """Write each (path, bytes read, new bytes) only if its bytes are still those read; on any failure
    (another writer, a full disk, Ctrl-C) put back the ones written already and raise."""
    done: list[tuple[Path, bytes | None]] = []
    try:
        for path, before, after in files:
            if before == after:
                continue
            if not replace_if_unchanged(path, before, after):
                raise LockChangedError(f"{ws.relative(path)}: changed by another writer while this upgrade worked; "
                                       f"nothing written. Run `envlock upgrade {env} ...` again")
            done.append((path, before))
    except BaseException:
        for path, before in reversed(done):
            if before is None:
                path.unlink(missing_ok=True)
            else:
                write_atomic(path, before)
        raise
