"""``file://`` URLs (a static index or mirror on this machine or a mounted share, as an air-gapped
cluster keeps one), read as a web server would serve them: a missing file is a 404, and what is no
regular file is refused before a byte is read. ``net.http`` reads them so for every kind of GET.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from envlock.net.responses import HttpError


def open_local(url: str, path: str) -> BinaryIO:
    """``path`` opened for reading, failing as a server would: a missing file is a 404, and what
    is no regular file (a FIFO, whose open would wait for a writer forever; a device such as
    /dev/zero; a folder) is refused before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO's open does not wait
    except (FileNotFoundError, NotADirectoryError):
        raise HttpError(url, "no such file", status=404) from None
    except OSError as exc:
        raise HttpError(url, f"cannot read {path} ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or special file"
        raise HttpError(url, f"{path} is {kind}; expected a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")  # the caller closes it


def file_validator(st: os.stat_result) -> str:
    """The ``validator`` of a file on this machine: its modification time (an upload replaces the file)."""
    return f"modified {st.st_mtime_ns}"
