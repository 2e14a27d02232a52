"""Load and validate env specs (``envs/NAME.toml``).

Validation reports every problem at once, each as ``FILE: KEY.PATH: message``;
an unknown key gets a "did you mean" when a known one is close.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from envlock.errors import SpecError, did_you_mean
from envlock.errors import found as _found
from envlock.model import overlaps
from envlock.model.lockfile import PACKAGE_NAME as _PACKAGE_NAME
from envlock.model.lockfile import PYTHON_VERSION, is_workspace_path, toml_key
from envlock.model.overlaps import AllowedOverlap
from envlock.model.tomlio import load_toml
from envlock.urlcheck import git_url_problem, index_url_problem
from envlock.urlcheck import is_index_url as is_index_url  # mirrors and the stages ask spec
from envlock.workspace import Workspace, env_var_suffix

#: A full git commit id: what a pin must be where a moving rev would be a hole.
COMMIT_ID = re.compile(r"[0-9a-f]{40}")
_PLATFORM = re.compile(r"[a-z0-9_]+(-[a-z0-9_.]+)+")
#: What the pinned uv (pyproject.toml) accepts for ``--python-platform``, less the bare OS names
#: (``linux``, ``macos``, ``windows``), which name no architecture. A spec naming anything else
#: would pass here and fail in uv with "no resolution"; test_spec checks this set against the
#: pinned uv's ``uv pip compile --help``, so a uv upgrade that changes it fails a test.
UV_PLATFORMS = frozenset({
    "x86_64-pc-windows-msvc", "aarch64-pc-windows-msvc", "i686-pc-windows-msvc",
    "x86_64-unknown-linux-gnu", "aarch64-apple-darwin", "x86_64-apple-darwin",
    "aarch64-unknown-linux-gnu", "aarch64-unknown-linux-musl", "x86_64-unknown-linux-musl",
    "riscv64-unknown-linux",
    "x86_64-manylinux2014", "x86_64-manylinux_2_17", "x86_64-manylinux_2_28",
    *(f"x86_64-manylinux_2_{minor}" for minor in range(31, 41)),
    "aarch64-manylinux2014", "aarch64-manylinux_2_17", "aarch64-manylinux_2_28",
    *(f"aarch64-manylinux_2_{minor}" for minor in range(31, 41)),
    "aarch64-linux-android", "x86_64-linux-android", "wasm32-pyodide2024", "wasm32-pyodide2025",
    "arm64-apple-ios", "arm64-apple-ios-simulator", "x86_64-apple-ios-simulator",
})
#: How a spec names a GPU (``[env] gpus``): ``sm_90``, ``sm_120a``, ``sm_100f``, or a compute capability ``"12.0"``.
GPU_NAME = re.compile(r"sm_(\d{2,3})[af]?|(\d{1,2})\.(\d)")
_ENV_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CMAKE_NAME = re.compile(r"[A-Za-z0-9_.+-]+")  # FetchContent names: sgl-kernel uses repo-cutlass


@dataclass(frozen=True)
class IndexSpec:
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
    overrides: tuple[str, ...] = ()
    exclude: tuple[NormalizedName, ...] = ()
    same_version: tuple[tuple[NormalizedName, ...], ...] = ()
    allow_overlap: tuple[AllowedOverlap, ...] = ()  # exact paths two named distributions may both install


@dataclass(frozen=True)
class EnvSpec:
    name: str
    path: Path
    python: str
    platform: str | None
    indexes: Mapping[str, IndexSpec]
    packages: Mapping[NormalizedName, PackageSpec]
    sources: Mapping[str, SourceSpec]
    builds: Mapping[str, BuildSpec]
    resolution: ResolutionSpec
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)
    #: ``[env] gpus``: the GPUs the env must run on (``sm_120a``, ``"12.0"``), as written; () for none.
    gpus: tuple[str, ...] = ()

    @property
    def default_index(self) -> IndexSpec:
        return next(i for i in self.indexes.values() if i.default)

    def index_of(self, name: NormalizedName) -> str:
        """The one index package ``name`` may come from: the one the spec pins it to, else the
        default (every non-default index is explicit: the torchtriton lesson)."""
        pkg = self.packages.get(name)
        return pkg.index if pkg and pkg.index else self.default_index.name

    def key_digests(self) -> dict[str, str]:
        """A digest per spec key (``packages.torch``, ``env``, ...), for ``lock --check``."""
        out: dict[str, str] = {}
        for table, value in sorted(self.raw.items()):
            if isinstance(value, dict) and table in _KEYED_TABLES:
                for key, sub in sorted(value.items()):
                    out[f"{table}.{key}"] = _digest(sub)
            else:
                out[table] = _digest(value)
        return out

    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(_canonical(self.raw).encode()).hexdigest()

    def pin_problems(self, versions: Mapping[NormalizedName, str], nightlies: Mapping[str, str], *,
                     what: str, missing_hint: str = "") -> list[str]:
        """What in ``versions`` (name -> version: a resolution, a lock) breaks this spec's own pins.

        Every declared package (but one a build provides) must be there, at a version its
        pin allows; a nightly at the very version ``nightlies`` (name -> version) names.
        ``what`` names ``versions`` in the messages ("the resolution", "the lock");
        ``missing_hint`` follows the message for a package that is not there.
        """
        from packaging.version import InvalidVersion, Version

        problems = []
        for pkg in self.packages.values():
            version = versions.get(pkg.name)
            if pkg.build:
                continue
            if version is None:
                problems.append(f"packages.{pkg.name}: declared, but {what} leaves it out{missing_hint}")
                continue
            try:
                if pkg.nightly and pkg.name in nightlies and Version(version) != Version(nightlies[pkg.name]):
                    problems.append(f"packages.{pkg.name}: nightly {pkg.nightly} is {nightlies[pkg.name]}, "
                                    f"but {what} has {version}")
                elif pkg.specifier and not SpecifierSet(pkg.specifier).contains(version, prereleases=True):
                    problems.append(f"packages.{pkg.name}: pinned {pkg.specifier}, but {what} has {version}")
            except InvalidVersion:
                problems.append(f"packages.{pkg.name}: {what} has {version!r}, which is no version")
        return problems


_KEYED_TABLES = {"indexes", "packages", "sources", "builds"}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()[:16]


# -- validation --------------------------------------------------------------


class _Problems:
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


def _get_str(p: _Problems, table: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> str | None:
    value = table.get(key)
    if value is None:
        if required:
            p.add(f"{path}.{key}" if path else key, "missing; expected a string")
        return None
    if not isinstance(value, str):
        p.add(f"{path}.{key}" if path else key, f"expected a string, found {_found(value)}")
        return None
    return value


def _get_table(p: _Problems, doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        p.add(key, f"expected a table, found {_found(value)}")
        return {}
    return value


def _get_str_list(p: _Problems, table: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = table.get(key, [])
    where = f"{path}.{key}" if path else key
    if not isinstance(value, list):
        p.add(where, f"expected an array of strings, found {_found(value)}")
        return ()
    for i, item in enumerate(value):
        if not isinstance(item, str):
            p.add(f"{where}[{i}]", f"expected a string (an array of strings), found {_found(item)}")
    return tuple(value) if all(isinstance(item, str) for item in value) else ()


def _get_str_map(p: _Problems, table: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
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


def _is_date(value: str) -> bool:
    try:
        return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value)) and bool(dt.date.fromisoformat(value))
    except ValueError:
        return False


def _check_date(p: _Problems, key: str, value: str) -> None:
    if not _is_date(value):
        p.add(key, f"expected a date YYYY-MM-DD, found {value!r}")


def _check_relpath(p: _Problems, key: str, value: str) -> bool:
    if not is_workspace_path(value):
        p.add(key, f"expected a relative path inside the workspace, found {value!r}")
        return False
    return True


def _check_exists(p: _Problems, key: str, root: Path | None, value: str, *, directory: bool) -> None:
    """A workspace-relative path must name a directory (or file) now, not when a later stage reads it."""
    if root is None:
        return
    target = root / value
    if target.is_dir() if directory else target.is_file():
        return
    what = "a directory" if directory else "a file"
    why = "does not exist" if not target.exists() else f"is not {what}"
    p.add(key, f"expected {what} relative to the workspace root {root}, found {value!r}, which {why}")


def _check_platform(p: _Problems, platform: str) -> None:
    if platform in UV_PLATFORMS:
        return
    if not _PLATFORM.fullmatch(platform):
        p.add("env.platform",
              f"expected a platform as uv spells it (e.g. \"x86_64-manylinux_2_28\"), found {platform!r}")
        return
    hint = did_you_mean(platform, sorted(UV_PLATFORMS), before=" (", after=")")
    p.add("env.platform", f"expected a platform the pinned uv accepts for --python-platform, "
          f"found {platform!r}{hint}; accepted: {', '.join(sorted(UV_PLATFORMS))}")


_TOP = {"env", "indexes", "packages", "sources", "builds", "resolution"}
_ENV_KEYS = {"python", "platform", "gpus"}
_INDEX_KEYS = {"url", "default"}
_PACKAGE_KEYS = {"version", "index", "nightly", "local", "same-date", "build"}
_SOURCE_KEYS = {"git", "rev", "path", "patches"}
_BUILD_KEYS = {"source", "subdirectory", "isolation", "env", "config-settings", "requires", "fetchcontent",
               "toolchain"}
_FETCHCONTENT_KEYS = {"git", "rev", "url", "sha256"}
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
#: What an archive input may be: a tar file, compressed or not (FetchContent's URL kind, as upstream uses it).
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar")
_RESOLUTION_KEYS = {"overrides", "exclude", "same-version", "allow-overlap"}


def parse_spec(doc: Mapping[str, Any], *, name: str, origin: Path, root: Path | None = None) -> EnvSpec:
    """Validate a parsed spec document; raise ``SpecError`` listing every problem.

    ``root``: the workspace root that source paths and patches are relative to; when
    given, each must exist (None: their form is checked, not their existence).
    """
    p = _Problems(str(origin))
    p.check_keys("", doc, _TOP)

    env = _get_table(p, doc, "env")
    p.check_keys("env", env, _ENV_KEYS)
    given = _get_str(p, env, "python", "env", required=True)
    python = given or "3"
    if given is not None and not PYTHON_VERSION.fullmatch(given):
        p.add("env.python", f"expected a Python version like \"3.12\", found {given!r}")
    platform = _get_str(p, env, "platform", "env")
    if platform is not None:
        _check_platform(p, platform)
    gpus = _get_str_list(p, env, "gpus", "env")
    for i, gpu in enumerate(gpus):
        if not GPU_NAME.fullmatch(gpu):
            p.add(f"env.gpus[{i}]", f'expected a GPU as nvcc names its arch ("sm_120a", "sm_90") or a compute '
                  f'capability ("12.0"), found {gpu!r}')

    indexes = _parse_indexes(p, _get_table(p, doc, "indexes"))
    sources = _parse_sources(p, _get_table(p, doc, "sources"), root)
    builds = _parse_builds(p, _get_table(p, doc, "builds"), sources)
    packages_table = _get_table(p, doc, "packages")
    packages = _parse_packages(p, packages_table, indexes, builds)
    resolution = _parse_resolution(p, _get_table(p, doc, "resolution"))
    _check_same_date(p, packages)
    _check_excluded_not_declared(p, packages_table, resolution)
    _check_overrides_keep_pins(p, packages, indexes, resolution)

    if p.items:
        count = len(p.items)
        raise SpecError(
            f"{origin}: {count} problem{'s' if count > 1 else ''} in env spec {name!r}",
            details=p.items,
        )
    return EnvSpec(
        name=name,
        path=origin,
        python=python,
        platform=platform,
        indexes=indexes,
        packages=packages,
        sources=sources,
        builds=builds,
        resolution=resolution,
        raw=doc,
        gpus=gpus,
    )


def _entries(
    p: _Problems, table: dict[str, Any], prefix: str, expected: str, allowed: set[str]
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(name, key path, entry) of each sub-table of ``[prefix.*]``; other values and unknown keys are problems."""
    for name, entry in table.items():
        key = toml_key(prefix, name)
        if not isinstance(entry, dict):
            p.add(key, f"expected a table with {expected}, found {_found(entry)}")
            continue
        p.check_keys(key, entry, allowed)
        yield name, key, entry


def _parse_indexes(p: _Problems, table: dict[str, Any]) -> dict[str, IndexSpec]:
    out: dict[str, IndexSpec] = {}
    by_variable: dict[str, str] = {}
    for name, key, entry in _entries(p, table, "indexes", 'url = "..."', _INDEX_KEYS):
        if (other := by_variable.setdefault(env_var_suffix(name), name)) != name:
            p.add(key, f"expected a name unlike {other!r} in more than case, '-', '_' and '.': both are "
                       f"ENVLOCK_INDEX_{env_var_suffix(name)} (a mirror's variable)")
        if not _PACKAGE_NAME.fullmatch(name):  # named in --index NAME=URL and ENVLOCK_INDEX_<NAME>
            p.add(key, f"expected an index name of letters, digits, '-', '_' or '.' (like \"pytorch-nightly\"), "
                       f"found {name!r}")
        url = _get_str(p, entry, "url", key, required=True)
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


def _parse_sources(p: _Problems, table: dict[str, Any], root: Path | None) -> dict[str, SourceSpec]:
    out: dict[str, SourceSpec] = {}
    for name, key, entry in _entries(p, table, "sources", 'git = "..." or path = "..."', _SOURCE_KEYS):
        if not _PACKAGE_NAME.fullmatch(name):  # patches/NAME/, --source NAME=URL, ENVLOCK_SOURCE_<NAME>
            p.add(key, f"expected a source name of letters, digits, '-', '_' or '.' (like \"sglang\"), found {name!r}")
        git = _get_str(p, entry, "git", key)
        rev = _get_str(p, entry, "rev", key)
        path = _get_str(p, entry, "path", key)
        if (git is None) == (path is None):
            p.add(key, "expected exactly one of git = \"URL\" or path = \"DIR\"")
        if git is not None and rev is None:
            p.add(f"{key}.rev", "missing; a git source needs rev = \"<commit, tag or branch>\"")
        _check_git_url(p, f"{key}.git", git)
        # An empty rev would be fetched as HEAD: a moving pin nobody wrote down.
        if rev is not None and (rev.startswith("-") or not rev.strip()):
            p.add(f"{key}.rev", f"expected a commit, tag or branch, found {rev!r}")
        if path is not None:
            if _check_relpath(p, f"{key}.path", path):
                _check_exists(p, f"{key}.path", root, path, directory=True)
            if rev is not None:
                p.add(f"{key}.rev", "only git sources take a rev")
        patches = _get_str_list(p, entry, "patches", key)
        for i, patch in enumerate(patches):
            inside = _check_relpath(p, f"{key}.patches[{i}]", patch)
            if not patch.endswith(".patch"):
                p.add(f"{key}.patches[{i}]", f"expected a .patch file, found {patch!r}")
            elif inside:
                _check_exists(p, f"{key}.patches[{i}]", root, patch, directory=False)
            if patch in patches[:i]:  # applied twice, it reads as "already upstream" the second time
                p.add(f"{key}.patches[{i}]", f"found {patch!r} again (also patches[{patches.index(patch)}]); "
                      "expected each patch once")
        out[name] = SourceSpec(name=name, git=git, rev=rev, path=path, patches=patches)
    return out


def _check_git_url(p: _Problems, key: str, url: str | None) -> None:
    if url is not None and (problem := git_url_problem(url)) is not None:
        p.add(key, problem)


def _parse_builds(p: _Problems, table: dict[str, Any], sources: Mapping[str, SourceSpec]) -> dict[str, BuildSpec]:
    out: dict[str, BuildSpec] = {}
    for name, key, entry in _entries(p, table, "builds", 'source = "..."', _BUILD_KEYS):
        if not _PACKAGE_NAME.fullmatch(name):  # it makes the package of its name (checked after the build)
            p.add(key, f"expected the name of the package the build makes (like \"sgl-kernel\"), found {name!r}")
        if "source" not in entry and list(entry) == ["fetchcontent"]:  # what a rename by hand leaves behind
            bare = [n for n, e in table.items() if n != name and isinstance(e, dict) and "fetchcontent" not in e]
            to = (bare if len(bare) == 1 else difflib.get_close_matches(name, bare, n=1, cutoff=0.6)) or ["NEW-NAME"]
            p.add(key, f"only [{key}.fetchcontent] is left of it, no source: left behind when the build was renamed? "
                  f"move it to [builds.{to[0]}.fetchcontent] (`envlock upgrade ENV --fix-renames` moves every table "
                  "of a build upstream renamed)")
            continue
        source = _get_str(p, entry, "source", key, required=True)
        if source is not None and source not in sources:
            known = ", ".join(sorted(sources)) or "none defined"
            p.add(f"{key}.source", f"names no [sources.{source}]; sources: {known}")
        subdirectory = _get_str(p, entry, "subdirectory", key) or ""
        if subdirectory:
            _check_relpath(p, f"{key}.subdirectory", subdirectory)
        isolation = entry.get("isolation", True)
        if not isinstance(isolation, bool):
            p.add(f"{key}.isolation", f"expected true or false, found {_found(isolation)}")
            isolation = True
        env = _get_str_map(p, entry, "env", key)
        for var in env:
            if not _ENV_VAR.fullmatch(var):
                p.add(f"{key}.env.{var}", "expected an environment variable name")
        settings = _get_str_map(p, entry, "config-settings", key)
        requires = _get_str_list(p, entry, "requires", key)
        for i, req in enumerate(requires):
            try:
                Requirement(req)
            except InvalidRequirement:
                p.add(f"{key}.requires[{i}]", f"expected a requirement like \"scikit-build-core>=0.10\", found {req!r}")
        toolchain = _get_str_list(p, entry, "toolchain", key)
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
        for dep, dkey, spec in _entries(p, fc_table, f"{key}.fetchcontent", _FETCHCONTENT_EXPECTED,
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


def _parse_fetchcontent(p: _Problems, dep: str, dkey: str, spec: Mapping[str, Any]) -> FetchContentInput:
    """One ``fetchcontent.DEP``: a git repository at a rev, or a tar archive by URL (and sha256)."""
    git = _get_str(p, spec, "git", dkey)
    url = _get_str(p, spec, "url", dkey)
    rev = _get_str(p, spec, "rev", dkey)
    sha256 = _get_str(p, spec, "sha256", dkey)
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


def _parse_packages(
    p: _Problems,
    table: dict[str, Any],
    indexes: Mapping[str, IndexSpec],
    builds: Mapping[str, BuildSpec],
) -> dict[NormalizedName, PackageSpec]:
    out: dict[NormalizedName, PackageSpec] = {}
    for raw_name, entry in table.items():
        key = toml_key("packages", raw_name)
        if not _PACKAGE_NAME.fullmatch(raw_name):
            p.add(key, "expected a valid distribution name")
            continue
        name = canonicalize_name(raw_name)
        if name in out:
            p.add(key, f"duplicate of another spelling of {name!r}")
            continue
        shorthand = isinstance(entry, str)  # `name = "==1.0"`
        if shorthand:
            entry = {"version": entry}
        if not isinstance(entry, dict):
            p.add(key, f"expected a version string or a table, found {_found(entry)}")
            continue
        p.check_keys(key, entry, _PACKAGE_KEYS)
        version = _get_str(p, entry, "version", key)
        index = _get_str(p, entry, "index", key)
        nightly = _get_str(p, entry, "nightly", key)
        local = _get_str(p, entry, "local", key)
        build = _get_str(p, entry, "build", key)
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
            _check_date(p, f"{key}.nightly", nightly)
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
        out[name] = PackageSpec(
            name=name,
            specifier=version or "",
            index=index,
            nightly=nightly,
            local=local,
            same_date=same_date,
            build=build,
        )
    return out


def _check_same_date(p: _Problems, packages: Mapping[NormalizedName, PackageSpec]) -> None:
    # Nightlies of one index are built together; mixing dates mixes ABIs (torch vs torchvision).
    dates: dict[str, dict[str, list[str]]] = {}
    for pkg in packages.values():
        if pkg.nightly and pkg.index and pkg.same_date and _is_date(pkg.nightly):  # a bad date: said at its key
            dates.setdefault(pkg.index, {}).setdefault(pkg.nightly, []).append(pkg.name)
    for index, by_date in sorted(dates.items()):
        if len(by_date) > 1:
            listed = "; ".join(f"{d}: {', '.join(sorted(n))}" for d, n in sorted(by_date.items()))
            p.add(
                f"indexes.{index}",
                f"nightlies from one index must share a date, found {listed} "
                "(set same-date = false on a package to opt out)",
            )


def _check_excluded_not_declared(p: _Problems, packages: Mapping[str, Any], resolution: ResolutionSpec) -> None:
    # uv drops an excluded package with a never-true marker, and a declared one would go with it.
    declared = {canonicalize_name(raw): raw for raw in packages}
    for i, name in enumerate(resolution.exclude):
        if name in declared:
            p.add(f"resolution.exclude[{i}]", f"expected a package the spec does not declare, found {name!r}, "
                  f"which packages.{declared[name]} requires (keep one of the two)")


def _check_overrides_keep_pins(p: _Problems, packages: Mapping[NormalizedName, PackageSpec],
                               indexes: Mapping[str, IndexSpec], resolution: ResolutionSpec) -> None:
    # Overrides are for upstream's pins (sglang's flashinfer==0.6.4): one that moved the
    # spec's own pin would lock a version other than the one the spec (and its nightly
    # table, and `diff`) names.
    default = next((name for name, idx in indexes.items() if idx.default), None)
    for i, text in enumerate(resolution.overrides):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue  # reported by _parse_resolution
        pkg = packages.get(canonicalize_name(req.name))
        if pkg is None:
            continue
        key = f"resolution.overrides[{i}]"
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        exact = pins[0] if len(pins) == 1 and "*" not in pins[0] else None
        if pkg.nightly:
            p.add(key, f"expected no override of {pkg.name}: packages.{pkg.name} is a nightly pin "
                       f"({pkg.nightly}), which already beats upstream's pins; found {text!r} (change the date there)")
        elif pkg.index and pkg.index != default and exact is None:
            p.add(key, f"{pkg.name} is pinned to index {pkg.index!r}; an override of it must be an exact "
                       f"==VERSION, found {text!r}")
        elif pkg.specifier and exact is not None and not allows(pkg.specifier, exact):
            p.add(key, f"expected a version packages.{pkg.name} allows ({pkg.specifier}), found {text!r} "
                       "(an override may beat upstream's pins, not the spec's own)")


def allows(specifier: str, version: str | Version, *, invalid: bool = True) -> bool:
    """Whether ``specifier`` allows ``version`` (pre-releases included); ``invalid`` for a specifier
    that does not parse (reported at its own key: one message, not a second one elsewhere)."""
    try:
        return SpecifierSet(specifier).contains(version, prereleases=True)
    except InvalidSpecifier:
        return invalid


def _parse_resolution(p: _Problems, table: dict[str, Any]) -> ResolutionSpec:
    p.check_keys("resolution", table, _RESOLUTION_KEYS)
    overrides = _get_str_list(p, table, "overrides", "resolution")
    for i, req in enumerate(overrides):
        try:
            Requirement(req)
        except InvalidRequirement:
            p.add(f"resolution.overrides[{i}]",
                  f"expected a requirement like \"flashinfer-python==0.6.5\", found {req!r}")
    exclude: list[NormalizedName] = []
    for i, name in enumerate(_get_str_list(p, table, "exclude", "resolution")):
        if _PACKAGE_NAME.fullmatch(name):
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
                          allow_overlap=allowed)


def load_spec(path: Path, *, name: str | None = None, root: Path | None = None) -> EnvSpec:
    """Read and validate a spec file (``root``: as for ``read_spec``)."""
    return read_spec(path, name=name, root=root)[0]


def read_spec(path: Path, *, name: str | None = None, root: Path | None = None) -> tuple[EnvSpec, bytes]:
    """Read and validate a spec file; also return the bytes it was parsed from.

    ``root``: the workspace root its source paths and patches must exist under (None:
    their existence is left to the stages that read them).
    """
    env_name = name or path.stem
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such env spec") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the env spec ({exc.strerror})") from None
    doc = load_toml(text, path, SpecError)
    return parse_spec(doc, name=env_name, origin=path, root=root), data


def load_env_spec(ws: Workspace, env: str, *, check_paths: bool = True) -> EnvSpec:
    """The spec of env ``env`` in ``ws``; ``check_paths``: its source paths and patches must exist
    in the workspace (not for work that may never read them: a frozen sync whose wheels are all
    there, a build from --override-source)."""
    return load_spec(ws.spec_path(env), name=env, root=ws.root if check_paths else None)
