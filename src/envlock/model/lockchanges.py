"""The change ledger of two locks: one ``Change`` per key that differs (packages, nightly pins,
sources, patches, builds and their build requirements and toolchains, GPU kernels, and the lock's
own keys: python, platform, venv digest and its python). Pure: two ``Lock`` values in, no files read.

``model.lockdiff`` builds the report on top of it (``diff_locks``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import Lock, LockedBuild, canonicalize_name


@dataclass(frozen=True)
class Change:
    """One key that differs between two locks: its kind and name, the old and the new value (None: absent)."""

    # "package", "nightly", "source", "patch", "build", "build-requirement", "toolchain" (note: "build NAME"),
    # "env" (a [tool.envlock] key: python, platform, venv-digest, venv-python, min-driver),
    # "kernels" (a package's GPU arches, note: "lost sm_90a SASS; gained sm_120 SASS")
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
        return json_doc(self, omit=("pending",), extra={"action": self.action})


def lock_changes(old: Lock, new: Lock) -> list[Change]:
    """The change ledger: one entry per key that differs."""
    return [*_env_changes(old, new), *_kernel_changes(old, new), *_package_changes(old, new),
            *_nightly_changes(old, new), *_source_changes(old, new), *_build_changes(old, new)]


def _env_changes(old: Lock, new: Lock) -> list[Change]:
    """The lock's own keys: python, platform, the venv digest and its python, the minimum driver."""
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
    if old.min_driver != new.min_driver:
        changes.append(Change("env", "min-driver", old.min_driver, new.min_driver))
    return changes


def _package_changes(old: Lock, new: Lock) -> list[Change]:
    """Each package added, removed, moved (version, wheel bytes, index) or pending its local build."""
    changes: list[Change] = []
    old_pkgs = {p.name: p for p in old.packages}
    new_pkgs = {p.name: p for p in new.packages}
    unbuilt = {str(canonicalize_name(n)) for n in new.unbuilt()}  # a build's name is its package's
    pending_note = f"not built for this lock yet: `envlock build {new.env}` (or `envlock sync {new.env}`) builds it"
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
        elif b is None and name in unbuilt:
            changes.append(Change("package", name, a.version if a else None, None, pending_note, pending=True))
        else:
            changes.append(Change("package", name, a.version if a else None, b.version if b else None))
    return changes


def _nightly_changes(old: Lock, new: Lock) -> list[Change]:
    """Each nightly pin whose date or version moved."""
    changes: list[Change] = []
    for name in sorted(set(old.nightlies) | set(new.nightlies)):
        na, nb = old.nightlies.get(name), new.nightlies.get(name)
        if na != nb:
            changes.append(Change("nightly", name, na.date if na else None, nb.date if nb else None,
                                  f"{na.version if na else '-'} -> {nb.version if nb else '-'}"))
    return changes


def _source_changes(old: Lock, new: Lock) -> list[Change]:
    """Each source whose commit or tree digest moved, and each of its patches that changed."""
    changes: list[Change] = []
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
    return changes


def _build_changes(old: Lock, new: Lock) -> list[Change]:
    """Each local build added, removed, pending, or rebuilt (inputs, wheel), and its requirements' moves."""
    changes: list[Change] = []
    unbuilt = {str(canonicalize_name(n)) for n in new.unbuilt()}
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
        changes += requirement_changes(name, ba, bb)
    return changes


def _kernel_changes(old: Lock, new: Lock) -> list[Change]:
    """Each package whose recorded GPU arches moved (``[tool.envlock.kernels]``): what it lost and gained."""
    out = []
    for name in sorted(set(old.kernels) | set(new.kernels)):
        a, b = old.kernels.get(name), new.kernels.get(name)
        was = (*a.sass, *a.ptx) if a else ()
        now = (*b.sass, *b.ptx) if b else ()
        if was == now:
            continue

        def kind(arch: str) -> str:
            return f"{arch} {'SASS' if arch.startswith('sm_') else 'PTX'}"

        said = [f"lost {kind(x)}" for x in was if x not in now] + [f"gained {kind(x)}" for x in now if x not in was]
        out.append(Change("kernels", name, ", ".join(was) if a else None, ", ".join(now) if b else None,
                          "; ".join(said)))
    return out


def requirement_changes(build: str, a: LockedBuild, b: LockedBuild) -> list[Change]:
    """Each build requirement and toolchain wheel of ``build`` added, removed or changed (version, or the
    hashes it pins)."""
    note = f"build {build}"
    if a.input_digest == b.input_digest:
        # Build requirements are inputs of the build: a lock written by envlock never changes
        # one without its input digest, so this one was edited by other means.
        note += "; its input digest did not change"
    return [*line_changes("build-requirement", a.requirements, b.requirements, note),
            *line_changes("toolchain", a.toolchain, b.toolchain, note)]


def line_changes(kind: str, a: Iterable[str], b: Iterable[str], note: str = "") -> list[Change]:
    """Each package of two lists of locked lines (``name==version --hash=...``) added, removed or
    changed, as ``Change``s of ``kind`` with ``note``."""
    old, new = requirements(a), requirements(b)
    out: list[Change] = []
    for name in sorted(set(old) | set(new)):
        ra, rb = old.get(name), new.get(name)
        if ra == rb:
            continue
        if ra is None or rb is None:
            out.append(Change(kind, name, ra[0] if ra else None, rb[0] if rb else None, note))
        elif ra[0] != rb[0]:
            out.append(Change(kind, name, ra[0], rb[0], note))
        else:
            what = "other hashes" if ra[1] != rb[1] else "another requirement line"
            out.append(Change(kind, name, ra[0], rb[0], f"{note}; same version, {what}"))
    return out


def requirements(lines: Iterable[str]) -> dict[str, tuple[str, frozenset[str], str]]:
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

