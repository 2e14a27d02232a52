"""runner: the one place subprocesses start; what it writes beside them."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from envlock import runner
from kit.processes import running, start, wait_for


def test_a_log_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    # A full disk fails the log's write with an OSError naming no file (as this size limit does):
    # the CLI prints the file an OSError names, so the log must be it.
    log = tmp_path / "logs" / "uv.log"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, hard))
    try:
        with pytest.raises(OSError) as info:
            runner.run([sys.executable, "-c", "print('x' * 200)"], log=log)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert (info.value.filename, info.value.strerror) == (str(log), "File too large")


def test_a_log_keeps_no_url_credentials(tmp_path: Path) -> None:
    # Build logs stay in the store; uv's command line names the index, password and all.
    log = tmp_path / "build.log"
    result = runner.run([sys.executable, "-c", "import sys; print(sys.argv[1])", "https://bob:s3cret@host/simple"],
                        log=log)
    assert result.stdout == "https://bob:s3cret@host/simple\n"  # the caller gets what the tool said
    text = log.read_text()
    assert "s3cret" not in text and text.count("https://host/simple") == 2, text


def test_one_compile_command_for_a_lock_and_for_a_builds_requirements(tmp_path: Path) -> None:
    assert runner.compile_args("pyproject.toml", "pylock.toml", runner.CompileOptions(
        output_format="pylock.toml", python="3.12", platform="x86_64-manylinux_2_28", default_index="https://i/simple",
        overrides="overrides.txt")) == [
        "pip", "compile", "pyproject.toml", "--format", "pylock.toml", "-o", "pylock.toml", "--python-version", "3.12",
        "--python-platform", "x86_64-manylinux_2_28", "--no-header", "--quiet", "--default-index", "https://i/simple",
        "--index-strategy", "first-index", "--override", "overrides.txt"]
    # A lock's: wheels only, but the local builds' source trees (an index's sdist would run its code).
    assert runner.compile_args("pyproject.toml", "pylock.toml", runner.CompileOptions(
        python="3.12", wheels_only=["mini-kernel", "sgl-kernel"]))[-6:] == [
        "--only-binary", ":all:", "--no-binary", "mini-kernel", "--no-binary", "sgl-kernel"]
    assert runner.compile_args(tmp_path / "requirements.in", tmp_path / "requirements.txt", runner.CompileOptions(
        python="3.11.7", constraints=tmp_path / "constraints.txt", hashes=True, annotate=False)) == [
        "pip", "compile", f"{tmp_path}/requirements.in", "-o", f"{tmp_path}/requirements.txt", "--python-version",
        "3.11.7", "--generate-hashes", "--no-header", "--no-annotate", "--quiet", "--index-strategy", "first-index",
        "--constraint", f"{tmp_path}/constraints.txt"]


def test_a_failed_runs_log_is_moved_where_it_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "tmp" / "work" / "uv.log"
    log.parent.mkdir(parents=True)
    log.write_text("$ uv build\nfailed\n")
    kept = runner.keep_log(log, tmp_path / "logs" / "build-x.log")
    assert kept == tmp_path / "logs" / "build-x.log"
    assert kept.read_text() == "$ uv build\nfailed\n" and not log.exists()
    # A run that wrote nothing (it never started) still leaves the file the message names.
    assert runner.keep_log(log, tmp_path / "logs" / "build-y.log").read_text() == "(no output)\n"


def test_an_index_password_reaches_uv_in_its_environment_never_its_command_line(tmp_path: Path) -> None:
    probe = tmp_path / "probe.txt"
    probe.write_text("")
    index = "http://alice:p%40ss@127.0.0.1:9/simple"
    result = runner.uv(["pip", "compile", probe, "--default-index", index, "--offline", "--quiet"])
    assert "--default-index" not in result.argv and not any("p%40ss" in a or "p@ss" in a for a in result.argv)
    # Named indexes (the transient project's [[tool.uv.index]]) as uv reads them: name upper-cased, '-'/'.' as '_'.
    urls = {"pytorch-nightly": index, "plain": "https://x/simple", "ci.keyring": "https://ci@x/simple"}
    assert runner.uv_index_credentials(urls) == {"UV_INDEX_PYTORCH_NIGHTLY_USERNAME": "alice",
                                                 "UV_INDEX_PYTORCH_NIGHTLY_PASSWORD": "p@ss"}
    assert [runner.without_password(u) for u in urls.values()] == [
        "http://127.0.0.1:9/simple", "https://x/simple", "https://ci@x/simple"]


# -- interrupts reach the tool that runs ------------------------------------------------------------
# An interrupt of envlock (Ctrl-C, SIGTERM) reaches the tool it runs: uv, git or a build gets to
# clean up, and a build backend under uv is stopped, not orphaned.

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


def test_meanwhile_runs_once_the_command_has_started_and_before_the_wait(tmp_path: Path) -> None:
    # The command waits for a file only `meanwhile` writes: run before the start, or after the
    # wait, it would never be seen (the deadline ends the command then).
    go = tmp_path / "go"
    result = runner.run(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; done; echo seen"],
                        deadline=(20.0, "meanwhile never ran"), meanwhile=go.touch)
    assert (result.returncode, result.stdout) == (0, "seen\n")


def test_an_interrupt_in_meanwhile_ends_the_command_as_one_in_the_wait(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    def interrupted() -> None:
        wait_for(pid_file.exists, "the command to start")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"], meanwhile=interrupted)
    pid = int(pid_file.read_text())
    assert not running(pid)


ADOPTS = """
import os, subprocess, sys, time
from envlock import runner
assert runner.uv(["--version"], builds=sys.argv[1] == "builds").ok
# A child that leaves a grandchild behind: whose is the orphan now?
orphan = int(subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True).stdout)
time.sleep(0.2)
with open(f"/proc/{orphan}/status") as fh:
    parent = next(int(line.split()[1]) for line in fh if line.startswith("PPid:"))
os.kill(orphan, 9)
print("adopted" if parent == os.getpid() else "not adopted", "ctypes" in sys.modules)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_a_uv_run_that_builds_nothing_adopts_no_orphans_and_loads_no_ctypes() -> None:
    # A warm sync's install (--no-build) has no build backend to keep within an interrupt's reach:
    # its uv run leaves envlock as it was (and ctypes unloaded until uv runs), a build's does not.
    said = {how: subprocess.run([sys.executable, "-c", ADOPTS, how], capture_output=True, text=True, check=True)
            .stdout.split() for how in ("builds", "no-builds")}
    assert said == {"builds": ["adopted", "True"], "no-builds": ["not", "adopted", "False"]}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_is_passed_on_to_the_running_tool(tmp_path: Path, sig: signal.Signals) -> None:
    # `kill -INT` (or a plain `kill`) of envlock alone, not its process group: uv, git or a
    # build must still get to clean up (uv removes its temp folders in its cache), not be
    # killed outright nor left running (what runs under uv: test_an_interrupt_stops_a_build_backend_uv_runs).
    cleaned, started = tmp_path / "cleaned", tmp_path / "started"
    proc = start([sys.executable, "-c", RUNS_CHILD, CHILD_CLEANS_UP, str(cleaned), str(started)], stderr=None,
                 start_new_session=True)
    wait_for(started.exists, "the child to start")
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
    proc = start([sys.executable, "-c", RUNS_A_BUILD, str(project), str(tmp_path / "out"), str(marker),
                  "1" if terminal else ""], stderr=None, start_new_session=True)
    wait_for(marker.exists, "the build backend to start")
    backend = int(marker.read_text())
    if terminal:
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does: the whole foreground group
    else:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert out == "terminated\n"
    wait_for(lambda: not running(backend), f"build backend {backend} to end", timeout=5)


def test_a_group_run_is_named_while_it_runs_and_ended_whole_by_its_record(tmp_path: Path) -> None:
    # A uv that outlives a SIGKILLed envlock, and what it started, end together: the record names
    # their process group (their own: a signal to envlock's group does not reach them).
    import os
    import threading
    import time

    record = tmp_path / f"uv{runner.GROUP_SUFFIX}"
    child = tmp_path / "child.pid"
    got: list[runner.Result] = []
    script = f"import os, subprocess, time; p = subprocess.Popen(['sleep', '60']); open({str(child)!r}, 'w')" \
             ".write(str(p.pid)); time.sleep(60)"
    t = threading.Thread(target=lambda: got.append(runner.run([sys.executable, "-c", script], group=record)))
    t.start()
    deadline = time.monotonic() + 30
    while not (record.exists() and child.exists() and child.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    pgid = int(record.read_text().split()[0])
    assert pgid != os.getpgrp() and os.getpgid(int(child.read_text())) == pgid
    assert runner.end_group(record)
    t.join(timeout=10)
    assert got[0].returncode == -9 and not record.exists()  # killed, and its record gone with it
    running = []  # of the group (a zombie left to a parent that does not reap it holds nothing)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            running.append(stat.parent.name)
    assert running == []


def test_a_group_record_whose_leader_pid_is_another_process_now_ends_nothing(tmp_path: Path) -> None:
    import os

    record = tmp_path / f"uv{runner.GROUP_SUFFIX}"
    record.write_text(f"{os.getpid()} 1\n")  # this process, as if it had been started at tick 1
    assert runner.end_group(record)
    assert not record.exists()  # and this test still runs
