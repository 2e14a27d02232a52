"""Recorded patches: strict application, status against any commit, and the edit/record workflow.

Patches are unified diffs in git format with a short header (``Subject:``, ``Why:``,
``Upstream:``, then a ``---`` line). envlock applies them with its own applier rather
than ``git apply`` so that a failure can name the patch, the file and the hunk and show
the expected lines next to the ones actually there:

- strict: every context and removed line must match exactly (no fuzz); a hunk may sit at
  another line than its header says (an offset, as ``git apply`` allows), never overlap
  the previous hunk;
- all-or-nothing: patches are applied to an in-memory view of the tree; only when every
  patch applied is the result written, into a temp copy renamed into the store;
- contained: a path with ``..``, an absolute path, a ``.git`` component, a NUL byte, or one
  that runs through (or is) a symlink in the tree is refused, as are binary patches, renames
  and symlink creation; a new file where the tree has a file or a directory is a conflict.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envlock import runner
from envlock.errors import PatchError, UsageError
from envlock.lockfile import LockedPatch
from envlock.store import Store, write_atomic
from envlock.trees import copy_tree, tree_digest

State = Literal["applies", "already-applied", "conflict"]
_HUNK = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_HEADER_KEYS = ("Subject", "Why", "Upstream")
_REGULAR = 0o100644
_EXECUTABLE = 0o100755


# -- parsed patches ----------------------------------------------------------


@dataclass(frozen=True)
class Hunk:
    header: str  # the "@@ -a,b +c,d @@ ..." line
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[tuple[str, bytes], ...]  # (" " | "-" | "+", line bytes with its newline, if any)

    @property
    def old(self) -> list[bytes]:
        return [text for op, text in self.lines if op != "+"]

    @property
    def new(self) -> list[bytes]:
        return [text for op, text in self.lines if op != "-"]

    def reversed(self) -> Hunk:
        swap = {" ": " ", "-": "+", "+": "-"}
        return Hunk(
            header=f"@@ -{self.new_start},{self.new_count} +{self.old_start},{self.old_count} @@ (reversed)",
            old_start=self.new_start,
            old_count=self.new_count,
            new_start=self.old_start,
            new_count=self.old_count,
            lines=tuple((swap[op], text) for op, text in self.lines),
        )


@dataclass(frozen=True)
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: tuple[Hunk, ...]
    new_mode: int | None = None  # set by "new file mode" / "new mode"
    old_mode: int | None = None

    @property
    def path(self) -> str:
        path = self.new_path or self.old_path
        assert path is not None
        return path

    def reversed(self) -> FilePatch:
        return FilePatch(
            old_path=self.new_path,
            new_path=self.old_path,
            hunks=tuple(h.reversed() for h in self.hunks),
            new_mode=self.old_mode,
            old_mode=self.new_mode,
        )


@dataclass(frozen=True)
class PatchFile:
    """One ``.patch`` file: its header and its per-file diffs."""

    label: str  # as the spec lists it (workspace-relative)
    path: Path
    sha256: str
    files: tuple[FilePatch, ...]
    subject: str = ""
    why: str = ""
    upstream: str = ""

    def reversed(self) -> PatchFile:
        return PatchFile(
            self.label,
            self.path,
            self.sha256,
            tuple(f.reversed() for f in self.files),
            self.subject,
            self.why,
            self.upstream,
        )

    def locked(self) -> LockedPatch:
        return LockedPatch(path=self.label, sha256=self.sha256)


def load_patches(root: Path, labels: Iterable[str]) -> list[PatchFile]:
    """Read and parse the patches a source lists (paths relative to the workspace ``root``)."""
    return [parse_patch_file(root / label, label=label) for label in labels]


def parse_patch_file(path: Path, *, label: str | None = None) -> PatchFile:
    name = label or str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise PatchError(f"{name}: patch file not found") from None
    return parse_patch(data, label=name, path=path)


def parse_patch(data: bytes, *, label: str, path: Path | None = None) -> PatchFile:
    """Parse a git-format unified diff with an optional header; refuse what envlock cannot apply safely."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    i = 0
    header: list[bytes] = []
    while i < len(lines) and not _starts_file(lines, i):
        header.append(lines[i])
        i += 1
    files: list[FilePatch] = []
    while i < len(lines):
        fp, i = _parse_file(lines, i, label)
        files.append(fp)
    if not files:
        raise PatchError(f"{label}: no diff found; expected a unified diff (`diff --git a/... b/...`)")
    for fp in files:
        for p in (fp.old_path, fp.new_path):
            if p is not None:
                problem = _path_problem(p)
                if problem:
                    raise PatchError(f"{label}: refuses to touch {p!r}: {problem}")
    fields = _parse_header(header)
    return PatchFile(
        label=label,
        path=path or Path(label),
        sha256=hashlib.sha256(data).hexdigest(),
        files=tuple(files),
        subject=fields.get("Subject", ""),
        why=fields.get("Why", ""),
        upstream=fields.get("Upstream", ""),
    )


def _parse_header(lines: Sequence[bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    key: str | None = None
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if line.rstrip() == "---":  # unindented: a field's own "---" line is written indented
            break
        m = re.match(r"([A-Za-z-]+):\s?(.*)", line)
        if m and m.group(1) in _HEADER_KEYS:
            key = m.group(1)
            out[key] = m.group(2).strip()
        elif key and line[:1].isspace():
            out[key] += " " + line.strip()
    return out


def _starts_file(lines: Sequence[bytes], i: int) -> bool:
    if lines[i].startswith(b"diff --git "):
        return True
    return (
        lines[i].startswith(b"--- ")
        and i + 2 < len(lines)
        and lines[i + 1].startswith(b"+++ ")
        and lines[i + 2].startswith(b"@@ ")
    )


def _unquote(path: bytes, where: str) -> str:
    """A path as git writes it: plain, or C-quoted when it has unusual bytes (``where``: the patch
    and line, for the ``PatchError`` a malformed escape raises)."""
    if not (path.startswith(b'"') and path.endswith(b'"') and len(path) >= 2):
        return path.decode("utf-8", "surrogateescape")
    body, out, j = path[1:-1], bytearray(), 0
    escapes = {
        ord("n"): 10,
        ord("t"): 9,
        ord('"'): 34,
        ord("\\"): 92,
        ord("a"): 7,
        ord("b"): 8,
        ord("f"): 12,
        ord("r"): 13,
        ord("v"): 11,
    }
    while j < len(body):
        c = body[j]
        if c == 92 and j + 1 < len(body):
            nxt = body[j + 1]
            if 48 <= nxt <= 55:
                # git writes a byte as exactly three octal digits, \000 to \377 (quote.c's
                # unquote_c_style refuses anything else): a shorter or larger one is no byte.
                digits = body[j + 1 : j + 4]
                if not re.fullmatch(rb"[0-3][0-7][0-7]", digits):
                    shown = path.decode("utf-8", "backslashreplace")
                    escape = body[j : j + 4].decode("utf-8", "backslashreplace")
                    raise PatchError(f"{where}: bad escape {escape} in the quoted path {shown}; expected a "
                                     "backslash and three octal digits, \\000 to \\377, as git quotes a byte")
                out.append(int(digits, 8))
                j += 4
                continue
            out.append(escapes.get(nxt, nxt))
            j += 2
            continue
        out.append(c)
        j += 1
    return bytes(out).decode("utf-8", "surrogateescape")


def _strip_path(raw: bytes, where: str) -> str | None:
    """``a/dir/file`` (from a ---/+++ line) -> ``dir/file``; ``/dev/null`` -> None."""
    raw = raw.split(b"\t", 1)[0].rstrip(b"\r")
    if raw == b"/dev/null":
        return None
    path = _unquote(raw, where)
    if path.startswith("/"):
        return path  # refused later, loudly, as an absolute path
    return path.split("/", 1)[1] if "/" in path else path


def _path_problem(path: str) -> str | None:
    if not path:
        return "empty path"
    if path.startswith("/"):
        return "absolute path, outside the source tree"
    parts = path.split("/")
    if ".." in parts:
        return "'..' component leaves the source tree"
    if ".git" in parts:
        return "writes into a .git directory"
    if "\0" in path:  # a C-quoted \000: no file name can hold it (the OS refuses it as an argument)
        return "holds a NUL byte, which no file name can"
    if "\\" in path or any(p in ("", ".") for p in parts):
        return "not a plain relative path"
    return None


def _parse_mode(value: bytes, where: str) -> int:
    """A git file mode (``100644``); ``where`` names the patch and line for the ``PatchError``."""
    digits = value.strip()
    # Only octal digits: int(..., 8) alone would also take a sign or underscores ("10_0644").
    if not re.fullmatch(rb"[0-7]{1,6}", digits):
        found = digits.decode("utf-8", "replace")
        raise PatchError(f"{where}: malformed file mode {found!r}; expected octal digits, such as 100644")
    return int(digits, 8)


def _parse_file(lines: Sequence[bytes], i: int, label: str) -> tuple[FilePatch, int]:
    old_path: str | None = None
    new_path: str | None = None
    new_mode: int | None = None
    old_mode: int | None = None
    created = deleted = False
    start = i
    if lines[i].startswith(b"diff --git "):
        m = re.fullmatch(rb"diff --git (\"?a/.+\"?) (\"?b/.+\"?)", lines[i])
        if m:
            old_path = new_path = _strip_path(m.group(1), f"{label}: line {i + 1}")
        i += 1
        while i < len(lines) and not lines[i].startswith((b"--- ", b"@@ ", b"diff --git ")):
            line, where = lines[i], f"{label}: line {i + 1}"
            if line.startswith(b"new file mode "):
                created, new_mode = True, _parse_mode(line[14:], where)
            elif line.startswith(b"deleted file mode "):
                deleted, old_mode = True, _parse_mode(line[18:], where)
            elif line.startswith(b"old mode "):
                old_mode = _parse_mode(line[9:], where)
            elif line.startswith(b"new mode "):
                new_mode = _parse_mode(line[9:], where)
            elif line.startswith((b"rename ", b"copy ")):
                raise PatchError(
                    f"{label}: line {i + 1}: renames and copies are not supported; "
                    "record the patch with `git diff --no-renames`"
                )
            elif line.startswith((b"Binary files ", b"GIT binary patch")):
                raise PatchError(f"{label}: line {i + 1}: binary patches are not supported ({old_path})")
            i += 1
    if i < len(lines) and lines[i].startswith(b"--- "):
        if i + 1 >= len(lines) or not lines[i + 1].startswith(b"+++ "):
            raise PatchError(f"{label}: line {i + 2}: expected a '+++ ' line after '--- '")
        old_path = _strip_path(lines[i][4:], f"{label}: line {i + 1}")
        new_path = _strip_path(lines[i + 1][4:], f"{label}: line {i + 2}")
        i += 2
    if created:
        old_path = None
    if deleted:
        new_path = None
    if old_path is None and new_path is None:
        raise PatchError(f"{label}: line {start + 1}: a file diff without a file name")
    for mode in (new_mode, old_mode):
        if mode is not None and stat.S_ISLNK(mode):
            raise PatchError(f"{label}: {new_path or old_path}: symlinks in patches are not supported")
    hunks: list[Hunk] = []
    while i < len(lines) and lines[i].startswith(b"@@ "):
        hunk, i = _parse_hunk(lines, i, label)
        hunks.append(hunk)
    return FilePatch(old_path, new_path, tuple(hunks), new_mode=new_mode, old_mode=old_mode), i


def _parse_hunk(lines: Sequence[bytes], i: int, label: str) -> tuple[Hunk, int]:
    m = _HUNK.match(lines[i])
    if not m:
        found = lines[i].decode(errors="replace")
        raise PatchError(f"{label}: line {i + 1}: malformed hunk header {found!r}")
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_count = int(m.group(2)) if m.group(2) is not None else 1
    new_count = int(m.group(4)) if m.group(4) is not None else 1
    header = lines[i].decode("utf-8", "replace")
    i += 1
    body: list[tuple[str, bytes]] = []
    old_left, new_left = old_count, new_count
    while old_left > 0 or new_left > 0:
        if i >= len(lines):
            raise PatchError(
                f"{label}: hunk {header!r} ends early (expected {old_left} more old and {new_left} more new lines)"
            )
        line = lines[i]
        op = chr(line[0]) if line else " "  # an empty line is an empty context line
        text = line[1:] + b"\n"
        if op == " ":
            old_left, new_left = old_left - 1, new_left - 1
        elif op == "-":
            old_left -= 1
        elif op == "+":
            new_left -= 1
        elif op == "\\":
            _drop_newline(body)
            i += 1
            continue
        else:
            raise PatchError(f"{label}: line {i + 1}: unexpected line in hunk {header!r}")
        if old_left < 0 or new_left < 0:
            raise PatchError(f"{label}: line {i + 1}: hunk {header!r} has more lines than its header says")
        body.append((op, text))
        i += 1
    while i < len(lines) and lines[i].startswith(b"\\"):
        _drop_newline(body)
        i += 1
    return Hunk(header, old_start, old_count, new_start, new_count, tuple(body)), i


def _drop_newline(body: list[tuple[str, bytes]]) -> None:
    if body:
        op, text = body[-1]
        body[-1] = (op, text[:-1] if text.endswith(b"\n") else text)


# -- applying ----------------------------------------------------------------


@dataclass(frozen=True)
class HunkFailure:
    """Why one file of a patch does not apply."""

    file: str
    hunk: int  # 1-based within the file, 0 for a file-level problem
    header: str
    reason: str
    line: int = 0  # 1-based line in the file where the hunk was expected
    expected: tuple[str, ...] = ()
    actual: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        where = f"{self.file}: hunk {self.hunk} ({self.header})" if self.hunk else self.file
        out = [f"{where}: {self.reason}"]
        if self.expected or self.actual:
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


# -- the stage: apply all, status -------------------------------------------


@dataclass(frozen=True)
class PatchedTree:
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
    patch: str
    subject: str
    state: State
    failure: HunkFailure | None = None  # for "conflict": the first hunk that does not apply
    # For "conflict": an earlier patch that conflicted too. This one was checked without
    # it, so it may conflict only because it builds on that one.
    after: str | None = None

    @property
    def advice(self) -> str:
        if self.state == "already-applied":
            return "upstream has it: retire this patch"
        if self.state == "conflict" and self.after is not None:
            return (f"checked without {self.after}, which conflicts first: refresh that one, then look again "
                    "(this one may only build on it)")
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
        }


def status(tree: Path, patches: Sequence[PatchFile]) -> list[PatchStatus]:
    """Each patch, in order, against ``tree``: applies, already-applied (its reverse applies) or conflict.

    A patch that applies is applied (in memory) before the next one is checked, as a real
    application would; an already-applied or conflicting one is not, so a conflict after
    a conflict names the earlier one (``after``): it may only build on it.
    """
    view = TreeView(tree)
    out: list[PatchStatus] = []
    first_conflict: str | None = None
    for patch in patches:
        state, applied, failure = view.classify(patch)
        if applied is not None:
            view.changes.update(applied.changes)
        out.append(PatchStatus(patch.label, patch.subject, state, failure,
                               after=first_conflict if state == "conflict" else None))
        if state == "conflict" and first_conflict is None:
            first_conflict = patch.label
    return out


# -- edit / record -----------------------------------------------------------

_EDIT_STATE = "envlock-edit.json"


@dataclass(frozen=True)
class EditSession:
    source: str
    workdir: Path
    levels: tuple[str, ...]  # patch labels, one commit each on top of "base"
    # Patches not applied because the first of them conflicts (``edit(..., stop_at_conflict=True)``):
    # redo its change by hand, then ``record(..., refresh=True)`` rewrites that file.
    pending: tuple[str, ...] = ()
    conflict: HunkFailure | None = None
    upstreamed: tuple[str, ...] = ()  # already applied at that commit: drop them from the spec

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "workdir": str(self.workdir),
            "levels": list(self.levels),
            "pending": list(self.pending),
            "conflict": self.conflict.to_dict() if self.conflict else None,
            "upstreamed": list(self.upstreamed),
        }


def _git_ok(args: Sequence[str | os.PathLike[str]], cwd: Path, what: str) -> runner.Result:
    return runner.git_checked(args, what=what, error=PatchError, cwd=cwd)


def edit(
    source: str, tree: Path, patches: Sequence[PatchFile], workdir: Path, *, stop_at_conflict: bool = False,
    env: str | None = None,
) -> EditSession:
    """Check the patched tree out into ``workdir``: a git repo, one commit per patch level.

    Edit files there, then ``record`` writes the difference against the top level as the
    next patch. With ``stop_at_conflict`` (refreshing patches for a new commit) the patches
    are applied up to the first that does not apply; it and the rest are ``pending``.
    The work dir's state names ``env`` and the patches it was made on (label and sha256),
    which ``record`` holds the spec's patches to.
    """
    if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        what = "is not empty" if workdir.is_dir() else "is a file"
        raise UsageError(f"{workdir}: work dir exists and {what}; expected a new or empty directory")
    view = TreeView(tree)
    conflict: HunkFailure | None = None
    applying: list[PatchFile] = []
    upstreamed: list[str] = []
    pending: Sequence[PatchFile] = ()
    made_on = [{"path": p.label, "sha256": p.sha256} for p in patches]
    for i, patch in enumerate(patches):
        if not stop_at_conflict:
            view.apply(patch)  # fails before anything is written
            applying.append(patch)
            continue
        verdict, ok, failure = view.classify(patch)
        if verdict == "already-applied":
            upstreamed.append(patch.label)  # upstream has it: nothing to redo, retire it
        elif ok is not None:
            view.changes.update(ok.changes)
            applying.append(patch)
        else:
            conflict, pending = failure, patches[i:]
            break
    patches = applying
    copy_tree(tree, workdir)
    what = f"patch edit {source}"
    _git_ok(["init", "-q"], workdir, what)
    _git_ok(["add", "-A", "-f"], workdir, what)
    _git_ok(["commit", "-q", "--allow-empty", "--no-verify", "-m", "base (unpatched)"], workdir, what)
    for patch in patches:
        view = TreeView(workdir)
        view.apply(patch)
        _commit_level(workdir, view, patch, what)
    state = {"source": source, "env": env, "levels": [p.label for p in patches], "pending": [p.label for p in pending],
             "made_on": made_on, "upstreamed": upstreamed, "recorded": []}
    (workdir / ".git" / _EDIT_STATE).write_text(json.dumps(state, indent=2) + "\n")
    return EditSession(source, workdir, tuple(p.label for p in patches), tuple(p.label for p in pending), conflict,
                       tuple(upstreamed))


def _commit_level(workdir: Path, view: TreeView, patch: PatchFile, what: str) -> None:
    """Write ``view``'s changes (``patch`` applied) into the work dir as the next patch level."""
    view.write(workdir)
    _git_ok(["add", "-A", "-f"], workdir, what)
    _git_ok(["commit", "-q", "--allow-empty", "--no-verify", "-m", f"{patch.label}\n\n{patch.subject}"],
            workdir, what)


@dataclass(frozen=True)
class RecordedPatch:
    source: str
    path: Path
    number: int
    files: tuple[str, ...]
    sha256: str
    pending: tuple[str, ...] = ()  # (refresh) patches still to redo by hand, first one conflicting
    upstreamed: tuple[str, ...] = ()  # (refresh) later patches the new code already has: retire them
    env: str = ""  # the env whose spec the work dir was made from (what `envlock lock ENV` then locks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "path": str(self.path),
            "number": self.number,
            "files": list(self.files),
            "sha256": self.sha256,
            "pending": list(self.pending),
            "upstreamed": list(self.upstreamed),
        }


def slug(title: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return s[:60].rstrip("-") or "patch"


def format_header(subject: str, why: str, upstream: str) -> str:
    """The header envlock writes above a recorded diff (continuation lines indented by two)."""

    def field_(key: str, value: str) -> str:
        lines = value.strip().splitlines() or [""]
        return f"{key}: {lines[0].strip()}\n" + "".join(f"  {line.strip()}\n" for line in lines[1:])

    return field_("Subject", subject) + field_("Why", why) + field_("Upstream", upstream) + "---\n"


def _written_header(data: bytes) -> bytes | None:
    """The header above a patch's diff as written, through its first ``---`` line (as
    ``_parse_header`` reads it), looked for only before the first file diff (as ``parse_patch``
    finds that); None when it has none. What follows it there (a diffstat) is not kept."""
    lines = data.split(b"\n")
    end = next((i for i in range(len(lines)) if _starts_file(lines, i)), len(lines))
    sep = next((i for i in range(end) if lines[i].rstrip() == b"---"), None)
    return None if sep is None else b"\n".join(lines[:sep + 1]) + b"\n"


def edited_source(workdir: Path) -> str:
    """The source an ``edit`` work dir was made for (``PatchError`` if it is not one)."""
    return str(_edit_state(workdir)[1]["source"])


def edited_env(workdir: Path) -> str:
    """The env whose spec an ``edit`` work dir was made from (``PatchError`` if it does not say)."""
    state = _edit_state(workdir)[1]
    if not isinstance(state.get("env"), str) or "made_on" not in state:
        raise _unknown_base(workdir, state)
    return str(state["env"])


def _unknown_base(workdir: Path, state: dict[str, Any]) -> PatchError:
    return PatchError(
        f"{workdir}: the work dir does not record the env and the patches it was made on (made by an earlier "
        f"envlock, or not by `envlock patch edit`); expected a work dir made with `envlock patch edit ENV "
        f"{state.get('source', 'SOURCE')}`: make one and redo your change there"
    )


def _edit_state(workdir: Path) -> tuple[Path, dict[str, Any]]:
    state_file = workdir / ".git" / _EDIT_STATE
    if not state_file.is_file():
        raise PatchError(
            f"{workdir}: not an envlock edit work dir (no .git/{_EDIT_STATE}); create one with `envlock patch edit`"
        )
    state: dict[str, Any] = json.loads(state_file.read_text())
    return state_file, state


def record(
    workdir: Path,
    patches_dir: Path,
    *,
    current: Sequence[LockedPatch],
    subject: str | None,
    why: str | None,
    upstream: str | None,
    refresh: bool = False,
    workspace_root: Path | None = None,
    other_envs: Sequence[Path] = (),
) -> RecordedPatch:
    """Write the work dir's changes against its top patch level as ``patches_dir/NNNN-slug.patch``.

    The new patch becomes the next level (committed), so another ``record`` diffs against it.
    With ``refresh``, the changes replace the first pending patch's file instead (same name,
    same header unless given), for a patch that no longer applied to a new commit.

    ``current``: the source's patches as the spec lists them now. They must still be the ones
    the work dir was made on (``PatchError`` otherwise, naming what changed), and no numbered
    patch in ``patches_dir`` the work dir was not made on may precede the new one, but those
    ``other_envs`` list (the patch folder is the source's, which other envs share).
    """
    state_file, state = _edit_state(workdir)
    source = str(state["source"])
    what = f"patch record {source}"
    pending = [str(p) for p in state.get("pending", [])]
    # What was asked is checked before anything in the work dir is touched.
    if refresh and not pending:
        raise UsageError(f"{workdir}: no pending patch to refresh; record a new one with --subject and --why")
    if not refresh and (not subject or not why):
        raise UsageError(f"{workdir}: a new patch needs a subject and a why (--subject, --why)")
    root = workspace_root or patches_dir.parent.parent  # pending patches are named from the workspace root
    _check_base(workdir, state, current, root, None if refresh else patches_dir, other_envs)
    # Without -f (unlike edit's levels): what the source's .gitignore covers, such as the
    # __pycache__ and build output of trying the change, is not part of a patch.
    _git_ok(["add", "-A"], workdir, what)
    diff = runner.git_bytes(
        [
            "-c",
            "core.quotepath=false",
            "diff",
            "--cached",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "HEAD",
        ],
        what=what,
        error=PatchError,
        cwd=workdir,
    )
    if not diff.strip():
        level = state["levels"][-1] if state["levels"] else "base"
        raise PatchError(f"{workdir}: nothing to record (no change against {level})")
    kept_header = None  # a refresh that changes no field keeps the header's bytes, line breaks and all
    if refresh:
        label = pending[0]
        target = root / label
        try:
            written = target.read_bytes()
        except FileNotFoundError:
            raise PatchError(f"{label}: patch file not found") from None
        old = parse_patch(written, label=label, path=target)
        if not (subject or why or upstream):
            kept_header = _written_header(written)
        subject, why, upstream = subject or old.subject, why or old.why, upstream or old.upstream
        number = patch_number(target.name) or 0
    else:
        assert subject and why  # checked above
        number = max((n for p in patches_dir.glob("*.patch") if (n := patch_number(p.name)) is not None),
                     default=0) + 1
        target = patches_dir / f"{number:04d}-{slug(subject)}.patch"
        label = str(target)
    header = kept_header or format_header(subject, why or "", upstream or "not proposed upstream").encode()
    data = header + diff
    parsed = parse_patch(data, label=str(target))  # refuses binary diffs and the like
    # patch(1)'s leftovers from redoing a change by hand would become part of the patch.
    leftovers = sorted(f.path for f in parsed.files if f.path.endswith((".orig", ".rej")))
    if leftovers:
        _git_ok(["reset", "-q"], workdir, what)  # unstage: the work dir is as the user left it
        raise PatchError(f"{workdir}: {len(leftovers)} patch(1) leftover file(s) would be recorded; "
                         "expected them removed first", details=leftovers)
    check = TreeView(workdir)
    _git_ok(["stash", "-q"], workdir, what)  # check the patch against the level it was diffed from
    try:
        result = check.try_apply(parsed)
    finally:
        _git_ok(["stash", "pop", "-q"], workdir, what)
    if isinstance(result, HunkFailure):
        raise PatchError(f"{target}: recorded diff does not apply to its own base", details=result.describe())
    write_atomic(target, data)
    _git_ok(["add", "-A"], workdir, what)
    _git_ok(["commit", "-q", "--no-verify", "-m", f"{target.name}\n\n{subject}"], workdir, what)
    state["levels"] = [*state["levels"], label]
    state["pending"] = pending[1:] if refresh else pending
    if refresh:  # the spec lists the rewritten file: its new bytes are what the work dir is made on
        state["made_on"] = [{"path": p["path"], "sha256": parsed.sha256 if p["path"] == label else p["sha256"]}
                            for p in state["made_on"]]
    else:
        state["recorded"] = [*state.get("recorded", []), {"path": label, "sha256": parsed.sha256}]
    upstreamed: list[str] = []
    if refresh:
        # Carry on with the patches after it, as edit does: apply what applies, retire what
        # the new code already has, and stop at the next one that needs a hand.
        while state["pending"]:
            nxt = parse_patch_file(root / state["pending"][0], label=state["pending"][0])
            view = TreeView(workdir)
            verdict, applies, _failure = view.classify(nxt)
            if verdict == "already-applied":
                upstreamed.append(nxt.label)
            elif applies is not None:
                view.changes.update(applies.changes)
                _commit_level(workdir, view, nxt, what)
                state["levels"].append(nxt.label)
            else:
                break
            state["pending"] = state["pending"][1:]
    state["upstreamed"] = [*state.get("upstreamed", []), *upstreamed]
    state_file.write_text(json.dumps(state, indent=2) + "\n")
    return RecordedPatch(source, target, number, tuple(f.path for f in parsed.files), parsed.sha256,
                         tuple(state["pending"]), tuple(upstreamed))


def patch_number(filename: str) -> int | None:
    """The NNNN of a ``NNNN-title.patch`` file name (None for another name): the order of a
    source's patches folder, which ``record`` numbers after."""
    found = re.match(r"(\d{4})-", filename)
    return int(found.group(1)) if found else None


def _check_base(workdir: Path, state: dict[str, Any], current: Sequence[LockedPatch], root: Path,
                patches_dir: Path | None, other_envs: Sequence[Path] = ()) -> None:
    """Refuse to record when the spec's patches are no longer those the work dir was made on
    (the new patch would be diffed against a base the spec does not build), or, for a new
    patch (``patches_dir``), when a numbered patch there that the work dir was not made on,
    nor another env lists (``other_envs``), would come between them and it."""
    if "made_on" not in state:
        raise _unknown_base(workdir, state)
    source, env = state["source"], state.get("env") or "ENV"
    redo = f"make a new work dir with `envlock patch edit {env} {source}` and redo your change there"

    def where(label: str) -> str:  # one name for a patch however it is spelled (relative, absolute)
        return os.path.normpath(root / label)

    made_on = [(str(p["path"]), str(p["sha256"])) for p in state["made_on"]]
    recorded = [(str(p["path"]), str(p["sha256"])) for p in state.get("recorded", [])]
    # A patch the work dir found already applied may stay in the spec or leave it (as the
    # advice says): the tree has its change either way.
    gone = {label: sha for label, sha in made_on if label in state.get("upstreamed", [])}
    expected = [(where(label), sha) for label, sha in made_on if label not in gone]
    actual = [(where(p.path), p.sha256) for p in current if gone.get(p.path) != p.sha256]
    mine = [(where(label), sha) for label, sha in recorded]
    extra = actual[len(expected):]
    if actual[:len(expected)] != expected or extra != mine[:len(extra)]:
        was = dict(expected + mine + [(where(label), sha) for label, sha in gone.items()])
        now = dict(actual)
        names = {where(label): label for label, _ in made_on + recorded} | {where(p.path): p.path for p in current}
        problems = [f"{names[key]}: removed from the spec" for key, _ in expected if key not in now]
        problems += [f"{names[key]}: added to the spec" for key in now if key not in was]
        problems += [f"{names[key]}: its file changed (sha256 {was[key][:12]} -> {sha[:12]})"
                     for key, sha in actual if key in was and was[key] != sha]
        if not problems:  # the same patches, in another order
            problems.append("the spec lists " + ", ".join(names[key] for key, _ in actual) + "; expected "
                            + ", ".join(names[key] for key, _ in expected)
                            + (", then those recorded here, in order: " + ", ".join(names[k] for k, _ in mine)
                               if mine else ""))
        raise PatchError(f"{workdir}: the spec's patches of source {source!r} are no longer those this work dir was "
                         f"made on, so a patch recorded here would be diffed against a tree the spec does not "
                         f"build; {redo}", details=problems)
    if patches_dir is None:
        return
    # The next number must follow the patches the work dir was made on: a higher-numbered
    # patch it was not made on (recorded from another work dir since) would be taken to come
    # before the new one, which was diffed without it.
    folder = os.path.normpath(patches_dir)
    base = {key for key, _ in expected + mine} | {where(label) for label in gone}
    top = max((n for key in base
               if os.path.dirname(key) == folder and (n := patch_number(os.path.basename(key))) is not None),
              default=0)
    # Not stray: what the work dir was made on, and what other envs list (the folder is the source's).
    known = base | {os.path.normpath(p) for p in other_envs}
    later = sorted(str(p) for p in patches_dir.glob("*.patch")
                   if os.path.normpath(p) not in known and (n := patch_number(p.name)) is not None and n > top)
    if later:
        shown = ", ".join(os.path.relpath(p, root) if p.startswith(os.path.normpath(root) + os.sep) else p
                          for p in later)
        it = "it" if len(later) == 1 else "them"
        raise PatchError(f"{workdir}: a new patch of source {source!r} would be numbered after {shown}, which this "
                         f"work dir was not made on (recorded from another work dir since?); the new patch was "
                         f"diffed without {it}. Add {it} to the spec and {redo}, or delete {it} if retired")
