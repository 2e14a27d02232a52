"""Local builds: a wheel from a patched source tree, keyed in the store by an input digest.

The input digest covers everything that can change the wheel:

- the digest of the build's subdirectory of the patched source tree, and of what of the source
  outside it its ``pyproject.toml`` names (``../rust/sglang-grpc/Cargo.toml``) or its links lead to:
  the build sees the whole tree, as pip's does, and a patch elsewhere does not rebuild it; the
  build recipe (``[builds.*]``: subdirectory, isolation, env, config-settings, requires,
  FetchContent inputs) and SOURCE_DATE_EPOCH;
- the build environment, locked: with ``isolation = true`` the backend's
  ``[build-system].requires`` resolved with hashes (``uv pip compile --generate-hashes``)
  and enforced during the build (``--build-constraint`` + ``--require-hashes``); with
  ``isolation = false`` the env's own locked wheels (name==version sha256) plus the
  build's ``requires``, resolved the same way, installed into a fresh build venv;
- the interpreter (full version), the target and host platforms, uv's version and a
  toolchain: the build's ``toolchain`` wheels, locked by sha256 and unpacked once into the
  store (``envlock.build.toolchain``), and the host tools' version lines (``cc``, ``c++``, ``cmake``,
  ``nvcc``, those the toolchain does not provide; missing ones recorded as absent).

Same digest => the stored wheel is reused, no rebuild. The wheel is made bit-identical by
SOURCE_DATE_EPOCH (the commit time; path sources use ``trees.PATH_SOURCE_EPOCH``), a
build in a scratch copy whose paths are mapped away (``envlock.build.buildenv``: gcc's and nvcc's
prefix maps, nvcc's temp files, a fixed build path where the kernel allows it;
scikit-build-core's build-dir inside the scratch dir), and a final rewrite of the zip with
fixed timestamps and permissions. ``check`` rebuilds from
scratch and names the files inside the wheel that differ.

CMake FetchContent inputs come checked out into the store (the orchestration fetches them
with the git source machinery) and are handed to CMake as ``FETCHCONTENT_SOURCE_DIR_<NAME>``
with ``FETCHCONTENT_FULLY_DISCONNECTED=ON``: the build downloads nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as host_platform
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion

from envlock import runner
from envlock.build import buildenv, toolchain
from envlock.build.requirements import (
    BuildEnvPackage,
    build_env_closure,
    build_roots,
    interpreter,
    lock_requirements,
    project_backend,
)
from envlock.build.wheelzip import ZIP_EPOCH_MIN, normalize_wheel, wheel_diff
from envlock.errors import BuildError, scrub
from envlock.model import buildsystem
from envlock.model.lockfile import LockedBuild
from envlock.model.spec import BuildSpec
from envlock.model.target import target_environment
from envlock.model.tomlio import load_toml
from envlock.store import trees
from envlock.store.home import file_sha256
from envlock.store.store import Store, copy_atomic

#: 2: a build sees the whole source tree, built in ``src/SUBDIRECTORY`` (1: the subdirectory alone, as ``src``).
RECIPE_FORMAT = 2
_LOG_TAIL = 25


# -- inputs and results ------------------------------------------------------


@dataclass(frozen=True)
class BuildRequest:
    """What to build: a ``[builds.*]`` entry applied to a patched tree, for one env."""

    spec: BuildSpec
    tree: Path  # the patched source tree (store entry; never written)
    source_date_epoch: int
    python: str  # interpreter request, as uv takes it ("3.11")
    platform: str | None = None  # the env's target platform
    index_url: str | None = None  # default index for build requirements (None: uv's default)
    env_packages: tuple[BuildEnvPackage, ...] = ()  # isolation = false: the env's locked wheels
    # The lock's build requirements, taken instead of resolving them again (sync --frozen
    # rebuilding a recorded wheel: the index may have newer tools since).
    locked_requirements: tuple[str, ...] | None = None
    # Each FetchContent input of ``spec``, by name: its pinned commit checked out (or its archive
    # unpacked) into the store (``envlock.commands.build`` fetches them, from a mirror if one is given).
    fetchcontent: Mapping[str, Path] = field(default_factory=dict)
    # What the input digest covers of each (``LockedFetchContent.recipe``: the commit a tag or
    # branch resolved to, an archive's sha256); an input the spec pins by commit may be left out.
    fetchcontent_pins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The lock's toolchain lines, taken instead of resolving ``spec.toolchain`` again (as
    # ``locked_requirements``).
    locked_toolchain: tuple[str, ...] | None = None
    # Planned only to compare its input digest (``envlock lock``): the FetchContent inputs' pins suffice,
    # their trees are not fetched; such a plan is never built.
    digest_only: bool = False


@dataclass(frozen=True)
class BuildPlan:
    """A request with its inputs resolved: the recipe and its digest."""

    request: BuildRequest
    recipe: Mapping[str, Any]
    input_digest: str
    build_requirements: tuple[str, ...]  # "name==version --hash=sha256:..." lines, locked
    fetchcontent_dirs: Mapping[str, Path] = field(default_factory=dict)
    # isolation = false: the env's wheels the build venv holds (those the digest covers)
    env_packages: tuple[BuildEnvPackage, ...] = ()
    # A wheel of each of ``build_requirements``, in the store (``buildinputs.backend_wheels`` brings
    # them in, hash-checked): the build installs its backend from these alone (``--no-index
    # --find-links``), never from an index. None: from ``request.index_url`` (a caller that fetched none).
    backend_wheels: tuple[Path, ...] | None = None
    # The build's toolchain, locked ("name==version --hash=sha256:..." lines; () when it declares none),
    # and a stored wheel of each (brought in as ``backend_wheels`` are), unpacked for the build.
    toolchain: tuple[str, ...] = ()
    toolchain_wheels: tuple[Path, ...] = ()

    @property
    def key(self) -> str:
        return self.input_digest.removeprefix("sha256:")


@dataclass(frozen=True)
class BuiltWheel:
    """A local build's wheel (``build_wheel``): built, reused from the store or found in the wheelhouse, with its
    input digest, sha256, build requirements and toolchain, and where its copies and log are."""

    name: str
    filename: str
    sha256: str
    input_digest: str
    wheel: Path  # the copy in the workspace wheelhouse
    store_path: Path  # the stored original
    log: Path | None  # None: taken from the wheelhouse, built by an earlier store
    rebuilt: bool  # False: the stored wheel for these inputs was reused
    build_requirements: tuple[str, ...] = ()
    from_wheelhouse: bool = False  # the wheelhouse held the lock's wheel of these inputs: nothing built or copied
    toolchain: tuple[str, ...] = ()  # the locked toolchain lines it was built with

    def locked(self) -> LockedBuild:
        return LockedBuild(
            input_digest=self.input_digest,
            wheel=self.filename,
            sha256=self.sha256,
            requirements=self.build_requirements,
            toolchain=self.toolchain,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "wheel": self.filename,
            "path": str(self.wheel),
            "sha256": self.sha256,
            "input-digest": self.input_digest,
            "rebuilt": self.rebuilt,
            "log": str(self.log) if self.log is not None else None,
            "from-wheelhouse": self.from_wheelhouse,
            "build-requirements": list(self.build_requirements),
            "toolchain": list(self.toolchain),
        }


@dataclass(frozen=True)
class CheckResult:
    """A rebuild from scratch compared with the expected wheel (``check``): both sha256s, the files inside the
    wheel that differ, and the rebuild kept for inspection."""

    name: str
    input_digest: str
    expected_sha256: str
    actual_sha256: str
    differing: tuple[str, ...] = ()  # files inside the wheel that differ
    kept: Path | None = None  # the differing rebuild, kept for inspection
    recorded: bool = False  # ``expected_sha256`` is the lock's wheel (else the first build's)
    unfixed: str | None = None  # why the rebuild's build path was not fixed (None: it was)

    @property
    def reproducible(self) -> bool:
        return self.expected_sha256 == self.actual_sha256

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input-digest": self.input_digest,
            "reproducible": self.reproducible,
            "expected-sha256": self.expected_sha256,
            "actual-sha256": self.actual_sha256,
            "differing": list(self.differing),
            "kept": str(self.kept) if self.kept else None,
            "expected-from": "lock" if self.recorded else "first-build",
            "fixed-build-path": self.unfixed is None,
            "unfixed-because": self.unfixed,
        }


# -- build requirements ------------------------------------------------------


# -- planning ----------------------------------------------------------------


def plan(request: BuildRequest, store: Store) -> BuildPlan:
    """Resolve a request's inputs (locked build requirements; the FetchContent checkouts it names)
    and digest them."""
    spec = request.spec
    what = f"[builds.{spec.name}]"
    project = request.tree / spec.subdirectory if spec.subdirectory else request.tree
    if not project.is_dir():
        raise BuildError(f"{what}: subdirectory {spec.subdirectory!r} not found in source {spec.source!r}")
    # Its links must stay in the source tree, which the lock pins (a git commit's links are
    # checked only here, where a build reads them); before anything reads the subdirectory.
    source_tree = trees.tree_digest(project, within=request.tree, name=f"{what} (source {spec.source!r})")
    outside = _outside(request, project, what)
    backend, system_requires = project_backend(project)
    python = interpreter(request.python)
    scratch = store.temp_dir(f"plan-{canonicalize_name(spec.name)}")
    try:
        env, build_reqs = _build_env(request, system_requires, python["version"], scratch)
        tool_lines = request.locked_toolchain
        if tool_lines is None:
            tool_lines = toolchain.resolve(spec.toolchain, what, lambda reqs: lock_requirements(
                reqs, python=python["version"], index_url=request.index_url, what=f"{what} toolchain",
                scratch=scratch / "toolchain"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    fc_recipe, fc_dirs = _fetchcontent(request, what)
    recipe: dict[str, Any] = {
        "format": RECIPE_FORMAT,
        "name": str(canonicalize_name(spec.name)),
        "source": spec.source,
        "source-tree": source_tree,  # the subdirectory
        "subdirectory": spec.subdirectory,
        "isolation": spec.isolation,
        "backend": backend,
        "env": dict(sorted(spec.env.items())),
        "config-settings": dict(sorted(spec.config_settings.items())),
        "requires": list(spec.requires),
        "fetchcontent": fc_recipe,
        "source-date-epoch": request.source_date_epoch,
        "build-env": {"env-packages": sorted(p.line for p in env), "requirements": list(build_reqs)},
        "python": python["version"],
        "platform": request.platform or "",
        "host": python["platform"],
        "machine": host_platform.machine(),
        "toolchain": toolchain.recorded_tools(toolchain.provided(tool_lines)),
    }
    if spec.toolchain:  # its wheels' hashes stand for the version lines of what it provides
        recipe["toolchain-wheels"] = list(tool_lines)
    if outside:  # what its pyproject.toml reads of the source beyond the subdirectory
        recipe["source-outside"] = outside
    digest = "sha256:" + hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
    return BuildPlan(request, recipe, digest, build_reqs, fc_dirs, tuple(env), toolchain=tool_lines)


def _build_env(request: BuildRequest, system_requires: Sequence[str], python: str,
               scratch: Path) -> tuple[list[BuildEnvPackage], tuple[str, ...]]:
    """What a build's venv holds: the env's packages (``isolation = false``: those its requirements
    reach) and its build requirements, locked (the lock's when it has them, else resolved for
    ``python`` in ``scratch``)."""
    spec = request.spec
    what = f"[builds.{spec.name}]"
    if spec.isolation:
        if request.locked_requirements is not None:
            return [], request.locked_requirements
        return [], lock_requirements(system_requires, python=python, index_url=request.index_url, what=what,
                                     scratch=scratch)
    if not spec.requires:
        raise BuildError(
            f"{what}: isolation = false needs requires = [...] (the build backend "
            f"and its tools, e.g. {list(system_requires)!r}); found none"
        )
    # Only what the build can import: the closure of its own build requirements
    # within the env. Pinning another PyPI package must not rebuild the kernel;
    # moving torch (named in sgl-kernel's [build-system] requires) must.
    roots = build_roots(spec, request.tree)
    env = [
        p
        for p in build_env_closure(request.env_packages, roots, target_environment(request.python, request.platform))
        if canonicalize_name(p.name) != canonicalize_name(spec.name)
    ]
    if request.locked_requirements is not None:
        return env, request.locked_requirements
    in_env = {canonicalize_name(p.name) for p in env}
    wanted = [r for r in spec.requires if canonicalize_name(Requirement(r).name) not in in_env]
    pins = [f"{canonicalize_name(p.name)}=={p.version}" for p in env]
    locked = lock_requirements(wanted, python=python, index_url=request.index_url, what=what, constraints=pins,
                               scratch=scratch)
    return env, tuple(line for line in locked if canonicalize_name(line.partition("==")[0]) not in in_env)


def _outside(request: BuildRequest, project: Path, what: str) -> dict[str, str]:
    """What the build reads of the source outside its subdirectory (``buildsystem.reached``), digested by
    its path in the source ("" for the whole tree); {} when it reads nothing outside."""
    path = project / "pyproject.toml"
    try:
        doc = load_toml(path.read_text(encoding="utf-8"), path, BuildError) if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        doc = None
    name = f"{what} (source {request.spec.source!r})"
    links = [p for _, p in trees.walk_tree(project) if p.is_symlink()]
    return {rel: trees.tree_digest(request.tree / rel, within=request.tree, name=name) if (request.tree / rel).is_dir()
            else "absent" for rel in buildsystem.reached(request.tree, project, doc, links)}


def _fetchcontent(request: BuildRequest, what: str) -> tuple[list[dict[str, Any]], dict[str, Path]]:
    """What the input digest covers of each FetchContent input of ``request``, and its tree."""
    spec = request.spec
    missing = [dep.name for dep in spec.fetchcontent if dep.name not in request.fetchcontent]
    if missing and not request.digest_only:
        raise ValueError(f"{what}: the request has no checkout of fetchcontent {', '.join(missing)}")
    fc_recipe = []
    for dep in spec.fetchcontent:
        pin = request.fetchcontent_pins.get(dep.name)
        if pin is None and not (dep.git is not None and dep.pinned_by_spec):  # a tag can move: its commit, then
            raise ValueError(f"{what}: the request has no pin of fetchcontent {dep.name} (a tag, branch or archive)")
        fc_recipe.append(dict(pin) if pin is not None else {"name": dep.name, "git": dep.git, "rev": dep.rev})
    fc_dirs = {dep.name: request.fetchcontent[dep.name] for dep in spec.fetchcontent if dep.name not in missing}
    for name, fc_dir in fc_dirs.items():
        # CMake reads it as a source folder; the recipe pins only its commit, which says
        # nothing of what a link out of it reads.
        trees.check_links(fc_dir, name=f"{what}: fetchcontent.{name}")
    return fc_recipe, fc_dirs


# -- building ----------------------------------------------------------------


def _fail(plan_: BuildPlan, store: Store, log: Path, message: str) -> BuildError:
    """The ``BuildError`` of a failed build step: its log kept in the store's ``logs/``, its tail the details."""
    kept = runner.keep_log(log, store.path("logs", f"build-{plan_.key[:32]}.log"))
    tail = kept.read_text(errors="replace").rstrip().splitlines()[-_LOG_TAIL:]
    return BuildError(f"[builds.{plan_.request.spec.name}]: {message}; build log: {kept}", details=tail)


def _run_build(plan_: BuildPlan, store: Store, scratch: Path) -> tuple[Path, Path, str | None]:
    """Build in ``scratch``; return (normalized wheel, log, why its build path was not fixed or None).
    Raises ``BuildError`` with the log kept."""
    req = plan_.request
    spec = req.spec
    if req.digest_only:  # its FetchContent inputs were pinned, not fetched
        raise ValueError(f"[builds.{spec.name}]: a plan made to compare input digests is never built")
    log = scratch / "build.log"
    # The whole source tree, as pip's build of a subdirectory sees it (``..`` is the source): the digest
    # covers the subdirectory and what its pyproject.toml names outside it. A link that leads out of the
    # source is left out (it would read this machine's files).
    trees.copy_tree(req.tree, scratch / "src", leave_out=trees.links_out(req.tree))
    tools = (toolchain.unpacked(store, plan_.toolchain_wheels, what=f"[builds.{spec.name}]")
             if plan_.toolchain_wheels else None)
    epoch = max(req.source_date_epoch, ZIP_EPOCH_MIN)
    paths = buildenv.prepare(scratch, plan_.fetchcontent_dirs, tools.tree if tools is not None else None,
                             epoch=epoch)
    seen = paths.scratch  # the scratch folder as the build sees it (at a fixed path, if it could be)
    backend_is_skbuild = str(plan_.recipe["backend"]).startswith("scikit_build_core")
    env = buildenv.build_env(spec, epoch, paths, tools, backend_is_skbuild)
    args: list[str | os.PathLike[str]] = ["build", "--wheel", "--no-sources", "--out-dir", seen / "dist"]
    args += _index_args(plan_, scratch, seen)
    if spec.isolation:
        args += ["--python", interpreter(req.python)["executable"]]
        if plan_.build_requirements:
            (scratch / "build-constraints.txt").write_text("".join(f"{line}\n" for line in plan_.build_requirements))
            args += ["--build-constraint", seen / "build-constraints.txt", "--require-hashes"]
    else:
        python = _make_build_venv(plan_, scratch, log, store)
        args += ["--no-build-isolation", "--python", seen / python.relative_to(scratch)]
    args += buildenv.config_settings(spec, paths, tools, backend_is_skbuild)
    args.append(seen / "src" / spec.subdirectory if spec.subdirectory else seen / "src")
    with log.open("a", encoding="utf-8") as fh:
        fh.write(scrub(  # a fetchcontent URL's token stays out of a log the store keeps
            f"# envlock build {spec.name} {plan_.input_digest}\n"
            + json.dumps(plan_.recipe, indent=2, sort_keys=True)
            + f"\n# build path: {seen}" + (f" (not fixed: {paths.unfixed})" if paths.unfixed else " (fixed)")
            + (f"\n# toolchain: {tools.tree} ({tools.digest})" if tools is not None else "") + "\n"
        ))
    result = runner.uv(args, cwd=scratch, env=env, log=log, wrap=paths.wrap())
    if not result.ok:
        raise _fail(plan_, store, log, f"build failed (uv build exit {result.returncode})")
    dist = scratch / "dist"
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise _fail(plan_, store, log, f"expected one wheel in {dist}, found {len(wheels)}")
    built = parse_wheel_filename(wheels[0].name)[0]
    if built != canonicalize_name(spec.name):
        raise _fail(
            plan_,
            store,
            log,
            f"built {wheels[0].name}, but the build is named {spec.name!r} "
            f"(expected a wheel of {canonicalize_name(spec.name)})",
        )
    normalize_wheel(wheels[0], req.source_date_epoch)
    return wheels[0], log, paths.unfixed


def _index_args(plan_: BuildPlan, scratch: Path, seen: Path | None = None) -> list[str | os.PathLike[str]]:
    """Where uv installs the build's requirements from: a folder of the plan's stored backend wheels
    and nothing else, when it has them; else the request's index. ``seen``: the scratch folder as
    the command run sees it."""
    if plan_.backend_wheels is None:
        return ["--default-index", plan_.request.index_url] if plan_.request.index_url else []
    folder = scratch / "backend-wheels"
    folder.mkdir(exist_ok=True)
    for wheel in plan_.backend_wheels:
        if not (folder / wheel.name).is_symlink():
            (folder / wheel.name).symlink_to(wheel)
    return ["--no-index", "--find-links", (seen or scratch) / "backend-wheels"]


def _make_build_venv(plan_: BuildPlan, scratch: Path, log: Path, store: Store) -> Path:
    """A venv with exactly the env wheels the plan's digest covers and the build's locked requirements."""
    req = plan_.request
    venv = scratch / "venv"
    made = runner.uv(["venv", "--no-project", "--python", interpreter(req.python)["executable"], venv], log=log)
    if not made.ok:
        raise _fail(plan_, store, log, f"cannot create the build venv (uv venv exit {made.returncode})")
    python = venv / "bin" / "python"
    wheels = [p.wheel for p in plan_.env_packages]
    if wheels:
        r = runner.uv(["pip", "install", "--python", python, "--no-deps", "--no-index", *wheels], log=log)
        if not r.ok:
            raise _fail(
                plan_,
                store,
                log,
                f"cannot install the env's packages into the build venv (exit {r.returncode})",
            )
    if plan_.build_requirements:
        reqs = scratch / "build-requirements.txt"
        reqs.write_text("".join(f"{line}\n" for line in plan_.build_requirements))
        args: list[str | os.PathLike[str]] = [
            "pip",
            "install",
            "--python",
            python,
            "--no-deps",
            "--require-hashes",
            "-r",
            reqs,
        ]
        args += _index_args(plan_, scratch)
        r = runner.uv(args, log=log)
        if not r.ok:
            raise _fail(
                plan_,
                store,
                log,
                f"cannot install build requirements into the build venv (exit {r.returncode})",
            )
    return python


def recorded_wheel(request: BuildRequest, plan_: BuildPlan, wheelhouse: Path,
                   recorded: LockedBuild) -> BuiltWheel | None:
    """The wheelhouse's wheel when it is the one the lock records for these very inputs (so a
    fresh store does not rebuild what the workspace holds: same inputs, no rebuild), else None."""
    if (recorded.input_digest != plan_.input_digest or tuple(recorded.requirements) != plan_.build_requirements
            or tuple(recorded.toolchain) != plan_.toolchain
            or "/" in recorded.wheel or os.sep in recorded.wheel or not recorded.wheel.endswith(".whl")):
        return None  # the lock says other things than these inputs, or names no plain wheel file
    try:
        if parse_wheel_filename(recorded.wheel)[0] != canonicalize_name(request.spec.name):
            return None
    except (InvalidWheelFilename, InvalidVersion):
        return None
    target = wheelhouse / recorded.wheel
    if file_sha256(str(target)) != recorded.sha256:
        return None
    return BuiltWheel(name=request.spec.name, filename=recorded.wheel, sha256=recorded.sha256,
                      input_digest=plan_.input_digest, wheel=target, store_path=target, log=None, rebuilt=False,
                      build_requirements=plan_.build_requirements, from_wheelhouse=True, toolchain=plan_.toolchain)


def place(wheel: BuiltWheel, wheelhouse: Path) -> BuiltWheel:
    """``wheel`` (left in the store by ``build_wheel``) copied into ``wheelhouse``, once it proved to be
    the wheel a lock names."""
    target = wheelhouse / wheel.filename
    if file_sha256(str(target)) != wheel.sha256:
        copy_atomic(wheel.store_path, target)
    return replace(wheel, wheel=target)


def is_built(plan_: BuildPlan, store: Store) -> bool:
    """Whether the store holds the wheel of ``plan_``'s inputs (``build_wheel`` then only copies it)."""
    return (store.path("builds", plan_.key) / "wheel.json").is_file()


def build_wheel(
    request: BuildRequest,
    store: Store,
    wheelhouse: Path | None,
    *,
    plan_: BuildPlan | None = None,
) -> BuiltWheel:
    """Build (or reuse) the wheel for ``request``: stored by input digest, copied to ``wheelhouse``
    (None: left in the store only, for a build no lock is to name yet)."""
    p = plan_ or plan(request, store)
    entry = store.path("builds", p.key)
    rebuilt = False
    if not is_built(p, store):
        scratch = store.temp_dir(f"build-{canonicalize_name(request.spec.name)}")
        try:
            wheel, log, _unfixed = _run_build(p, store, scratch)
            with store.new_entry("builds", p.key) as work:
                shutil.copyfile(wheel, work / wheel.name)
                shutil.copyfile(log, work / "build.log")
                (work / "recipe.json").write_text(json.dumps(p.recipe, indent=2, sort_keys=True) + "\n")
                (work / "wheel.json").write_text(
                    json.dumps({"wheel": wheel.name, "sha256": _sha256(wheel)}, sort_keys=True) + "\n"
                )
            rebuilt = True
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    info = json.loads((entry / "wheel.json").read_text())
    stored = entry / info["wheel"]
    built = BuiltWheel(
        name=request.spec.name,
        filename=info["wheel"],
        sha256=info["sha256"],
        input_digest=p.input_digest,
        wheel=stored,
        store_path=stored,
        log=entry / "build.log",
        rebuilt=rebuilt,
        build_requirements=p.build_requirements,
        toolchain=p.toolchain,
    )
    return place(built, wheelhouse) if wheelhouse is not None else built


def check(
    request: BuildRequest,
    store: Store,
    wheelhouse: Path | None,
    *,
    expected_sha256: str | None = None,
    plan_: BuildPlan | None = None,
    first: BuiltWheel | None = None,
) -> CheckResult:
    """Rebuild from scratch and compare with the stored (or recorded) wheel (Nix's ``--check``).

    Builds first when nothing is stored for these inputs (``first``: that build, when the
    caller has it). On a difference, names the files inside the wheel that differ and keeps
    the rebuild for inspection.
    """
    p = plan_ or plan(request, store)
    first = first or build_wheel(request, store, wheelhouse, plan_=p)
    expected = expected_sha256 or first.sha256
    scratch = store.temp_dir(f"check-{canonicalize_name(request.spec.name)}")
    try:
        wheel, _log, unfixed = _run_build(p, store, scratch)
        actual = _sha256(wheel)
        recorded = expected_sha256 is not None
        if actual == expected:
            return CheckResult(request.spec.name, p.input_digest, expected, actual, recorded=recorded,
                               unfixed=unfixed)
        differing = tuple(wheel_diff(first.store_path, wheel)) if first.sha256 != actual else ()
        if not differing and first.sha256 != expected:
            differing = (
                f"(the stored wheel {first.sha256[:12]} differs from the recorded "
                f"{expected[:12]}; no stored copy of the recorded wheel to compare files with)",
            )
        kept = store.path("check-failures", f"{p.key[:32]}-{int(time.time())}")
        kept.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(wheel, kept / wheel.name)
        return CheckResult(request.spec.name, p.input_digest, expected, actual, differing, kept / wheel.name,
                           recorded=recorded, unfixed=unfixed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _sha256(path: Path) -> str:
    """``quick.file_sha256`` for a file that must be there (a wheel just built)."""
    digest = file_sha256(str(path))
    if digest is None:
        raise BuildError(f"{path}: cannot be read")
    return digest


# -- the env a non-isolated build runs against -------------------------------


