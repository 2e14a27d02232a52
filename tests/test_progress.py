"""Progress seams: ``Stop`` interrupts a download wherever it waits; ``parallel`` runs calls on threads."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from envlock.errors import FetchError
from envlock.progress import DownloadStoppedError, Stop, parallel


def test_parallel_keeps_each_calls_result_or_fetch_error_in_order() -> None:
    def ok(stop: Stop) -> str:
        return "ok"

    def fails(stop: Stop) -> str:
        raise FetchError("x.whl: gone")

    got = parallel([ok, fails, ok], jobs=2)
    assert got[0] == got[2] == "ok"
    assert isinstance(got[1], FetchError) and got[1].message == "x.whl: gone"


def test_a_set_stop_ends_waits_and_checks_and_shuts_watched_sockets() -> None:
    stop = Stop()
    stop.check()  # not set: returns
    left, right = socket.socketpair()
    try:
        stop.watch(left)
        threading.Timer(0.1, stop.set).start()
        started = time.monotonic()
        with pytest.raises(DownloadStoppedError):
            stop.wait(30)
        assert time.monotonic() - started < 20  # woken by the stop, not the 30 s
        assert left.recv(1) == b""  # shut down: a read waiting on it returns
        with pytest.raises(DownloadStoppedError):
            stop.check()
        stop.unwatch(left)
    finally:
        left.close()
        right.close()


def test_an_interrupt_while_workers_start_still_stops_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C landing in pool.submit (a worker thread starting) must set the Stop too: the
    # worker already running would otherwise go on, and the process would wait for it.
    seen: list[bool] = []

    def first(stop: Stop) -> None:
        try:
            stop.wait(10)  # returns at once when the run is stopped (DownloadStoppedError)
        except DownloadStoppedError:
            seen.append(True)
            return
        seen.append(False)

    real_submit = ThreadPoolExecutor.submit
    submitted: list[int] = []

    def submit(self: ThreadPoolExecutor, fn: object, *args: object) -> object:
        submitted.append(1)
        if len(submitted) == 2:
            raise KeyboardInterrupt
        return real_submit(self, fn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ThreadPoolExecutor, "submit", submit)
    with pytest.raises(KeyboardInterrupt):
        parallel([first, first], jobs=2)
    assert seen == [True]
