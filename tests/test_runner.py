"""runner: the one place subprocesses start; what it writes beside them."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import pytest

from envlock import runner


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
    assert runner.compile_args("pyproject.toml", "pylock.toml", output_format="pylock.toml", python="3.12",
                               platform="x86_64-manylinux_2_28", default_index="https://i/simple",
                               overrides="overrides.txt") == [
        "pip", "compile", "pyproject.toml", "--format", "pylock.toml", "-o", "pylock.toml", "--python-version", "3.12",
        "--python-platform", "x86_64-manylinux_2_28", "--no-header", "--quiet", "--default-index", "https://i/simple",
        "--index-strategy", "first-index", "--override", "overrides.txt"]
    assert runner.compile_args(tmp_path / "requirements.in", tmp_path / "requirements.txt", python="3.11.7",
                               constraints=tmp_path / "constraints.txt", hashes=True, annotate=False) == [
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
