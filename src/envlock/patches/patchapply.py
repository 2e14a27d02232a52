"""Applying patches: strict, all-or-nothing, contained; and each patch's status against a tree.

envlock applies patches with its own applier rather than ``git apply`` so that a failure can
name the patch, the file and the hunk and show the expected lines next to the ones actually there.
Strict and contained, hunk by hunk, on a ``TreeView`` (``patches.treeview``); all-or-nothing here:
patches are applied to an in-memory view of the tree, and only when every patch applied is the
result written, into a temp copy renamed into the store (``apply_all``). A patch that conflicts is
also tried 3-way against the tree it was recorded on (``patches.patchmerge``), for its status.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.errors import PatchError
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import LockedPatch
from envlock.patches.patchfile import PatchFile
from envlock.patches.patchmerge import merge_patch

# What patches are applied to, named here too (``X as X``: an explicit re-export).
from envlock.patches.treeview import Applied as Applied
from envlock.patches.treeview import HunkFailure as HunkFailure
from envlock.patches.treeview import State
from envlock.patches.treeview import TreeView as TreeView
from envlock.store.store import Store
from envlock.store.trees import copy_tree, tree_digest


@dataclass(frozen=True)
class PatchedTree:
    """A source tree with its patches applied, as a store entry."""

    tree: Path  # patched tree in the store (or the unpatched one when there are no patches)
    tree_digest: str  # content digest after patches
    patches: tuple[LockedPatch, ...]


def apply_all(source: str, tree: Path, base_digest: str, patches: Sequence[PatchFile], store: Store) -> PatchedTree:
    """Apply ``patches`` in order to a fresh copy of ``tree``; the result is a store entry.

    All-or-nothing: every patch is applied in memory first; a failure raises ``PatchError``
    and writes nothing. Keyed by the base tree digest and the patches' sha256.
    """
    locked = tuple(p.locked() for p in patches)
    if not patches:
        return PatchedTree(tree, base_digest, ())
    key_text = base_digest + "\n" + "".join(f"{p.path} {p.sha256}\n" for p in locked)
    key = hashlib.sha256(key_text.encode()).hexdigest()
    entry = store.path("sources", f"patched-{key}")
    if not (entry / "tree-digest").is_file():
        view = TreeView(tree)
        for patch in patches:
            try:
                view.apply(patch)
            except PatchError as exc:
                raise PatchError(f"source {source!r}: {exc.message}", details=exc.details) from None
        with store.new_entry("sources", f"patched-{key}") as work:
            copy_tree(tree, work / "tree")
            view.write(work / "tree")
            # Patches make no links; those the tree has are refused, if a build reads them, by
            # build.plan (a git commit's may lead anywhere and not matter).
            (work / "tree-digest").write_text(tree_digest(work / "tree", links_inside=False) + "\n")
    digest = (entry / "tree-digest").read_text().strip()
    return PatchedTree(entry / "tree", digest, locked)


@dataclass(frozen=True)
class PatchStatus:
    """One patch's state against a tree (``status``), with what to do about it."""

    patch: str
    subject: str
    state: State
    failure: HunkFailure | None = None  # for "conflict": the first hunk that does not apply
    # For "conflict": an earlier patch that conflicted too, on one of the same files. This one
    # was checked without it, so it may conflict only because it builds on that one.
    after: str | None = None
    # With the tree it was recorded on (``status(..., base=)``), for a patch that does not apply
    # as it is: "clean" (a 3-way merge carries it; `patch rebase` rewrites it) or "conflict".
    merge: str | None = None
    conflicts: tuple[HunkFailure, ...] = ()  # the 3-way merge's conflicting hunks
    upstream: str = ""  # the patch header's Upstream: line
    files: tuple[str, ...] = ()

    @property
    def advice(self) -> str:
        """What to do about the patch, in one line ("" when it applies)."""
        if self.state == "already-applied":
            return "upstream has it: retire this patch"
        if self.state == "conflict" and self.merge == "clean":
            return "a 3-way merge carries it cleanly: `envlock patch rebase` rewrites it"
        if self.state == "conflict" and self.after is not None:
            return (f"checked without {self.after}, which conflicts first on the same file: refresh that one, "
                    "then look again (this one may only build on it)")
        if self.state == "conflict" and self.failure is not None:
            hunk = f" hunk {self.failure.hunk}" if self.failure.hunk else ""  # 0: the file itself, no hunk
            return f"refresh it: {self.failure.file}{hunk} no longer matches"
        return ""

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, extra={"advice": self.advice})


def status(tree: Path, patches: Sequence[PatchFile], *, base: Path | None = None,
           label: str = "upstream") -> list[PatchStatus]:
    """Each patch, in order, against ``tree``: applies, already-applied (its reverse applies) or conflict.

    A patch that applies is applied (in memory) before the next one is checked, as a real
    application would; an already-applied or conflicting one is not, so a conflict after a
    conflict on the same file names the earlier one (``after``): it may only build on it.

    ``base``: the tree the patches were recorded on (the pin). A patch that does not apply as
    it is is then merged 3-way, as ``patch rebase`` would: upstream may have it (already-applied),
    the merge may carry it (``merge="clean"``, and the next patches see it merged), or it
    conflicts, and ``failure`` shows upstream's lines where the hunk's were, found by the merge.
    """
    view = TreeView(tree)
    recorded = TreeView(base) if base is not None else None
    out: list[PatchStatus] = []
    conflicting: list[PatchFile] = []
    for patch in patches:
        state, applied, failure = view.classify(patch)
        merge: str | None = None
        conflicts: tuple[HunkFailure, ...] = ()
        if applied is not None:
            view.changes.update(applied.changes)
        elif state == "conflict" and recorded is not None and isinstance(recorded.try_apply(patch), Applied):
            merged = merge_patch(view, recorded, patch, ours_label=label, theirs_label=patch.label)
            if merged.already:
                state = "already-applied"
            elif merged.clean:
                merge = "clean"
                view.changes.update(merged.changes)
            else:
                merge, conflicts, failure = "conflict", merged.conflicts, merged.conflicts[0]
        if recorded is not None and isinstance(done := recorded.try_apply(patch), Applied):
            recorded.changes.update(done.changes)
        after = None
        if state == "conflict" and merge != "clean":
            after = next((c.label for c in conflicting if set(c.paths) & set(patch.paths)), None)
            conflicting.append(patch)
        out.append(PatchStatus(patch.label, patch.subject, state, failure, after=after, merge=merge,
                               conflicts=conflicts, upstream=patch.upstream, files=patch.paths))
    return out
