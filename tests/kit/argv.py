"""Every command line a test's code starts, and every one its descendants show in /proc.

``command_lines()`` records, for the block: the argv of each process this Python starts (an audit
hook on ``subprocess.Popen``, which sees every one, however short-lived), and the
``/proc/PID/cmdline`` of every descendant process seen while the block runs (uv's own children
too), read every few milliseconds. What any user of the machine could read in ``ps`` is in there.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_active: list[list[str]] = []  # the recorders of the blocks under way
_installed = False
_lock = threading.Lock()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen" and _active:
        argv = args[1]
        line = " ".join(os.fsdecode(a) for a in argv) if isinstance(argv, (list, tuple)) else os.fsdecode(argv)
        with _lock:
            for seen in _active:
                seen.append(line)


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    parent = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(parent, []).append(int(name))
    out, todo = [], list(parents.get(pid, ()))
    while todo:
        child = todo.pop()
        out.append(child)
        todo += parents.get(child, ())
    return out


def _poll(seen: list[str], stop: threading.Event) -> None:
    me = os.getpid()
    while not stop.wait(0.005):
        for pid in _descendants(me):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    line = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            except OSError:
                continue
            if line:
                with _lock:
                    seen.append(line)


@contextmanager
def command_lines() -> Iterator[list[str]]:
    """The command lines started and seen during the block (filled as it runs)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)  # for the session: an audit hook cannot be removed
        _installed = True
    seen: list[str] = []
    stop = threading.Event()
    poller = threading.Thread(target=_poll, args=(seen, stop), daemon=True)
    with _lock:
        _active.append(seen)
    poller.start()
    try:
        yield seen
    finally:
        stop.set()
        poller.join()
        with _lock:
            _active.remove(seen)
