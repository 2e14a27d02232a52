"""Progress for downloads: a rich bar on a terminal (bytes, rate, ETA), nothing otherwise.

Only the CLI uses this; core stages take any ``envlock.fetch.Progress``. rich is
imported only when a bar is actually drawn, keeping it off the no-op sync path.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, TextIO

from envlock.fetch import NullProgress, Progress


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
            self._tasks[name] = self._bar.add_task(name, total=total)

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


__all__ = ["Progress", "RichProgress", "progress"]
