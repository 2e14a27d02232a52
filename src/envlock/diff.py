"""What changes between two locks: packages, nightly pins, sources, patches, builds.

Pure: takes two ``Lock`` values, reads no files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envlock.lockfile import Lock


@dataclass(frozen=True)
class Change:
    kind: str  # "package", "nightly", "source", "patch", "build", "env"
    name: str
    old: str | None  # None: added
    new: str | None  # None: removed
    note: str = ""

    @property
    def action(self) -> str:
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        return "changed"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "action": self.action,
                "old": self.old, "new": self.new, "note": self.note}


@dataclass(frozen=True)
class LockDiff:
    old: str
    new: str
    changes: tuple[Change, ...]
    unchanged: int  # packages identical in both

    def to_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "unchanged_packages": self.unchanged,
                "changes": [c.to_dict() for c in self.changes]}


def diff_locks(old: Lock, new: Lock, *, old_label: str, new_label: str) -> LockDiff:
    """Every difference that changes what gets installed or built."""
    changes: list[Change] = []
    for key, was, now in (("python", old.python, new.python), ("platform", old.platform, new.platform)):
        if was != now:
            changes.append(Change("env", key, was, now))
    old_pkgs = {p.name: p for p in old.packages}
    new_pkgs = {p.name: p for p in new.packages}
    unchanged = 0
    for pkg_name in sorted(set(old_pkgs) | set(new_pkgs)):
        a, b = old_pkgs.get(pkg_name), new_pkgs.get(pkg_name)
        name = str(pkg_name)
        if a is not None and b is not None:
            if a.version != b.version:
                changes.append(Change("package", name, a.version, b.version, _index_note(a.index, b.index)))
            elif {w.sha256 for w in a.wheels} != {w.sha256 for w in b.wheels}:
                # Same version, other bytes: a re-uploaded nightly or a rebuilt local wheel.
                changes.append(Change("package", name, a.version, b.version, "same version, different wheel sha256"))
            elif a.index != b.index:
                changes.append(Change("package", name, a.version, b.version, _index_note(a.index, b.index)))
            else:
                unchanged += 1
        else:
            changes.append(Change("package", name, a.version if a else None, b.version if b else None))
    for name in sorted(set(old.nightlies) | set(new.nightlies)):
        na, nb = old.nightlies.get(name), new.nightlies.get(name)
        if na != nb:
            changes.append(Change("nightly", name, na.date if na else None, nb.date if nb else None,
                                  f"{na.version if na else '-'} -> {nb.version if nb else '-'}"))
    for name in sorted(set(old.sources) | set(new.sources)):
        sa, sb = old.sources.get(name), new.sources.get(name)
        pin_a = (sa.commit or sa.tree_digest) if sa else None
        pin_b = (sb.commit or sb.tree_digest) if sb else None
        if pin_a != pin_b:
            changes.append(Change("source", name, pin_a, pin_b))
        pa = {p.path: p.sha256 for p in sa.patches} if sa else {}
        pb = {p.path: p.sha256 for p in sb.patches} if sb else {}
        for path in sorted(set(pa) | set(pb)):
            if pa.get(path) != pb.get(path):
                changes.append(Change("patch", path, pa.get(path), pb.get(path), f"source {name}"))
    for name in sorted(set(old.builds) | set(new.builds)):
        ba, bb = old.builds.get(name), new.builds.get(name)
        if ba == bb:
            continue
        if ba and bb and ba.input_digest == bb.input_digest:  # a build that did not reproduce
            changes.append(Change("build", name, ba.sha256, bb.sha256, "same inputs, another wheel sha256"))
        else:
            changes.append(Change("build", name, ba.input_digest if ba else None, bb.input_digest if bb else None,
                                  "inputs changed: rebuild" if ba and bb else ""))
    return LockDiff(old=old_label, new=new_label, changes=tuple(changes), unchanged=unchanged)


def _index_note(a: str | None, b: str | None) -> str:
    return f"index {a} -> {b}" if a != b else ""
