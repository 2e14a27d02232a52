"""An opt-in step timeline: with ``ENVLOCK_TIMINGS=1`` each ``mark`` writes one line to stderr.

    envlock-timing   412.3 ms  +38.1 ms wall  cpu +36.0 ms (self 201.0, uv & co 140.2)  walk the venv

The line says how long the step that ends at the mark took (wall clock and CPU time since the
previous mark) and this process's and its waited-for children's CPU time so far (the first mark
includes the interpreter's start-up, which no mark sees start). Wall clock is the time since this
module was imported (``__main__``'s first instruction). Off, the default, a mark is one test of a
flag: ``os``, ``sys`` and ``time`` are loaded before any of envlock is. docs/performance.md says
where the time of each path goes, measured with it.
"""

from __future__ import annotations

import os
import sys
import time

#: Whether marks are written (read once, when the process starts).
ON = os.environ.get("ENVLOCK_TIMINGS", "") not in ("", "0")

_T0 = time.perf_counter()
_last = [_T0, 0.0]  # wall and total CPU time at the previous mark


def mark(step: str) -> None:
    """End ``step``: write its wall and CPU time (no-op unless ``ENVLOCK_TIMINGS`` is set)."""
    if not ON:
        return
    now = time.perf_counter()
    t = os.times()
    own, children = t.user + t.system, t.children_user + t.children_system
    cpu = own + children
    sys.stderr.write(f"envlock-timing {(now - _T0) * 1000:8.1f} ms {(now - _last[0]) * 1000:+7.1f} ms wall  "
                     f"cpu {(cpu - _last[1]) * 1000:+7.1f} ms (self {own * 1000:.1f}, uv & co "
                     f"{children * 1000:.1f})  {step}\n")
    _last[0], _last[1] = now, cpu
