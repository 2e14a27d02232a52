"""Files two distributions may both install: ``[resolution] allow-overlap``, one value for the spec,
the guards and the lock.

The lock's guard refuses two distributions that install one path with different bytes (the one
installed last would overwrite the other's). Some such paths are harmless and known:
``flashinfer-python`` 0.6.5 and ``torch-c-dlpack-ext`` 0.1.5 both ship a top-level
``build_backend.py``. An allowance names that one exact path, the two distributions, and why:
never a prefix, a folder or a glob, and only for that pair. The lock records the allowances a
resolution used; the install keeps the bytes of the first distribution named, whatever order
the installer wrote them in (so the venv digest does not depend on it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: What a path may not hold: glob characters (an allowance is one exact path) and backslashes.
_NOT_EXACT = re.compile(r"[*?\[\]\\]")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
KEYS = ("path", "packages", "reason")
EXPECTED = '{ path = "build_backend.py", packages = ["flashinfer-python", "torch-c-dlpack-ext"], reason = "..." }'


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class AllowedOverlap:
    """One installed path (relative to site-packages, as a wheel's RECORD names it) that two
    distributions may both install with different bytes; the venv keeps ``packages[0]``'s."""

    path: str
    packages: tuple[str, str]  # canonical names, as written (the first one's bytes are kept)
    reason: str

    def covers(self, a: str, b: str, path: str) -> bool:
        """Whether this allowance is for ``path`` installed by ``a`` and ``b`` (in either order)."""
        return path == self.path and {a, b} == set(self.packages)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "packages": list(self.packages), "reason": self.reason}


def parse(raw: object, where: str, add: Callable[[str, str], None]) -> tuple[AllowedOverlap, ...]:
    """The allowances of ``raw`` (an array of ``{ path, packages, reason }`` tables at key ``where``);
    each problem is given to ``add(key, message)`` (all of them, not the first)."""
    if not isinstance(raw, list):
        add(where, f"expected an array of tables {EXPECTED}")
        return ()
    out: list[AllowedOverlap] = []
    for i, entry in enumerate(raw):
        key = f"{where}[{i}]"
        if not isinstance(entry, dict):
            add(key, f"expected a table {EXPECTED}")
            continue
        for extra in sorted(set(entry) - set(KEYS)):
            add(f"{key}.{extra}", f"unknown key; expected one of: {', '.join(KEYS)}")
        path, names, reason = entry.get("path"), entry.get("packages"), entry.get("reason")
        problems = len(out)
        if not (isinstance(path, str) and path_problem(path) is None):
            why = path_problem(path) if isinstance(path, str) else "missing; expected a string" if path is None \
                else "expected a string"
            add(f"{key}.path", f"{why} (one exact file a wheel installs, relative to site-packages, "
                f"as its RECORD names it)")
            path = None
        pair = _pair(names, f"{key}.packages", add)
        if not (isinstance(reason, str) and reason.strip()):
            add(f"{key}.reason", "missing; expected why the shared file is harmless (a non-empty string)")
        if path is None or pair is None or not isinstance(reason, str) or not reason.strip() or problems != len(out):
            continue
        allowed = AllowedOverlap(path, pair, reason.strip())
        if any(o.covers(*pair, path) for o in out):
            add(key, f"{path} for {' and '.join(pair)} is allowed twice")
            continue
        out.append(allowed)
    return tuple(out)


def path_problem(path: str) -> str | None:
    """Why ``path`` is not one exact installed file (None: it is)."""
    if not path or path != path.strip():
        return f"expected a path, found {path!r}"
    if _NOT_EXACT.search(path):
        return f"expected one exact path, found {path!r} (no glob, no backslash: each shared file is named)"
    parts = path.split("/")
    if path.startswith("/") or "" in parts or "." in parts or ".." in parts:
        return f"expected a relative file path with no empty, '.' or '..' part, found {path!r} (a folder " \
               "or a prefix is not allowed: each shared file is named)"
    return None


def _pair(names: object, key: str, add: Callable[[str, str], None]) -> tuple[str, str] | None:
    if not (isinstance(names, list) and len(names) == 2 and all(isinstance(n, str) for n in names)):
        add(key, "expected two package names, [\"first\", \"second\"] (the venv keeps the first one's bytes)")
        return None
    bad = [n for n in names if not _NAME.fullmatch(n)]
    if bad:
        add(key, f"expected package names, found {bad[0]!r}")
        return None
    first, second = (_canonical(n) for n in names)
    if first == second:
        add(key, f"expected two different packages, found {first!r} twice")
        return None
    return first, second


def allow(overlaps: Sequence[tuple[str, str, tuple[str, ...]]],
          allowed: Sequence[AllowedOverlap]) -> tuple[list[tuple[str, str, tuple[str, ...]]], list[AllowedOverlap]]:
    """``overlaps`` (first, second, paths) less the paths ``allowed`` covers (a pair left with no path
    is dropped), and the allowances that covered one."""
    kept, used = [], []
    for a, b, paths in overlaps:
        rest = []
        for path in paths:
            which = next((o for o in allowed if o.covers(a, b, path)), None)
            if which is None:
                rest.append(path)
            elif which not in used:
                used.append(which)
        if rest:
            kept.append((a, b, tuple(rest)))
    return kept, [o for o in allowed if o in used]


def unused_note(index: int, o: AllowedOverlap, installed: set[str]) -> str:
    """The note for allowance ``index`` that covered nothing (``installed``: the resolution's packages)."""
    missing = [n for n in o.packages if n not in installed]
    if missing:
        why = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in the resolution"
    else:
        why = f"{o.packages[0]} and {o.packages[1]} do not both install {o.path} with different bytes"
    return f"resolution.allow-overlap[{index}]: {o.path} ({o.reason}): {why}; the allowance is no longer needed: " \
           "remove it"
