"""The patch commands, as recipes: ``patch status``, ``patch edit`` and ``patch record``
(``patch rebase`` is ``commands.rebase``).

Each reads the env's spec, brings the source's tree into the store at its pin (and at
``--against REV``, an upgrade target) and hands it with the spec's patches to the stage that
does the work: ``patchapply.status`` (with what upstream did between the two commits, from
``upstream``), ``patchedit.edit``, ``patchedit.record``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envlock.build import sources
from envlock.commands.buildsession import pinned_commit
from envlock.errors import EnvlockError, PatchError, UsageError
from envlock.model.lockfile import Lock, LockFile
from envlock.model.mirrors import MirrorOptions, Mirrors
from envlock.model.spec import SourceSpec, load_env_spec
from envlock.patches.patchapply import HunkFailure, PatchStatus, TreeView, status
from envlock.patches.patchedit import (
    EditOptions,
    EditSession,
    PatchHeader,
    RecordedPatch,
    edit,
    edited_env,
    edited_source,
    record,
)
from envlock.patches.patchfile import PatchFile, load_patches
from envlock.patches.upstream import UpstreamCommit, commits_touching, map_line
from envlock.store.store import Store
from envlock.workspace import Workspace


@dataclass(frozen=True)
class PatchCheck:
    """One patch's status, and the upstream commits between the pin and ``--against REV`` that
    touch its files (newest first)."""

    status: PatchStatus
    commits: tuple[UpstreamCommit, ...] = ()

    @property
    def touch(self) -> str | None:
        """``touched`` (a commit changes lines within its hunks), ``same-file`` (only elsewhere in
        its files) or None (no commit touches its files)."""
        if any(c.touch == "touched" for c in self.commits):
            return "touched"
        return "same-file" if self.commits else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.status.to_dict(), "touch": self.touch, "commits": [c.to_dict() for c in self.commits]}

    def describe_upstream(self) -> list[str]:
        """The patch's ``Upstream:`` line and the commits that touch its files, as lines to show."""
        lines = [f"Upstream: {self.status.upstream}"] if self.status.upstream else []
        if not self.commits:
            return [*lines, "no upstream commit touches its files"]
        n = len(self.commits)
        touched = sum(1 for c in self.commits if c.touch == "touched")
        head = f"{n} upstream commit{'' if n == 1 else 's'} touch{'es' if n == 1 else ''}"
        if touched and touched < n:  # each counted where it touches: the list says which is which
            lines.append(f"{head} its files: {touched} within its hunks, {n - touched} only elsewhere in them:")
        else:
            lines.append(f"{head} {'lines within its hunks' if touched else 'its files, not its hunks'}:")
        return lines + [f"  {c.commit[:12]} {c.touch:9} {c.subject}" for c in self.commits]


@dataclass(frozen=True)
class PatchReport:
    """``patch status``: each source's patches in order, and the commit they were checked against."""

    env: str
    against: str | None
    sources: Mapping[str, tuple[PatchCheck, ...]]
    commits: Mapping[str, str | None]
    pins: Mapping[str, str | None]

    @property
    def conflicts(self) -> int:
        return sum(1 for st in self.sources.values() for s in st if s.status.state == "conflict")

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "against": self.against,
            "sources": {
                name: {"commit": self.commits.get(name), "pin": self.pins.get(name),
                       "patches": [s.to_dict() for s in st]}
                for name, st in sorted(self.sources.items())
            },
            "conflicts": self.conflicts,
        }


def patch_status(ws: Workspace, env: str, *, against: str | None = None,
                 asked: MirrorOptions | None = None) -> PatchReport:
    """Each source's patches against its pinned commit (or ``against``): applies / already-applied /
    conflict; against another commit, merged 3-way as a rebase would, with the upstream commits
    that touch each patch's files."""
    spec = load_env_spec(ws, env)
    # Of a lock of several targets, any one: a source is pinned alike on every target.
    lock = LockFile.read(ws.lock_path(env)).lock_of(whole=True)
    store = Store.open()
    out: dict[str, tuple[PatchCheck, ...]] = {}
    commits: dict[str, str | None] = {}
    pins: dict[str, str | None] = {}
    mirrors = Mirrors.of(spec, asked, read_indexes=bool(asked and asked.indexes))  # --index: checked, unused
    reader = SourceReader(ws, store, lock, mirrors)
    for name, src in sorted(spec.sources.items()):
        if not src.patches:
            continue
        patches = load_patches(ws.root, src.patches)
        if against is not None and src.git is None:
            raise UsageError(f"--against {against}: source {name!r} is a path source (no commits)")
        pinned = reader.at(name, src)
        pins[name] = commits[name] = pinned.commit
        if against is None:
            out[name] = tuple(PatchCheck(s) for s in status(pinned.tree, patches))
            continue
        target = reader.at(name, src, against=against)
        commits[name] = target.commit
        checked = status(target.tree, patches, base=pinned.tree, label=against)
        history = _history(store, name, src, pinned, target, patches, mirrors)
        out[name] = tuple(PatchCheck(s, history[p.label]) for s, p in zip(checked, patches, strict=True))
    return PatchReport(env, against, out, commits, pins)


def _history(store: Store, name: str, src: SourceSpec, pinned: sources.PreparedSource,
             target: sources.PreparedSource, patches: Sequence[PatchFile],
             mirrors: Mirrors) -> dict[str, tuple[UpstreamCommit, ...]]:
    """Per patch, the commits between the pin and the target that touch its files, and whether
    they touch the lines of its hunks (as at the pin: the patches before it are mapped out)."""
    assert src.git is not None and pinned.commit is not None and target.commit is not None
    fetch_from = mirrors.sources.get(name)
    with mirrors.source_hint(name, src.git):
        # Both commits are in the mirror (cheap when they are); one made for a pin is shallow.
        mirror = sources.fetch_commit(store, src.git, pinned.commit, fetch_from=fetch_from)
        sources.fetch_commit(store, src.git, target.commit, fetch_from=fetch_from)
        if (mirror / "shallow").exists():
            mirror = sources.fetch_history(store, src.git, fetch_from=fetch_from)
    recorded = TreeView(pinned.tree)
    out = {}
    for patch in patches:
        ranges: dict[str, list[tuple[int, int]]] = {}
        for fp in patch.files:
            if fp.old_path is None:
                ranges[fp.path] = []  # a new file: any commit on it touches the patch
                continue
            spans = [(max(h.old_start, 1), h.old_start + max(h.old_count, 1) - 1) for h in fp.hunks]
            at_pin, now = TreeView(pinned.tree).read(fp.old_path), recorded.read(fp.old_path)
            if at_pin is not None and now is not None and at_pin[0] != now[0]:  # an earlier patch moved them
                spans = _mapped(now[0], at_pin[0], spans)
            ranges[fp.old_path] = spans
        out[patch.label] = tuple(commits_touching(mirror, pinned.commit, target.commit, ranges))
        applied = recorded.try_apply(patch)
        if not isinstance(applied, HunkFailure):
            recorded.changes.update(applied.changes)
    return out


def _mapped(old: bytes, new: bytes, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Line ranges of ``old`` as the same lines of ``new`` (a diff of the two, as ``-U0`` hunks)."""
    import difflib

    matcher = difflib.SequenceMatcher(None, old.split(b"\n"), new.split(b"\n"), autojunk=False)
    hunks = [(i1 + 1 if i2 > i1 else i1, i2 - i1, j1 + 1 if j2 > j1 else j1, j2 - j1)
             for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]
    return [(map_line(hunks, a, end=False), map_line(hunks, b, end=True)) for a, b in spans]


def patch_edit(ws: Workspace, env: str, source: str, workdir: Path, *, against: str | None = None,
               asked: MirrorOptions | None = None) -> EditSession:
    """Check the patched tree of ``source`` out into ``workdir`` (one git commit per patch level).

    ``against``: another commit (an upgrade target); patches apply up to the first conflict,
    which is applied as far as it goes (3-way against the pin, conflict markers where it
    conflicts) and which ``patch_record(..., refresh=True)`` then rewrites from the user's edits.
    """
    spec = load_env_spec(ws, env)
    if source not in spec.sources:
        known = ", ".join(sorted(spec.sources)) or "none"
        raise UsageError(f"{spec.path}: no [sources.{source}]; sources: {known}")
    src = spec.sources[source]
    store = Store.open()
    # Of a lock of several targets, any one: a source is pinned alike on every target.
    lock = LockFile.read(ws.lock_path(env)).lock_of(whole=True)
    mirrors = Mirrors.of(spec, asked, read_indexes=bool(asked and asked.indexes))  # --index: checked, unused
    reader = SourceReader(ws, store, lock, mirrors)
    prepared = reader.at(source, src, against=against)
    base = None
    if against is not None:  # the tree the patches were recorded on: what a conflict is merged against
        base = reader.at(source, src).tree
    # A path source has no pin to go back to: its tree as it is now is what a patch must
    # be redone on, as for a new commit (record --refresh).
    session = edit(source, prepared.tree, load_patches(ws.root, src.patches), workdir, EditOptions(
        stop_at_conflict=against is not None or src.git is None, env=env, base=base, label=against or "upstream",
        commit=prepared.commit))
    ignore_in_git(ws.root, workdir)
    return session


def ignore_in_git(root: Path, workdir: Path) -> bool:
    """Keep ``workdir`` out of ``git status`` when it lies in the git work tree of the workspace
    ``root`` (``./SOURCE-edit``): a line in the repository's ``info/exclude``, which is local and
    never committed. True if it is excluded (now or before)."""
    from envlock import runner
    from envlock.store.store import write_atomic

    found = runner.git(["rev-parse", "--show-toplevel", "--git-path", "info/exclude"], cwd=root)
    if not found.ok or len(found.stdout.splitlines()) != 2:
        return False  # not a git checkout: nothing lists it
    top, exclude = (Path(line) for line in found.stdout.splitlines())
    exclude = root / exclude  # relative to where git ran, unless absolute
    try:
        rel = workdir.resolve().relative_to(top.resolve())
    except ValueError:
        return False  # outside the work tree: git does not see it
    line = f"/{rel.as_posix()}/"
    text = exclude.read_text(encoding="utf-8") if exclude.is_file() else ""
    if line not in text.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(exclude, (text + ("\n" if text and not text.endswith("\n") else "") + line + "\n").encode())
    return True


def patch_record(ws: Workspace, workdir: Path, *, subject: str | None, why: str | None, upstream: str | None,
                 refresh: bool = False) -> RecordedPatch:
    """Write the edits in ``workdir`` as ``patches/SOURCE/NNNN-title.patch`` (add it to the spec's list),
    or with ``refresh`` over the first pending patch that did not apply to the new commit; only while
    the spec's patches of the source are still those the work dir was made on."""
    try:
        source = edited_source(workdir)
    except PatchError as exc:  # the command was pointed at another folder: bad input
        raise UsageError(exc.message) from None
    spec = load_env_spec(ws, edited_env(workdir))
    if source not in spec.sources:
        raise PatchError(f"{workdir}: made for [sources.{source}], which {ws.relative(spec.path)} no longer has; "
                         "expected the source the work dir was made for")
    current = tuple(p.locked() for p in load_patches(ws.root, spec.sources[source].patches))
    patches_dir = ws.root / "patches" / source
    # A refresh rewrites a patch in place: no new number for other envs' patches to stand before.
    recorded = record(workdir, patches_dir, PatchHeader(subject, why, upstream), current=current,
                      refresh=refresh, workspace_root=ws.root,
                      other_envs=() if refresh else patches_of_other_envs(ws, spec.name, source))
    if refresh:
        return replace(recorded, env=spec.name)  # a refresh carries on there (the next patch, a new one)
    # Done with it: the new patch holds every change of the work dir (record staged them all and
    # refuses leftovers), and the next `patch edit` makes a new one where this was.
    import shutil

    shutil.rmtree(workdir)
    return replace(recorded, env=spec.name, removed=True)


@dataclass(frozen=True)
class SourceReader:
    """Where the patch commands read a source's tree: the workspace (a path source), the store, the
    lock whose pin is taken (None: the spec's rev alone), and the mirrors git is fetched from."""

    ws: Workspace
    store: Store
    lock: Lock | None
    mirrors: Mirrors

    def at(self, name: str, src: SourceSpec, *, against: str | None = None,
           commit: str | None = None) -> sources.PreparedSource:
        """``src`` fetched (or snapshotted) into the store at ``commit`` or ``against``, else at its pin."""
        mirrors, store = self.mirrors, self.store
        if commit is None and against is None:
            commit = pinned_commit(src, self.lock)
        elif commit is None and src.git is None:
            raise UsageError(f"--against {against}: source {name!r} is a path source (no commits)")
        elif commit is None:
            assert against is not None and src.git is not None
            with mirrors.source_hint(name, src.git):
                commit = sources.resolve_rev(src.git, against, store=store, fetch_from=mirrors.sources.get(name))
        with mirrors.source_hint(name, src.git):
            return sources.prepare(src, store, self.ws.root, commit=commit, fetch_from=mirrors.sources.get(name))


def patches_of_other_envs(ws: Workspace, env: str, source: str) -> list[Path]:
    """The patches of source ``source`` that the workspace's other envs list (patches/SOURCE/
    is the source's, shared by every env that builds it). A spec that does not read lists none."""
    found = []
    for other in ws.envs():
        if other == env:
            continue
        try:
            spec = load_env_spec(ws, other, check_paths=False)
        except EnvlockError:
            continue
        if source in spec.sources:
            found += [ws.root / rel for rel in spec.sources[source].patches]
    return found
