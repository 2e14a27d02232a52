"""Applying patches: strict, all-or-nothing, contained; and each patch's status against a tree.

envlock applies patches with its own applier rather than ``git apply`` so that a failure can
name the patch, the file and the hunk and show the expected lines next to the ones actually there:

- strict: every context and removed line must match exactly (no fuzz); a hunk may sit at
  another line than its header says (an offset, as ``git apply`` allows), never overlap
  the previous hunk;
- all-or-nothing: patches are applied to an in-memory view of the tree; only when every
  patch applied is the result written, into a temp copy renamed into the store;
- contained: a path that runs through (or is) a symlink in the tree is refused (``patchfile``
  refuses the paths and kinds of diff that are unsafe whatever the tree); a new file where the
  tree has a file or a directory is a conflict.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envlock.errors import PatchError
from envlock.model.lockfile import LockedPatch
from envlock.patches.patchfile import FilePatch, Hunk, PatchFile, format_file_patch
from envlock.store.store import Store
from envlock.store.trees import copy_tree, tree_digest

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
        return {
            "file": self.file,
            "hunk": self.hunk,
            "header": self.header,
            "reason": self.reason,
            "line": self.line,
            "expected": list(self.expected),
            "actual": list(self.actual),
            "merged": self.merged,
        }


@dataclass(frozen=True)
class Applied:
    """What a patch changes in a view: path -> (bytes, mode) or None (deleted)."""

    changes: dict[str, tuple[bytes, int] | None]
    offset: int  # summed distance of its hunks from their stated lines


class _FailedError(Exception):
    def __init__(self, failure: HunkFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


def _show(lines: Iterable[bytes]) -> tuple[str, ...]:
    return tuple(t.decode("utf-8", "replace").rstrip("\n") for t in lines)


def _split(data: bytes) -> list[bytes]:
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
        except _FailedError as failed:
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
                raise _FailedError(HunkFailure(path, 0, "", f"refused: {problem}"))
        if fp.old_path is None:  # creation
            assert fp.new_path is not None
            self._check_free(fp.new_path)
            content = b"".join(b"".join(h.new) for h in fp.hunks)
            return {fp.new_path: (content, _mode(fp.new_mode, _REGULAR))}, 0
        current = self.read(fp.old_path)
        if current is None:
            raise _FailedError(HunkFailure(fp.old_path, 0, "", "does not exist in the tree"))
        data, mode = current
        lines, offset = _apply_hunks(fp.old_path, _split(data), fp.hunks)
        if fp.new_path is None:  # deletion: what is left must be nothing
            if lines:
                raise _FailedError(
                    HunkFailure(fp.old_path, 0, "", "would be deleted, but has other content than the patch removes")
                )
            return {fp.old_path: None}, offset
        out: dict[str, tuple[bytes, int] | None] = {fp.new_path: (b"".join(lines), _mode(fp.new_mode, mode))}
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
                raise _FailedError(HunkFailure(rel, 0, "", f"would be created, but {sub!r} is {kind}, not a directory"))
        kind = self._kind(rel)
        if kind == "a file":
            raise _FailedError(HunkFailure(rel, 0, "", "would be created, but already exists"))
        if kind is not None:
            raise _FailedError(HunkFailure(rel, 0, "", f"would be created, but the tree has {kind} there"))

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


def _mode(mode: int | None, default: int) -> int:
    return default if mode is None else (_EXECUTABLE if mode & 0o100 else _REGULAR)


def _apply_hunks(path: str, lines: list[bytes], hunks: Sequence[Hunk]) -> tuple[list[bytes], int]:
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
            failure = HunkFailure(path, number, hunk.header, reason, at + 1, _show(old), _show(actual))
            raise _FailedError(failure)
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
        return {
            "patch": self.patch,
            "subject": self.subject,
            "state": self.state,
            "advice": self.advice,
            "failure": self.failure.to_dict() if self.failure else None,
            "after": self.after,
            "merge": self.merge,
            "conflicts": [c.to_dict() for c in self.conflicts],
            "upstream": self.upstream,
            "files": list(self.files),
        }


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


# -- 3-way: a patch carried to another commit, as git rebase carries a commit ----------


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
    import tempfile

    from envlock import runner

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
            alone, _ = _apply_hunks(path, _split(base), [hunk])
        except _FailedError:
            continue
        merged, count = merge_file(ours, base, b"".join(alone), labels, diff3=True)
        block = _first_block(merged, labels) if count else None
        if block is not None:
            line, expected, found = block
            out.append(HunkFailure(path, number, hunk.header, "upstream changed these lines too (3-way merge)",
                                   line, _show(expected), _show(found), merged=True))
    if not out:  # only the hunks together conflict: the file's first conflict, as such
        merged, _ = merge_file(ours, base, theirs, labels, diff3=True)
        block = _first_block(merged, labels)
        line, expected, found = block if block is not None else (0, [], [])
        out.append(HunkFailure(path, 0, "", "upstream changed these lines too (3-way merge)", line,
                               _show(expected), _show(found), merged=True))
    return out


def _first_block(merged: bytes, labels: tuple[str, str, str]) -> tuple[int, list[bytes], list[bytes]] | None:
    """The first conflict of a ``--diff3`` merge: its line there, the base's lines, and upstream's."""
    marks = [f"{c * 7} {label}".encode() for c, label in zip("<|", labels, strict=False)]
    lines = _split(merged)
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
        lines, failed = _split(current[0]), []
        for hunk in fp.hunks:
            try:
                lines, _ = _apply_hunks(fp.path, lines, [hunk])
            except _FailedError:
                failed.append(hunk)
        changes[fp.path] = (b"".join(lines), _mode(fp.new_mode, current[1]))
        rejects[fp.path] = format_file_patch(fp, failed)
    return changes, rejects
