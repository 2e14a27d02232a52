"""Load and validate env specs (``envs/NAME.toml``): ``EnvSpec``, read by ``parse_spec`` table by
table (``model.spectables``: each table's value and parser) and then across its tables.

Validation reports every problem at once, each as ``FILE: KEY.PATH: message``;
an unknown key gets a "did you mean" when a known one is close.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from platform import machine as host_machine
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from envlock.errors import SpecError, UsageError, did_you_mean
from envlock.model import spectables
from envlock.model.locktables import PYTHON_VERSION

# The values of the spec's tables, named here too (``X as X``: an explicit re-export).
from envlock.model.spectables import COMMIT_ID as COMMIT_ID
from envlock.model.spectables import BuildSpec as BuildSpec
from envlock.model.spectables import FetchContentInput as FetchContentInput
from envlock.model.spectables import IndexSpec as IndexSpec
from envlock.model.spectables import PackageSpec as PackageSpec
from envlock.model.spectables import ResolutionSpec as ResolutionSpec
from envlock.model.spectables import SourceSpec as SourceSpec
from envlock.model.targets import TargetSpec, parse_targets, pick, runs_here
from envlock.model.tomlio import load_toml
from envlock.urlcheck import is_index_url as is_index_url  # mirrors and the stages ask spec
from envlock.workspace import Workspace

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


@dataclass(frozen=True)
class EnvSpec:
    """An env spec as ``parse_spec`` read it: its python and platform, its tables (indexes, packages, sources,
    builds, resolution), its GPUs and targets, and the parsed TOML it came from (``raw``)."""

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
    #: ``[targets.NAME]``: the kinds of machine the env is locked for ({}: one, the ``[env]`` table's).
    targets: Mapping[str, TargetSpec] = field(default_factory=dict)
    #: The target this spec is the view of (``model.targets.for_target``); None: the whole spec.
    target: str | None = None

    @property
    def default_index(self) -> IndexSpec:
        return next(i for i in self.indexes.values() if i.default)

    def index_of(self, name: NormalizedName) -> str:
        """The one index package ``name`` may come from: the one the spec pins it to, else the
        default (every non-default index is explicit: the torchtriton lesson)."""
        pkg = self.packages.get(name)
        return pkg.index if pkg and pkg.index else self.default_index.name

    def for_target(self, name: str) -> EnvSpec:
        """This spec as target ``name`` sees it: a one-target spec of its platform, python, GPUs and
        nightly pins (its own date, its own local tag), with the whole spec's text (digest, keys)."""
        target = self.targets[name]
        out = set(target.exclude)
        packages = {n: p for n, p in self.packages.items() if n not in out}
        for pkg_name, pkg in packages.items():
            if pkg.nightly:
                local = pkg.local if target.local is None or pkg.local is None else (target.local or None)
                packages[pkg_name] = replace(pkg, nightly=target.nightly or pkg.nightly, local=local)
        res = self.resolution
        if out:  # what it does without: excluded, and out of the overrides and same-version sets
            kept = [tuple(n for n in group if n not in out) for group in res.same_version]
            res = replace(res, exclude=tuple(sorted({*res.exclude, *target.exclude})),
                          overrides=tuple(o for o in res.overrides
                                          if canonicalize_name(Requirement(o).name) not in out),
                          same_version=tuple(group for group in kept if len(group) >= 2))
        if target.overrides:  # its own, over [resolution]'s of the same packages
            own = {spectables.override_name(o) for o in target.overrides}
            res = replace(res, overrides=(*(o for o in res.overrides if spectables.override_name(o) not in own),
                                          *target.overrides))
        builds = {n: replace(b, env={**b.env, **target.build_env}) for n, b in self.builds.items()}
        return replace(self, platform=target.platform, python=target.python or self.python,
                       gpus=self.gpus if target.gpus is None else target.gpus, packages=packages, resolution=res,
                       builds=builds if target.build_env else self.builds, targets={}, target=name)

    def on_this_machine(self, asked: str | None) -> EnvSpec:
        """The view of the target a sync or a build here works on (``for_target``): ``asked`` (``--target``),
        else the one whose platform this machine runs; this spec itself when it has no targets. Exit 2 when
        ``asked`` names no target, or one of another kind of machine (its venv and builds are made there)."""
        if not self.targets:
            if asked is not None:
                raise UsageError(f"{self.path}: --target {asked}: the spec has no [targets] (one target, [env]'s)")
            return self
        name = pick({n: t.platform for n, t in self.targets.items()}, asked, str(self.path))
        platform = self.targets[name].platform
        if not runs_here(platform):
            raise UsageError(f"{self.path}: target {name} ({platform}) does not run on this machine "
                             f"({host_machine()}): its venv and its builds are made on a machine of its platform "
                             f"(`envlock sync {self.name} --target {name}` there); here its lock stays as it is")
        return self.for_target(name)

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


_KEYED_TABLES = {"indexes", "packages", "sources", "builds", "targets"}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()[:16]


# -- validation --------------------------------------------------------------


def _check_platform(p: spectables.Problems, platform: str) -> None:
    if platform in UV_PLATFORMS:
        return
    if not _PLATFORM.fullmatch(platform):
        p.add("env.platform",
              f"expected a platform as uv spells it (e.g. \"x86_64-manylinux_2_28\"), found {platform!r}")
        return
    hint = did_you_mean(platform, sorted(UV_PLATFORMS), before=" (", after=")")
    p.add("env.platform", f"expected a platform the pinned uv accepts for --python-platform, "
          f"found {platform!r}{hint}; accepted: {', '.join(sorted(UV_PLATFORMS))}")


_TOP = {"env", "indexes", "packages", "sources", "builds", "resolution", "targets"}
_ENV_KEYS = {"python", "platform", "gpus"}


def parse_spec(doc: Mapping[str, Any], *, name: str, origin: Path, root: Path | None = None) -> EnvSpec:
    """Validate a parsed spec document; raise ``SpecError`` listing every problem.

    ``root``: the workspace root that source paths and patches are relative to; when
    given, each must exist (None: their form is checked, not their existence).
    """
    p = spectables.Problems(str(origin))
    p.check_keys("", doc, _TOP)

    env = spectables.get_table(p, doc, "env")
    p.check_keys("env", env, _ENV_KEYS)
    given = spectables.get_str(p, env, "python", "env", required=True)
    python = given or "3"
    if given is not None and not PYTHON_VERSION.fullmatch(given):
        p.add("env.python", f"expected a Python version like \"3.12\", found {given!r}")
    platform = spectables.get_str(p, env, "platform", "env")
    if platform is not None:
        _check_platform(p, platform)
    gpus = spectables.get_str_list(p, env, "gpus", "env")
    for i, gpu in enumerate(gpus):
        if (problem := _gpu_problem(gpu)) is not None:
            p.add(f"env.gpus[{i}]", problem)
    named = parse_targets(p, spectables.get_table(p, doc, "targets"), env, python, _gpu_problem)

    indexes = spectables.parse_indexes(p, spectables.get_table(p, doc, "indexes"))
    sources = spectables.parse_sources(p, spectables.get_table(p, doc, "sources"), root)
    builds = spectables.parse_builds(p, spectables.get_table(p, doc, "builds"), sources)
    packages_table = spectables.get_table(p, doc, "packages")
    packages = spectables.parse_packages(p, packages_table, indexes, builds)
    resolution = spectables.parse_resolution(p, spectables.get_table(p, doc, "resolution"))
    _check_same_date(p, packages)
    _check_excluded_not_declared(p, packages_table, resolution)
    _check_overrides_keep_pins(p, packages, indexes, resolution)
    for i, gap in enumerate(resolution.allow_no_kernels):
        for j, gpu in enumerate(gap.gpus):
            if (problem := _gpu_problem(gpu)) is not None:
                p.add(f"resolution.allow-no-kernels[{i}].gpus[{j}]", problem)
    for target in named.values():  # a build's package is made for every target (or for none)
        _check_overrides_keep_pins(p, packages, indexes, ResolutionSpec(overrides=target.overrides),
                                   f"targets.{target.name}")
        for i, name in enumerate(target.exclude):
            if name in packages and packages[name].build:
                p.add(f"targets.{target.name}.exclude[{i}]", f"expected a package no build provides, found "
                      f"{name!r} ([builds.{packages[name].build}] is built for every target)")

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
        targets=named,
    )


def _gpu_problem(gpu: str) -> str | None:
    if GPU_NAME.fullmatch(gpu):
        return None
    return f'expected a GPU as nvcc names its arch ("sm_120a", "sm_90") or a compute capability ("12.0"), found {gpu!r}'


def _check_same_date(p: spectables.Problems, packages: Mapping[NormalizedName, PackageSpec]) -> None:
    # Nightlies of one index are built together; mixing dates mixes ABIs (torch vs torchvision).
    dates: dict[str, dict[str, list[str]]] = {}
    for pkg in packages.values():
        # A bad date is said at its own key.
        if pkg.nightly and pkg.index and pkg.same_date and spectables.is_date(pkg.nightly):
            dates.setdefault(pkg.index, {}).setdefault(pkg.nightly, []).append(pkg.name)
    for index, by_date in sorted(dates.items()):
        if len(by_date) > 1:
            listed = "; ".join(f"{d}: {', '.join(sorted(n))}" for d, n in sorted(by_date.items()))
            p.add(
                f"indexes.{index}",
                f"nightlies from one index must share a date, found {listed} "
                "(set same-date = false on a package to opt out)",
            )


def _check_excluded_not_declared(p: spectables.Problems, packages: Mapping[str, Any],
                                 resolution: ResolutionSpec) -> None:
    # uv drops an excluded package with a never-true marker, and a declared one would go with it.
    declared = {canonicalize_name(raw): raw for raw in packages}
    for i, name in enumerate(resolution.exclude):
        if name in declared:
            p.add(f"resolution.exclude[{i}]", f"expected a package the spec does not declare, found {name!r}, "
                  f"which packages.{declared[name]} requires (keep one of the two)")


def _check_overrides_keep_pins(p: spectables.Problems, packages: Mapping[NormalizedName, PackageSpec],
                               indexes: Mapping[str, IndexSpec], resolution: ResolutionSpec,
                               where: str = "resolution") -> None:
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
        key = f"{where}.overrides[{i}]"
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
