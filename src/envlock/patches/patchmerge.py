"""3-way: a patch carried to another commit, as git rebase carries a commit (``patch rebase``, the
pending patch of a refresh): merged per file against the tree it was recorded on with ``git merge-file``,
each conflicting hunk named; where there is nothing to merge on, applied hunk by hunk with ``.rej`` files.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envlock import runner
from envlock.errors import PatchError
from envlock.patches.patchfile import FilePatch, PatchFile, format_file_patch
from envlock.patches.treeview import (
    Applied,
    HunkFailedError,
    HunkFailure,
    TreeView,
    apply_hunks,
    file_mode,
    shown_lines,
    split_lines,
)


@dataclass(frozen=True)
class Merged:
    """A patch applied 3-way onto a view (``merge_patch``): what it changes there, markers and all.

    ``changes`` holds only files whose content differs from the view's: empty with no
    conflict, the view already has the patch's change (upstream took it)."""

    changes: dict[str, tuple[bytes, int] | None]
    conflicts: tuple[HunkFailure, ...] = ()  # one per conflicting hunk (or file), in order
    conflicted: tuple[str, ...] = ()  # files left with conflict markers
    rejects: dict[str, bytes] | None = None  # FILE -> its .rej text, where there is no base to merge on

    @property
    def clean(self) -> bool:
        return not self.conflicts

    @property
    def already(self) -> bool:
        """Nothing to do: the view has the patch's change already."""
        return self.clean and not self.changes


def merge_patch(ours: TreeView, base: TreeView, patch: PatchFile, *, ours_label: str,
                theirs_label: str) -> Merged:
    """``patch`` carried onto ``ours`` by a 3-way merge per file against ``base``, the tree it was
    recorded on (where it must apply: ``PatchError`` otherwise), with ``git merge-file``.

    Where both sides changed the same lines the file gets standard conflict markers
    (``<<<<<<< ours_label`` / ``>>>>>>> theirs_label``); where there is nothing to merge on (a file
    upstream deleted that the patch changes, or that the patch deletes and upstream changed)
    the file's diff is kept as a ``.rej``.
    """
    theirs = base.try_apply(patch)
    if isinstance(theirs, HunkFailure):
        raise PatchError(f"{patch.label}: does not apply to the tree it was recorded on",
                         details=theirs.describe())
    changes: dict[str, tuple[bytes, int] | None] = {}
    conflicts: list[HunkFailure] = []
    conflicted: list[str] = []
    rejects: dict[str, bytes] = {}
    for path, wanted in sorted(theirs.changes.items()):
        was, now = base.read(path), ours.read(path)
        if _same(now, wanted):
            continue
        fp = next(f for f in patch.files if path in (f.old_path, f.new_path))
        if _same(now, was):  # upstream left the file alone: the patch's version, as it is
            changes[path] = wanted
        elif wanted is None or now is None:  # a delete on one side, a change on the other
            why = ("the patch deletes it, upstream changed it" if wanted is None
                   else "upstream deleted it, the patch changes it")
            conflicts.append(HunkFailure(path, 0, "", f"{why}; its diff is in {path}.rej"))
            rejects[path] = format_file_patch(fp)
        else:
            old = b"" if was is None else was[0]
            data, count = merge_file(now[0], old, wanted[0], (ours_label, "recorded base", theirs_label))
            mode = wanted[1] if was is None or wanted[1] != was[1] else now[1]
            if data != now[0] or mode != now[1]:
                changes[path] = (data, mode)
            if count:
                conflicted.append(path)
                conflicts += _attribute(path, now[0], old, wanted[0], fp)
    return Merged(changes, tuple(conflicts), tuple(conflicted), rejects)


def _same(a: tuple[bytes, int] | None, b: tuple[bytes, int] | None) -> bool:
    return a == b or (a is not None and b is not None and a[0] == b[0])


def merge_file(ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str], *,
               diff3: bool = False) -> tuple[bytes, int]:
    """``git merge-file`` of three versions of a file: the merged bytes (conflict markers where
    both sides changed the same lines, labelled ``labels``) and the number of conflicts."""
    with tempfile.TemporaryDirectory(prefix="envlock-merge-") as tmp:
        files = [Path(tmp) / name for name in ("ours", "base", "theirs")]
        for path, data in zip(files, (ours, base, theirs), strict=True):
            path.write_bytes(data)
        args: list[str | os.PathLike[str]] = ["merge-file", "-q"]
        if diff3:
            args.append("--diff3")
        for label in labels:
            args += ["-L", label]
        result = runner.git([*args, *files])
        if result.returncode > 127:  # negative: git could not merge at all
            raise PatchError(f"git merge-file failed (exit {result.returncode})", details=result.tail(10).splitlines())
        return files[0].read_bytes(), result.returncode


def _attribute(path: str, ours: bytes, base: bytes, theirs: bytes, fp: FilePatch) -> list[HunkFailure]:
    """Which hunks of ``fp`` conflict, each with the lines it expected and those upstream has in
    their place, as a merge of that hunk alone finds them (not at the hunk's old line number)."""
    out = []
    labels = ("upstream", "recorded base", "patch")
    for number, hunk in enumerate(fp.hunks, 1):
        try:
            alone, _ = apply_hunks(path, split_lines(base), [hunk])
        except HunkFailedError:
            continue
        merged, count = merge_file(ours, base, b"".join(alone), labels, diff3=True)
        block = _first_block(merged, labels) if count else None
        if block is not None:
            line, expected, found = block
            out.append(HunkFailure(path, number, hunk.header, "upstream changed these lines too (3-way merge)",
                                   line, shown_lines(expected), shown_lines(found), merged=True))
    if not out:  # only the hunks together conflict: the file's first conflict, as such
        merged, _ = merge_file(ours, base, theirs, labels, diff3=True)
        block = _first_block(merged, labels)
        line, expected, found = block if block is not None else (0, [], [])
        out.append(HunkFailure(path, 0, "", "upstream changed these lines too (3-way merge)", line,
                               shown_lines(expected), shown_lines(found), merged=True))
    return out


def _first_block(merged: bytes, labels: tuple[str, str, str]) -> tuple[int, list[bytes], list[bytes]] | None:
    """The first conflict of a ``--diff3`` merge: its line there, the base's lines, and upstream's."""
    marks = [f"{c * 7} {label}".encode() for c, label in zip("<|", labels, strict=False)]
    lines = split_lines(merged)
    for i, line in enumerate(lines):
        if line.rstrip(b"\n") == marks[0]:
            found: list[bytes] = []
            expected: list[bytes] = []
            part = found
            for text in lines[i + 1:]:
                bare = text.rstrip(b"\n")
                if bare == marks[1]:
                    part = expected
                elif bare == b"=" * 7:
                    return i + 1, expected, found
                else:
                    part.append(text)
    return None


def apply_partly(view: TreeView, patch: PatchFile) -> tuple[dict[str, tuple[bytes, int] | None], dict[str, bytes]]:
    """``patch`` applied hunk by hunk where there is no base to merge on (as ``patch`` or
    ``git apply --reject`` do): the hunks that apply, and per file the ``.rej`` text of the rest."""
    changes: dict[str, tuple[bytes, int] | None] = {}
    rejects: dict[str, bytes] = {}
    for fp in patch.files:
        one = PatchFile(patch.label, patch.path, patch.sha256, (fp,))
        whole = view.try_apply(one)
        if isinstance(whole, Applied):
            changes.update(whole.changes)
            continue
        current = view.read(fp.old_path) if fp.old_path is not None and fp.new_path == fp.old_path else None
        if current is None:  # a creation, deletion or move that fails: the whole file diff
            rejects[fp.path] = format_file_patch(fp)
            continue
        lines, failed = split_lines(current[0]), []
        for hunk in fp.hunks:
            try:
                lines, _ = apply_hunks(fp.path, lines, [hunk])
            except HunkFailedError:
                failed.append(hunk)
        changes[fp.path] = (b"".join(lines), file_mode(fp.new_mode, current[1]))
        rejects[fp.path] = format_file_patch(fp, failed)
    return changes, rejects
