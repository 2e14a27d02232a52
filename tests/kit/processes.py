"""Child processes of the tests: ``envlock`` in a process of its own (paused where a test kills it,
``kit.pause``), and bounded waits on what a child does (a file it writes, a flock it waits for).

Every child starts with SIGINT and SIGTERM at their defaults. A test run started with SIGINT
ignored (a background job of a non-interactive shell) would otherwise hand the ignored signal on
through ``exec``, and Python installs no ``KeyboardInterrupt`` handler where SIGINT is ignored at
its start: a test of what Ctrl-C does would then prove nothing (its child never sees the Ctrl-C).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]


def default_signals() -> None:
    """For ``preexec_fn``: SIGINT and SIGTERM at their defaults in the child, whatever this run inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def start(args: Sequence[str], **kwargs: Any) -> subprocess.Popen[str]:
    """``args`` started as ``subprocess.Popen`` (text, stdout and stderr piped unless given) with
    SIGINT and SIGTERM at their defaults."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(args, text=True, preexec_fn=default_signals, **kwargs)


def envlock(cwd: Path | None, home: Path, *args: str, env: Mapping[str, str] | None = None, paused: bool = False,
            **kwargs: Any) -> subprocess.Popen[str]:
    """``envlock ARGS`` in its own process, in ``cwd``, with ``ENVLOCK_HOME=home`` and ``env`` added.

    ``paused``: through ``kit.pause``, which stops at the points its ``PAUSE_*`` variables (in
    ``env``) name, so that a test can kill the process there or act beside it.
    """
    environ = {**os.environ, "ENVLOCK_HOME": str(home), **(env or {})}
    if paused:
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
        argv = [sys.executable, "-c", "import kit.pause; kit.pause.main()", *args]
    else:
        argv = [sys.executable, "-m", "envlock.cli.main", *args]
    return start(argv, cwd=cwd, env=environ, **kwargs)


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Return once ``cond()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


def waits_on_flock(path: Path, pid: int | None = None) -> bool:
    """Whether a process (``pid``, else any) is blocked on a ``flock`` of ``path``: a ``->`` line of
    /proc/locks naming the file (``MAJ:MIN:INODE``, as the kernel prints it) after the waiter's pid."""
    st = path.stat()
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split(":", 1)[1].split()  # [->] FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END
        if fields[0] == "->" and fields[5] == device and (pid is None or fields[4] == str(pid)):
            return True
    return False


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended, just not been reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
