"""Nightly pins: the date a version carries, the dates an index lists for a target, and what
a pin whose date is missing or unusable is told.

The date lives in the dev or pre-release segment: ``2.12.0.dev20260307``,
``3.6.0a20260307``, ``.dev2026030701`` (a build of that day; the latest the target can
install wins). Everything here is a pure function of an index's file list and the
target's wheel tags (``model.target.target_tags``): ``resolve`` pins with it, ``envlock nightlies``
lists with it, so the two never disagree on which dates a target can use.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from packaging.tags import Tag
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from envlock.errors import ResolveError
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import NightlyPin
from envlock.net.indexes import IndexFile


def nightly_date(version: Version) -> str | None:
    """``YYYY-MM-DD`` carried by the version's dev or pre segment, or None."""
    for number in (version.dev, version.pre[1] if version.pre else None):
        if number is None:
            continue
        digits = str(number)
        if len(digits) not in (8, 10):
            continue
        try:
            return dt.date(int(digits[:4]), int(digits[4:6]), int(digits[6:8])).isoformat()
        except ValueError:
            continue
    return None


def local_tag(local: str | None) -> str | None:
    """A spec's ``local`` tag as PEP 440 normalizes ``Version.local``: "CU130" is cu130, "cu_130" cu.130."""
    return None if local is None else local.lower().replace("_", ".").replace("-", ".")


def nightlies_by_date(files: Sequence[IndexFile], local: str | None) -> dict[str, set[Version]]:
    """The nightly versions among ``files`` (with the ``local`` tag, if given), by their date."""
    by_date: dict[str, set[Version]] = {}
    tag_wanted = local_tag(local)
    for f in files:
        if tag_wanted is not None and f.version.local != tag_wanted:
            continue
        day = nightly_date(f.version)
        if day is not None:
            by_date.setdefault(day, set()).add(f.version)
    return by_date



def usable_files(files: Sequence[IndexFile], tags: Sequence[Tag] | None) -> list[IndexFile]:
    """The files among ``files`` the target can install: wheels with one of its ``tags``; every
    file when ``tags`` is None (a platform form not ranked: uv decides)."""
    if tags is None:
        return list(files)
    supported = set(tags)
    return [f for f in files if f.filename.endswith(".whl") and parse_wheel_filename(f.filename)[3] & supported]


def wheel_tag(filename: str) -> str:
    """The tag triple a wheel's file name ends with (``cp311-cp311-manylinux_2_28_x86_64``), as the
    file spells it; ``sdist`` for a source distribution."""
    if not filename.endswith(".whl"):
        return "sdist"
    return "-".join(filename[: -len(".whl")].split("-")[-3:])


def _python_of(tag: str) -> str:
    python, abi, _ = tag.split("-")
    return python if abi in ("none", python) else f"{python}-{abi}"  # cp39-abi3, cp313-cp313t


def _platform_of(tag: str) -> str:
    return tag.rsplit("-", 1)[-1]


def describe_tags(tags: Iterable[str]) -> str:
    """``wheel_tag`` values, grouped by platform for a reader: ``macosx_11_0_arm64 (cp311, cp312),
    manylinux_2_28_aarch64 (cp312)``; an sdist reads ``sdist (no wheel)``."""
    by_platform: dict[str, set[str]] = {}
    sdist = False
    for tag in tags:
        if tag == "sdist":
            sdist = True
            continue
        by_platform.setdefault(_platform_of(tag), set()).add(_python_of(tag))
    parts = [f"{platform} ({', '.join(sorted(pythons))})" for platform, pythons in sorted(by_platform.items())]
    return ", ".join(parts + ["sdist (no wheel)"] * sdist) or "no file"


#: How a date stands for the target: a wheel it installs; wheels for other platforms or pythons only;
#: not listed any more, but the locked wheel is in the store (``resolve.kept_pins``); not listed at all.
DateStatus = Literal["usable", "other-platforms", "kept", "unlisted"]


@dataclass(frozen=True)
class NightlyDate:
    """One date of a nightly-pinned package, as the target sees it."""

    date: str  # YYYY-MM-DD
    status: DateStatus
    # The day's build the target takes (its latest usable one), else the day's latest; a date
    # the index no longer lists: the lock's version; a date only the spec names: None.
    version: str | None
    wheels: tuple[str, ...] = ()  # ``wheel_tag`` of each of the day's files (the pin's local tag), sorted
    locked: bool = False  # the lock's pin
    pinned: bool = False  # the spec's pin

    @property
    def usable(self) -> bool:
        """Whether a lock of this date works for the target (listed with its wheel, or kept)."""
        return self.status in ("usable", "kept")

    def platforms(self) -> str:
        """What the day's files are for, read by people (``describe_tags``)."""
        return describe_tags(self.wheels)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, extra={
            "usable": self.usable,
            "platforms": sorted({_platform_of(t) for t in self.wheels if t != "sdist"}),
            "pythons": sorted({_python_of(t) for t in self.wheels if t != "sdist"}),
        })


def list_dates(files: Sequence[IndexFile], *, local: str | None, tags: Sequence[Tag] | None,
               pinned: str | None = None, locked: NightlyPin | None = None,
               kept_wheel: str | None = None) -> tuple[NightlyDate, ...]:
    """Every nightly date ``files`` (one project's index listing) has with the ``local`` tag, newest
    first, as the target (``tags``) sees it; plus the ``locked`` pin and the ``pinned`` date of the
    spec where the index no longer lists them. ``kept_wheel``: the file name of the locked pin's
    wheel when the store holds it for a relock (``resolve.kept_pins`` said so)."""
    tag_wanted = local_tag(local)
    by_date: dict[str, list[IndexFile]] = {}
    for f in files:
        if (tag_wanted is None or f.version.local == tag_wanted) and (day := nightly_date(f.version)):
            by_date.setdefault(day, []).append(f)
    dates = []
    for day, day_files in by_date.items():
        ours = usable_files(day_files, tags)
        dates.append(NightlyDate(
            date=day, status="usable" if ours else "other-platforms",
            version=str(max(f.version for f in ours or day_files)),
            wheels=tuple(sorted({wheel_tag(f.filename) for f in day_files})),
            locked=locked is not None and locked.date == day, pinned=pinned == day,
        ))
    if locked is not None and locked.date not in by_date:
        dates.append(NightlyDate(date=locked.date, status="kept" if kept_wheel else "unlisted",
                                 version=locked.version, wheels=(wheel_tag(kept_wheel),) if kept_wheel else (),
                                 locked=True, pinned=pinned == locked.date))
    if pinned is not None and pinned not in by_date and (locked is None or locked.date != pinned):
        dates.append(NightlyDate(date=pinned, status="unlisted", version=None, pinned=True))
    return tuple(sorted(dates, key=lambda d: d.date, reverse=True))


def target_words(python: str, platform: str | None) -> str:
    """The target as messages name it: ``python 3.11 on x86_64-manylinux_2_28``."""
    return f"python {python}" + (f" on {platform}" if platform else "")


@dataclass(frozen=True)
class DatePin:
    """A spec's nightly pin, with what an error about its date names."""

    env: str
    key: str  # "<spec path>: packages.NAME.nightly"
    package: str
    date: str
    local: str | None
    index_name: str
    index_url: str  # without credentials
    python: str
    platform: str | None


def date_error(pin: DatePin, files: Sequence[IndexFile], tags: Sequence[Tag] | None) -> ResolveError:
    """Why ``pin``'s date cannot be locked from ``files`` (its index's listing): the date is not
    listed (with the pin's local tag), or has no wheel the target (``tags``) installs. Either way
    the nearest dates the target can use are named, on each side."""
    target = target_words(pin.python, pin.platform)
    dates = list_dates(files, local=pin.local, tags=tags)
    hint = f"`envlock nightlies {pin.env} {pin.package}` lists every date the index has, and its platforms"
    if not dates:
        tag = f" with local tag +{pin.local}" if pin.local else ""
        return ResolveError(
            f"{pin.key}: no nightly{tag} is listed on index {pin.index_name!r} ({pin.index_url}); "
            "check the package name, the index and the local tag")
    asked = next((d for d in dates if d.date == pin.date), None)
    if asked is not None:
        return ResolveError(
            f"{pin.key}: index {pin.index_name!r} ({pin.index_url}) lists {pin.package} nightlies dated {pin.date}, "
            f"but none with a wheel for {target}: that date has {asked.platforms()} only; "
            f"{_nearest_usable(dates, pin.date, target)}", details=[hint])
    return ResolveError(_missing(pin, files, dates, target), details=[hint])


def _missing(pin: DatePin, files: Sequence[IndexFile], dates: Sequence[NightlyDate], target: str) -> str:
    tag = f" with local tag +{pin.local}" if pin.local else ""
    listed = [d.date for d in dates]
    # The date may be there under other local tags (+cpu but not +cu130): say which.
    others = sorted({f"+{f.version.local}" if f.version.local else "no local tag"
                     for f in files if nightly_date(f.version) == pin.date})
    elsewhere = f"; that date is listed with {', '.join(others)} only" if others else ""
    said = (f"{pin.key}: no nightly{tag} dated {pin.date} on index {pin.index_name!r} ({pin.index_url}){elsewhere}; "
            f"listed range {min(listed)} .. {max(listed)}; {_nearest_usable(dates, pin.date, target)}")
    if pin.date < min(listed):
        said += (". Indexes such as PyTorch's keep only their ~60 newest nightlies: an older pin needs a mirror "
                 "(--index NAME=URL), or a relock of a lock that pinned this date, with its wheels in the store")
    return said


def _nearest_usable(dates: Sequence[NightlyDate], date: str, target: str) -> str:
    """The nearest dates usable for the target before and after ``date``, in words."""
    usable = [d.date for d in dates if d.usable]
    if not usable:
        wheels = {t for d in dates for t in d.wheels}
        return f"no listed date has a wheel for {target}: they have {describe_tags(wheels)}"
    before = max((d for d in usable if d < date), default=None)
    after = min((d for d in usable if d > date), default=None)
    return f"nearest dates with a wheel for {target}: {before or 'none'} before, {after or 'none'} after"
