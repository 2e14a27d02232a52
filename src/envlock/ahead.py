"""Read-only work started ahead, in a forked child, while the console script imports what a command needs.

A switch to a venv already in the store holds that venv's stat snapshot (an ``lstat`` per entry: ~25 ms
for 7k files) to the one kept for it, after ~30 ms of imports on one core. The console script starts the
walk ahead, once its fast no-op check has said no, for the venv the lock's bytes were last synced to
(``store.noop.venv_last_synced``); the child takes it on another core meanwhile, and ``take`` reads its
answer where the walk would have begun (``install.digest.Snapshot.taken_now``).

Forked before any thread exists (the console script's first steps: ``fork``'s rule), the child only
reads: it takes no lock, writes nothing but its answer to a pipe, and ends with ``os._exit`` (no
clean-up of the parent's is run twice). An interrupt reaches it as it reaches envlock (one process
group) and ends it; its answer is then missing, and the work is done again, in the parent.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

#: key -> (the child's pid, the read end of its pipe)
_children: dict[str, tuple[int, int]] = {}


def start(key: str, work: Callable[[], str]) -> bool:
    """Run ``work`` in a forked child, its answer kept for ``take(key)``; False when none was started."""
    if key in _children:
        return False
    try:
        read, write = os.pipe()
    except OSError:
        return False
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return False
    if pid == 0:  # the child
        code = 1
        try:
            os.close(read)
            answer = memoryview(work().encode())
            while answer:
                answer = answer[os.write(write, answer):]
            code = 0
        finally:
            os._exit(code)  # an exception too: nothing of the parent's runs here again
    os.close(write)
    _children[key] = (pid, read)
    return True


def take(key: str) -> str | None:
    """The answer of the work started for ``key``, once the child has ended; None when none was started
    or it failed."""
    child = _children.pop(key, None)
    if child is None:
        return None
    pid, read = child
    chunks = []
    try:
        while chunk := os.read(read, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(read)
        _, status = os.waitpid(pid, 0)
    return b"".join(chunks).decode() if os.waitstatus_to_exitcode(status) == 0 else None
