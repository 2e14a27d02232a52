"""What upstream did between two commits, read from the store's git mirror: the commits that
touch a set of files, and which of them touch given lines (``git log -L``, git's own tracking of
a line range through history), for ``patch status --against`` ("has upstream touched this?").
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envlock import runner
from envlock.errors import SourceError
from envlock.model.jsondoc import json_doc

Touch = Literal["touched", "same-file"]
_U0_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class UpstreamCommit:
    """An upstream commit that touches a patch's files: ``touched`` if it changes lines within
    the patch's hunks, ``same-file`` if only elsewhere in those files."""

    commit: str
    subject: str
    touch: Touch
    files: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


def _git(mirror: Path, args: Sequence[str | os.PathLike[str]]) -> str:
    return runner.git_checked(["--git-dir", mirror, *args], what=f"{mirror}: history", error=SourceError).stdout


def commits_touching(mirror: Path, old: str, new: str, ranges: Mapping[str, Sequence[tuple[int, int]]]
                     ) -> list[UpstreamCommit]:
    """The commits in ``old..new`` that touch the files of ``ranges`` (newest first), each marked
    ``touched`` when it changes lines within the file's ``ranges`` (1-based, inclusive, as at ``old``;
    none: the file is new, any commit touching it touches the patch)."""
    if not ranges or old == new:
        return []
    out = _git(mirror, ["log", "--no-renames", "--format=%x01%H%x00%s", "--name-only", f"{old}..{new}", "--",
                        *sorted(ranges)])
    found: list[tuple[str, str, list[str]]] = []
    for line in out.splitlines():
        if line.startswith("\x01"):
            commit, _, subject = line[1:].partition("\x00")
            found.append((commit, subject, []))
        elif line.strip() and found:
            found[-1][2].append(line.strip())
    if not found:
        return []
    touched: set[str] = set()
    for path, spans in ranges.items():
        touched |= _touching_lines(mirror, old, new, path, spans)
    return [UpstreamCommit(c, s, "touched" if c in touched else "same-file", tuple(f)) for c, s, f in found]


def _touching_lines(mirror: Path, old: str, new: str, path: str, spans: Sequence[tuple[int, int]]) -> set[str]:
    """The commits in ``old..new`` that change the lines ``spans`` of ``path`` (as at ``old``)."""
    every = set(_git(mirror, ["log", "--format=%H", f"{old}..{new}", "--", path]).split())
    size = runner.git(["--git-dir", mirror, "cat-file", "-s", f"{new}:{path}"])
    if not spans or not size.ok:  # a new file, or one upstream deleted: every commit on it counts
        return every
    count = len(_git(mirror, ["show", f"{new}:{path}"]).splitlines())
    if count == 0:
        return every
    diff = _git(mirror, ["diff", "--no-renames", "-U0", old, new, "--", path])
    hunks = [(int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1)) for m in _U0_HUNK.finditer(diff)]
    args: list[str] = []
    for start, end in spans:
        first, last = map_line(hunks, start, end=False), map_line(hunks, end, end=True)
        first, last = min(max(first, 1), count), min(max(last, first), count)
        args.append(f"-L{first},{last}:{path}")
    return set(_git(mirror, ["log", "-s", "--format=%H", *args, f"{old}..{new}"]).split()) & every


def map_line(hunks: Sequence[tuple[int, int, int, int]], line: int, *, end: bool) -> int:
    """Line ``line`` of the old file in the new one, through a ``-U0`` diff's hunks (old start,
    old count, new start, new count); a line a hunk replaced maps to the edge of what replaced it."""
    delta = 0
    for a, b, c, d in hunks:
        if b == 0:  # an insertion after old line a
            if a < line or (a == line and end):
                delta += d
            continue
        if a + b - 1 < line:
            delta += d - b
        elif a <= line:
            return c + d - 1 if end else c
    return line + delta
