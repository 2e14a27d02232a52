"""Ctrl-C (SIGINT) during a real ``envlock`` download: the run stops at once, nothing half-made stays.

Downloads run on worker threads; the interrupt lands in the main thread, which must
tell the workers to stop rather than wait for GBs to finish arriving.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.store import Store
from kit.cacheservers import Trickle
from kit.index import IndexServer
from kit.locks import lock_for, sha256_of
from kit.wheels import build_wheel
from test_sync_kill import _wait_for

# 20 MB trickling at ~3 MB/s: a run that waited for it would finish the download.
PAYLOAD = 20_000_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[IndexServer]:
    srv = IndexServer(tmp_path / "served").start()
    srv.slow_chunk, srv.slow_delay = 64 * 1024, 0.02
    srv.add_index("pypi")
    srv.add_index("pytorch", hashes=False)
    yield srv
    srv.stop()


def _big(server: IndexServer, tmp_path: Path, index: str, name: str, version: str) -> Path:
    wheel = build_wheel(tmp_path / "wheels", name, version, files={f"{name}/blob.bin": os.urandom(PAYLOAD)})
    server.add(index, wheel)
    server.faults[wheel.name] = "slow"
    return wheel


def _interrupt(ws: Path, home: Path, wheel: Path, *args: str,
               sig: signal.Signals = signal.SIGINT) -> subprocess.CompletedProcess[str]:
    """Run ``envlock ARGS`` in ``ws``, SIGINT (or ``sig``) it once ``wheel``'s download is under way."""
    env = dict(os.environ, ENVLOCK_HOME=str(home))
    proc = subprocess.Popen([sys.executable, "-m", "envlock.cli", *args], cwd=ws, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial = home / "v1" / "tmp" / "partial"

    def downloading() -> bool:
        assert proc.poll() is None, proc.communicate()
        return any(p.stat().st_size > 0 for p in partial.glob("*.part")) if partial.is_dir() else False

    _wait_for(downloading, f"{wheel.name} to start downloading")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_stops_a_sync_download_and_keeps_its_partial_to_resume(server: IndexServer, tmp_path: Path) -> None:
    big = _big(server, tmp_path, "pypi", "big", "1.0")
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "locks").mkdir()
    lock = ws / "locks" / "pylock.demo.toml"
    lock.write_text(lock_for(server, "pypi", [big]).to_toml())
    home = tmp_path / "home"
    done = _interrupt(ws, home, big, "sync", "demo", "--lock", str(lock))
    assert (done.returncode, done.stderr) == (130, "envlock: interrupted\n")
    sha = sha256_of(big)
    store = Store.open(home)
    assert not store.has("wheels", sha)  # stopped, not waited out
    part = store.partial_dir / f"{sha}.part"
    assert 0 < part.stat().st_size < big.stat().st_size
    # The next sync resumes from where the interrupted one stopped.
    server.faults.pop(big.name)
    again = subprocess.run([sys.executable, "-m", "envlock.cli", "sync", "demo", "--lock", str(lock)], cwd=ws,
                           env=dict(os.environ, ENVLOCK_HOME=str(home)), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert any(path.endswith(big.name) and rng.startswith("bytes=") for path, rng in server.requests)
    assert sha256_of(next(store.path("wheels", sha).iterdir())) == sha


def test_sigterm_stops_a_sync_as_ctrl_c_does(server: IndexServer, tmp_path: Path) -> None:
    # `kill`, `timeout` and supervisors send SIGTERM: handled as an interrupt (the download
    # stopped, its partial kept), said, and exit 143, the shell's code for it.
    big = _big(server, tmp_path, "pypi", "big", "1.0")
    ws, lock = _sync_ws(server, tmp_path, big)
    done = _interrupt(ws, tmp_path / "home", big, "sync", "demo", "--lock", str(lock), sig=signal.SIGTERM)
    assert (done.returncode, done.stderr) == (143, "envlock: terminated\n")
    store = Store.open(tmp_path / "home")
    assert not store.has("wheels", sha256_of(big))
    assert 0 < (store.partial_dir / f"{sha256_of(big)}.part").stat().st_size < big.stat().st_size


def test_ctrl_c_stops_a_lock_hashing_a_nightly_and_leaves_nothing(server: IndexServer, tmp_path: Path) -> None:
    torch = _big(server, tmp_path, "pytorch", "torch", "2.12.0.dev20260307+cpu")
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "envs" / "e.toml").write_text(f"""
[env]
python = "3.11"
[indexes.pypi]
url = "{server.url('pypi')}"
default = true
[indexes.pytorch]
url = "{server.url('pytorch')}"
[packages]
torch = {{ nightly = "2026-03-07", local = "cpu", index = "pytorch" }}
""")
    home = tmp_path / "home"
    done = _interrupt(ws, home, torch, "lock", "e")
    assert (done.returncode, done.stderr) == (130, "envlock: interrupted\n")
    # Looked at before Store.open, which would clear an unheld one anyway.
    assert list((home / "v1" / "tmp" / "partial").glob("*.part")) == []  # no hash to resume against
    store = Store.open(home)
    assert not (store.root / "wheels").exists() or not any((store.root / "wheels").iterdir())
    assert not (ws / "locks" / "pylock.e.toml").exists()


def _sync_ws(server: IndexServer, tmp_path: Path, wheel: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "locks").mkdir()
    lock = ws / "locks" / "pylock.demo.toml"
    lock.write_text(lock_for(server, "pypi", [wheel]).to_toml())
    return ws, lock


def test_ctrl_c_does_not_wait_out_a_stalled_server(server: IndexServer, tmp_path: Path) -> None:
    big = _big(server, tmp_path, "pypi", "big", "1.0")
    server.faults[big.name] = "stall"  # half the bytes, then nothing: the read waits on its 60 s timeout
    ws, lock = _sync_ws(server, tmp_path, big)
    done = _interrupt(ws, tmp_path / "home", big, "sync", "demo", "--lock", str(lock))  # 60 s communicate limit
    assert (done.returncode, done.stderr) == (130, "envlock: interrupted\n")
    assert len(server.downloads(big.name)) == 1  # and no retry after the interrupt


def test_ctrl_c_does_not_wait_for_another_process_download(server: IndexServer, tmp_path: Path) -> None:
    import fcntl

    big = _big(server, tmp_path, "pypi", "big", "1.0")
    ws, lock = _sync_ws(server, tmp_path, big)
    home = tmp_path / "home"
    partial = Store.open(home).partial_dir
    partial.mkdir(parents=True, exist_ok=True)
    part = partial / f"{sha256_of(big)}.part"
    with open(part, "a+b") as held:  # as a concurrent sync downloading it holds it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        held.write(b"x")
        held.flush()
        proc = subprocess.Popen([sys.executable, "-m", "envlock.cli", "sync", "demo", "--lock", str(lock)], cwd=ws,
                                env=dict(os.environ, ENVLOCK_HOME=str(home)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

        def waiting() -> bool:
            assert proc.poll() is None, proc.communicate()
            fds = Path(f"/proc/{proc.pid}/fd")
            return any(os.path.realpath(fd) == str(part) for fd in fds.iterdir())

        _wait_for(waiting, "the sync to wait for the partial file")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)  # the lock is still held: waiting it out would hang here
    assert (proc.returncode, err) == (130, "envlock: interrupted\n")
    assert server.downloads(big.name) == []


CHILD_CLEANS_UP = """
import signal, sys, time
from pathlib import Path
def cleanup(*_):
    sys.stdout.write("x" * 300_000)  # more than a pipe holds: its reader must keep reading
    sys.stdout.flush()
    Path(sys.argv[1]).write_text("cleaned up")
    sys.exit(1)
signal.signal(signal.SIGINT, cleanup)
Path(sys.argv[2]).write_text("started")
time.sleep(60)
"""

RUNS_CHILD = """
import signal, sys
from envlock import errors, runner
signal.signal(signal.SIGTERM, errors.raise_terminated)  # as cli.main does
try:
    runner.run([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]])
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_is_passed_on_to_the_running_tool(tmp_path: Path, sig: signal.Signals) -> None:
    # `kill -INT` (or a plain `kill`) of envlock alone, not its process group: uv, git or a
    # build must still get to clean up (uv removes its temp folders in its cache), not be
    # killed outright nor left running (what runs under uv: test_sigterm_stops_a_build_backend_uv_runs).
    cleaned, started = tmp_path / "cleaned", tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-c", RUNS_CHILD, CHILD_CLEANS_UP, str(cleaned), str(started)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for(started.exists, "the child to start")
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    assert out == "interrupted\n"
    assert cleaned.read_text() == "cleaned up"


HANGING_BACKEND = """
import os, pathlib, signal, time
def _hang(*args, **kwargs):
    if os.environ.get("BACKEND_IGNORES_SIGINT"):  # as bash's background jobs and some tools do
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    pathlib.Path(os.environ["BACKEND_PID"]).write_text(str(os.getpid()))
    time.sleep(120)
build_wheel = prepare_metadata_for_build_wheel = _hang
def get_requires_for_build_wheel(config_settings=None):
    return []
"""

RUNS_A_BUILD = """
import signal, sys
from envlock import errors, runner
signal.signal(signal.SIGTERM, errors.raise_terminated)  # as cli.main does
try:
    runner.uv(["build", "--wheel", "--offline", "--python", sys.executable, "--out-dir", sys.argv[2], sys.argv[1]],
              env={"BACKEND_PID": sys.argv[3], "BACKEND_IGNORES_SIGINT": sys.argv[4]})
except KeyboardInterrupt:
    print("terminated")
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is done, just not reaped
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", ["SIGTERM to envlock alone", "Ctrl-C at a terminal, backend ignoring SIGINT"])
def test_an_interrupt_stops_a_build_backend_uv_runs(tmp_path: Path, how: str) -> None:
    # `kill` (or `docker stop`) signals envlock alone; the build backend runs under uv, which
    # outlived a forwarded SIGINT and was killed, leaving the backend building on for its hour.
    # A terminal's Ctrl-C signals the whole group: uv dies at once, and a backend that ignores
    # SIGINT was orphaned to init, out of reach.
    terminal = how.startswith("Ctrl-C")
    project = tmp_path / "hang"
    project.mkdir()
    (project / "hang.py").write_text(HANGING_BACKEND)
    (project / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "hang"\n'
                                            'backend-path = ["."]\n[project]\nname = "hang"\nversion = "0.1"\n')
    marker = tmp_path / "backend.pid"
    proc = subprocess.Popen([sys.executable, "-c", RUNS_A_BUILD, str(project), str(tmp_path / "out"), str(marker),
                             "1" if terminal else ""], stdout=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for(marker.exists, "the build backend to start")
    backend = int(marker.read_text())
    if terminal:
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does: the whole foreground group
    else:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert out == "terminated\n"
    deadline = time.monotonic() + 5
    while _running(backend) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(backend), f"build backend {backend} still running"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the test run may have been started with SIGINT ignored


def _sync_from_trickling_cache(server: IndexServer, tmp_path: Path, trickle: Trickle,
                               **extra: str) -> tuple[subprocess.Popen[str], Path]:
    """``envlock sync`` of a one-wheel lock whose cache answers with headers, then a byte a second."""
    wheel = build_wheel(tmp_path / "wheels", "tiny", "1.0")
    server.add("pypi", wheel)
    ws, lock = _sync_ws(server, tmp_path, wheel)
    env = dict(os.environ, ENVLOCK_HOME=str(tmp_path / "home"), ENVLOCK_CACHE_URLS=trickle.url, **extra)
    proc = subprocess.Popen([sys.executable, "-m", "envlock.cli", "sync", "demo", "--lock", str(lock), "--json"],
                            cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
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
            _wait_for(lambda: trickle.gets > 0 or proc.poll() is not None, "the cache's GET")
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
    proc = subprocess.Popen([sys.executable, "-c", STUCK_THREAD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_default_sigint)
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
