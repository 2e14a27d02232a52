"""The TOML document of the lock an env's sync last read, kept as JSON in the env's folder of the
store (``envs/NAME/lock-doc``): the next sync of the same bytes reads it instead of the TOML
(``model.lockfile.read_lock``: ~3 ms with the check against ~9 ms for a lock of 158 packages, and no
``tomllib`` import, ~5 ms).

A cache, not a record: ``read_lock`` takes the document only when the lock read from it writes
exactly the file's bytes back (envlock's writer is deterministic and reads back what it writes), so
a document changed by hand, torn or of other bytes is ignored and the TOML read. It is written
only where the env has its folder already (a sync made a generation of it) and is never read by
anything else; ``envlock gc`` and a new generation leave it alone.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from envlock.errors import UsageError
from envlock.store.home import LAYOUT_DIR, default_home
from envlock.store.store import write_atomic
from envlock.workspace import check_env_name

NAME = "lock-doc"


class EnvLockDocs:
    """``model.lockfile.LockDocs`` kept for env ``env`` in the store at ``home`` (default: ``ENVLOCK_HOME``'s):
    one document, of the lock bytes last read with it (their sha256 on its first line)."""

    def __init__(self, env: str, home: str | None = None) -> None:
        self._path: Path | None = Path(home or default_home(), LAYOUT_DIR, "envs", env, NAME)
        try:
            check_env_name(env)
        except UsageError:  # said by the sync, where it always was: no document for such a name
            self._path = None

    def get(self, sha256: str) -> bytes | None:
        """The document kept for the lock bytes of ``sha256`` (None: none, or of other bytes)."""
        if self._path is None:
            return None
        try:
            with self._path.open("rb") as fh:
                return fh.read() if fh.readline() == f"{sha256}\n".encode() else None
        except OSError:
            return None

    def put(self, sha256: str, doc: bytes) -> None:
        """Keep ``doc`` for the lock bytes of ``sha256``, if the env has its folder (else nothing)."""
        if self._path is None or not self._path.parent.is_dir():
            return
        with contextlib.suppress(OSError):  # a read-only store, a full disk: the next sync reads the TOML
            write_atomic(self._path, f"{sha256}\n".encode() + doc)
