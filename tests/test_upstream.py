"""upstream: line ranges carried through a diff (the rest is end to end in test_rebase)."""

from __future__ import annotations

import pytest

from envlock.patches.upstream import map_line

# A -U0 diff of a 20-line file: 2 lines inserted after line 3, line 10 replaced by 3, 15-16 deleted.
HUNKS = [(3, 0, 4, 2), (10, 1, 12, 3), (15, 2, 16, 0)]


@pytest.mark.parametrize(("line", "end", "mapped"), [
    (1, False, 1),     # before everything
    (4, False, 6),     # after the insertion: +2
    (3, True, 5),      # a range ending at the line the insertion follows takes the insertion in
    (10, False, 12),   # a replaced line: the start of what replaced it
    (10, True, 14),    # ... and its end
    (12, False, 16),   # after the replacement: +2 +2
    (15, True, 15),    # a deleted line: the edge of where it was
    (20, False, 22),   # after the deletion: +2 +2 -2
])
def test_map_line(line: int, end: bool, mapped: int) -> None:
    assert map_line(HUNKS, line, end=end) == mapped
