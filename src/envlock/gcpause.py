"""The cyclic garbage collector paused where envlock makes many objects that live on and no garbage
cycles: start-up with the imports of a command, and a venv's digest walk (a row per file).

CPython collects the youngest objects every 700 allocations and moves the survivors up, to be
scanned again there. Everything the imports make (modules, classes, functions) and every row of a
walk survives, so each collection is scanned work for nothing: ~80 collections, 8-14 ms of a
warm sync of 158 wheels (docs/performance.md). Objects that die are still freed at once by
reference counting; only cycles wait for the collector, which runs again once the pause ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def start_up() -> bool:
    """Pause collecting for start-up and the imports; whether it was on (``command_starts``'s input)."""
    collecting = gc.isenabled()
    gc.disable()
    return collecting


def command_starts(collecting: bool) -> None:
    """The imports are done: what they made is kept out of every later collection (``gc.freeze``),
    and collecting goes on as it was before ``start_up``."""
    if collecting:
        gc.freeze()
        gc.enable()


def command_ended(collecting: bool, *, exiting: bool) -> None:
    """After the command: collecting as it was before ``start_up``, and the frozen objects made collectable
    again (a process that runs several commands, as the tests do). Unless the process is ``exiting`` (the
    console script): the collector is then off (a pause inside the command may have turned it on again),
    so nothing the command made is scanned before the process ends with it (a pass over a sync's objects:
    0.5-1 ms)."""
    if exiting:
        gc.disable()
        return
    gc.unfreeze()
    if collecting:
        gc.enable()


def off_for_the_command() -> None:
    """No collection from here to the end of the command, for one whose objects live on and form no cycles
    (a sync: its modules, a lock's tables, a row per venv file). ``command_ended`` decides what comes after:
    collecting as it was, or, when the process is exiting, nothing (a pause that ended inside the command
    would have scanned everything it made at once: 0.5-1 ms of a sync)."""
    gc.disable()


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside the block (one that makes many objects and no cycles); as before after it."""
    collecting = start_up()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
