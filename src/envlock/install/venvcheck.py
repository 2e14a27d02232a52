"""``envlock verify``: a venv's digest recomputed from every byte and compared with the recorded one
(the walk and the digest are ``envlock.install.digest``'s)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.errors import VerifyError
from envlock.install.digest import Difference, Manifest, compare, manifest


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of ``verify``; doubles as ``envlock verify --json``."""

    env: str
    path: str
    expected: str | None
    actual: str
    difference: Difference | None  # None when no reference manifest is at hand
    note: str = ""
    # The current generation was built from another lock (a rollback): checked against its
    # own digest, and not ok, since the env is not the lock's.
    other_lock: bool = False
    # ENV/N of every generation whose venv holds one of the changed files (hard links: one edit is in
    # all of them), this one's included; what `envlock verify ENV --repair` rebuilds.
    shared: tuple[str, ...] = ()

    @property
    def intact(self) -> bool:
        """The venv has the digest it was checked against."""
        return self.expected == self.actual

    @property
    def ok(self) -> bool:
        return self.intact and not self.other_lock

    def to_dict(self) -> dict[str, Any]:
        diff = self.difference
        return {
            "env": self.env,
            "path": self.path,
            "ok": self.ok,
            "intact": self.intact,
            "other_lock": self.other_lock,
            "expected": self.expected,
            "actual": self.actual,
            "added": list(diff.added) if diff else None,
            "removed": list(diff.removed) if diff else None,
            "changed": list(diff.changed) if diff else None,
            "note": self.note,
            "shared": list(self.shared),
        }


def check(venv: Path, expected: str | None, reference: Manifest | None, *, env: str = "",
          cache_dir: Path | None = None) -> VerifyResult:
    """Recompute ``venv``'s digest from every byte and compare it with ``expected``.

    Files are listed when ``reference`` is given. The hash cache in ``cache_dir`` is
    refreshed, never answered from.
    """
    if not venv.is_dir():
        raise VerifyError(f"{venv}: no venv there (expected the env's current generation)")
    actual = manifest(venv, cache_dir=cache_dir, reuse=False)
    difference = None
    note = ""
    if expected is None:
        note = "no venv digest recorded to compare with"
    elif reference is not None and reference.digest == expected:
        difference = compare(reference.entries, actual.entries)
    elif expected != actual.digest:
        note = f"no manifest for {expected} in this store: cannot list the differing files"
    return VerifyResult(env, str(venv), expected, actual.digest, difference, note)
