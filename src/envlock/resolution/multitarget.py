"""What locking several targets checks across them (``[targets.NAME]``, ``model.targets``).

- **One nightly date for every target** (``check_dates``): a date a target cannot use (its index
  lists no wheel of it for the target's platform and python, with its local tag) fails the lock before
  anything is resolved, naming the target and the nearest dates usable on every target that shares
  the date; a target that declares its own ``nightly`` is held to that date alone.
- **The CPU build where a CUDA one was meant** (``cuda_traps``): a target that locks a package from
  the default index with no ``+cuNNN`` local tag, where the spec pins CUDA nightlies to an index that
  has CUDA builds of that package (PyPI's aarch64 ``torch`` pulled in by an upstream ``torch==`` pin on
  GB200/GH200), is refused; a package CUDA on one target and not on another is noted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envlock.errors import ResolveError
from envlock.model.lockfile import Lock
from envlock.model.spec import EnvSpec
from envlock.model.target import target_tags
from envlock.net import http
from envlock.net.indexes import Listings, choosable
from envlock.resolution.nightly import local_tag, nightlies_by_date, target_words, usable_files

_CUDA_LOCAL = re.compile(r"cu\d+")
_CUDA_URL = re.compile(r"/cu\d+(/|$)")


def check_dates(spec: EnvSpec, urls: Mapping[str, str], listings: Listings,
                kept: Mapping[str, Mapping[str, str]]) -> None:
    """``ResolveError`` when a nightly pin's date is not usable on one of ``spec``'s targets; ``kept``:
    target -> package -> the date its earlier lock pinned (a relock keeps it from the store)."""
    views = {name: spec.for_target(name) for name in sorted(spec.targets)}
    problems = []
    for pkg in spec.packages.values():
        if not pkg.nightly or pkg.index is None:
            continue
        files = choosable(listings.files(urls[pkg.index], pkg.name))
        usable: dict[str, set[str]] = {}
        for name, view in views.items():
            mine = view.packages[pkg.name]
            usable[name] = set(nightlies_by_date(usable_files(files, target_tags(view.python, view.platform)),
                                                 mine.local))
        for name, view in views.items():
            date = view.packages[pkg.name].nightly
            assert date is not None
            if date in usable[name] or kept.get(name, {}).get(str(pkg.name)) == date:
                continue
            sharing = [n for n, v in views.items() if v.packages[pkg.name].nightly == date]
            problems.append(_missing_date(spec, name, str(pkg.name), date, sharing, usable,
                                          pkg.index, http.redact(urls[pkg.index])))
    if problems:
        raise ResolveError(f"{spec.path}: a nightly date one of the targets cannot use", details=problems)


def _missing_date(spec: EnvSpec, target: str, package: str, date: str, sharing: Sequence[str],
                  usable: Mapping[str, set[str]], index: str, url: str) -> str:
    """The line of a date ``target`` cannot use: the nearest dates usable on every target sharing it."""
    view = spec.for_target(target)
    local = local_tag(view.packages[canonicalize_name(package)].local)
    tag = f" +{local}" if local else " (no local tag)"
    common = set.intersection(*(usable[n] for n in sharing)) if sharing else set()
    before = max((d for d in common if d < date), default=None)
    after = min((d for d in common if d > date), default=None)
    on = "every target" if len(sharing) == len(usable) else "targets " + ", ".join(sharing)
    own = spec.targets[target].nightly is not None
    fix = ("" if own else f", or give [targets.{target}] its own nightly = \"YYYY-MM-DD\"")
    return (f"targets.{target}: packages.{package}.nightly = {date}: index {index!r} ({url}) has no {package}"
            f"{tag} nightly of that date for {target_words(view.python, view.platform)}; nearest dates usable on "
            f"{on}: {before or 'none'} before, {after or 'none'} after{fix}")


def cuda_traps(spec: EnvSpec, locks: Mapping[str, Lock], urls: Mapping[str, str],
               listings: Listings) -> list[str]:
    """The notes of packages CUDA on one target and not on another; ``ResolveError`` for a target that
    takes from the default index a package a CUDA nightly index of the spec has CUDA builds of (see the module)."""
    refused = []
    for index in _cuda_indexes(spec):
        listed = listings.names(urls[index]) or set()
        # Taken from the default index, not a CUDA build, and listed there too: a CUDA build of it there?
        # (PyTorch's index lists numpy and jinja2 too, with no CUDA build: those are not asked about.)
        suspects = sorted({(target, pkg.name, pkg.version) for target, lock in locks.items() for pkg in lock.packages
                           if pkg.name in listed and spec.index_of(pkg.name) == spec.default_index.name
                           and not _is_cuda(pkg.version)})
        for _, name, _ in suspects:
            listings.prefetch(urls[index], name)
        for target, name, version in suspects:
            if any(_is_cuda(str(f.version)) for f in listings.files(urls[index], name)):
                refused.append(
                    f"targets.{target}: {name} {version} comes from the default index "
                    f"{spec.default_index.name!r}, a build without CUDA (no +cuNNN local tag), while the spec "
                    f"pins CUDA nightlies to index {index!r}, which has CUDA builds of {name}; pin it there "
                    f"(packages.{name} = {{ nightly = \"YYYY-MM-DD\", index = \"{index}\" }}) or exclude it")
    if refused:
        raise ResolveError(f"{spec.path}: a target would take a CPU build where the spec pins CUDA", details=refused)
    return cuda_split(locks)


def cuda_split(locks: Mapping[str, Lock]) -> list[str]:
    """A note per package that is a CUDA build (``+cuNNN``) on some targets and not on others."""
    versions: dict[str, dict[str, str]] = {}
    for target, lock in sorted(locks.items()):
        for pkg in lock.packages:
            versions.setdefault(str(pkg.name), {})[target] = pkg.version
    notes = []
    for name, by_target in sorted(versions.items()):
        cuda = sorted(t for t, v in by_target.items() if _is_cuda(v))
        other = sorted(t for t, v in by_target.items() if not _is_cuda(v))
        if cuda and other:
            said = "; ".join(f"{t} {by_target[t]}" for t in cuda)
            cpu = "; ".join(f"{t} {by_target[t]}" for t in other)
            notes.append(f"{name} is a CUDA build on {', '.join(cuda)} ({said}) and not on {', '.join(other)} "
                         f"({cpu}): check that those machines need no CUDA from it")
    return notes


def _cuda_indexes(spec: EnvSpec) -> list[str]:
    """The spec's indexes of CUDA nightlies: one a nightly pin with a ``cuNNN`` local tag names, or whose
    URL names a CUDA flavour (``.../nightly/cu130``)."""
    out = set()
    for pkg in spec.packages.values():
        if pkg.nightly and pkg.index and pkg.local and _CUDA_LOCAL.fullmatch(pkg.local):
            out.add(pkg.index)
    for name, idx in spec.indexes.items():
        if not idx.default and _CUDA_URL.search(idx.url):
            out.add(name)
    return sorted(out)


def _is_cuda(version: str) -> bool:
    try:
        local = Version(version).local
    except InvalidVersion:
        return False
    return bool(local and _CUDA_LOCAL.match(local))
