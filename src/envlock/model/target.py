"""The target platform of an env: its wheel tags, its PEP 508 marker values, which wheel it installs,
what a wheel requires, and the interpreter that stands for its python on this machine.

An env is locked for a python version and, optionally, a platform as uv spells it
(``x86_64-manylinux_2_28``), which need not be this host's. Resolution ranks an index's
wheels by the target's tags and reads requirements with the target's markers; a build's
venv follows the same requirements. Forms not ranked here (another OS, another libc)
are answered with None, and the caller leaves the choice to uv.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from envlock import runner
from envlock.errors import InstallError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    # packaging's tags and requirement parser (~40 ms of imports) are imported where used: an install
    # only asks ``find_python``.
    from packaging.requirements import Requirement
    from packaging.tags import Tag

    # A type name only: envlock.net.indexes imports envlock.net.http (socket, ssl), which finding an
    # interpreter for an install has no use for.
    from envlock.net.indexes import IndexFile


def target_tags(python: str, platform: str | None) -> list[Tag] | None:
    """Wheel tags for the target, best first; None when the platform form is not one we rank."""
    tags = _target_tags(python, platform)
    return list(tags) if tags is not None else None


@functools.cache  # a lock asks for a target's tags ~8 times (each ~2 ms), a lock of two targets twice that
def _target_tags(python: str, platform: str | None) -> tuple[Tag, ...] | None:
    from packaging.tags import compatible_tags, cpython_tags, sys_tags

    major, minor = (int(x) for x in python.split(".")[:2])
    if platform is None:
        if (major, minor) != sys.version_info[:2]:
            return None
        return tuple(sys_tags())
    m = re.fullmatch(r"(x86_64|aarch64)-manylinux_2_(\d+)", platform)
    if not m:
        return None
    arch, glibc = m.group(1), int(m.group(2))
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    plats: list[str] = []
    for minor_glibc in range(glibc, 4, -1):
        plats.append(f"manylinux_2_{minor_glibc}_{arch}")
        if minor_glibc in legacy and (arch == "x86_64" or minor_glibc == 17):
            plats.append(f"{legacy[minor_glibc]}_{arch}")
    plats.append(f"linux_{arch}")
    version = (major, minor)
    return (*cpython_tags(version, platforms=plats), *compatible_tags(version, platforms=plats))


def host_tags(python: str) -> list[Tag]:
    """Wheel tags a CPython ``python`` (``3.11``) interpreter on this machine installs, best first: what
    a build's backend and its tools are installed into (a build runs here, whatever the env's target)."""
    from packaging.tags import compatible_tags, cpython_tags, platform_tags, sys_tags

    major, minor = (int(x) for x in python.split(".")[:2])
    if (major, minor) == sys.version_info[:2]:
        return list(sys_tags())
    here = list(platform_tags())
    return [*cpython_tags((major, minor), platforms=here), *compatible_tags((major, minor), platforms=here)]


def for_target(files: Iterable[IndexFile], tags: Sequence[Tag] | None) -> list[IndexFile]:
    """The wheels among ``files`` the target installs (every wheel when ``tags`` is None: not ranked)."""
    from packaging.utils import parse_wheel_filename

    supported = set(tags) if tags is not None else None
    return [f for f in files if f.filename.endswith(".whl")
            and (supported is None or parse_wheel_filename(f.filename)[3] & supported)]


def best_file(files: Sequence[IndexFile], tags: Sequence[Tag] | None) -> IndexFile:
    """The one of ``files`` (wheels, for the target) the target would install."""
    return files[best_wheel([f.filename for f in files], tags)]


def best_wheel(filenames: Sequence[str], tags: Sequence[Tag] | None) -> int:
    """Index of the wheel the target installer would pick (first by tag priority)."""
    if tags is None or len(filenames) == 1:
        return 0
    from packaging.utils import parse_wheel_filename

    rank = {tag: i for i, tag in enumerate(tags)}
    scores = []
    for filename in filenames:
        wheel_tags = parse_wheel_filename(filename)[3]
        scores.append(min((rank[t] for t in wheel_tags if t in rank), default=len(rank)))
    return scores.index(min(scores))


def target_markers(python: str, platform: str | None, *, known_only: bool = True) -> dict[str, str] | None:
    """PEP 508 marker values of the target, not this host's where they differ.

    A platform form not read here (or, with none, a host that is not Linux): None when
    ``known_only``, else this host's platform values.
    """
    from packaging.markers import default_environment

    env = {key: str(value) for key, value in default_environment().items()}
    m = re.fullmatch(r"(x86_64|aarch64)-manylinux_2_\d+", platform or "")
    if m:
        env.update(sys_platform="linux", platform_system="Linux", platform_machine=m.group(1), os_name="posix",
                   platform_release="", platform_version="")  # another machine's: not this host's
    elif known_only and (platform is not None or not sys.platform.startswith("linux")):
        return None
    parts = python.split(".")
    full = python if len(parts) > 2 else f"{python}.0"
    env.update(python_version=".".join(parts[:2]), python_full_version=full, implementation_version=full,
               implementation_name="cpython", platform_python_implementation="CPython")
    return env


def target_environment(python: str, platform: str | None) -> dict[str, str]:
    """``target_markers`` that always answer: this host's platform values where the target's are not read."""
    markers = target_markers(python, platform, known_only=False)
    assert markers is not None  # known_only=False always answers
    return markers


def requires_dist(wheel: Path) -> list[Requirement]:
    """A wheel's ``Requires-Dist``, read from its METADATA without unpacking it.

    ``ValueError`` naming the wheel when it has not exactly one top-level ``*.dist-info/METADATA``
    or a requirement line does not parse; a broken zip raises as it is read.
    """
    import zipfile
    from email.parser import BytesParser

    from packaging.requirements import InvalidRequirement, Requirement

    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ValueError(f"{wheel}: not a wheel (expected one .dist-info/METADATA, found {len(names)})")
        message = BytesParser().parsebytes(zf.read(names[0]), headersonly=True)
    try:
        return [Requirement(str(line)) for line in message.get_all("Requires-Dist") or []]
    except InvalidRequirement as exc:
        raise ValueError(f"{wheel}: a Requires-Dist of its METADATA does not parse ({exc})") from None


def find_python(version: str) -> Path:
    """The interpreter for ``version`` on this machine (never a download); ``InstallError`` when none is.

    The interpreter running envlock when its version matches (free), else uv's
    discovery (which probes every interpreter on PATH: a few hundred ms).
    """
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    base = getattr(sys, "_base_executable", None) or sys.executable
    if version in (running, f"{running}.{sys.version_info.micro}") and base:
        return _versioned(Path(base), running)
    result = runner.uv(["python", "find", "--system", "--no-project", version])
    found = result.stdout.strip().splitlines()
    if not result.ok or not found:
        raise InstallError(
            f"python {version} (the lock's python) is not available on this machine; "
            "envlock never downloads interpreters (UV_PYTHON_DOWNLOADS=never): install it, "
            "or lock the env for a python that is here",
            details=result.tail(5).splitlines(),
        )
    return _versioned(Path(found[-1]), version)


def _versioned(python: Path, version: str) -> Path:
    # The venv's bin/python links to the name we pass: always pass pythonX.Y when it
    # exists, so one interpreter found two ways gives one venv.
    major_minor = ".".join(version.split(".")[:2])
    named = python.parent / f"python{major_minor}"
    return named if named.exists() else python
