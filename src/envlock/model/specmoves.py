"""The moves of ``envlock upgrade`` written into a spec's text: each nightly of an index to one date,
each version asked (a ``same-version`` set, and the overrides that pin it, together).

Pure: text in, text out (through ``model.specedit``, every comment kept), with each value changed
recorded as a ``SpecChange``; what ``latest`` means is handed in (``newest``), so nothing here reads an
index. The recipe (``commands.upgrade``) plans with these, and moves source revs itself (git).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from envlock.errors import SpecError, UsageError
from envlock.model import specedit
from envlock.model.jsondoc import json_doc
from envlock.model.spec import EnvSpec, allows
from envlock.model.specedit import SpecChange
from envlock.model.tomlio import load_toml, toml_key

LATEST = "latest"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class NightlyMove:
    """The nightlies of one index moved to one date (those with ``same-date = false`` stay)."""

    index: str
    old: str  # the date they shared
    new: str
    asked: str  # the date given, or "latest"
    packages: tuple[str, ...]
    kept: tuple[str, ...] = ()  # nightlies of the index that opted out (same-date = false)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class _Spec:
    """The spec a move reads, and how messages name it (its path, relative to the workspace)."""

    spec: EnvSpec
    origin: str


# -- nightlies -------------------------------------------------------------------


def move_nightlies(spec: EnvSpec, origin: str, text: str, asked: Mapping[str, str], newest: Callable[[str], str] | None,
                   changes: list[SpecChange]) -> tuple[str, tuple[NightlyMove, ...]]:
    """Every nightly of each asked index (``""``: every index with nightlies) moved to its date
    (``newest(index)`` for ``latest``)."""
    if not asked:
        return text, ()
    by_index: dict[str, list[NormalizedName]] = {}
    for pkg in sorted(spec.packages.values(), key=lambda p: p.name):
        if pkg.nightly and pkg.index:
            by_index.setdefault(pkg.index, [])
            if pkg.same_date:
                by_index[pkg.index].append(pkg.name)
    wanted = {index: asked.get(index, asked.get("", "")) for index in by_index if index in asked or "" in asked}
    for index, value in asked.items():
        shown = f"--nightly {index + '=' if index else ''}{value}"
        if index and not by_index.get(index):
            known = ", ".join(i for i in sorted(by_index) if by_index[i]) or "none"
            raise UsageError(f"{shown}: {origin} pins no nightly on index {index!r} that shares its date; "
                             f"indexes with nightly pins: {known}")
        if value != LATEST and not _is_date(value):
            raise UsageError(f"{shown}: expected a date YYYY-MM-DD or {LATEST!r}, found {value!r}")
    if not any(by_index.values()):
        raise UsageError(f"--nightly: {origin} has no nightly pins to move (packages with nightly = \"YYYY-MM-DD\")")
    moves = []
    for index, value in sorted(wanted.items()):
        names = by_index[index]
        if not names:
            continue
        current = spec.packages[names[0]].nightly or ""
        date = newest(index) if value == LATEST and newest is not None else value
        if value == LATEST and date <= current:
            date = current  # the newest the index has for the target: never a move back
        for name in names:
            if spec.packages[name].nightly != date:
                text = specedit.set_nightly(text, name, date, origin=origin)
                changes.append(SpecChange(toml_key(toml_key("packages", name), "nightly"), current, date))
        kept = tuple(p.name for p in spec.packages.values() if p.index == index and p.nightly and not p.same_date)
        moves.append(NightlyMove(index, current, date, value, tuple(names), kept))
    return text, tuple(moves)


def _is_date(value: str) -> bool:
    try:
        return bool(_DATE.fullmatch(value)) and bool(dt.date.fromisoformat(value))
    except ValueError:
        return False


# -- versions --------------------------------------------------------------------


def move_versions(spec: EnvSpec, origin: str, text: str, versions: Mapping[str, str],
                  changes: list[SpecChange]) -> str:
    """Each asked package's version set; a ``same-version`` set's members, and the overrides that
    pin them, move with it to the same public version (each keeping its own local tag)."""
    e = _Spec(spec, origin)
    for raw, value in sorted(versions.items()):
        name = canonicalize_name(raw)
        shown = f"--version {raw}={value}"
        specifier = f"=={value}" if value[:1].isdigit() else value
        try:
            SpecifierSet(specifier)
        except InvalidSpecifier:
            raise UsageError(f"{shown}: expected a version (0.6.6) or a specifier (==0.6.6, >=1.1), "
                             f"found {value!r}") from None
        group = next(((i, g) for i, g in enumerate(spec.resolution.same_version) if name in g), None)
        exact = _exact(specifier)
        new: dict[NormalizedName, Version] = {}
        if group is None:
            text = _set_version(e, text, name, specifier, shown, changes)
            if exact is not None:
                new[name] = exact
        else:
            if exact is None:
                members = ", ".join(group[1])
                raise UsageError(f"{shown}: {name} is in resolution.same-version[{group[0]}] ({members}), "
                                 f"which moves by one exact version; expected {raw}=VERSION")
            # One public version; local tags are free: the one given for the package named, else each its own.
            new = {m: exact if m == name and exact.local else _with_local(Version(exact.public), m, spec)
                   for m in group[1]}
            for member in group[1]:
                if member in spec.packages:
                    text = _move_member(e, text, member, new[member], member == name, shown, changes)
        text = _move_overrides(e, text, new, changes)
    return text


def _set_version(e: _Spec, text: str, name: NormalizedName, specifier: str, shown: str,
                 changes: list[SpecChange]) -> str:
    """Package ``name`` set to ``specifier``; a nightly or a build is refused (moved otherwise)."""
    origin = e.origin
    pkg = e.spec.packages.get(name)
    if pkg is None:
        raise UsageError(f"{shown}: {origin} declares no packages.{name}; expected a package of [packages]")
    if pkg.nightly:
        raise UsageError(f"{shown}: packages.{name} is a nightly pin ({pkg.nightly}); move it with "
                         f"--nightly {pkg.index}=DATE")
    if pkg.build:
        raise UsageError(f"{shown}: packages.{name} comes from [builds.{pkg.build}]; move its source with "
                         "--rev SOURCE=REV")
    if pkg.specifier != specifier:
        text = specedit.set_version(text, name, specifier, origin=origin)
        changes.append(SpecChange(_version_key(text, name, origin), pkg.specifier, specifier))
    return text


def _move_member(e: _Spec, text: str, member: NormalizedName, version: Version, named: bool, shown: str,
                 changes: list[SpecChange]) -> str:
    """A declared member of a same-version set moved to ``version``: an exact pin (or the one named)
    is rewritten; a range that allows it stays."""
    pkg = e.spec.packages[member]
    if pkg.nightly or pkg.build:
        return _set_version(e, text, member, f"=={version}", shown, changes)  # says why not
    if not named and _exact(pkg.specifier) is None:
        if pkg.specifier and not allows(pkg.specifier, version.public):
            raise UsageError(f"{shown}: packages.{member} ({pkg.specifier!r}) does not allow {version.public}, "
                             "and only an exact ==VERSION moves with its set; edit it by hand")
        return text
    return _set_version(e, text, member, f"=={version}", shown, changes)


def _move_overrides(e: _Spec, text: str, new: Mapping[NormalizedName, Version],
                    changes: list[SpecChange]) -> str:
    """``resolution.overrides`` that pin a moved package exactly, moved with it."""
    for i, line in enumerate(e.spec.resolution.overrides):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue  # the spec's reader has refused it already
        name = canonicalize_name(req.name)
        pinned = _exact(str(req.specifier))
        if name not in new or pinned is None:
            continue
        # An override keeps its own local tag (or none), as a member of a set does.
        version = Version(f"{new[name].public}+{pinned.local}" if pinned.local else new[name].public)
        if version == pinned:
            continue
        req.specifier = SpecifierSet(f"=={version}")
        text = specedit.set_array_string(text, ("resolution", "overrides"), i, str(req), origin=e.origin)
        changes.append(SpecChange(f"resolution.overrides[{i}]", line, str(req)))
    return text


def _exact(specifier: str) -> Version | None:
    """The version of an exact ``==VERSION`` specifier (no wildcard), else None."""
    try:
        parts = list(SpecifierSet(specifier))
        if len(parts) == 1 and parts[0].operator in ("==", "===") and "*" not in parts[0].version:
            return Version(parts[0].version)
    except (InvalidSpecifier, InvalidVersion):
        pass
    return None


def _with_local(version: Version, name: NormalizedName, spec: EnvSpec) -> Version:
    """``version`` with the local tag the spec pins ``name`` with, if any
    (``flashinfer-jit-cache==0.6.4+cu130`` moved to 0.6.5 is ``0.6.5+cu130``)."""
    pkg = spec.packages.get(name)
    current = _exact(pkg.specifier) if pkg is not None and pkg.specifier else None
    tag = current.local if current is not None else None
    return Version(f"{version.public}+{tag}") if tag else version


def _version_key(text: str, name: NormalizedName, origin: str) -> str:
    key = specedit.package_key(text, name, origin=origin)
    entry = load_toml(text, origin, SpecError)["packages"][key]
    return toml_key("packages", key) + ("" if isinstance(entry, str) else ".version")
