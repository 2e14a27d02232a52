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
