"""What makes a lock stale for its spec: one ``Drift`` value, read without network or writes.

``lock --check`` prints it, a frozen sync notes it, a build refuses to record a wheel whose
inputs moved because of it, and the fast no-op stamp records the files whose bytes make a
lock current (``stamp_inputs``) so that the next sync can trust them without reading them
again. A lock is stale for its spec when the spec's keys changed since it was written
(``[tool.envlock] spec-keys`` names which), when it was edited by hand (its pins no longer
keep the spec's, or another env's lock stands in its place), or when a source moved: a
``path`` source's tree (content-hashed) or a recorded patch.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envlock.errors import SourceTreeError
from envlock.quick import file_sha256
from envlock.trees import tree_digest
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.lockfile import Lock, LockedSource
    from envlock.spec import EnvSpec


@dataclass(frozen=True)
class Drift:
    """The reasons a lock is stale, by where they come from (each a line naming the key)."""

    spec: tuple[str, ...] = ()  # the spec's keys added, removed or changed since the lock
    lock: tuple[str, ...] = ()  # the lock edited by hand, or another env's
    sources: tuple[str, ...] = ()  # path source trees and patches edited since the lock
    unreadable: tuple[str, ...] = ()  # path source trees that cannot be hashed (a frozen sync's note)

    @property
    def reasons(self) -> tuple[str, ...]:
        return (*self.spec, *self.lock, *self.sources)

    @property
    def current(self) -> bool:
        return not self.reasons

    def about(self, build: str, source: str) -> list[str]:
        """The reasons that name ``[builds.BUILD]`` or its source ``source``."""
        keys = (f"sources.{source}.", f"sources.{source}:", f"builds.{build}.", f"builds.{build}:")
        return list(dict.fromkeys(r for r in self.reasons if r.startswith(keys)))


def drift(ws: Workspace, env: str, spec: EnvSpec, lock: Lock, *, sources: Collection[str] | None = None) -> Drift:
    """Everything ``lock --check`` says about ``lock`` for env ``env``'s ``spec``; ``sources``:
    read only those sources' trees and patches (None: every source the lock records).

    A path source whose tree cannot be hashed is a ``SourceTreeError``."""
    edits: list[str] = []
    spec_keys: list[str] = []
    if lock.spec_digest != spec.digest():
        spec_keys = spec_reasons(spec, lock)
    elif lock.env == env:
        # Made for this spec: a lock edited by hand since may still not keep its pins.
        versions = {p.name: p.version for p in lock.packages}
        nightlies = {name: pin.version for name, pin in lock.nightlies.items()}
        edits += [f"{problem} (edited by hand?)" for problem in spec.pin_problems(versions, nightlies,
                                                                                    what="the lock")]
        # The spec digest covers these: a lock that holds others was edited after it was written.
        edits += [f"tool.envlock.{key}: {got!r}, but env.{key} is {want!r} (edited by hand?)"
                  for key, got, want in (("python", lock.python, spec.python),
                                         ("platform", lock.platform, spec.platform)) if got != want]
    if lock.env != env:
        edits.append(f"tool.envlock.env: the lock of env {lock.env!r}, not {env!r}")
    if lock.venv_digest_stale:
        edits.append("tool.envlock.venv-digest: recorded for other packages than the lock's (install digest "
                      f"{lock.venv_install}, now {lock.install_digest()}): the packages were edited by hand since")
    moved = [r for name, source in sorted(lock.sources.items()) if sources is None or name in sources
             for r in source_drift(ws, name, source)]
    return Drift(spec=tuple(spec_keys), lock=tuple(edits), sources=tuple(moved))


def frozen_drift(ws: Workspace, spec: EnvSpec, lock: Lock) -> Drift:
    """What makes ``lock`` stale for the spec, as a frozen sync says it: the spec's keys, and
    patches and path sources edited since (not missing ones: a frozen sync needs no source);
    and the path sources that cannot be hashed at all (a link out of the tree), which a note
    names rather than failing a sync that reads no source."""
    moved: list[str] = []
    unreadable: list[str] = []
    for name, source in sorted(lock.sources.items()):
        if source.kind == "path" and source.tree_digest is not None and (ws.root / source.location).is_dir():
            try:
                moved += _tree_drift(ws, name, source.location, source.tree_digest)
            except SourceTreeError as exc:
                unreadable.append(exc.message)
        moved += [r for patch in source.patches if (ws.root / patch.path).is_file()
                  for r in _patch_drift(ws, name, patch.path, patch.sha256)]
    spec_keys = spec_reasons(spec, lock) if lock.spec_digest != spec.digest() else []
    return Drift(spec=tuple(spec_keys), sources=tuple(moved), unreadable=tuple(unreadable))


def spec_reasons(spec: EnvSpec, lock: Lock) -> list[str]:
    """The spec keys added, removed or changed since ``lock`` was made (it was made for another spec)."""
    reasons = []
    new = spec.key_digests()
    old = dict(lock.spec_keys)
    for key in sorted(set(new) | set(old)):
        if key not in old:
            reasons.append(f"{key}: added to the spec")
        elif key not in new:
            reasons.append(f"{key}: removed from the spec")
        elif old[key] != new[key]:
            reasons.append(f"{key}: changed")
    return reasons or ["spec changed"]


def source_drift(ws: Workspace, name: str, source: LockedSource) -> list[str]:
    """A source's edits since the lock: its tree (a ``path`` source) and its patches."""
    reasons = _tree_drift(ws, name, source.location, source.tree_digest) if (
        source.kind == "path" and source.tree_digest is not None) else []
    for patch in source.patches:
        reasons += _patch_drift(ws, name, patch.path, patch.sha256)
    return reasons


def _tree_drift(ws: Workspace, source: str, rel: str, digest: str) -> list[str]:
    """A ``path`` source is content-hashed: an edit in its tree makes the lock stale."""
    folder = ws.root / rel
    if not folder.is_dir():
        return [f"sources.{source}.path: {rel} is missing"]
    if tree_digest(folder, name=f"sources.{source}.path: {rel}") != digest:
        return [f"sources.{source}.path: {rel} changed since the lock"]
    return []


def _patch_drift(ws: Workspace, source: str, rel: str, sha256: str) -> list[str]:
    actual = file_sha256(str(ws.root / rel))
    if actual is None:
        return [f"sources.{source}.patches: {rel} is missing"]
    if actual != sha256:
        return [f"sources.{source}.patches: {rel} changed since the lock"]
    return []


def stamp_inputs(ws: Workspace, spec: EnvSpec, spec_sha: str, lock: Lock, lock_path: Path) -> dict[str, str] | None:
    """The files whose bytes make ``lock`` current for its spec (path -> sha256), or None.

    For the fast no-op stamp (``envlock.quick``): ``spec`` was parsed from the bytes with
    ``spec_sha`` and must give the lock's spec digest; patches and local wheels must keep
    the sha256 the lock records (what ``lock --check`` and the build check read). None when
    a whole tree is an input (a ``path`` source): the full check runs every time.
    """
    if spec.digest() != lock.spec_digest or any(source.kind == "path" for source in lock.sources.values()):
        return None
    inputs = {str(spec.path): spec_sha}
    for source in lock.sources.values():
        inputs.update((str(ws.root / patch.path), patch.sha256) for patch in source.patches)
    for pkg in lock.packages:
        art = pkg.wheels[0]
        if art.path is not None:
            inputs[str(lock_path.parent / art.path)] = art.sha256
    return inputs


def frozen_stamp_inputs(ws: Workspace, spec: EnvSpec, spec_sha: str, lock: Lock) -> dict[str, str] | None:
    """For a frozen sync's no-op stamp: the spec and patches it found ``lock`` made for (path ->
    sha256), or None when the lock has a ``path`` source (its tree is checked each time)."""
    if any(source.kind == "path" for source in lock.sources.values()):
        return None
    return {str(spec.path): spec_sha, **{str(ws.root / patch.path): patch.sha256
                                         for source in lock.sources.values() for patch in source.patches}}
