"""The ``envlock`` console script and ``python -m envlock``: ``cli.main``, with Ctrl-C handled
from the first instruction on.

``cli.main`` answers an interrupt with one line and exit 130, but only once its own
handler is in place: an interrupt during the imports and the argument parsing before
that (the first ~50 ms, when a supervisor stops a service it just started) would end
in a traceback. This module imports nothing but ``sys`` before it is guarding, and
answers the fast no-op (``envlock.store.noop``) before ``cli`` and its imports are loaded.
"""

from __future__ import annotations

import os
import sys

from envlock import deferred, gcpause, timings  # gc, contextlib, os, sys, time, types: loaded already


def main() -> int:
    collecting = gcpause.start_up()  # until the command's imports are done (cli.main)
    deferred.defer()  # inspect and ipaddress: loaded where used, not with the modules that import them
    try:
        # An up-to-date `envlock sync ENV` is answered before cli (argparse, json) is imported.
        from envlock.store.noop import answer_noop

        fast = answer_noop(sys.argv[1:], ahead=_start_ahead)
        if fast is not None:
            timings.mark("start-up and the fast no-op (answered)")
            return _exit_now(fast)
        timings.mark("start-up and the fast no-op check")
        from envlock.cli.main import main as cli_main

        return _exit_now(cli_main(fast_path=False, collecting=collecting))
    except KeyboardInterrupt as exc:  # or Terminated: SIGTERM once cli.main's handler is in place
        from envlock.errors import asks_json, interrupted
        from envlock.interrupts import say

        code = interrupted(exc)[1]
        say(code, type(exc).__name__, json=asks_json(sys.argv[1:]))  # the document cli.main gives, as promised
        return code


def _start_ahead(venv: str) -> None:
    """Before the imports of a sync the fast no-op did not answer, whose lock's bytes were last synced to
    store venv ``venv``: that venv's stat snapshot is taken in a forked child meanwhile (``ahead``; a
    switch holds it to the one kept). Here, before any thread is started."""
    from envlock import ahead

    def snapshot() -> str:
        from envlock.install.digest import Snapshot  # in the child: its imports are its own

        return Snapshot.ahead(venv)

    ahead.start(os.path.basename(venv), snapshot)


def _exit_now(code: int) -> int:
    """End the process with ``code`` at once, without the interpreter's teardown (freeing every module
    and object one by one: 2.6 ms of a warm sync, paired), when nothing is left for an exit to do:
    stdout and stderr flushed, no ``atexit`` callback and no thread but this one. Else ``code`` is
    returned, for the ordinary exit."""
    import atexit

    threading = sys.modules.get("threading")
    if atexit._ncallbacks() or (threading is not None and threading.active_count() > 1):
        return code
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a reader gone, a stream closed: the ordinary exit reports it
        return code
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
