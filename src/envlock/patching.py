"""The patch commands, as recipes: ``patch status``, ``patch edit`` and ``patch record``.

Each reads the env's spec, brings the source's tree into the store at its pin (or at
``--against REV``, an upgrade target) and hands it with the spec's patches to the stage that
does the work: ``patchapply.status``, ``patchedit.edit``, ``patchedit.record``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envlock import sources
from envlock.building import pinned_commit
from envlock.errors import EnvlockError, PatchError, UsageError
from envlock.lockfile import Lock, LockFile
from envlock.mirrors import MirrorOptions, Mirrors
from envlock.patchapply import PatchStatus, status
from envlock.patchedit import EditSession, RecordedPatch, edit, edited_env, edited_source, record
from envlock.patchfile import load_patches
from envlock.spec import SourceSpec, load_env_spec
from envlock.store import Store
from envlock.workspace import Workspace


@dataclass(frozen=True)
class PatchReport:
    """``patch status``: each source's patches in order, and the commit they were checked against."""

    env: str
    against: str | None
    sources: Mapping[str, tuple[PatchStatus, ...]]
    commits: Mapping[str, str | None]

    @property
    def conflicts(self) -> int:
        return sum(1 for st in self.sources.values() for s in st if s.state == "conflict")

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "against": self.against,
            "sources": {
                name: {"commit": self.commits.get(name), "patches": [s.to_dict() for s in st]}
                for name, st in sorted(self.sources.items())
            },
            "conflicts": self.conflicts,
        }


def patch_status(ws: Workspace, env: str, *, against: str | None = None,
                 asked: MirrorOptions | None = None) -> PatchReport:
    """Each source's patches against its pinned commit (or ``against``): applies / already-applied / conflict."""
    spec = load_env_spec(ws, env)
    lock = LockFile.read(ws.lock_path(env)).lock
    store = Store.open()
    out: dict[str, tuple[PatchStatus, ...]] = {}
    commits: dict[str, str | None] = {}
    mirrors = Mirrors.of(spec, asked, read_indexes=False)
    for name, src in sorted(spec.sources.items()):
        if not src.patches:
            continue
        prepared = _source_at(ws, store, name, src, against=against, lock=lock, mirrors=mirrors)
        commits[name] = prepared.commit
        out[name] = tuple(status(prepared.tree, load_patches(ws.root, src.patches)))
    return PatchReport(env, against, out, commits)


def patch_edit(ws: Workspace, env: str, source: str, workdir: Path, *, against: str | None = None) -> EditSession:
    """Check the patched tree of ``source`` out into ``workdir`` (one git commit per patch level).

    ``against``: another commit (an upgrade target); patches apply up to the first conflict,
    which ``patch_record(..., refresh=True)`` then rewrites from the user's edits.
    """
    spec = load_env_spec(ws, env)
    if source not in spec.sources:
        known = ", ".join(sorted(spec.sources)) or "none"
        raise UsageError(f"{spec.path}: no [sources.{source}]; sources: {known}")
    src = spec.sources[source]
    store = Store.open()
    # `patch edit` takes no --source: a mirror comes from ENVLOCK_SOURCE_<NAME> alone.
    prepared = _source_at(ws, store, source, src, against=against, lock=LockFile.read(ws.lock_path(env)).lock,
                          mirrors=Mirrors.of(spec, read_indexes=False), option=False)
    # A path source has no pin to go back to: its tree as it is now is what a patch must
    # be redone on, as for a new commit (record --refresh).
    return edit(source, prepared.tree, load_patches(ws.root, src.patches), workdir,
                stop_at_conflict=against is not None or src.git is None, env=env)


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
    recorded = record(workdir, patches_dir, current=current, subject=subject, why=why, upstream=upstream,
                      refresh=refresh, workspace_root=ws.root,
                      other_envs=() if refresh else _patches_of_other_envs(ws, spec.name, source))
    return replace(recorded, env=spec.name)


def _source_at(ws: Workspace, store: Store, name: str, src: SourceSpec, *, against: str | None, lock: Lock | None,
               mirrors: Mirrors, option: bool = True) -> sources.PreparedSource:
    """``src`` fetched (or snapshotted) into the store at ``against``, else at its pin.

    ``option``: whether the command takes ``--source`` (the mirror hint names it)."""
    commit: str | None
    if against is None:
        commit = pinned_commit(src, lock)
    elif src.git is None:
        raise UsageError(f"--against {against}: source {name!r} is a path source (no commits)")
    else:
        with mirrors.source_hint(name, src.git, option=option):
            commit = sources.resolve_rev(src.git, against, store=store, fetch_from=mirrors.sources.get(name))
    with mirrors.source_hint(name, src.git, option=option):
        return sources.prepare(src, store, ws.root, commit=commit, fetch_from=mirrors.sources.get(name))


def _patches_of_other_envs(ws: Workspace, env: str, source: str) -> list[Path]:
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
