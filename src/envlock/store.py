"""The content-addressed store under ``$ENVLOCK_HOME``.

Entries are immutable: each is written under ``tmp/`` and renamed into place in
one step, so a reader sees either nothing or a complete entry, and a killed
writer leaves only litter under ``tmp/`` (cleared on the next open).

Layout (version 1)::

    $ENVLOCK_HOME/
      layout                 "1"
      v1/
        wheels/<sha256>/<filename>       downloaded artifacts, by sha256
        sources/<kind>/<digest>/         fetched or patched source trees
        builds/<input digest>/<wheel>    locally built wheels, by input digest
        venvs/<install digest>/          installed venvs, by lock install digest
        envs/<name>/                     generations and the stable ``current`` link
        tmp/                             work in progress; never read
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import StoreError

LAYOUT_VERSION = 1


def default_home() -> Path:
    """``$ENVLOCK_HOME``, else the platform's user data dir."""
    env = os.environ.get("ENVLOCK_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("envlock", appauthor=False))


@dataclass(frozen=True)
class Store:
    home: Path

    @classmethod
    def open(cls, home: Path | None = None) -> Store:
        """Open (creating if needed) the store; refuse a layout this version does not know."""
        store = cls((home or default_home()).absolute())
        marker = store.home / "layout"
        try:
            store.home.mkdir(parents=True, exist_ok=True)
            if marker.exists():
                found = marker.read_text().strip()
                if found != str(LAYOUT_VERSION):
                    raise StoreError(
                        f"{marker}: store layout {found!r}, this envlock reads layout {LAYOUT_VERSION}; "
                        "use another ENVLOCK_HOME or a matching envlock"
                    )
            else:
                _write_atomic(marker, f"{LAYOUT_VERSION}\n".encode())
            store.tmp.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{store.home}: cannot use as store: {exc.strerror}") from None
        return store

    @property
    def root(self) -> Path:
        return self.home / f"v{LAYOUT_VERSION}"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    def path(self, kind: str, key: str) -> Path:
        """Where the entry ``kind/key`` lives (complete or not)."""
        if not key or "/" in key or key.startswith("."):
            raise StoreError(f"store key {key!r} for {kind}: expected a digest-like name")
        return self.root / kind / key

    def has(self, kind: str, key: str) -> bool:
        return self.path(kind, key).exists()

    @contextlib.contextmanager
    def new_entry(self, kind: str, key: str) -> Iterator[Path]:
        """Yield an empty temp directory; on success it becomes ``kind/key`` in one rename.

        If another writer completed the same entry first, ours is discarded: both
        were built from the same inputs, and the first complete one wins.
        """
        final = self.path(kind, key)
        work = self.tmp / f"{kind}-{key[:24]}-{uuid.uuid4().hex[:8]}"
        work.mkdir(parents=True)
        try:
            yield work
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(work, final)
            except OSError:
                if not final.exists():
                    raise
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)

    def temp_dir(self, label: str) -> Path:
        """A fresh scratch directory under ``tmp/`` (the caller removes it)."""
        path = self.tmp / f"{label}-{uuid.uuid4().hex[:12]}"
        path.mkdir(parents=True)
        return path


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` via a temp file in the same directory and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, data)
