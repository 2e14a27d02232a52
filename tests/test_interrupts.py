"""``interrupts`` and ``transfers``: SIGINT and SIGTERM end envlock within 2 s whatever its threads
do (130/143, one line, no traceback), and a transfer's total deadline ends a trickling server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envlock.store.store import Store
from kit.cacheservers import Trickle
from kit.index import IndexServer
from kit.locks import sha256_of, sync_workspace
from kit.processes import start, wait_for
from kit.wheels import build_wheel


def _sync_from_trickling_cache(server: IndexServer, tmp_path: Path, trickle: Trickle,
                               **extra: str) -> tuple[subprocess.Popen[str], Path]:
    """``envlock sync`` of a one-wheel lock whose cache answers with headers, then a byte a second."""
    wheel = build_wheel(tmp_path / "wheels", "tiny", "1.0")
    server.add("pypi", wheel)
    ws, lock = sync_workspace(server, tmp_path, wheel)
    env = dict(os.environ, ENVLOCK_HOME=str(tmp_path / "home"), ENVLOCK_CACHE_URLS=trickle.url, **extra)
    proc = start([sys.executable, "-m", "envlock.cli.main", "sync", "demo", "--lock", str(lock), "--json"], cwd=ws,
                 env=env)
    return proc, wheel


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGTERM, 143, "terminated"),
                                                   (signal.SIGINT, 130, "interrupted")])
def test_a_signal_ends_a_sync_stuck_on_a_trickling_cache_within_2_s(server: IndexServer, tmp_path: Path,
                                                                   sig: signal.Signals, code: int, said: str) -> None:
    # As found: headers, then a byte a second; the cache's read timeout never fires, the download
    # thread never ends, and SIGTERM and SIGINT waited on it (18 minutes), then an "Exception
    # ignored ... KeyboardInterrupt" traceback on a second Ctrl-C.
    with Trickle(every=1.0) as trickle:
        proc, _ = _sync_from_trickling_cache(server, tmp_path, trickle)
        try:
            wait_for(lambda: trickle.gets > 0 or proc.poll() is not None, "the cache's GET")
            time.sleep(1.0)
            assert proc.poll() is None, proc.communicate()
            sent = time.monotonic()
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert (proc.returncode, err) == (code, f"envlock: {said}\n"), err
    assert took < 2.0, took
    assert json.loads(out)["error"]["exit_code"] == code


def test_the_transfer_deadline_alone_ends_a_trickling_cache_and_names_it(server: IndexServer,
                                                                         tmp_path: Path) -> None:
    # No signal: ENVLOCK_TRANSFER_TIMEOUT bounds the whole transfer; the cache is noted and the
    # index serves the wheel (a cache never fails a sync).
    with Trickle(size=1000, every=1.0) as trickle:
        started = time.monotonic()
        proc, wheel = _sync_from_trickling_cache(server, tmp_path, trickle, ENVLOCK_TRANSFER_TIMEOUT="2")
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        took = time.monotonic() - started
    assert proc.returncode == 0, err
    note = json.loads(out)["note"]
    sha = sha256_of(wheel)
    assert re.search(rf"cache {re.escape(trickle.url)}: wheels/{sha}: timed out after 2 s, the most one transfer "
                     r"may take \(\d+ bytes in; ENVLOCK_TRANSFER_TIMEOUT=2 plus 1 s per MiB of a known size\): not "
                     "used for the rest of this command", note), note
    assert took < 30, took
    assert Store.open(tmp_path / "home").has("wheels", sha)


STUCK_THREAD = """
import sys, threading, time
from envlock import interrupts
from envlock.errors import interrupted
interrupts.install()  # as cli.main does
stuck = threading.Thread(target=time.sleep, args=(60,))  # not a daemon: the interpreter waits on it at exit
stuck.start()
try:  # "ready" is said inside the try: a signal right after it still finds the handler
    print("ready", flush=True)
    stuck.join()
except KeyboardInterrupt as exc:
    code = interrupted(exc)[1]
    interrupts.say(code, type(exc).__name__, json=False)
    sys.exit(code)
"""


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT], [signal.SIGINT, signal.SIGINT]],
                         ids=["SIGTERM", "SIGINT", "Ctrl-C twice"])
def test_a_thread_that_cannot_be_stopped_does_not_hold_envlock_past_2_s(signals: list[signal.Signals]) -> None:
    # The interpreter joins every non-daemon thread before it exits: one stuck for a minute held
    # envlock for that minute after its "terminated", and a second Ctrl-C there printed an
    # "Exception ignored ... KeyboardInterrupt" traceback.
    proc = start([sys.executable, "-c", STUCK_THREAD])
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    sent = time.monotonic()
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.2)
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    code = 143 if signals[0] == signal.SIGTERM else 130
    assert (proc.returncode, err) == (code, f"envlock: {'terminated' if code == 143 else 'interrupted'}\n")
    assert took < 2.0, took
