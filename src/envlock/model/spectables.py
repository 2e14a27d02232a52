"""The tables of an env spec, each a frozen value and its parser: ``[indexes]``, ``[sources]``,
``[builds]`` (with their ``fetchcontent`` inputs), ``[packages]`` and ``[resolution]``.

Each parser reads its table key by key into a ``Problems``, which collects every problem (the
key path and what was expected) rather than stopping at the first; ``model.spec.parse_spec``
reads the tables in turn and checks them against each other.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name

from envlock.errors import did_you_mean
from envlock.errors import found as _found
from envlock.model import overlaps
from envlock.model.locktables import PACKAGE_NAME, is_workspace_path
from envlock.model.overlaps import AllowedOverlap
from envlock.model.tomlio import toml_key
from envlock.urlcheck import git_url_problem, index_url_problem
from envlock.workspace import env_var_suffix, leaves

#: A full git commit id: what a pin must be where a moving rev would be a hole.
COMMIT_ID = re.compile(r"[0-9a-f]{40}")
_ENV_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CMAKE_NAME = re.compile(r"[A-Za-z0-9_.+-]+")  # FetchContent names: sgl-kernel uses repo-cutlass

_INDEX_KEYS = {"url", "default"}
_PACKAGE_KEYS = {"version", "index", "nightly", "local", "same-date", "build"}
_SOURCE_KEYS = {"git", "rev", "path", "patches"}
_BUILD_KEYS = {"source", "subdirectory", "isolation", "env", "config-settings", "requires", "fetchcontent",
               "toolchain"}
_FETCHCONTENT_KEYS = {"git", "rev", "url", "sha256"}
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
#: What an archive input may be: a tar file, compressed or not (FetchContent's URL kind, as upstream uses it).
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar")
_RESOLUTION_KEYS = {"overrides", "exclude", "same-version", "allow-overlap", "allow-no-kernels"}


@dataclass(frozen=True)
class IndexSpec:
    """``[indexes.NAME]``: the index's URL (no trailing /) and whether it is the default."""

    name: str
    url: str
    default: bool = False


@dataclass(frozen=True)
class PackageSpec:
    """A top-level requirement. Exactly one of: a version specifier, a nightly date, a build."""

    name: NormalizedName
    specifier: str = ""  # PEP 440 specifier, "" = any
    index: str | None = None  # the only index it may come from
    nightly: str | None = None  # YYYY-MM-DD
    local: str | None = None  # local version tag for nightlies ("cu130")
    same_date: bool = True  # nightlies of one index share a date unless False
    build: str | None = None  # name of a [builds.*] entry that provides it


@dataclass(frozen=True)
class SourceSpec:
    """``[sources.NAME]``: a git URL at a rev, or a workspace path, and the patches applied to it."""

    name: str
    git: str | None = None
    rev: str | None = None
    path: str | None = None  # workspace-relative local tree
    patches: tuple[str, ...] = ()


@dataclass(frozen=True)
class FetchContentInput:
    """A CMake FetchContent dependency that envlock pre-fetches (no download in the build)."""

    name: str  # as in FetchContent_Declare(<name> ...)
    git: str | None = None  # a git repository, at ``rev`` (a commit, tag or branch: the lock records the commit)
    rev: str | None = None
    url: str | None = None  # or an archive (tar), checked against ``sha256`` (computed at lock time if not given)
    sha256: str | None = None

    @property
    def pinned_by_spec(self) -> bool:
        """Whether the spec alone pins its bytes (a full commit, or an archive's sha256)."""
        return bool(COMMIT_ID.fullmatch(self.rev or "") if self.git is not None else self.sha256)


@dataclass(frozen=True)
class BuildSpec:
    """``[builds.NAME]``: the wheel of package NAME, built from one of ``[sources]``: its subdirectory, isolation,
    environment, config settings, build requirements, FetchContent inputs and toolchain."""

    name: str  # the distribution it builds
    source: str
    subdirectory: str = ""
    isolation: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    config_settings: Mapping[str, str] = field(default_factory=dict)
    requires: tuple[str, ...] = ()  # build requirements locked with the env (isolation = false)
    fetchcontent: tuple[FetchContentInput, ...] = ()
    # Wheels of compilers and build tools (CUDA's nvcc set, cmake, ninja), locked by sha256 and put
    # first for the build (``envlock.build.toolchain``).
    toolchain: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolutionSpec:
    """``[resolution]``: overrides, excluded packages, same-version groups, allowed overlaps and allowed kernel gaps."""

    overrides: tuple[str, ...] = ()
    exclude: tuple[NormalizedName, ...] = ()
    same_version: tuple[tuple[NormalizedName, ...], ...] = ()
    allow_overlap: tuple[AllowedOverlap, ...] = ()  # exact paths two named distributions may both install
    # Packages known to carry no kernel for some GPUs of ``gpus``, and why that is harmless there.
    allow_no_kernels: tuple[AllowedGap, ...] = ()


@dataclass(frozen=True)
class AllowedGap:
    """``[resolution] allow-no-kernels`` entry: ``package`` may carry no kernel for ``gpus`` (names as
    ``env.gpus``'s), for ``reason`` (the GPU check notes it instead of failing)."""

    package: NormalizedName
    gpus: tuple[str, ...]
    reason: str


# -- reading a table, every problem collected ----------------------------------------


class Problems:
    """Every problem of a spec, each as ``KEY.PATH: message``, collected rather than raised at the first."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{key}: {message}")

    def check_keys(self, key: str, table: Mapping[str, Any], allowed: set[str]) -> None:
        for name in table:
            if name not in allowed:
                hint = did_you_mean(name, sorted(allowed), before=" (", after=")")
                known = ", ".join(sorted(allowed))
                self.add(f"{key}.{name}" if key else name, f"unknown key{hint}; expected one of: {known}")


def get_str(p: Problems, table: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str | None:
    """``table[key]`` as a string (None when absent, or a problem at ``path.key`` when ``required``); a
    value of another type is a problem, and None."""
    value = table.get(key)
    if value is None:
        if required:
            p.add(f"{path}.{key}" if path else key, "missing; expected a string")
        return None
    if not isinstance(value, str):
        p.add(f"{path}.{key}" if path else key, f"expected a string, found {_found(value)}")
        return None
    return value


def get_table(p: Problems, doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``doc[key]`` as a table (empty when absent); another type is a problem, and an empty table."""
    value = doc.get(key, {})
    if not isinstance(value, dict):
        p.add(key, f"expected a table, found {_found(value)}")
        return {}
    return value


def get_str_list(p: Problems, table: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    """``table[key]`` as an array of strings (empty when absent); each item of another type is a problem."""
    value = table.get(key, [])
    where = f"{path}.{key}" if path else key
    if not isinstance(value, list):
        p.add(where, f"expected an array of strings, found {_found(value)}")
        return ()
    for i, item in enumerate(value):
        if not isinstance(item, str):
            p.add(f"{where}[{i}]", f"expected a string (an array of strings), found {_found(item)}")
    return tuple(value) if all(isinstance(item, str) for item in value) else ()


def get_str_map(p: Problems, table: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    """``table[key]`` as a table of strings (empty when absent); each value of another type is a problem."""
    value = table.get(key, {})
    if not isinstance(value, dict):
        p.add(f"{path}.{key}", f"expected a table of strings, found {_found(value)}")
        return {}
    out = {}
    for k, v in value.items():
        if not isinstance(v, str):
            p.add(f"{path}.{key}.{k}", f"expected a string, found {_found(v)}")
        else:
            out[k] = v
    return out


def is_date(value: str) -> bool:
    """Whether ``value`` is a date written ``YYYY-MM-DD``."""
    try:
        return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value)) and bool(dt.date.fromisoformat(value))
    except ValueError:
        return False


def check_date(p: Problems, key: str, value: str) -> None:
    """A problem at ``key`` unless ``value`` is a date ``YYYY-MM-DD``."""
    if not is_date(value):
        p.add(key, f"expected a date YYYY-MM-DD, found {value!r}")


def check_relpath(p: Problems, key: str, value: str) -> bool:
    """Whether ``value`` is a relative path inside the workspace (a problem at ``key`` if not)."""
    if not is_workspace_path(value):
        p.add(key, f"expected a relative path inside the workspace, found {value!r}")
        return False
    return True


def check_exists(p: Problems, key: str, root: Path | None, value: str, *, directory: bool) -> None:
    """A workspace-relative path must name a directory (or file) now, not when a later stage reads it."""
    if root is None:
        return
    target = root / value
    what = "a directory" if directory else "a file"
    if (out := leaves(root, value)) is not None:
        p.add(key, f"expected {what} inside the workspace root {root}, found {value!r}, which a symbolic link "
                   f"takes out of it (to {out})")
        return
    if target.is_dir() if directory else target.is_file():
        return
    why = "does not exist" if not target.exists() else f"is not {what}"
    p.add(key, f"expected {what} relative to the workspace root {root}, found {value!r}, which {why}")


def entries(
    p: Problems, table: dict[str, Any], prefix: str, expected: str, allowed: set[str]
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(name, key path, entry) of each sub-table of ``[prefix.*]``; other values and unknown keys are problems."""
    for name, entry in table.items():
        key = toml_key(prefix, name)
        if not isinstance(entry, dict):
            p.add(key, f"expected a table with {expected}, found {_found(entry)}")
            continue
        p.check_keys(key, entry, allowed)
        yield name, key, entry


def parse_indexes(p: Problems, table: dict[str, Any]) -> dict[str, IndexSpec]:
    """``[indexes]``: each index's URL and whether it is the default (exactly one is)."""
    out: dict[str, IndexSpec] = {}
    by_variable: dict[str, str] = {}
    for name, key, entry in entries(p, table, "indexes", 'url = "..."', _INDEX_KEYS):
        if (other := by_variable.setdefault(env_var_suffix(name), name)) != name:
            p.add(key, f"expected a name unlike {other!r} in more than case, '-', '_' and '.': both are "
                       f"ENVLOCK_INDEX_{env_var_suffix(name)} (a mirror's variable)")
        if not PACKAGE_NAME.fullmatch(name):  # named in --index NAME=URL and ENVLOCK_INDEX_<NAME>
            p.add(key, f"expected an index name of letters, digits, '-', '_' or '.' (like \"pytorch-nightly\"), "
                       f"found {name!r}")
        url = get_str(p, entry, "url", key, required=True)
        if url is not None and (problem := index_url_problem(url)) is not None:
            p.add(f"{key}.url", problem)
        default = entry.get("default", False)
        if not isinstance(default, bool):
            p.add(f"{key}.default", f"expected true or false, found {_found(default)}")
            default = False
        out[name] = IndexSpec(name=name, url=(url or "").rstrip("/"), default=default)
    defaults = [i.name for i in out.values() if i.default]
    if len(defaults) != 1:
        found = ", ".join(defaults) if defaults else "none"
        p.add("indexes", f"expected exactly one index with default = true, found {found}")
    return out


def parse_sources(p: Problems, table: dict[str, Any], root: Path | None) -> dict[str, SourceSpec]:
    """``[sources]``: each a git URL at a rev, or a workspace path, and its patches (``root``: they must exist)."""
    out: dict[str, SourceSpec] = {}
    for name, key, entry in entries(p, table, "sources", 'git = "..." or path = "..."', _SOURCE_KEYS):
        if not PACKAGE_NAME.fullmatch(name):  # patches/NAME/, --source NAME=URL, ENVLOCK_SOURCE_<NAME>
            p.add(key, f"expected a source name of letters, digits, '-', '_' or '.' (like \"sglang\"), found {name!r}")
        git = get_str(p, entry, "git", key)
        rev = get_str(p, entry, "rev", key)
        path = get_str(p, entry, "path", key)
        if (git is None) == (path is None):
            p.add(key, "expected exactly one of git = \"URL\" or path = \"DIR\"")
        if git is not None and rev is None:
            p.add(f"{key}.rev", "missing; a git source needs rev = \"<commit, tag or branch>\"")
        _check_git_url(p, f"{key}.git", git)
        # An empty rev would be fetched as HEAD: a moving pin nobody wrote down.
        if rev is not None and (rev.startswith("-") or not rev.strip()):
            p.add(f"{key}.rev", f"expected a commit, tag or branch, found {rev!r}")
        if path is not None:
            if check_relpath(p, f"{key}.path", path):
                check_exists(p, f"{key}.path", root, path, directory=True)
            if rev is not None:
                p.add(f"{key}.rev", "only git sources take a rev")
        patches = get_str_list(p, entry, "patches", key)
        for i, patch in enumerate(patches):
            inside = check_relpath(p, f"{key}.patches[{i}]", patch)
            if not patch.endswith(".patch"):
                p.add(f"{key}.patches[{i}]", f"expected a .patch file, found {patch!r}")
            elif inside:
                check_exists(p, f"{key}.patches[{i}]", root, patch, directory=False)
            if patch in patches[:i]:  # applied twice, it reads as "already upstream" the second time
                p.add(f"{key}.patches[{i}]", f"found {patch!r} again (also patches[{patches.index(patch)}]); "
                      "expected each patch once")
        out[name] = SourceSpec(name=name, git=git, rev=rev, path=path, patches=patches)
    return out


def _check_git_url(p: Problems, key: str, url: str | None) -> None:
    if url is not None and (problem := git_url_problem(url)) is not None:
        p.add(key, problem)


def _renamed_leftover(p: Problems, table: Mapping[str, Any], name: str, key: str) -> None:
    """Build ``name`` has only its ``fetchcontent`` table, no source: what renaming a build by hand leaves
    behind; say where it goes (the one build without FetchContent inputs, or the closest name)."""
    bare = [n for n, e in table.items() if n != name and isinstance(e, dict) and "fetchcontent" not in e]
    to = (bare if len(bare) == 1 else difflib.get_close_matches(name, bare, n=1, cutoff=0.6)) or ["NEW-NAME"]
    p.add(key, f"only [{key}.fetchcontent] is left of it, no source: left behind when the build was renamed? "
          f"move it to [builds.{to[0]}.fetchcontent] (`envlock upgrade ENV --fix-renames` moves every table "
          "of a build upstream renamed)")


def parse_builds(p: Problems, table: dict[str, Any], sources: Mapping[str, SourceSpec]) -> dict[str, BuildSpec]:
    """``[builds]``: each build's source (one of ``sources``), recipe, requirements, toolchain and
    FetchContent inputs."""
    out: dict[str, BuildSpec] = {}
    for name, key, entry in entries(p, table, "builds", 'source = "..."', _BUILD_KEYS):
        if not PACKAGE_NAME.fullmatch(name):  # it makes the package of its name (checked after the build)
            p.add(key, f"expected the name of the package the build makes (like \"sgl-kernel\"), found {name!r}")
        if "source" not in entry and list(entry) == ["fetchcontent"]:  # what a rename by hand leaves behind
            _renamed_leftover(p, table, name, key)
            continue
        source = get_str(p, entry, "source", key, required=True)
        if source is not None and source not in sources:
            known = ", ".join(sorted(sources)) or "none defined"
            p.add(f"{key}.source", f"names no [sources.{source}]; sources: {known}")
        subdirectory = get_str(p, entry, "subdirectory", key) or ""
        if subdirectory:
            check_relpath(p, f"{key}.subdirectory", subdirectory)
        isolation = entry.get("isolation", True)
        if not isinstance(isolation, bool):
            p.add(f"{key}.isolation", f"expected true or false, found {_found(isolation)}")
            isolation = True
        env = get_str_map(p, entry, "env", key)
        for var in env:
            if not _ENV_VAR.fullmatch(var):
                p.add(f"{key}.env.{var}", "expected an environment variable name")
        settings = get_str_map(p, entry, "config-settings", key)
        requires = get_str_list(p, entry, "requires", key)
        for i, req in enumerate(requires):
            try:
                Requirement(req)
            except InvalidRequirement:
                p.add(f"{key}.requires[{i}]", f"expected a requirement like \"scikit-build-core>=0.10\", found {req!r}")
        toolchain = get_str_list(p, entry, "toolchain", key)
        for i, req in enumerate(toolchain):
            try:
                Requirement(req)
            except InvalidRequirement:
                p.add(f"{key}.toolchain[{i}]", f"expected a requirement like \"nvidia-cuda-nvcc==13.0.88\", "
                      f"found {req!r}")
        fc_table = entry.get("fetchcontent", {})
        fetchcontent: list[FetchContentInput] = []
        if not isinstance(fc_table, dict):
            p.add(f"{key}.fetchcontent", f"expected a table of name = {{ git, rev }}, found {_found(fc_table)}")
            fc_table = {}
        for dep, dkey, spec in entries(p, fc_table, f"{key}.fetchcontent", _FETCHCONTENT_EXPECTED,
                                        _FETCHCONTENT_KEYS):
            if not _CMAKE_NAME.fullmatch(dep):
                p.add(dkey, "expected a CMake FetchContent name (letters, digits, _ . + -)")
            fetchcontent.append(_parse_fetchcontent(p, dep, dkey, spec))
        out[name] = BuildSpec(
            name=name,
            source=source or "",
            subdirectory=subdirectory,
            isolation=isolation,
            env=env,
            config_settings=settings,
            requires=requires,
            fetchcontent=tuple(fetchcontent),
            toolchain=toolchain,
        )
    return out


_ARCHIVE_EXPECTED = "expected an https://, http:// or file:// URL of an archive"
_FETCHCONTENT_EXPECTED = '{ git = "URL", rev = "<commit, tag or branch>" } or { url = "<archive URL>", sha256 = "..." }'


def _parse_fetchcontent(p: Problems, dep: str, dkey: str, spec: Mapping[str, Any]) -> FetchContentInput:
    """One ``fetchcontent.DEP``: a git repository at a rev, or a tar archive by URL (and sha256)."""
    git = get_str(p, spec, "git", dkey)
    url = get_str(p, spec, "url", dkey)
    rev = get_str(p, spec, "rev", dkey)
    sha256 = get_str(p, spec, "sha256", dkey)
    if (git is None) == (url is None):
        if "git" not in spec and "url" not in spec:
            p.add(dkey, f"expected exactly one of git or url, found neither: {_FETCHCONTENT_EXPECTED}")
        elif "git" in spec and "url" in spec:
            p.add(dkey, "expected exactly one of git or url, found both")
        return FetchContentInput(name=dep, git=git, rev=rev, url=url, sha256=sha256)
    if git is not None:
        _check_git_url(p, f"{dkey}.git", git)
        if "rev" not in spec:
            p.add(f"{dkey}.rev", "missing; a git input needs rev = \"<commit, tag or branch>\" (the lock records "
                  "its commit)")
        elif rev is not None and (rev.startswith("-") or not rev.strip()):
            p.add(f"{dkey}.rev", f"expected a commit, tag or branch, found {rev!r}")
        if "sha256" in spec:
            p.add(f"{dkey}.sha256", "only an archive (url) input takes a sha256; a git input is pinned by its commit")
    else:
        assert url is not None
        if (problem := index_url_problem(url, _ARCHIVE_EXPECTED)) is not None:
            p.add(f"{dkey}.url", problem)
        elif not urlsplit(url).path.endswith(ARCHIVE_SUFFIXES):
            p.add(f"{dkey}.url", f"expected the URL of a tar archive ({', '.join(ARCHIVE_SUFFIXES)}), found {url!r}")
        if "rev" in spec:
            p.add(f"{dkey}.rev", "only a git input takes a rev; an archive (url) input is pinned by its sha256")
        if sha256 is not None and not _SHA256_HEX.fullmatch(sha256):
            p.add(f"{dkey}.sha256", f"expected 64 lowercase hex digits, found {sha256!r}")
    return FetchContentInput(name=dep, git=git, rev=rev, url=url, sha256=sha256)


def parse_packages(
    p: Problems,
    table: dict[str, Any],
    indexes: Mapping[str, IndexSpec],
    builds: Mapping[str, BuildSpec],
) -> dict[NormalizedName, PackageSpec]:
    """``[packages]``: each package's pin (a version, a nightly date or a build) and its index."""
    out: dict[NormalizedName, PackageSpec] = {}
    for raw_name, entry in table.items():
        key = toml_key("packages", raw_name)
        if not PACKAGE_NAME.fullmatch(raw_name):
            p.add(key, "expected a valid distribution name")
            continue
        name = canonicalize_name(raw_name)
        if name in out:
            p.add(key, f"duplicate of another spelling of {name!r}")
            continue
        if (package := _package(p, key, name, entry, indexes, builds)) is not None:
            out[name] = package
    return out


def _package(p: Problems, key: str, name: NormalizedName, entry: object, indexes: Mapping[str, IndexSpec],
             builds: Mapping[str, BuildSpec]) -> PackageSpec | None:
    """``packages.NAME`` at ``key``: a version string, or a table of its pin (a version, a nightly date
    or a build) and its index; None (a problem) when it is neither."""
    shorthand = isinstance(entry, str)  # `name = "==1.0"`
    if shorthand:
        entry = {"version": entry}
    if not isinstance(entry, dict):
        p.add(key, f"expected a version string or a table, found {_found(entry)}")
        return None
    p.check_keys(key, entry, _PACKAGE_KEYS)
    version = get_str(p, entry, "version", key)
    index = get_str(p, entry, "index", key)
    nightly = get_str(p, entry, "nightly", key)
    local = get_str(p, entry, "local", key)
    build = get_str(p, entry, "build", key)
    same_date = entry.get("same-date", True)
    if not isinstance(same_date, bool):
        p.add(f"{key}.same-date", f"expected true or false, found {_found(same_date)}")
        same_date = True
    elif "same-date" in entry and "nightly" not in entry:
        p.add(f"{key}.same-date", "only a nightly pin takes same-date (it opts out of sharing its index's date)")
    if version is not None:
        try:
            SpecifierSet(version)
        except InvalidSpecifier:
            p.add(key if shorthand else f"{key}.version",
                  f"expected a version specifier like \"==0.6.5\", found {version!r}")
    if index is not None and index not in indexes:
        known = ", ".join(sorted(indexes)) or "none defined"
        p.add(f"{key}.index", f"names no [indexes.{index}]; indexes: {known}")
    if nightly is not None:
        check_date(p, f"{key}.nightly", nightly)
        if version is not None:
            p.add(key, "expected either version or nightly, not both")
        if index is None:
            p.add(f"{key}.index", "missing; a nightly pin must name its index "
                  "(nightlies are never taken from the default index by accident)")
    if local is not None:
        if "nightly" not in entry:  # one that is there but malformed is reported as such
            p.add(f"{key}.local",
                  "only a nightly pin takes a local tag; write it in the version (\"==0.6.5+cu130\")")
        elif not re.fullmatch(r"[A-Za-z0-9]+([._][A-Za-z0-9]+)*", local):
            p.add(f"{key}.local", f"expected a local version tag like \"cu130\", found {local!r}")
    if build is not None:
        _check_build_pin(p, key, name, entry, build, builds)
    return PackageSpec(name=name, specifier=version or "", index=index, nightly=nightly, local=local,
                       same_date=same_date, build=build)


def _check_build_pin(p: Problems, key: str, name: NormalizedName, entry: Mapping[str, Any], build: str,
                     builds: Mapping[str, BuildSpec]) -> None:
    """A package a build provides: no other key beside ``build``, which names a build of its own name."""
    if set(entry) - {"build"}:
        p.add(key, "a package provided by a build takes no other keys")
    if build not in builds:
        known = ", ".join(sorted(builds)) or "none defined"
        p.add(f"{key}.build", f"names no [builds.{build}]; builds: {known}")
    elif canonicalize_name(build) != name:
        # The build's wheel is checked to be the build's name (after an hour of sgl-kernel):
        # say so now, not after the build.
        p.add(f"{key}.build", f"expected {name!r}: a build makes the package of its own name, so "
              f"packages.{name} comes from [builds.{name}]; found {build!r} (rename [builds.{build}])")


def get_overrides(p: Problems, table: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """``overrides`` of ``table`` (``[resolution]`` or a ``[targets.NAME]``): requirements, each checked."""
    overrides = get_str_list(p, table, "overrides", where)
    for i, req in enumerate(overrides):
        try:
            Requirement(req)
        except InvalidRequirement:
            p.add(f"{where}.overrides[{i}]",
                  f"expected a requirement like \"flashinfer-python==0.6.5\", found {req!r}")
    return overrides


def override_name(requirement: str) -> NormalizedName:
    """The package an override (a requirement ``get_overrides`` checked) is for."""
    return canonicalize_name(Requirement(requirement).name)


def parse_resolution(p: Problems, table: dict[str, Any]) -> ResolutionSpec:
    """``[resolution]``: overrides, excluded packages, the same-version groups and the allowed overlaps."""
    p.check_keys("resolution", table, _RESOLUTION_KEYS)
    overrides = get_overrides(p, table, "resolution")
    exclude: list[NormalizedName] = []
    for i, name in enumerate(get_str_list(p, table, "exclude", "resolution")):
        if PACKAGE_NAME.fullmatch(name):
            exclude.append(canonicalize_name(name))
        else:
            p.add(f"resolution.exclude[{i}]", f"expected a package name like \"sgl-fa4\", found {name!r}")
    groups_raw = table.get("same-version", [])
    groups: list[tuple[NormalizedName, ...]] = []
    if not isinstance(groups_raw, list) or not all(
        isinstance(g, list) and len(g) >= 2 and all(isinstance(n, str) for n in g) for g in groups_raw
    ):
        p.add("resolution.same-version", "expected an array of arrays of two or more package names")
    else:
        groups = [tuple(canonicalize_name(n) for n in g) for g in groups_raw]
    allowed = overlaps.parse(table.get("allow-overlap", []), "resolution.allow-overlap", p.add)
    return ResolutionSpec(overrides=overrides, exclude=tuple(exclude), same_version=tuple(groups),
                          allow_overlap=allowed, allow_no_kernels=_allowed_gaps(p, table))


_GAP = '{ package = "torchao", gpus = ["sm_120a"], reason = "..." }'


def _allowed_gaps(p: Problems, table: Mapping[str, Any]) -> tuple[AllowedGap, ...]:
    """``[resolution] allow-no-kernels``: each a package, the GPUs (checked with ``env.gpus``) and a reason."""
    raw = table.get("allow-no-kernels", [])
    if not isinstance(raw, list):
        p.add("resolution.allow-no-kernels", f"expected an array of {_GAP}, found {_found(raw)}")
        return ()
    out = []
    for i, entry in enumerate(raw):
        key = f"resolution.allow-no-kernels[{i}]"
        if not isinstance(entry, dict):
            p.add(key, f"expected {_GAP}, found {_found(entry)}")
            continue
        p.check_keys(key, entry, {"package", "gpus", "reason"})
        package = get_str(p, entry, "package", key, required=True)
        gpus = get_str_list(p, entry, "gpus", key)
        reason = get_str(p, entry, "reason", key, required=True)
        if package is not None and not PACKAGE_NAME.fullmatch(package):
            p.add(f"{key}.package", f"expected a package name like \"torchao\", found {package!r}")
            package = None
        if not gpus:
            p.add(f"{key}.gpus", "expected one GPU or more, as env.gpus names them (\"sm_120a\")")
        if reason is not None and not reason.strip():
            p.add(f"{key}.reason", "expected why the package needs no kernel for those GPUs, found ''")
        if package is not None and gpus:  # its GPU names are checked with env.gpus's (spec.py)
            out.append(AllowedGap(canonicalize_name(package), gpus, reason or ""))
    return tuple(out)


