"""How long one network transfer may take in all, and the watchdog that ends one that takes longer.

A read timeout does not bound a transfer: a server that sends its headers, then a byte a second,
never lets a read time out, and a sync waited 18 minutes on such a cache. So every transfer
``http`` makes (an index page, a wheel, a cache's get, put or probe, an archive) is registered here
for its whole length, from the request to its last byte, and a watchdog thread ends it (shuts its
socket down, wherever its reader waits) when:

- it has taken longer than ``ENVLOCK_TRANSFER_TIMEOUT`` seconds (default 3600), plus one second per
  MiB of its size when that is known (a 4 GiB wheel gets 3600 + 4096 s); or
- it moved fewer than ``ENVLOCK_TRANSFER_MIN_RATE`` bytes per second (default 1024; 0: no floor)
  over a window of ``WINDOW`` seconds: a trickle is ended after a minute, not after the total.

The reader then fails with what happened (``Transfer.expired``), naming the limit and its variable.
``abort`` (an interrupt) ends every transfer under way, and every one started after it, at once.
git's transfers get the same limits from ``runner`` (``git_limits``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import socket


class Watcher(Protocol):
    """Told the socket a transfer reads, so it can shut it down (``progress.Stop``, a ``Transfer``)."""

    def watch(self, sock: socket.socket) -> None: ...

    def unwatch(self, sock: socket.socket) -> None: ...

TIMEOUT_VAR = "ENVLOCK_TRANSFER_TIMEOUT"
MIN_RATE_VAR = "ENVLOCK_TRANSFER_MIN_RATE"
DEFAULT_TIMEOUT = 3600.0
DEFAULT_MIN_RATE = 1024
WINDOW = 60.0  # seconds over which the minimum rate is averaged
SECONDS_PER_MIB = 1.0  # the total's allowance for a transfer of known size
_TICK = 0.1  # how often the watchdog looks (an interrupt is seen within it)


@dataclass(frozen=True)
class Limits:
    """What one transfer may take: ``total`` seconds (plus ``SECONDS_PER_MIB`` per MiB of a known
    size), and at least ``min_rate`` bytes per second over each ``window`` (0: no floor)."""

    total: float = DEFAULT_TIMEOUT
    min_rate: int = DEFAULT_MIN_RATE
    window: float = WINDOW

    @classmethod
    def configured(cls) -> Limits:
        """The limits ``ENVLOCK_TRANSFER_TIMEOUT`` and ``ENVLOCK_TRANSFER_MIN_RATE`` set (``UsageError``
        for a value that is no number)."""
        return cls(_number(TIMEOUT_VAR, DEFAULT_TIMEOUT, "seconds, a number above 0", positive=True),
                   int(_number(MIN_RATE_VAR, DEFAULT_MIN_RATE, "bytes per second, a whole number (0: no floor)",
                               whole=True)))

    def allowed(self, size: int | None) -> float:
        """Seconds a transfer of ``size`` bytes (None: unknown) may take in all."""
        return self.total + (size or 0) / (1 << 20) * SECONDS_PER_MIB


def _number(var: str, default: float, expected: str, *, positive: bool = False, whole: bool = False) -> float:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = -1
    if value < 0 or (positive and value == 0) or value != value or value == float("inf"):
        from envlock.errors import UsageError

        raise UsageError(f"{var}={raw!r}: expected {expected} (the default is {default:g})")
    return value


class Transfer:
    """One transfer under way: its clock, the bytes it moved, the sockets it reads. ``expired`` says
    why the watchdog ended it (None while it may go on)."""

    def __init__(self, url: str, limits: Limits, size: int | None = None, also: Watcher | None = None) -> None:
        self.url = url
        self.also = also  # told each socket too (a run's ``progress.Stop``)
        self.limits = limits
        self.size = size
        self.moved = 0
        self.expired: str | None = None
        self.started = time.monotonic()
        self._mark = (self.started, 0)  # the current window's start: (time, bytes moved by then)
        self._sockets: set[socket.socket] = set()

    def expect(self, size: int | None) -> None:
        """The transfer's size, once known (a Content-Length): it earns the size allowance."""
        if size is not None and size > (self.size or 0):
            self.size = size

    def count(self, nbytes: int) -> None:
        self.moved += nbytes

    def counted(self, body: IO[bytes]) -> _Counted:
        """``body`` (a request's) read through this transfer: an upload's rate is counted too."""
        return _Counted(body, self)

    def watch(self, sock: socket.socket) -> None:
        with _lock:
            self._sockets.add(sock)
            if self.expired is not None:
                _shut(sock)
        if self.also is not None:
            self.also.watch(sock)

    def unwatch(self, sock: socket.socket) -> None:
        with _lock:
            self._sockets.discard(sock)
        if self.also is not None:
            self.also.unwatch(sock)

    def _due(self, now: float) -> str | None:
        """Why the transfer must end now, or None (called by the watchdog)."""
        if _aborted:
            return "stopped: envlock was interrupted"
        allowed = self.limits.allowed(self.size)
        if now - self.started > allowed:
            return (f"timed out after {_seconds(allowed)} s, the most one transfer may take ({self.moved} bytes in; "
                    f"{TIMEOUT_VAR}={self.limits.total:g} plus {SECONDS_PER_MIB:g} s per MiB of a known size)")
        since, moved = self._mark
        if self.limits.min_rate and now - since >= self.limits.window:
            if self.moved - moved < self.limits.min_rate * (now - since):
                return (f"timed out: {self.moved - moved} bytes in the last {now - since:.0f} s, slower than "
                        f"{self.limits.min_rate} bytes/s ({MIN_RATE_VAR})")
            self._mark = (now, self.moved)
        return None


class _Counted:
    def __init__(self, body: IO[bytes], t: Transfer) -> None:
        self.body, self.t = body, t

    def read(self, n: int = -1) -> bytes:
        data = self.body.read(n)
        self.t.count(len(data))
        return data


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


_lock = threading.Lock()
_live: set[Transfer] = set()
_watchdog: threading.Thread | None = None
_aborted = False


@contextlib.contextmanager
def transfer(url: str, *, size: int | None = None, limits: Limits | None = None,
             also: Watcher | None = None) -> Iterator[Transfer]:
    """Register a transfer of ``url`` for the block (``limits``: the configured ones; ``also``: told
    its sockets too)."""
    global _watchdog
    t = Transfer(url, limits or Limits.configured(), size, also)
    with _lock:
        if _aborted:
            t.expired = "stopped: envlock was interrupted"
        _live.add(t)
        if _watchdog is None:
            _watchdog = threading.Thread(target=_watch, name="envlock-transfer-watchdog", daemon=True)
            _watchdog.start()
    try:
        yield t
    finally:
        with _lock:
            _live.discard(t)


def _watch() -> None:
    """End each transfer that is due, every ``_TICK``; stop when none is left (``transfer`` starts
    another when one comes)."""
    global _watchdog
    while True:
        time.sleep(_TICK)
        now = time.monotonic()
        with _lock:
            if not _live:
                _watchdog = None
                return
            for t in _live:
                if t.expired is None and (why := t._due(now)) is not None:
                    t.expired = why
                    for sock in t._sockets:
                        _shut(sock)


def _shut(sock: socket.socket) -> None:
    import socket

    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def abort() -> None:
    """End every transfer now and refuse new ones (an interrupt). Safe in a signal handler: it only
    sets a flag, which the watchdog reads within ``_TICK`` seconds."""
    global _aborted
    _aborted = True


def aborted() -> bool:
    return _aborted
