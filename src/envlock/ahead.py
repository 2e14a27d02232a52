"""Read-only work started ahead, in a forked child, while the console script imports what a command needs.

A switch to a venv already in the store holds that venv's stat snapshot (an ``lstat`` per entry: ~25 ms
for 7k files) to the one kept for it, after ~30 ms of imports on one core. The console script starts the
walk ahead, once its fast no-op check has said no, for the venv the lock's bytes were last synced to
(``store.noop.venv_last_synced``); the child takes it on another core meanwhile, and ``take`` reads its
answer where the walk would have begun (``install.digest.Snapshot.taken_now``).

Forked before any thread exists (the console script's first steps: ``fork``'s rule), the child only
reads: it takes no lock, holds none of the parent's output (its stdin, stdout and stderr are
``/dev/null``: a caller reading envlock's output is not kept waiting by it), writes nothing but its
answer to a pipe, and ends with ``os._exit`` (no clean-up of the parent's is run twice). Ctrl-C and
SIGTERM end it at once (their default actions, set before they are let through); its answer is then
missing, and the work is done again, in the parent. An answer is taken only within ``FRESH`` seconds
of the fork: a command that waited longer (on a store lock) does the work again, as of now.
"""

from __future__ import annotations

import os
import signal
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

#: How long after the fork an answer may be taken: the imports and the plan of a command take ~50 ms
#: and a walk of 50k files ~0.3 s; a command that waited on a lock past this does the work itself.
FRESH = 1.0

#: key -> (the child's pid, the read end of its pipe, when it was forked: ``time.monotonic``)
_children: dict[str, tuple[int, int, float]] = {}
_ENDING = (signal.SIGINT, signal.SIGTERM)


def start(key: str, work: Callable[[], str]) -> bool:
    """Run ``work`` in a forked child, its answer kept for ``take(key)``; False when none was started."""
    if key in _children or not hasattr(os, "fork") or not hasattr(signal, "pthread_sigmask"):
        return False  # (no fork on Windows: the work is done in the process, when it is needed)
    try:
        read, write = os.pipe()
    except OSError:
        return False
    # Held back over the fork: an interrupt must neither run the parent's handler in the child nor
    # come between the fork and the child's default actions.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _ENDING)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(read)
        os.close(write)
        return False
    if pid == 0:  # the child: never returns
        code = 1
        try:
            for sig in _ENDING:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            os.close(read)
            nothing = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(nothing, fd)
            answer = memoryview(work().encode())
            while answer:
                answer = answer[os.write(write, answer):]
            code = 0
        finally:
            os._exit(code)  # an exception too: nothing of the parent's runs here again
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    os.close(write)
    _children[key] = (pid, read, time.monotonic())
    return True


def take(key: str) -> str | None:
    """The answer of the work started for ``key``, once the child has ended; None when none was started,
    it failed, or it was started more than ``FRESH`` seconds ago."""
    child = _children.pop(key, None)
    if child is None:
        return None
    pid, read, forked = child
    chunks = []
    try:
        while chunk := os.read(read, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(read)
    try:
        failed = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0
    except ChildProcessError:  # reaped by the kernel (SIGCHLD ignored, inherited): its answer is whole or none
        failed = False
    if failed or time.monotonic() - forked > FRESH:
        return None
    return b"".join(chunks).decode() or None
