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

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from envlock.errors import SourceTreeError, redact
from envlock.model.lockfile import canonicalize_name, reach
from envlock.store.home import file_sha256
from envlock.store.trees import tree_digest
from envlock.urlcheck import is_file_url
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.model.lockfile import Lock, LockedPackage, LockedSource
    from envlock.model.spec import EnvSpec


@dataclass(frozen=True)
class Drift:
    """The reasons a lock is stale, by where they come from (each a line naming the key)."""

    spec: tuple[str, ...] = ()  # the spec's keys added, removed or changed since the lock
    lock: tuple[str, ...] = ()  # the lock edited by hand, or another env's
    sources: tuple[str, ...] = ()  # path source trees and patches edited since the lock
    unreadable: tuple[str, ...] = ()  # path source trees that cannot be hashed (a frozen sync's note)
    packages: tuple[str, ...] = ()  # locked packages the spec does not vouch for (``unvouched``)

    @property
    def reasons(self) -> tuple[str, ...]:
        return (*self.spec, *self.lock, *self.packages, *self.sources)

    @property
    def current(self) -> bool:
        return not self.reasons

    def about(self, build: str, source: str) -> list[str]:
        """The reasons that name ``[builds.BUILD]`` or its source ``source``."""
        keys = (f"sources.{source}.", f"sources.{source}:", f"builds.{build}.", f"builds.{build}:")
        return list(dict.fromkeys(r for r in self.reasons if r.startswith(keys)))


def drift(ws: Workspace, env: str, spec: EnvSpec, lock: Lock, *, sources: Collection[str] | None = None,
          mirrors: Mapping[str, str] | None = None) -> Drift:
    """Everything ``lock --check`` says about ``lock`` for env ``env``'s ``spec``; ``sources``:
    read only those sources' trees and patches (None: every source the lock records); ``mirrors``:
    the index mirrors given (spec index name -> URL), whose URLs a lock made through them records
    (None: the ``ENVLOCK_INDEX_<NAME>`` variables').

    A path source whose tree cannot be hashed is a ``SourceTreeError``."""
    edits: list[str] = []
    spec_keys: list[str] = []
    packages: list[str] = []
    if lock.spec_digest != spec.digest():
        spec_keys = spec_reasons(spec, lock)
    elif lock.env == env:
        packages = unvouched(spec, lock, mirrors)
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
    return Drift(spec=tuple(spec_keys), lock=tuple(edits), sources=tuple(moved), packages=tuple(packages))


def unvouched(spec: EnvSpec, lock: Lock, mirrors: Mapping[str, str] | None = None) -> list[str]:
    """Each locked package the spec does not vouch for, and why (one line each, naming it). A package
    is vouched for when it is named in ``[packages]`` (or in a non-isolated build's ``requires``) or
    required through the graph the lock records (``Lock.requires``) from those; and it comes from the
    index the spec takes it from (the spec's URL, or the mirror's in ``mirrors``; a file on this
    machine only from an index on this machine, inside its folder), or it is the wheel the lock
    records for one of the spec's builds. A lock made for another spec (a frozen sync of a stale
    lock) is held to this spec all the same: what the lock says of the spec it was made for (its
    ``spec-digest`` and ``spec-keys``) is the lock's own word, which vouches for nothing."""
    if mirrors is None:
        mirrors = _variable_mirrors(spec)
    roots = {str(n) for n in spec.packages} | {
        _requirement_name(r) for b in spec.builds.values() if not b.isolation for r in b.requires}
    # A lock the spec moved past: the package may be one the spec dropped or moved, not a hand's edit.
    how = "(edited by hand?)" if lock.spec_digest == spec.digest() else "(the spec changed since, or edited by hand?)"
    reasons = []
    reached = None
    if lock.requires is None:
        reasons.append(NO_GRAPH)
    else:
        reached = reach(roots, lock.requires)
    urls = {name: {_index_key(idx.url)} | ({_index_key(mirrors[name])} if mirrors and name in mirrors else set())
            for name, idx in spec.indexes.items()}
    for pkg in lock.packages:
        why = []
        if reached is not None and pkg.name not in reached:
            why.append("required by nothing the spec asks for (not in [packages], nor required through the lock's "
                       "tool.envlock.requires by what is)")
        why += _not_from_spec(spec, lock, pkg, urls)
        reasons += [f"[[packages]] {pkg.name} {pkg.version}: {w} {how}" for w in why]
    return reasons


#: ``unvouched``'s reason for a lock without ``Lock.requires``: stale, but no package named (a frozen
#: sync of such a lock notes it and holds its packages to the spec's indexes and builds only).
NO_GRAPH = ("tool.envlock.requires: missing (a lock written before envlock recorded what each package requires), "
            "so its packages cannot be held to the spec's: lock again")


def _not_from_spec(spec: EnvSpec, lock: Lock, pkg: LockedPackage, urls: Mapping[str, set[str]]) -> list[str]:
    """Why ``pkg`` does not come from where the spec takes it from ([] when it does)."""
    art = pkg.wheels[0]
    where = art.url or art.path
    named = spec.packages.get(pkg.name)
    build = named.build if named is not None else None
    if pkg.index is None:
        record = lock.builds.get(build) if build is not None else None
        if record is None:
            index = spec.index_of(pkg.name)
            return [f"no index, and the spec builds no {pkg.name} ({where}); expected a wheel of index {index!r} "
                    f"({redact(spec.indexes[index].url)})"]
        if art.path is None or (art.filename, art.sha256) != (record.wheel, record.sha256):
            return [f"{where} (sha256 {art.sha256}) is not the wheel the lock records for [builds.{build}] "
                    f"({record.wheel}, sha256 {record.sha256})"]
        return []
    index = spec.index_of(pkg.name)
    if _index_key(pkg.index) not in urls[index]:
        return [f"index {pkg.index}, but the spec takes {pkg.name} from index {index!r} "
                f"({redact(spec.indexes[index].url)})"]
    if art.url is None:
        return [f"{where}, a path, but a wheel of index {pkg.index} is the URL it lists"]
    if is_file_url(art.url) and not _in_folder(pkg.index, art.url):
        return [f"{art.url} is a file on this machine, not a file of index {pkg.index}"]
    return []


def _in_folder(index: str, url: str) -> bool:
    """Whether ``file:`` URL ``url`` names a file inside the folder of ``file:`` index ``index``, as
    the fetch reads it: its path unquoted (``%2e%2e`` is ``..``), and no ``.`` or ``..`` part in it,
    which a folder's symbolic link could take anywhere (an index lists its files by their names)."""
    folder, file = urlsplit(index), urlsplit(url)
    if folder.scheme != "file" or {folder.netloc, file.netloc} - {"", "localhost"}:
        return False  # another host's files: a share mounted here is named by its path
    parts = unquote(file.path).split("/")
    return (not {".", ".."} & set(parts)
            and "/".join(parts).startswith(unquote(folder.path).rstrip("/") + "/"))


def _variable_mirrors(spec: EnvSpec) -> dict[str, str]:
    """The index mirrors the environment names for ``spec`` (``ENVLOCK_INDEX_<NAME>``); {} when one is
    no URL (the command that reads indexes says so: here it only widens what a lock may record)."""
    from envlock.errors import UsageError
    from envlock.model.mirrors import index_mirrors

    try:
        return index_mirrors(spec)
    except UsageError:
        return {}


def _index_key(url: str) -> str:
    """An index URL as a lock records it (no credentials, no trailing slash)."""
    return redact(url.rstrip("/")).rstrip("/")


def _requirement_name(requirement: str) -> str:
    """The package a PEP 508 requirement names (the spec checked it parses)."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return str(canonicalize_name(found.group(1))) if found else requirement


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

    For the fast no-op stamp (``envlock.store.noop``): ``spec`` was parsed from the bytes with
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
