"""The seams a long download runs through: ``Progress`` to show it, ``Stop`` to interrupt it,
and ``parallel`` to run several at once.

A foundation: stages (fetch, resolve) take these from their caller, and ``envlock.ui``
draws a ``Progress`` on a terminal; none of them prints.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence

from envlock.errors import FetchError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~2.5 ms of a sync, which loads this module)
if TYPE_CHECKING:
    import socket  # imported when a download starts (it costs ~4 ms a warm sync does not need)
    from typing import Any, Protocol, TypeVar

    _T = TypeVar("_T")
else:
    Protocol = object  # at run time Progress is a plain class: nothing checks an instance against it


class Progress(Protocol):
    """Receives download progress; every method must be thread-safe."""

    def begin(self, name: str, total: int | None) -> None: ...

    def advance(self, name: str, nbytes: int) -> None: ...

    def end(self, name: str) -> None: ...


class NullProgress:
    """Progress that shows nothing (not a terminal, ``-q``, tests)."""

    def begin(self, name: str, total: int | None) -> None:
        pass

    def advance(self, name: str, nbytes: int) -> None:
        pass

    def end(self, name: str) -> None:
        pass


class DownloadStoppedError(Exception):
    """A download stopped because its run was interrupted (Ctrl-C)."""


class Stop:
    """Set when the run is interrupted: downloads stop at once, wherever they wait.

    Between chunks they check it; a socket one is reading from is shut down, so a read
    waiting on a stalled server returns now, not at its timeout; retry back-offs and
    waits for another process's partial file poll it.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        with self._lock:
            self._event.set()
            for sock in self._sockets:
                _shut(sock)

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or raise ``DownloadStoppedError`` as soon as the run is stopped."""
        if self._event.wait(seconds):
            raise DownloadStoppedError("stopped")

    def check(self) -> None:
        if self._event.is_set():
            raise DownloadStoppedError("stopped")

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
            if self._event.is_set():
                _shut(sock)

    def unwatch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)


def _shut(sock: socket.socket) -> None:
    import socket  # only a run with a socket open gets here

    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def parallel(calls: Sequence[Callable[[Stop], _T]], jobs: int) -> list[_T | FetchError]:
    """Run ``calls`` on up to ``jobs`` threads; return each one's result or its ``FetchError``.

    A failed call does not stop the others: what they bring into the store is kept for
    the next run. An interrupt (Ctrl-C) in the caller sets the ``Stop`` every call is
    given, so the run stops at once instead of after every download finished; a
    download with a known hash keeps its partial file to resume.
    """
    from concurrent.futures import ThreadPoolExecutor  # only a run with downloads starts threads

    stop = Stop()
    out: list[_T | FetchError] = []
    futures: list[Any] = []
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(calls)))) as pool:
        try:
            # Submitted inside the try: an interrupt while a worker thread starts must stop it too.
            futures += [pool.submit(call, stop) for call in calls]
            for fut in futures:
                try:
                    out.append(fut.result())
                except FetchError as exc:
                    out.append(exc)
        except BaseException:
            stop.set()
            for fut in futures:
                fut.cancel()
            raise
    return out
