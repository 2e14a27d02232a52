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
    # A lock's: wheels only, but the local builds' source trees (an index's sdist would run its code).
    assert runner.compile_args("pyproject.toml", "pylock.toml", python="3.12",
                               wheels_only=["mini-kernel", "sgl-kernel"])[-6:] == [
        "--only-binary", ":all:", "--no-binary", "mini-kernel", "--no-binary", "sgl-kernel"]
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
