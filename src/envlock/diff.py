"""What changes between two locks: packages, nightly pins, sources, patches, builds and their
build requirements, and the lock's own keys (python, platform, venv digest and its python).

Pure: takes two ``Lock`` values, reads no files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from envlock.lockfile import Lock, LockedBuild, canonicalize_name


@dataclass(frozen=True)
class Change:
    # "package", "nightly", "source", "patch", "build", "build-requirement" (note: "build NAME"),
    # "env" (a [tool.envlock] key: python, platform, venv-digest, venv-python)
    kind: str
    name: str
    old: str | None  # None: added
    new: str | None  # None: removed (or, pending, not built yet)
    note: str = ""
    # A local build the new lock records no build of yet (`envlock lock` before `build`): its
    # package is not removed, its wheel is still to be built.
    pending: bool = False

    @property
    def action(self) -> str:
        if self.pending:
            return "pending"
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
    if old.venv_digest != new.venv_digest:
        # The venv is keyed by the wheels it installs: the same wheels giving another venv is
        # worth a word (another interpreter, or a venv that did not reproduce).
        same = (old.venv_digest is not None and new.venv_digest is not None
                and old.install_digest() == new.install_digest())
        changes.append(Change("env", "venv-digest", old.venv_digest, new.venv_digest,
                              "same wheels, another venv" if same else ""))
    if old.venv_python != new.venv_python:
        changes.append(Change("env", "venv-python", old.venv_python, new.venv_python))
    old_pkgs = {p.name: p for p in old.packages}
    new_pkgs = {p.name: p for p in new.packages}
    unbuilt = {str(canonicalize_name(n)) for n in new.unbuilt()}  # a build's name is its package's
    pending_note = f"not built for this lock yet: `envlock build {new.env}` (or `envlock sync {new.env}`) builds it"
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
        elif b is None and name in unbuilt:
            changes.append(Change("package", name, a.version if a else None, None, pending_note, pending=True))
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
        if ba is not None and bb is None and str(canonicalize_name(name)) in unbuilt:
            changes.append(Change("build", name, ba.input_digest, None, "not built for this lock yet: rebuild pending",
                                  pending=True))
            continue
        if ba is None or bb is None:
            changes.append(Change("build", name, ba.input_digest if ba else None, bb.input_digest if bb else None))
            continue
        if ba.input_digest != bb.input_digest:
            changes.append(Change("build", name, ba.input_digest, bb.input_digest, "inputs changed: rebuild"))
        elif ba.sha256 != bb.sha256:  # a build that did not reproduce
            changes.append(Change("build", name, ba.sha256, bb.sha256, "same inputs, another wheel sha256"))
        elif ba.wheel != bb.wheel:
            changes.append(Change("build", name, ba.wheel, bb.wheel, "same inputs, another wheel file name"))
        changes += _requirement_changes(name, ba, bb)
    return LockDiff(old=old_label, new=new_label, changes=tuple(changes), unchanged=unchanged)


def _requirement_changes(build: str, a: LockedBuild, b: LockedBuild) -> list[Change]:
    """Each build requirement of ``build`` added, removed or changed (version, or the hashes it pins)."""
    old, new = _requirements(a.requirements), _requirements(b.requirements)
    note = f"build {build}"
    if a.input_digest == b.input_digest:
        # Build requirements are inputs of the build: a lock written by envlock never changes
        # one without its input digest, so this one was edited by other means.
        note += "; its input digest did not change"
    out: list[Change] = []
    for name in sorted(set(old) | set(new)):
        ra, rb = old.get(name), new.get(name)
        if ra == rb:
            continue
        if ra is None or rb is None:
            out.append(Change("build-requirement", name, ra[0] if ra else None, rb[0] if rb else None, note))
        elif ra[0] != rb[0]:
            out.append(Change("build-requirement", name, ra[0], rb[0], note))
        else:
            what = "other hashes" if ra[1] != rb[1] else "another requirement line"
            out.append(Change("build-requirement", name, ra[0], rb[0], f"{note}; same version, {what}"))
    return out


def _requirements(lines: Iterable[str]) -> dict[str, tuple[str, frozenset[str], str]]:
    """``name==version [; marker] --hash=...`` lines (as the lock records them) -> name: (version, hashes, line)."""
    out: dict[str, tuple[str, frozenset[str], str]] = {}
    for line in lines:
        words = line.split()
        pin = words[0] if words else line
        name, sep, version = pin.partition("==")
        hashes = frozenset(w for w in words if w.startswith("--hash="))
        out[canonicalize_name(name)] = (version if sep else pin, hashes, line)
    return out


def _index_note(a: str | None, b: str | None) -> str:
    return f"index {a} -> {b}" if a != b else ""
