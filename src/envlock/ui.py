"""Progress for downloads: a rich bar on a terminal (bytes, rate, ETA), nothing otherwise.

Only the CLI uses this; core stages take any ``envlock.progress.Progress``. rich is
imported only when a bar is actually drawn, keeping it off the no-op sync path.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from envlock.progress import NullProgress, Progress

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a sync loads this module)
if TYPE_CHECKING:
    from typing import Any, TextIO


class RichProgress:
    """One rich task per artifact on stderr; thread-safe (rich's Progress locks itself)."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as _Bar

        self._bar = _Bar(
            TextColumn("{task.description}", table_column=None),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(file=stream),
            transient=False,
        )
        self._tasks: dict[str, Any] = {}
        self._lock = threading.Lock()

    def begin(self, name: str, total: int | None) -> None:
        with self._lock:
            task = self._tasks.get(name)
            if task is None:
                self._tasks[name] = self._bar.add_task(name, total=total)
            else:  # a download started over: the same bar, from zero
                self._bar.reset(task, total=total)

    def advance(self, name: str, nbytes: int) -> None:
        task = self._tasks.get(name)
        if task is not None:
            self._bar.advance(task, nbytes)

    def end(self, name: str) -> None:
        task = self._tasks.get(name)
        if task is not None:
            self._bar.stop_task(task)

    def __enter__(self) -> RichProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()


class StatusProgress(NullProgress):
    """Download progress as the text of a status line.

    For work shown by a spinner (``envlock lock``): rich draws one live display at a
    time, so the downloads are summed into the spinner's text instead of bars, and the
    text is ``message`` again once they are done.
    """

    def __init__(self, update: Callable[[str], None], message: str) -> None:
        self._update = update
        self._message = message
        self._files: dict[str, tuple[int, int | None]] = {}  # name -> (bytes so far, total)
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._shown = 0.0

    def begin(self, name: str, total: int | None) -> None:
        with self._lock:
            self._files[name] = (0, total)
            self._running.add(name)
            self._show(force=True)

    def advance(self, name: str, nbytes: int) -> None:
        with self._lock:
            done, total = self._files.get(name, (0, None))
            self._files[name] = (done + nbytes, total)
            self._show()

    def end(self, name: str) -> None:
        with self._lock:
            self._running.discard(name)
            self._show(force=True)

    def _show(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._shown < 0.1:  # chunks arrive far faster than anyone reads
            return
        self._shown = now
        if not self._running:
            self._update(self._message)
            return
        done = sum(d for d, _ in self._files.values())
        totals = [t for _, t in self._files.values()]
        of = f" of {size(sum(t for t in totals if t is not None))}" if None not in totals else ""
        count = len(self._files)
        self._update(f"{self._message}: downloading {count} wheel{'s' if count > 1 else ''} "
                     f"to hash {'them' if count > 1 else 'it'}, {size(done)}{of}")


def size(n: int) -> str:
    """Bytes for people: 743.4 kB, 9.4 MB."""
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB"):
        value /= 1000
        if value < 999.95:  # what rounds to 1000.0 is the next unit's 1.0
            return f"{value:.1f} {unit}"
    return f"{value / 1000:.1f} GB"


class _Quiet(NullProgress):
    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def progress(*, quiet: bool = False) -> RichProgress | _Quiet:
    """A context-managed ``Progress``: a bar when stderr is a terminal and not ``quiet``."""
    if quiet or not sys.stderr.isatty():
        return _Quiet()
    return RichProgress(sys.stderr)


__all__ = ["Progress", "RichProgress", "StatusProgress", "progress", "size"]
