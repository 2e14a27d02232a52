"""The entries of a lock file, each a frozen value with its TOML: a package and its wheels
(``[[packages]]``); those of what the env builds (a nightly pin, a source and its patches, a build, a
FetchContent pin, a package's GPU kernels) are in ``model.lockbuilds``. Read key by key
(``BadKeyError``: the key path, what was found and what was expected) and written as envlock writes
them; ``model.lockfile`` holds the whole lock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from envlock.errors import found as _found
from envlock.model.tomlio import toml_key, toml_string

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any, cast

    from packaging.utils import NormalizedName

    from envlock.model.overlaps import AllowedOverlap
else:
    def cast(_kind: object, value: object) -> object:
        """``typing.cast`` at run time, an identity: a lock is read on every sync, typing is not imported for it."""
        return value


def canonicalize_name(name: str) -> NormalizedName:
    """PEP 503 name normalization, as ``packaging.utils.canonicalize_name``.

    Kept here so that reading a lock (every ``sync``) does not import ``packaging``.
    """
    return cast("NormalizedName", re.sub(r"[-_.]+", "-", name).lower())


SHA256 = re.compile(r"[0-9a-f]{64}")

#: A Python version as a spec's ``env.python`` and a lock's ``python`` give it: a sync hands it
#: to ``uv python find``, so a lock can name no program (``tools/python``) nor an option there.
PYTHON_VERSION = re.compile(r"3\.\d{1,3}(\.\d{1,3})?")

#: PEP 508's package name (the spec checks its names with it too).
PACKAGE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
#: PEP 440's version, as the PEP's appendix spells it (every form it normalizes). Not
#: packaging's Version: reading a lock (every sync) does not import packaging.
_VERSION = re.compile(
    r"v?([0-9]+!)?[0-9]+(\.[0-9]+)*"
    r"([-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?"
    r"(-[0-9]+|[-_.]?(post|rev|r)[-_.]?[0-9]*)?"
    r"([-_.]?dev[-_.]?[0-9]*)?"
    r"(\+[a-z0-9]+([-_.][a-z0-9]+)*)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Artifact:
    """One wheel: a remote ``url`` or a ``path`` relative to the lock file, and its sha256."""

    sha256: str
    url: str | None = None
    path: str | None = None
    size: int | None = None

    @property
    def filename(self) -> str:
        where = self.url if self.url is not None else self.path
        assert where is not None
        if "?" in where or "#" in where:  # the common case skips urlsplit: every lock read checks names
            where = urlsplit(where).path
        name = where.rsplit("/", 1)[-1]
        return unquote(name) if "%" in name else name

    def filename_problem(self) -> str | None:
        """Why ``filename`` cannot be kept as ``wheels/<sha256>/<filename>``, or None when it can.

        Only a plain ``*.whl`` name stays inside its store entry: a lock from a pull
        request or a hostile index page may end a URL in ``..%2F..%2Fx.whl``.
        """
        name = self.filename
        if name.endswith(".whl") and not name.startswith(".") and not any(c in name for c in "/\\\0"):
            return None
        return f"{self.url or self.path!r} names the file {name!r}, expected a plain *.whl file name"

    def to_toml(self) -> str:
        fields: list[str] = []
        if self.url is not None:
            fields.append(f"url = {toml_string(self.url)}")
        if self.path is not None:
            fields.append(f"path = {toml_string(self.path)}")
        if self.size is not None:
            fields.append(f"size = {self.size}")
        fields.append(f"hashes = {{ sha256 = {toml_string(self.sha256)} }}")
        return "{ " + ", ".join(fields) + " }"


@dataclass(frozen=True)
class LockedPackage:
    """One ``[[packages]]`` entry of a lock: a distribution pinned to its wheels."""

    name: NormalizedName
    version: str
    wheels: tuple[Artifact, ...]
    index: str | None = None  # the index base URL it was resolved from (PEP 751 ``index``)
    #: PEP 592: the reason its index gave ("" for none) when the locked release was yanked at lock
    #: time (an exact ``==`` pin takes a yanked release); None when it was not.
    #: ``[packages.tool.envlock] yanked`` in the file.
    yanked: str | None = None

    def toml_lines(self) -> list[str]:
        """Its ``[[packages]]`` table (and ``[packages.tool.envlock]``), a blank line first."""
        out = ["", "[[packages]]", f"name = {toml_string(self.name)}", f"version = {toml_string(self.version)}"]
        if self.index:
            out.append(f"index = {toml_string(self.index)}")
        out += ["wheels = [", *(f"    {wheel.to_toml()}," for wheel in self.wheels), "]"]
        if self.yanked is not None:  # PEP 751 packages.tool: this package's envlock data
            out += ["", "[packages.tool.envlock]", f"yanked = {toml_string(self.yanked)}"]
        return out


class BadKeyError(Exception):
    """A key of the lock that holds what envlock cannot read: where, what was found, what was expected
    (``model.lockfile`` names the file)."""

    def __init__(self, key: str, found: str, expected: str, package: str | None = None) -> None:
        super().__init__(key, found, expected)
        self.key, self.found, self.expected, self.package = key, found, expected, package

    def __str__(self) -> str:
        # packages[97] alone is hard to find in a lock of 158: name the package too.
        where = f"{self.key} (package {self.package!r})" if self.package else self.key
        return f"{where}: {self.found}; expected {self.expected}"


def read_table(value: object, key: str) -> Mapping[str, Any]:
    """``value`` as a table, else ``BadKeyError`` at ``key`` (missing, or what was found)."""
    if not isinstance(value, dict):
        raise BadKeyError(key, "missing" if value is None else f"found {_found(value)}", "a table")
    return value


def read_array(value: object, key: str) -> list[Any]:
    """``value`` as an array, else ``BadKeyError`` at ``key``."""
    if not isinstance(value, list):
        raise BadKeyError(key, "missing" if value is None else f"found {_found(value)}", "an array")
    return value


def read_str(table: Mapping[str, Any], name: str, path: str) -> str:
    """``table[name]`` as a string, else ``BadKeyError`` at ``path.name``."""
    value = table.get(name)
    if not isinstance(value, str):
        raise BadKeyError(toml_key(path, name), "missing" if value is None else f"found {_found(value)}", "a string")
    return value


def read_opt_str(table: Mapping[str, Any], name: str, path: str) -> str | None:
    """``table[name]`` as a string, or None when it is absent; ``BadKeyError`` when it is no string."""
    return None if table.get(name) is None else read_str(table, name, path)


def read_strings(value: object, key: str) -> tuple[str, ...]:
    """``value`` as an array of strings, else ``BadKeyError`` at ``key`` (or the first item that is none)."""
    for i, item in enumerate(read_array(value, key)):
        if not isinstance(item, str):
            raise BadKeyError(f"{key}[{i}]", f"found {_found(item)}", "a string")
    return tuple(cast("list[str]", value))


def package_entry(value: object, key: str) -> LockedPackage:
    """One ``[[packages]]`` table at ``key``; a ``BadKeyError`` below it names the package too."""
    pkg = read_table(value, key)
    name = read_str(pkg, "name", key)
    if not PACKAGE_NAME.fullmatch(name) or canonicalize_name(name) != name:
        raise BadKeyError(f"{key}.name", f"found {name!r}",
                          "a normalized package name (PEP 751), like \"flashinfer-python\"")
    try:
        version = read_str(pkg, "version", key)
        if not _VERSION.fullmatch(version):
            raise BadKeyError(f"{key}.version", f"found {version!r}", "a version (PEP 440), like \"2.9.1\"")
        wheels = read_array(pkg.get("wheels"), f"{key}.wheels")
        if not wheels:
            raise BadKeyError(f"{key}.wheels", "found an empty array", "a wheel (envlock installs wheels only)")
        return LockedPackage(
            name=cast("NormalizedName", name),  # normalized: checked above
            version=version,
            wheels=tuple(_artifact(w, f"{key}.wheels[{j}]") for j, w in enumerate(wheels)),
            index=read_opt_str(pkg, "index", key),
            yanked=_package_tool(pkg, key),
        )
    except BadKeyError as exc:
        exc.package = name
        raise


def _package_tool(pkg: Mapping[str, Any], key: str) -> str | None:
    """``[packages.tool.envlock]``: ``yanked``, the reason (a string) its release was yanked at lock
    time, and nothing else (another tool's table beside it is its own)."""
    tool = pkg.get("tool")
    if tool is None:
        return None
    ours = read_table(tool, f"{key}.tool").get("envlock")
    if ours is None:
        return None
    where = f"{key}.tool.envlock"
    for extra in sorted(set(read_table(ours, where)) - {"yanked"}):
        raise BadKeyError(toml_key(where, extra), "found a key envlock does not write there", "only yanked")
    return read_opt_str(ours, "yanked", where)


def _artifact(value: object, key: str) -> Artifact:
    """One ``[[packages.wheels]]`` entry, refused when its hash or file name could steer a store path.

    Both name where the wheel is kept (``wheels/<sha256>/<file name>``), so a lock from
    a pull request or a hostile index page (``..%2F..%2Fx.whl``) must not reach outside it.
    """
    wheel = read_table(value, key)
    hashes = read_table(wheel.get("hashes"), f"{key}.hashes")
    if "sha256" not in hashes:
        found = f"missing, found only {', '.join(sorted(hashes))}" if hashes else "missing"
        raise BadKeyError(f"{key}.hashes.sha256", found, "the wheel's sha256 (envlock locks every wheel by sha256)")
    sha256 = read_str(hashes, "sha256", f"{key}.hashes")
    if not SHA256.fullmatch(sha256):
        raise BadKeyError(f"{key}.hashes.sha256", f"found {sha256!r}", "64 lowercase hex digits")
    url, path = read_opt_str(wheel, "url", key), read_opt_str(wheel, "path", key)
    if url is None and path is None:
        raise BadKeyError(key, "found neither url nor path", "one of them")
    size = wheel.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise BadKeyError(f"{key}.size", f"found {_found(size)}", "a byte count")
    art = Artifact(sha256=sha256, url=url, path=path, size=size)
    where = f"{key}.url" if url is not None else f"{key}.path"
    try:
        problem = art.filename_problem()
    except ValueError:  # urlsplit: "https://[x?y" is no URL
        raise BadKeyError(where, f"found {url!r}", "a URL") from None
    if problem:
        raise BadKeyError(where, f"found {url or path!r}, which names the file {art.filename!r}",
                          "a plain *.whl file name")
    if path is not None and not is_lock_wheel_path(path):
        raise BadKeyError(where, f"found {path!r}, which leaves the workspace",
                          "a path from the lock's folder (locks/) to a wheel inside the workspace, as "
                          "`envlock build` writes it (../wheelhouse/FILE.whl)")
    return art


def is_lock_wheel_path(value: str) -> bool:
    """Whether a lock's wheel ``path`` stays in the workspace: relative to the lock's folder, ``locks/``,
    it may climb out of that folder once (``../wheelhouse/…``), and nowhere after."""
    parts = PurePosixPath(value).parts
    return not PurePosixPath(value).is_absolute() and ".." not in parts[1 if parts[:1] == ("..",) else 0:]


def is_workspace_path(value: str) -> bool:
    """Whether ``value`` is a relative path that stays inside the workspace (no ``..``, not absolute)."""
    pure = PurePosixPath(value)
    return bool(value.strip()) and not pure.is_absolute() and ".." not in pure.parts and "\\" not in value


def workspace_path(table: Mapping[str, Any], name: str, key: str) -> str:
    """The string ``table[name]`` at ``key``, a relative path inside the workspace (else ``BadKeyError``)."""
    # The lock names files the sync and `lock --check` read and hash: never outside the workspace.
    value = read_str(table, name, key)
    if not is_workspace_path(value):
        raise BadKeyError(toml_key(key, name), f"found {value!r}", "a relative path inside the workspace")
    return value


def allowed_overlaps_entry(value: object, key: str) -> tuple[AllowedOverlap, ...]:
    """``[tool.envlock] allowed-overlaps``: the spec's allowances, as ``overlaps.parse`` reads them."""
    entries = read_array(value, key)
    if not entries:
        return ()  # the module (its regexes and value) only for a lock that allows some
    from envlock.model import overlaps

    problems: list[tuple[str, str]] = []
    found = overlaps.parse(entries, key, lambda where, why: problems.append((where, why)))
    if problems:
        raise BadKeyError(problems[0][0], problems[0][1], "what `envlock lock` writes there")
    return found


def requires_table(value: object, key: str) -> dict[str, tuple[str, ...]] | None:
    """``[tool.envlock.requires]``: package name -> the package names it requires (None: no table)."""
    if value is None:
        return None
    out = {}
    for name, names in read_table(value, key).items():
        where = toml_key(key, name)
        for i, item in enumerate((name, *read_strings(names, where))):
            if canonicalize_name(item) != item or not PACKAGE_NAME.fullmatch(item):
                raise BadKeyError(where if i == 0 else f"{where}[{i - 1}]", f"found {item!r}",
                                  'a normalized package name (PEP 751), like "flashinfer-python"')
        out[name] = tuple(names)
    return out
