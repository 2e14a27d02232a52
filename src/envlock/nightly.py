"""Resolve ``nightly = "YYYY-MM-DD"`` pins to the exact version on the package's index.

The date lives in the dev or pre-release segment: ``2.12.0.dev20260307``,
``3.6.0a20260307``, ``.dev2026030701`` (a build of that day; the latest wins).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from packaging.version import Version

from envlock.errors import ResolveError
from envlock.indexes import IndexFile


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


def missing_date(by_date: dict[str, set[Version]], *, date: str, local: str | None, key: str, index_name: str,
                 index_url: str) -> ResolveError:
    """The error for a ``date`` that ``by_date`` (``nightlies_by_date``) does not list: the nearest dates."""
    tag = f" with local tag +{local}" if local else ""
    if not by_date:
        return ResolveError(
            f"{key}: no nightly{tag} is listed on index {index_name!r} ({index_url}); "
            "check the package name, the index and the local tag"
        )
    wanted = dt.date.fromisoformat(date)
    nearest = sorted(by_date, key=lambda d: (abs((dt.date.fromisoformat(d) - wanted).days), d))[:5]
    return ResolveError(
        f"{key}: no nightly{tag} dated {date} on index {index_name!r} ({index_url}); "
        f"nearest listed dates: {', '.join(sorted(nearest))} (listed range {min(by_date)} .. {max(by_date)}). "
        "Indexes such as PyTorch's keep only their ~60 newest nightlies: an older pin needs a mirror "
        "(--index NAME=URL), or a relock of a lock that pinned this date, with its wheels in the store"
    )
