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
