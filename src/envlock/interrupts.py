"""SIGINT and SIGTERM end envlock within 2 seconds, whatever its threads do: one line, exit 130 or 143.

``cli.main`` calls ``install`` (from the main thread; a signal a parent set to be ignored stays
ignored, as ``run``'s command must inherit it). Then a signal:

- raises ``KeyboardInterrupt`` (``Terminated`` for SIGTERM) in the main thread, which unwinds as it
  always did: a download keeps its partial file, a running tool is asked to clean up, nothing half
  made is published, and ``cli.main`` says one line (``say``);
- reaches a watcher thread at once, through Python's wakeup file descriptor (written by the C-level
  handler, so also while the main thread is stuck in C): it ends every network transfer under way
  (``transfers.abort``: a download thread blocked on a server that trickles a byte a second returns
  now, not after 18 minutes), and gives the unwinding ``GRACE`` seconds. If envlock has not exited
  by then (a thread that cannot be stopped, a join that waits on one), or at a second signal, it says
  the line (once), kills what envlock started and exits with the code: no "Exception ignored"
  traceback from an interpreter waiting on its threads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

from envlock.errors import Terminated, asks_json, json_error

GRACE = 1.5  # seconds the main thread has to unwind after a signal, before the process is ended

_said = threading.Lock()  # held once the line is said (by ``say`` or the last resort)
_raised = False  # a signal was raised in the main thread: a second one only ends the process
_installed: tuple[int, int, int, threading.Thread] | None = None  # the wakeup pipe, the old fd, the watcher


def install() -> bool:
    """Handle SIGINT and SIGTERM as above (those not ignored by a parent); False where it cannot be
    done (not the main thread). Undone by ``uninstall`` unless a signal came."""
    global _installed
    if threading.current_thread() is not threading.main_thread() or _installed is not None:
        return False
    handled = [sig for sig, usual in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))
               if signal.getsignal(sig) is usual]
    if not handled:
        return False
    read, write = os.pipe()
    os.set_blocking(write, False)
    watcher = threading.Thread(target=_watch, args=(read,), name="envlock-signals", daemon=True)
    for sig in handled:
        signal.signal(sig, _raise)
    _installed = (read, write, signal.set_wakeup_fd(write, warn_on_full_buffer=False), watcher)
    watcher.start()
    return True


def uninstall() -> None:
    """Give SIGINT and SIGTERM back their usual handling (an in-process caller: the tests), unless a
    signal came: then the watcher stays, to end the process if it does not end."""
    global _installed
    if _installed is None or _raised:
        return
    read, write, before, watcher = _installed
    _installed = None
    signal.set_wakeup_fd(before)
    for sig, usual in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) is _raise:
            signal.signal(sig, usual)
    os.close(write)  # the watcher reads the end of its pipe and returns
    watcher.join()
    os.close(read)


def _raise(signum: int, frame: object) -> None:
    global _raised
    if _raised:
        return  # a second signal: the watcher ends the process; raising again would end in a traceback
    _raised = True
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _watch(read: int) -> None:
    import select

    first: int | None = None
    while True:
        timeout = None if first is None else GRACE
        ready, _, _ = select.select([read], [], [], timeout)
        if not ready:  # the grace is over
            assert first is not None
            _end(first)
        data = os.read(read, 64)
        if not data:
            return  # uninstalled
        for sig in data:
            if sig not in (signal.SIGINT, signal.SIGTERM):
                continue
            if first is not None:
                _end(first)  # a second signal: now
            first = sig
            # A transfer runs only once its module is loaded: one a sync from the store never imports.
            transfers = sys.modules.get("envlock.transfers")
            if transfers is not None:
                transfers.abort()


def say(code: int, kind: str, *, json: bool, force: bool = False) -> bool:
    """Say that envlock was interrupted (``code`` 130) or terminated (143): one line on stderr, and
    the JSON error document on stdout when ``--json`` was asked. After a signal (or ``force``: the
    last resort) only once per process: False when it was said already."""
    if (_raised or force) and not _said.acquire(blocking=False):
        return False
    said = "terminated" if code == 143 else "interrupted"
    document = json_error(said, (), kind, code) + "\n" if json else ""
    if force:  # the last resort writes past Python's buffers: the main thread may hold them, stuck
        with contextlib.suppress(OSError):
            os.write(1, document.encode())
            os.write(2, f"envlock: {said}\n".encode())
        return True
    print(document, end="", flush=True)
    print(f"envlock: {said}", file=sys.stderr, flush=True)
    return True


def _end(sig: int) -> None:
    """The last resort: say the line, kill what envlock started, exit with the signal's code."""
    code = 143 if sig == signal.SIGTERM else 130
    with contextlib.suppress(Exception):
        say(code, "Terminated" if code == 143 else "KeyboardInterrupt", json=asks_json(sys.argv[1:]), force=True)
    with contextlib.suppress(Exception):
        from envlock.runner import kill_descendants

        kill_descendants()
    os._exit(code)
