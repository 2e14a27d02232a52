"""The store's home and layout names, import-light: the fast no-op (``store.noop``) reads them.

Only ``os``, ``sys`` and ``hashlib`` are imported here (see ``store.noop``), and the packages'
``__init__.py`` are empty, so importing ``envlock.store.home`` costs nothing more.
"""

from __future__ import annotations

import hashlib
import os
import sys

#: Inside every complete venv entry: its manifest (install writes it before the rename).
MANIFEST_NAME = ".envlock-manifest.json"


#: The store's layout folder (``store.LAYOUT_VERSION``); tests check they agree.
LAYOUT_DIR = "v1"


def default_home() -> str:
    """``$ENVLOCK_HOME``, else the user data dir (XDG on Linux; platformdirs elsewhere).

    ``store.default_home`` calls this, so the fast path and the store always agree.
    """
    env = os.environ.get("ENVLOCK_HOME")
    if env:
        return os.path.expanduser(env)
    if sys.platform.startswith("linux"):
        # platformdirs' rule on Linux, without its ~15 ms import.
        data = os.environ.get("XDG_DATA_HOME", "")
        if not os.path.isabs(data):
            data = os.path.join(os.path.expanduser("~"), ".local", "share")
        return os.path.join(data, "envlock")
    from platformdirs import user_data_dir

    return str(user_data_dir("envlock", appauthor=False))


def file_sha256(path: str) -> str | None:
    """sha256 of a file's bytes (streamed), or None when it cannot be read or is no regular file
    (a lock, a patch or a wheel linked to /dev/zero was hashed forever; a FIFO blocked the open)."""
    import stat  # already loaded by os

    h = hashlib.sha256()
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def pyvenv_value(venv: str | os.PathLike[str], key: str) -> str | None:
    """A key of ``venv/pyvenv.cfg`` (``home``, ``version_info``), if the venv has it.

    Here, in the lightest module, because a sync's no-op reads the venv's ``version_info``.
    """
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None
