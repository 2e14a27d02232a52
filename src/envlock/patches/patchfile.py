"""Patch files: envlock's reading of a unified diff in git format, with its short header.

A patch is a header (``Subject:``, ``Why:``, ``Upstream:``, then a ``---`` line) above
per-file diffs. The parser refuses, naming the patch and the line, what envlock will not
apply safely: a path with ``..``, an absolute path, a ``.git`` component or a NUL byte,
binary patches, renames and copies, symlinks, malformed modes and C-quoted escapes.
Applying is ``patchapply`` (hunk by hunk on a ``treeview``; 3-way: ``patchmerge``); the edit/record
workflow is ``patchedit``.
"""

from __future__ import annotations

import hashlib
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import PatchError
from envlock.model.lockfile import LockedPatch
from envlock.workspace import leaves

_HUNK = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_HEADER_KEYS = ("Subject", "Why", "Upstream", "Rebased-onto")


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` hunk of a file diff."""

    header: str  # the "@@ -a,b +c,d @@ ..." line
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[tuple[str, bytes], ...]  # (" " | "-" | "+", line bytes with its newline, if any)

    @property
    def old(self) -> list[bytes]:
        """The lines the hunk expects in the file (context and removed)."""
        return [text for op, text in self.lines if op != "+"]

    @property
    def new(self) -> list[bytes]:
        """The lines the hunk leaves in their place (context and added)."""
        return [text for op, text in self.lines if op != "-"]

    def reversed(self) -> Hunk:
        """The hunk that undoes this one."""
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
    """One file's diff in a patch: its paths, modes and hunks."""

    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: tuple[Hunk, ...]
    new_mode: int | None = None  # set by "new file mode" / "new mode"
    old_mode: int | None = None

    @property
    def path(self) -> str:
        """The file the diff touches (its new name, or the old one for a deletion)."""
        path = self.new_path or self.old_path
        assert path is not None
        return path

    def reversed(self) -> FilePatch:
        """The file diff that undoes this one."""
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
    rebased_onto: str = ""  # the commit `patch rebase` last rewrote it for ("" if never)

    def reversed(self) -> PatchFile:
        """The patch that undoes this one (a patch already applied is one whose reverse applies)."""
        return PatchFile(
            self.label,
            self.path,
            self.sha256,
            tuple(f.reversed() for f in self.files),
            self.subject,
            self.why,
            self.upstream,
            self.rebased_onto,
        )

    @property
    def paths(self) -> tuple[str, ...]:
        """Every file the patch reads or writes, in order, once each."""
        return tuple(dict.fromkeys(p for f in self.files for p in (f.old_path, f.new_path) if p is not None))

    def locked(self) -> LockedPatch:
        """The patch as a lock records it: its label and sha256."""
        return LockedPatch(path=self.label, sha256=self.sha256)


def load_patches(root: Path, labels: Iterable[str]) -> list[PatchFile]:
    """Read and parse the patches a source lists (paths relative to the workspace ``root``, and inside it:
    ``PatchError`` for one a symbolic link takes out)."""
    found = []
    for label in labels:
        if (out := leaves(root, label)) is not None:
            raise PatchError(f"{label}: a symbolic link takes it out of the workspace (to {out}); expected a "
                             "patch file inside the workspace")
        found.append(parse_patch_file(root / label, label=label))
    return found


def parse_patch_file(path: Path, *, label: str | None = None) -> PatchFile:
    """Read and parse one patch file, named ``label`` (else its path) in errors; ``PatchError`` if it is missing."""
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
        rebased_onto=fields.get("Rebased-onto", ""),
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


def written_header(data: bytes) -> bytes | None:
    """The header above a patch's diff as written, through its first ``---`` line (as
    ``_parse_header`` reads it), looked for only before the first file diff (as ``parse_patch``
    finds that); None when it has none. What follows it there (a diffstat) is not kept."""
    lines = data.split(b"\n")
    end = next((i for i in range(len(lines)) if _starts_file(lines, i)), len(lines))
    sep = next((i for i in range(end) if lines[i].rstrip() == b"---"), None)
    return None if sep is None else b"\n".join(lines[:sep + 1]) + b"\n"


def with_rebased_onto(data: bytes, commit: str) -> bytes:
    """The header of patch ``data`` (as ``written_header`` finds it) with a ``Rebased-onto: COMMIT``
    line just above its ``---`` (replacing an earlier one); a patch without a header gets one
    of that line alone. Everything else is kept byte for byte; the diff is not included."""
    header = written_header(data)
    line = f"Rebased-onto: {commit}\n".encode()
    if header is None:
        return line + b"---\n"
    lines = header.split(b"\n")[:-2]  # without the "---" line and the empty string after it
    kept = [raw + b"\n" for raw in lines if not raw.startswith(b"Rebased-onto:")]
    return b"".join(kept) + line + header.split(b"\n")[-2] + b"\n"


def format_file_patch(fp: FilePatch, hunks: Sequence[Hunk] | None = None) -> bytes:
    """One file's diff (or only ``hunks`` of it) as unified-diff text, as a ``.rej`` file holds it."""
    old = f"a/{fp.old_path}" if fp.old_path is not None else "/dev/null"
    new = f"b/{fp.new_path}" if fp.new_path is not None else "/dev/null"
    out = [f"--- {old}\n+++ {new}\n".encode()]
    for hunk in fp.hunks if hunks is None else hunks:
        out.append(hunk.header.encode() + b"\n")
        for op, text in hunk.lines:
            ending = b"" if text.endswith(b"\n") else b"\n\\ No newline at end of file\n"
            out.append(op.encode() + text + ending)
    return b"".join(out)


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
