"""A source tree as patches see it (``TreeView``: the files on disk plus changes in memory), and a
patch applied to it strictly, hunk by hunk, or the hunk that does not apply (``HunkFailure``: where,
why, the lines expected and those found).

- strict: every context and removed line must match exactly (no fuzz); a hunk may sit at
  another line than its header says (an offset, as ``git apply`` allows), never overlap
  the previous hunk;
- contained: a path that runs through (or is) a symlink in the tree is refused (``patchfile``
  refuses the paths and kinds of diff that are unsafe whatever the tree); a new file where the
  tree has a file or a directory is a conflict.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envlock.errors import PatchError
from envlock.model.jsondoc import json_doc
from envlock.patches.patchfile import FilePatch, Hunk, PatchFile

State = Literal["applies", "already-applied", "conflict"]
_REGULAR = 0o100644
_EXECUTABLE = 0o100755


@dataclass(frozen=True)
class HunkFailure:
    """Why one file of a patch does not apply."""

    file: str
    hunk: int  # 1-based within the file, 0 for a file-level problem
    header: str
    reason: str
    line: int = 0  # 1-based line in the file where the hunk was expected (merged: where upstream's lines are)
    expected: tuple[str, ...] = ()
    actual: tuple[str, ...] = ()
    merged: bool = False  # found by a 3-way merge: ``actual`` is what upstream has where ``expected`` was

    def describe(self) -> list[str]:
        """The failure as lines to show: where, why, then the expected lines and those found."""
        where = f"{self.file}: hunk {self.hunk} ({self.header})" if self.hunk else self.file
        out = [f"{where}: {self.reason}"]
        if self.merged:
            out.append("the patch expected:")
            out += [f"  | {t}" for t in self.expected] or ["  (nothing)"]
            out.append(f"upstream has, at line {self.line}:")
            out += [f"  | {t}" for t in self.actual] or ["  (nothing: deleted)"]
        elif self.expected or self.actual:
            out.append(f"expected at line {self.line}:")
            out += [f"  | {t}" for t in self.expected] or ["  (nothing)"]
            out.append("found:")
            out += [f"  | {t}" for t in self.actual] or ["  (end of file)"]
        return out

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class Applied:
    """What a patch changes in a view: path -> (bytes, mode) or None (deleted)."""

    changes: dict[str, tuple[bytes, int] | None]
    offset: int  # summed distance of its hunks from their stated lines


class HunkFailedError(Exception):
    """A hunk that does not apply (``apply_hunks``), with the failure to show."""

    def __init__(self, failure: HunkFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


def shown_lines(lines: Iterable[bytes]) -> tuple[str, ...]:
    """Lines of a file as a failure shows them (decoded, without their line ends)."""
    return tuple(t.decode("utf-8", "replace").rstrip("\n") for t in lines)


def split_lines(data: bytes) -> list[bytes]:
    """``data`` split into lines that keep their ``\n`` (the last one may lack it)."""
    parts = data.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


class TreeView:
    """A source tree on disk plus in-memory changes (path -> (bytes, mode), or None if deleted)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.changes: dict[str, tuple[bytes, int] | None] = {}

    def _symlink_problem(self, rel: str) -> str | None:
        parts = rel.split("/")
        for n in range(1, len(parts) + 1):
            sub = "/".join(parts[:n])
            if sub in self.changes:
                return None  # created by an earlier patch: a regular file, never a link
            if (self.root / sub).is_symlink():
                kind = "is a symlink" if n == len(parts) else f"goes through the symlink {sub!r}"
                return f"{kind} in the source tree (-> {os.readlink(self.root / sub)})"
        return None

    def read(self, rel: str) -> tuple[bytes, int] | None:
        """The bytes and mode of the regular file at ``rel`` in the view; None if there is none."""
        if rel in self.changes:
            return self.changes[rel]
        path = self.root / rel
        try:
            st = path.lstat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return path.read_bytes(), _EXECUTABLE if st.st_mode & 0o100 else _REGULAR

    def try_apply(self, patch: PatchFile) -> Applied | HunkFailure:
        """The changes ``patch`` makes to this view, or the first failure (the view is unchanged)."""
        staged: dict[str, tuple[bytes, int] | None] = {}
        offset = 0
        saved = self.changes
        try:
            for fp in patch.files:
                self.changes = {**saved, **staged}
                changes, moved = self._apply_file(fp)
                staged.update(changes)
                offset += moved
        except HunkFailedError as failed:
            return failed.failure
        finally:
            self.changes = saved
        # A new file where a new file below it (this patch's or an earlier one's) makes a
        # directory: found in one pass here, as _check_free sees only what is there already.
        merged = {**saved, **staged}
        made_dirs = {path.rsplit("/", n)[0] for path, change in merged.items() if change is not None
                     for n in range(1, path.count("/") + 1)}
        clash = next((path for path, change in staged.items() if change is not None and path in made_dirs), None)
        if clash is not None:
            return HunkFailure(clash, 0, "", "would be created, but the tree has a directory there")
        return Applied(staged, offset)

    def classify(self, patch: PatchFile) -> tuple[State, Applied | None, HunkFailure | None]:
        """applies / already-applied / conflict, with the changes (applies) or the failure (conflict).

        When both the patch and its reverse apply (the patch's result is already there, and
        its context also occurs elsewhere), the one matching nearer its stated lines wins:
        re-applying an upstreamed hunk at an offset would silently duplicate it.
        """
        forward = self.try_apply(patch)
        backward = self.try_apply(patch.reversed())
        if isinstance(forward, Applied) and (isinstance(backward, HunkFailure) or forward.offset <= backward.offset):
            return "applies", forward, None
        if isinstance(backward, Applied):
            return "already-applied", None, None
        assert isinstance(forward, HunkFailure)
        return "conflict", None, forward

    def apply(self, patch: PatchFile) -> None:
        """Apply ``patch`` to the view, or raise ``PatchError`` naming the patch, file and hunk."""
        state, applied, failure = self.classify(patch)
        if state == "already-applied":
            raise PatchError(
                f"{patch.label}: already applied (its reverse applies): upstream has it; "
                "remove it from the source's patches"
            )
        if failure is not None:
            raise PatchError(f"{patch.label}: does not apply", details=failure.describe())
        assert applied is not None
        self.changes.update(applied.changes)

    def _apply_file(self, fp: FilePatch) -> tuple[dict[str, tuple[bytes, int] | None], int]:
        for path in {p for p in (fp.old_path, fp.new_path) if p is not None}:
            problem = self._symlink_problem(path)
            if problem:
                raise HunkFailedError(HunkFailure(path, 0, "", f"refused: {problem}"))
        if fp.old_path is None:  # creation
            assert fp.new_path is not None
            self._check_free(fp.new_path)
            content = b"".join(b"".join(h.new) for h in fp.hunks)
            return {fp.new_path: (content, file_mode(fp.new_mode, _REGULAR))}, 0
        current = self.read(fp.old_path)
        if current is None:
            raise HunkFailedError(HunkFailure(fp.old_path, 0, "", "does not exist in the tree"))
        data, mode = current
        lines, offset = apply_hunks(fp.old_path, split_lines(data), fp.hunks)
        if fp.new_path is None:  # deletion: what is left must be nothing
            if lines:
                raise HunkFailedError(
                    HunkFailure(fp.old_path, 0, "", "would be deleted, but has other content than the patch removes")
                )
            return {fp.old_path: None}, offset
        out: dict[str, tuple[bytes, int] | None] = {fp.new_path: (b"".join(lines), file_mode(fp.new_mode, mode))}
        if fp.new_path != fp.old_path:  # a plain diff's ---/+++ names differ: the file moves there
            self._check_free(fp.new_path)
            out[fp.old_path] = None
        return out, offset

    def _check_free(self, rel: str) -> None:
        """Raise the failure of writing a new file at ``rel``: something (a file, a directory)
        is there, or one of its parent directories is a file. Checked here so that a conflict
        names the patch and the file, rather than ``write`` failing later in a store temp dir."""
        parts = rel.split("/")
        for n in range(1, len(parts)):
            sub = "/".join(parts[:n])
            kind = self._kind(sub)
            if kind not in (None, "a directory"):
                raise HunkFailedError(HunkFailure(rel, 0, "", f"would be created, but {sub!r} is {kind}, "
                                                  "not a directory"))
        kind = self._kind(rel)
        if kind == "a file":
            raise HunkFailedError(HunkFailure(rel, 0, "", "would be created, but already exists"))
        if kind is not None:
            raise HunkFailedError(HunkFailure(rel, 0, "", f"would be created, but the tree has {kind} there"))

    def _kind(self, rel: str) -> str | None:
        """What the view has at ``rel``: ``a file``, ``a directory``, another kind, or None.
        (A directory only new files below it make is not seen here, but by ``try_apply``.)"""
        if rel in self.changes:
            return None if self.changes[rel] is None else "a file"
        try:
            mode = (self.root / rel).lstat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISREG(mode):
            return "a file"
        if stat.S_ISDIR(mode):
            return "a directory"
        return "a symlink" if stat.S_ISLNK(mode) else "a special file"

    def write(self, dest: Path) -> None:
        """Write the in-memory changes over a copy of the tree at ``dest``."""
        for rel, change in sorted(self.changes.items()):
            target = dest / rel
            if change is None:
                target.unlink(missing_ok=True)
                continue
            data, mode = change
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o755 if mode & 0o100 else 0o644)


def file_mode(mode: int | None, default: int) -> int:
    """The git mode a patch gives a file (``mode``), else ``default`` (the file's own)."""
    return default if mode is None else (_EXECUTABLE if mode & 0o100 else _REGULAR)


def apply_hunks(path: str, lines: list[bytes], hunks: Sequence[Hunk]) -> tuple[list[bytes], int]:
    """The file's lines after ``hunks``, and how far (in lines, summed) the hunks sat from their headers."""
    out: list[bytes] = []
    offset = 0
    cursor = 0  # first line of ``lines`` not yet copied to ``out``
    for number, hunk in enumerate(hunks, 1):
        old, new = hunk.old, hunk.new
        wanted = hunk.old_start - 1 if hunk.old_count else hunk.old_start
        anchored = not old or (hunk.old_start <= 1 and bool(hunk.lines) and hunk.lines[0][0] != " ")
        pos = _find(lines, old, wanted, cursor, anchored)
        if pos is None:
            at = max(wanted, cursor)
            actual = lines[at : at + max(len(old), 1)]
            mismatch = next(
                (k for k, (a, b) in enumerate(zip(old, actual, strict=False)) if a != b),
                min(len(old), len(actual)),
            )
            reason = ("context does not match" if actual else "the file ends before the hunk") + (
                f" (first difference at line {at + mismatch + 1})" if actual else ""
            )
            failure = HunkFailure(path, number, hunk.header, reason, at + 1, shown_lines(old), shown_lines(actual))
            raise HunkFailedError(failure)
        out += lines[cursor:pos]
        out += new
        cursor = pos + len(old)
        offset += abs(pos - wanted)
    out += lines[cursor:]
    return out, offset


def _find(lines: Sequence[bytes], old: Sequence[bytes], wanted: int, floor: int, anchored: bool) -> int | None:
    """Where ``old`` matches exactly, nearest to ``wanted`` and not before ``floor``.

    Only the positions in ``floor..last`` are tried, each once: a header's line number far
    past the end of the file (``@@ -99999999999999999999 ...``, stale or hostile) costs no
    more than one near it, as git apply clamps it to the file's end (apply.c's find_pos).
    """
    n = len(old)
    last = len(lines) - n
    if anchored:
        pos = max(wanted, floor)
        return pos if floor <= pos <= last and list(lines[pos : pos + n]) == list(old) else None
    if floor > last:
        return None
    # Distances from ``wanted`` out to the nearer and the farther end of floor..last.
    nearest = max(floor - wanted, wanted - last, 0)
    farthest = max(wanted - floor, last - wanted)
    for delta in range(nearest, farthest + 1):
        for pos in (wanted - delta, wanted + delta) if delta else (wanted,):
            if floor <= pos <= last and list(lines[pos : pos + n]) == list(old):
                return pos
    return None
