"""transfers: one transfer's total deadline and minimum rate, enforced by a watchdog on a real socket."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from envlock import transfers
from envlock.errors import UsageError


def _pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of sockets on loopback: (the reader's end, the writer's end)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    reader = socket.create_connection(server.getsockname())
    writer, _ = server.accept()
    server.close()
    return reader, writer


def _read_through(t: transfers.Transfer, reader: socket.socket) -> float:
    """Read ``reader`` as ``http`` reads a body (counting each piece) until it ends; the seconds it took."""
    started = time.monotonic()
    while True:
        try:
            chunk = reader.recv(65536)
        except ConnectionResetError:  # the watchdog shut the socket while the kernel held unread bytes
            break
        if not chunk:
            break
        t.count(len(chunk))
    return time.monotonic() - started


def _trickle(writer: socket.socket, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        try:
            writer.send(b"x")
        except OSError:
            return


@pytest.mark.parametrize(("limits", "size", "said", "within"), [
    # a byte every 0.1 s never lets a read time out: the total ends it
    (transfers.Limits(total=1.0, min_rate=0), None,
     r"timed out after 1 s, the most one transfer may take \(\d+ bytes in; ENVLOCK_TRANSFER_TIMEOUT=1 plus 1 s per "
     r"MiB of a known size\)", (1.0, 3.0)),
    # a known size earns 1 s per MiB: 2 MiB -> 1 + 2 s
    (transfers.Limits(total=1.0, min_rate=0), 2 << 20,
     r"timed out after 3 s, the most one transfer may take", (3.0, 5.0)),
    # the minimum rate, over its window, ends a trickle long before the total
    (transfers.Limits(total=60.0, min_rate=1000, window=1.0), None,
     r"timed out: \d+ bytes in the last 1 s, slower than 1000 bytes/s \(ENVLOCK_TRANSFER_MIN_RATE\)", (1.0, 3.0)),
])
def test_the_watchdog_ends_a_trickle_wherever_its_reader_waits(limits: transfers.Limits, size: int | None, said: str,
                                                              within: tuple[float, float]) -> None:
    import re

    reader, writer = _pair()
    stop = threading.Event()
    threading.Thread(target=_trickle, args=(writer, 0.1, stop), daemon=True).start()
    try:
        with transfers.transfer("http://x/y.whl", size=size, limits=limits) as t:
            t.watch(reader)
            took = _read_through(t, reader)
            t.unwatch(reader)
    finally:
        stop.set()
        reader.close()
        writer.close()
    assert t.expired is not None and re.match(said, t.expired), t.expired
    assert within[0] <= took < within[1], took


def test_a_transfer_at_a_decent_rate_is_left_alone() -> None:
    reader, writer = _pair()

    def send() -> None:
        for _ in range(15):
            writer.send(b"x" * 4096)
            time.sleep(0.1)
        writer.close()

    threading.Thread(target=send, daemon=True).start()
    with transfers.transfer("http://x/y.whl", limits=transfers.Limits(total=60.0, min_rate=1000, window=0.5)) as t:
        t.watch(reader)
        _read_through(t, reader)
    reader.close()
    assert (t.expired, t.moved) == (None, 15 * 4096)


@pytest.mark.parametrize(("var", "value", "message"), [
    ("ENVLOCK_TRANSFER_TIMEOUT", "0", "ENVLOCK_TRANSFER_TIMEOUT='0': expected seconds, a number above 0 (the default "
                                      "is 3600)"),
    ("ENVLOCK_TRANSFER_TIMEOUT", "ten", "ENVLOCK_TRANSFER_TIMEOUT='ten': expected seconds, a number above 0 (the "
                                        "default is 3600)"),
    ("ENVLOCK_TRANSFER_TIMEOUT", "nan", "ENVLOCK_TRANSFER_TIMEOUT='nan': expected seconds, a number above 0 (the "
                                        "default is 3600)"),
    ("ENVLOCK_TRANSFER_MIN_RATE", "1.5", "ENVLOCK_TRANSFER_MIN_RATE='1.5': expected bytes per second, a whole "
                                         "number (0: no floor) (the default is 1024)"),
    ("ENVLOCK_TRANSFER_MIN_RATE", "-1", "ENVLOCK_TRANSFER_MIN_RATE='-1': expected bytes per second, a whole number "
                                        "(0: no floor) (the default is 1024)"),
])
def test_a_limit_that_is_no_number_is_named(monkeypatch: pytest.MonkeyPatch, var: str, value: str,
                                           message: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(UsageError) as info:
        transfers.Limits.configured()
    assert (info.value.message, info.value.exit_code) == (message, 2)


def test_the_configured_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    assert transfers.Limits.configured() == transfers.Limits(3600.0, 1024, 60.0)
    monkeypatch.setenv("ENVLOCK_TRANSFER_TIMEOUT", "2.5")
    monkeypatch.setenv("ENVLOCK_TRANSFER_MIN_RATE", "0")
    assert transfers.Limits.configured() == transfers.Limits(2.5, 0, 60.0)
    assert transfers.Limits().allowed(4 << 30) == 3600 + 4096
