"""The upgrade report: everything a move from one lock to another changes, for ``envlock diff`` and
``envlock upgrade``.

``upgrade_report`` is the recipe: read what the two locks do not hold themselves (the spec's index
names, builds and resolution; the files the patches touch; each moved source's commit range from
the store's git mirror; wheel metadata in the store), hand it to the pure ``lockdiff.diff_locks`` as
a ``DiffContext``, and return its ``LockDiff`` with notes. ``to_dict`` is the ``--json`` document
(docs/diff.md); ``cli.upgradereport`` renders it for a terminal or a pull request description.

Nothing here fails the report for want of a fact: a spec that does not read, a mirror that lacks
the history, a wheel not in the store each make the report say less, and say so.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envlock import runner
from envlock.build import sources
from envlock.errors import EnvlockError, UsageError, redact
from envlock.model.buildsystem import BuildSystem
from envlock.model.lockdiff import (
    BuildFacts,
    Commit,
    DiffContext,
    LockDiff,
    SourceHistory,
    diff_locks,
)
from envlock.model.lockfile import Lock, reach
from envlock.model.mirrors import MirrorOptions
from envlock.model.spec import COMMIT_ID, EnvSpec, load_env_spec
from envlock.model.target import requires_dist, target_environment
from envlock.patches.patchfile import parse_patch_file
from envlock.resolution import cmakefetch, yanks
from envlock.store.store import Store, store_file
from envlock.workspace import Workspace

SHA256_HEX = re.compile(r"[0-9a-f]{64}")

#: What a report says when the store's mirror lacks a source's history, for ``envlock diff``.
DIFF_FETCH_HINT = "`envlock diff OLD NEW --fetch` fetches it into the store"


@dataclass(frozen=True)
class UpgradeReport:
    """What a move from ``diff.old`` to ``diff.new`` changes, and what could not be told (``notes``)."""

    diff: LockDiff
    notes: tuple[str, ...] = ()
    # The new lock's wheels that are yanked (PEP 592): recorded so by the lock, or (``ReportOptions.yanked``)
    # marked so by their index now.
    yanked: tuple[yanks.Yanked, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.diff.to_dict(), "yanked": [y.to_dict() for y in self.yanked], "notes": list(self.notes)}


@dataclass(frozen=True)
class ReportOptions:
    """How far ``upgrade_report`` may reach: ``fetch`` the history of moved git sources into the
    store (network); ``fetch_from``: source name -> a mirror of its URL to fetch from instead;
    ``fetch_hint``: what to tell when the history is missing and not fetched; ``yanked``: read the
    index page of each of the new lock's packages for the files yanked since (network); ``mirrors``:
    the mirrors the command was given (the indexes they stand for are named by the spec's names). And what
    the caller knows already of how the locks were made (``upgrade`` knows all of it)."""

    fetch: bool = False
    fetch_from: Mapping[str, str] | None = None
    fetch_hint: str = DIFF_FETCH_HINT
    yanked: bool = False
    # ``diff --index``/``--source``: the mirrors its --yanked reads and its --fetch fetches from
    mirrors: MirrorOptions | None = None
    # The specs the locks were made from; without them the workspace's spec of the new lock's env (if it
    # reads) stands for both.
    old_spec: EnvSpec | None = None
    new_spec: EnvSpec | None = None
    # The toolchain lines the relock that made the new lock resolved for each build it does not record
    # yet (``commands.lock.LockResult.planned_toolchains``).
    planned_toolchains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def upgrade_report(ws: Workspace | None, old: Lock, new: Lock, *, old_label: str, new_label: str, store: Store,
                   options: ReportOptions | None = None) -> UpgradeReport:
    """What moving from lock ``old`` to ``new`` changes, reading the git mirrors and wheels of ``store``
    (and, ``options.fetch``, fetching into it)."""
    options = options or ReportOptions()
    new_spec, notes = _new_spec(ws, new, options)
    ctx = _spec_context(options.old_spec or new_spec, new_spec)
    asked = options.mirrors or MirrorOptions()
    if new_spec is not None:
        from envlock.model.mirrors import index_mirrors, source_mirrors  # ENVLOCK_*_<NAME> and the options

        try:
            named = index_mirrors(new_spec, asked.indexes)
        except EnvlockError as exc:  # a bad ENVLOCK_INDEX_* variable says less; a bad --index is the command's error
            if asked.indexes:
                raise
            named = {}
            notes.append(exc.message)
        # A lock made through a mirror records the mirror's URL: still named by the spec's name.
        ctx = replace(ctx, index_names={**{redact(url).rstrip("/"): name for name, url in named.items()},
                                        **ctx.index_names})
        if asked.sources:  # checked as every command checks them (used by --fetch)
            options = replace(options, fetch_from=options.fetch_from or source_mirrors(new_spec, asked.sources))
        elif options.fetch and options.fetch_from is None:
            try:
                options = replace(options, fetch_from=source_mirrors(new_spec))
            except EnvlockError as exc:
                notes.append(exc.message)
    elif asked.indexes or asked.sources:
        raise UsageError("--index/--source: mirrors are named by a spec's indexes and sources, and no spec of the "
                         "new lock's env reads here")
    patch_files = _patch_files(ws, old, new)
    histories, mirrors, missing = _histories(store, old, new, patch_files, options)
    notes += missing
    ctx = replace(
        ctx, patch_files=patch_files, histories=histories,
        subdir_moved=_subdirs_moved(ctx.builds, old, new, mirrors),
        source_requires=_source_requires(ctx.builds, old, new, mirrors),
        closures=_closures(_build_roots(ws, ctx.builds, old, new, store), old, new, store),
        recipes={name: (_recipe(store, old, name), _recipe(store, new, name)) for name in ctx.builds},
        required_by_old=_required_by(old, store), required_by_new=_required_by(new, store),
        build_systems=_build_systems(ctx.builds, old, new, mirrors),
        planned_toolchains=dict(options.planned_toolchains),
    )
    current = {*new.builds, *new.unbuilt()}  # a build the new lock's spec no longer has is told of by its new name
    commits = {name: (str(old.sources[name].commit), str(new.sources[name].commit)) for name in mirrors}
    notes += _dropped_inputs({n: f for n, f in ctx.builds.items() if n in current}, commits, mirrors, old, store)
    diff = diff_locks(old, new, old_label=old_label, new_label=new_label, context=ctx)
    yanked = list(yanks.recorded(new))
    if options.yanked:
        checked = _yanked_now(new, new_spec, asked)
        live = {y.package for y in checked.yanked}
        yanked = sorted([*(y for y in yanked if y.package not in live), *checked.yanked], key=lambda y: y.package)
        notes += checked.notes
    return UpgradeReport(diff, tuple(notes), tuple(yanked))


def _new_spec(ws: Workspace | None, new: Lock, options: ReportOptions) -> tuple[EnvSpec | None, list[str]]:
    """The spec ``new`` was made from: the one given, else the workspace's of its env (if it reads; a
    note says why not)."""
    if options.new_spec is not None or ws is None or not new.env:
        return options.new_spec, []
    if not (ws.root / "envs" / f"{new.env}.toml").is_file():
        return None, []
    try:
        return load_env_spec(ws, new.env, check_paths=False), []
    except EnvlockError as exc:
        problems = "; ".join([exc.message, *exc.details])
        return None, [f"envs/{new.env}.toml does not read ({problems}); the report names no build's source or "
                      "closure and no index by name"]


def _yanked_now(lock: Lock, spec: EnvSpec | None, asked: MirrorOptions) -> yanks.IndexCheck:
    """``yanks.check_index`` of ``lock``: with the mirrors (``asked`` and the environment's) and credentials
    of ``spec`` (the workspace's spec of its env) when there is one and they read, else at the indexes the
    lock records."""
    from envlock.model.mirrors import Mirrors

    mirrors = Mirrors()
    if spec is not None:
        try:
            mirrors = Mirrors.of(spec, asked)
        except EnvlockError as exc:  # a bad ENVLOCK_INDEX_* variable: the recorded indexes, and why
            checked = yanks.check_index(lock)
            return replace(checked, notes=(*checked.notes, exc.message))
    with mirrors.credentials():
        return yanks.check_index(lock, read_at=mirrors.for_packages(lock))


# -- from the specs ----------------------------------------------------------------


def _spec_context(old: EnvSpec | None, new: EnvSpec | None) -> DiffContext:
    specs = [s for s in (new, old) if s is not None]
    if not specs:
        return DiffContext()
    index_names = {idx.url.rstrip("/"): idx.name for s in reversed(specs) for idx in s.indexes.values()}
    builds = {name: BuildFacts(b.source, b.subdirectory, b.isolation,
                               tuple(str(canonicalize_name(Requirement(r).name)) for r in b.requires), b.toolchain,
                               tuple(d.name for d in b.fetchcontent))
              for s in reversed(specs) for name, b in s.builds.items()}
    overrides = {}
    for s in reversed(specs):
        for line in s.resolution.overrides:
            try:
                overrides[str(canonicalize_name(Requirement(line).name))] = line
            except InvalidRequirement:
                continue
    recipe_keys = {}
    toolchains = {}
    if old is not None and new is not None and old is not new:
        toolchains = {name: (old.builds[name].toolchain, b.toolchain) for name, b in new.builds.items()
                      if name in old.builds and old.builds[name].toolchain != b.toolchain}
        was, now = old.raw.get("builds", {}), new.raw.get("builds", {})
        for name in set(was) & set(now):
            a, b = was[name], now[name]
            if isinstance(a, dict) and isinstance(b, dict) and (keys := sorted(k for k in set(a) | set(b)
                                                                              if a.get(k) != b.get(k))):
                recipe_keys[name] = tuple(keys)
    first = specs[0]
    return DiffContext(
        index_names=index_names,
        nightly_order=tuple(str(n) for n, p in first.packages.items() if p.nightly),
        builds=builds, overrides=overrides,
        excludes=frozenset(str(n) for s in specs for n in s.resolution.exclude),
        recipe_keys=recipe_keys, toolchains=toolchains,
    )


def _patch_files(ws: Workspace | None, old: Lock, new: Lock) -> dict[str, tuple[str, ...]]:
    """Each recorded patch -> the files it touches, read from the workspace's patch file (as it is now)."""
    out: dict[str, tuple[str, ...]] = {}
    if ws is None:
        return out
    for lock in (new, old):
        for src in lock.sources.values():
            for patch in src.patches:
                if patch.path in out or not (ws.root / patch.path).is_file():
                    continue
                try:
                    out[patch.path] = tuple(sorted({f.path for f in parse_patch_file(ws.root / patch.path,
                                                                                     label=patch.path).files}))
                except (EnvlockError, OSError):
                    continue
    return out


# -- from the sources' git mirrors ---------------------------------------------------


def _histories(store: Store, old: Lock, new: Lock, patch_files: Mapping[str, tuple[str, ...]],
               options: ReportOptions) -> tuple[dict[str, SourceHistory], dict[str, Path], list[str]]:
    """Each git source whose commit moved -> its history; the mirrors holding both commits; notes."""
    histories, mirrors, notes = {}, {}, []
    for name in sorted(set(old.sources) & set(new.sources)):
        sa, sb = old.sources[name], new.sources[name]
        if sa.commit is None or sb.commit is None or sa.commit == sb.commit:
            continue
        url = sb.location
        paths = tuple(sorted({f for p in (*sa.patches, *sb.patches) for f in patch_files.get(p.path, ())}))
        if not (COMMIT_ID.fullmatch(sa.commit) and COMMIT_ID.fullmatch(sb.commit)):
            # A lock from a pull request may hold anything: git reads no "--output=FILE" as a commit.
            odd = next(c for c in (sa.commit, sb.commit) if not COMMIT_ID.fullmatch(c))
            histories[name] = SourceHistory("unknown", paths=paths, missing=f"{odd!r} is not a full 40-hex commit; "
                                            "the history is not read")
            continue
        mirror = sources.existing_mirror(store, url)
        if options.fetch and not (mirror is not None and _holds_range(mirror, sa.commit, sb.commit)):
            try:
                mirror = sources.fetch_history(store, url, fetch_from=(options.fetch_from or {}).get(name))
            except EnvlockError as exc:
                notes.append(f"source {name}: could not fetch the history of {url}: {exc.message}")
        history = _history(mirror, url, sa.commit, sb.commit, paths, options.fetch_hint)
        histories[name] = history
        if mirror is not None and _has(mirror, sa.commit) and _has(mirror, sb.commit):
            mirrors[name] = mirror  # both trees, with or without the history between them
    return histories, mirrors, notes


def _has(mirror: Path, commit: str) -> bool:
    return runner.git(["--git-dir", mirror, "cat-file", "-e", f"{commit}^{{commit}}"]).ok


def _is_ancestor(mirror: Path, a: str, b: str) -> bool:
    return runner.git(["--git-dir", mirror, "merge-base", "--is-ancestor", a, b]).ok


def _holds_range(mirror: Path, a: str, b: str) -> bool:
    return _has(mirror, a) and _has(mirror, b) and (_is_ancestor(mirror, a, b) or _is_ancestor(mirror, b, a)
                                                   or not (mirror / "shallow").exists())


def _history(mirror: Path | None, url: str, a: str, b: str, paths: tuple[str, ...], hint: str) -> SourceHistory:
    """What the store's mirror of ``url`` says of the move from commit ``a`` to ``b``."""
    if mirror is None:
        return SourceHistory("unknown", paths=paths,
                             missing=f"the store has no git mirror of {url}, so no history; {hint}")
    lacking = [c[:12] for c in (a, b) if not _has(mirror, c)]
    if lacking:
        return SourceHistory("unknown", paths=paths, missing=f"the store's mirror of {url} lacks commit "
                             f"{' and '.join(lacking)}; {hint}")
    if _is_ancestor(mirror, a, b):
        direction, span = "forward", f"{a}..{b}"
    elif _is_ancestor(mirror, b, a):
        direction, span = "backward", f"{b}..{a}"
    elif (mirror / "shallow").exists():
        return SourceHistory("unknown", paths=paths, missing=f"the store's mirror of {url} holds the two commits "
                             f"but not the history between them (it fetches pinned commits only); {hint}")
    else:
        direction, span = "diverged", f"{a}..{b}"
    commits = _log(mirror, span, ())
    touching = _log(mirror, span, paths) if paths else ()
    return SourceHistory(direction, len(commits), commits[-1] if commits else None, commits[0] if commits else None,
                         touching, paths)


def _log(mirror: Path, span: str, paths: Sequence[str]) -> tuple[Commit, ...]:
    """The commits of ``span`` (touching ``paths``, if any), newest first."""
    args: list[str | Path] = ["--git-dir", mirror, "log", "--format=%H%x00%cs%x00%s", span]
    if paths:
        args += ["--", *paths]
    result = runner.git(args)
    if not result.ok:
        return ()
    commits = []
    for line in result.stdout.splitlines():
        sha, date, subject = [*line.split("\0"), "", ""][:3]
        commits.append(Commit(sha, date, subject))
    return tuple(commits)


def _subdirs_moved(builds: Mapping[str, BuildFacts], old: Lock, new: Lock,
                   mirrors: Mapping[str, Path]) -> dict[str, bool]:
    """Each build whose git source moved (its history read) -> whether its subdirectory differs."""
    out = {}
    for name, facts in builds.items():
        mirror = mirrors.get(facts.source)
        if mirror is None:
            continue
        a, b = old.sources[facts.source].commit, new.sources[facts.source].commit
        args: list[str | Path] = ["--git-dir", mirror, "diff", "--quiet", str(a), str(b)]
        if facts.subdirectory:
            args += ["--", facts.subdirectory]
        result = runner.git(args)
        if result.returncode in (0, 1):
            out[name] = result.returncode == 1
    return out


def _source_requires(builds: Mapping[str, BuildFacts], old: Lock, new: Lock,
                     mirrors: Mapping[str, Path]) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Each build whose git source moved -> its project's ``[project].dependencies`` at both commits."""
    out = {}
    for name, facts in builds.items():
        mirror = mirrors.get(facts.source)
        if mirror is None:
            continue
        sides = [_dependencies(_pyproject(mirror, str(lock.sources[facts.source].commit), facts.subdirectory))
                 for lock in (old, new)]
        if sides[0] is not None and sides[1] is not None:
            out[name] = (sides[0], sides[1])
    return out


def _build_systems(builds: Mapping[str, BuildFacts], old: Lock, new: Lock,
                   mirrors: Mapping[str, Path]) -> dict[str, tuple[BuildSystem, BuildSystem]]:
    """Each build whose git source moved -> its project's build system at both commits (any build, isolated
    or not: requires, backend, the paths outside its subdirectory it names)."""
    out = {}
    for name, facts in builds.items():
        if (mirror := mirrors.get(facts.source)) is None:
            continue
        a, b = (_pyproject(mirror, str(lock.sources[facts.source].commit), facts.subdirectory) for lock in (old, new))
        if a is not None and b is not None:
            out[name] = (BuildSystem.of(a), BuildSystem.of(b))
    return out


def _cmake_files(mirror: Path, commit: str, subdirectory: str) -> dict[str, str]:
    """The CMake files ``cmakefetch`` reads of the project in ``subdirectory`` at ``commit``, by relative path."""
    prefix = f"{subdirectory.strip('/')}/" if subdirectory.strip("/") else ""
    listed = runner.git(["--git-dir", mirror, "ls-tree", "-r", "--name-only", commit, "--",
                         f"{prefix}CMakeLists.txt", f"{prefix}cmake"])
    out = {}
    for path in listed.stdout.splitlines() if listed.ok else ():
        rel = path.removeprefix(prefix)
        if cmakefetch.is_project_file(rel) and (shown := runner.git(["--git-dir", mirror, "show",
                                                                     f"{commit}:{path}"])).ok:
            out[rel] = shown.stdout
    return out


def dropped_inputs(spec: EnvSpec, moves: Mapping[str, tuple[str, str]], old: Lock, store: Store) -> list[str]:
    """The notes of ``_dropped_inputs`` for the builds of ``spec`` whose git source moved (source -> its old and
    new commit), read from the store's mirrors as they are (an upgrade that stopped before its report)."""
    builds = _spec_context(spec, spec).builds
    mirrors = {name: m for name in moves if (src := spec.sources.get(name)) is not None and src.git is not None
               and (m := sources.existing_mirror(store, src.git)) is not None}
    return _dropped_inputs(builds, moves, mirrors, old, store)


def _dropped_inputs(builds: Mapping[str, BuildFacts], commits: Mapping[str, tuple[str, str]],
                    mirrors: Mapping[str, Path], old: Lock, store: Store) -> list[str]:
    """A note for each FetchContent input of the spec that the build's CMake files declared at the old commit
    of its source (``commits``: source -> old and new commit) and no longer do at the new one (still fetched,
    in the input digest and in the lock), and for each the project declares at neither that came with one of
    those (as mscclpp's ``json``)."""
    notes = []
    for name, facts in sorted(builds.items()):
        if (mirror := mirrors.get(facts.source)) is None or not facts.fetchcontent or facts.source not in commits:
            continue
        a, b = commits[facts.source]
        if not (COMMIT_ID.fullmatch(a) and COMMIT_ID.fullmatch(b)):  # git reads no "--output=FILE" as a commit
            continue
        was, now = ({d.name.lower() for d in cmakefetch.declared_in(_cmake_files(mirror, c, facts.subdirectory))}
                    for c in (a, b))
        if not was:
            continue  # no CMake files, or not read: nothing to tell
        where = f"{facts.subdirectory.strip('/')}/" if facts.subdirectory.strip("/") else "the source"
        key = f"builds.{name}.fetchcontent"
        gone = [dep for dep in facts.fetchcontent if dep.lower() in was and dep.lower() not in now]
        for dep in gone:
            notes.append(f"{key}.{dep}: the CMake files of {where} no longer declare it at {b[:12]} (they did at "
                         f"{a[:12]}): it is still fetched, in the input digest and in the lock; drop it from [{key}]")
        for dep in (d for d in facts.fetchcontent if gone and d.lower() not in was | now):
            by = _declared_by(dep, gone, old, store)
            came = f"declared by {by}'s CMake files, which went" if by else \
                f"declared by no CMake file of {where} at either commit: an input of {' or '.join(gone)}, which went?"
            notes.append(f"{key}.{dep}: {came}; if so, drop it too")
    return notes


def _declared_by(dep: str, inputs: Sequence[str], old: Lock, store: Store) -> str | None:
    """Which of ``inputs`` (by their old pins, in the store) declares FetchContent input ``dep`` itself."""
    for pins in old.fetchcontent.values():
        for name in inputs:
            pin = pins.get(name)
            key = f"git-{pin.commit}" if pin is not None and pin.commit else \
                f"archive-{pin.sha256}" if pin is not None and pin.sha256 else None
            tree = store.path("sources", key) / "tree" if key else None
            if tree is not None and tree.is_dir() and any(d.name.lower() == dep.lower()
                                                          for d in cmakefetch.declared(tree)):
                return name
    return None


def _pyproject(mirror: Path, commit: str, subdirectory: str) -> Mapping[str, Any] | None:
    """The project's ``pyproject.toml`` at ``commit`` (None: none there, or it does not read)."""
    rel = f"{subdirectory.strip('/')}/pyproject.toml" if subdirectory else "pyproject.toml"
    shown = runner.git(["--git-dir", mirror, "show", f"{commit}:{rel}"])
    if not shown.ok:
        return None
    try:
        return tomllib.loads(shown.stdout)
    except tomllib.TOMLDecodeError:
        return None


def _names(lines: object) -> dict[str, str] | None:
    """Requirement lines -> name: line (None: not a list of requirements)."""
    if not isinstance(lines, list) or not all(isinstance(r, str) for r in lines):
        return None
    try:
        return {str(canonicalize_name(Requirement(r).name)): r for r in lines}
    except InvalidRequirement:
        return None


def _dependencies(doc: Mapping[str, Any] | None) -> dict[str, str] | None:
    project = doc.get("project") if doc is not None else None
    return _names(project.get("dependencies", [])) if isinstance(project, dict) else None


def _build_roots(ws: Workspace | None, builds: Mapping[str, BuildFacts], old: Lock, new: Lock,
                 store: Store) -> dict[str, set[str]]:
    """Each non-isolated build -> what its build venv is made from, as ``build.plan`` takes it: the
    spec's ``requires`` and the project's ``[build-system].requires`` (sgl-kernel names torch there),
    read at each lock's commit from the store's mirror, or from a path source in the workspace."""
    out = {}
    for name, facts in builds.items():
        if facts.isolation:
            continue
        names = set(facts.requires)
        for lock in (old, new):
            # The packages a build of this lock read, as its recipe in the store records them.
            recipe = _recipe(store, lock, name)
            env = recipe.get("build-env") if recipe is not None else None
            lines = env.get("env-packages") if isinstance(env, dict) else None
            names |= {str(canonicalize_name(line.partition("==")[0])) for line in lines or ()
                      if isinstance(line, str)}
            doc = _project_of(ws, store, facts, lock)
            system = doc.get("build-system") if doc is not None else None
            if isinstance(system, dict):
                names |= set(_names(system.get("requires", [])) or {})
        out[name] = names
    return out


def _recipe(store: Store, lock: Lock, name: str) -> Mapping[str, Any] | None:
    """The recipe of ``lock``'s build ``name`` as the store keeps it with the built wheel (None: not there)."""
    built = lock.builds.get(name)
    key = built.input_digest.removeprefix("sha256:") if built is not None else ""
    if not SHA256_HEX.fullmatch(key):  # a lock from elsewhere names no path in the store
        return None
    try:
        doc = json.loads((store.path("builds", key) / "recipe.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _project_of(ws: Workspace | None, store: Store, facts: BuildFacts, lock: Lock) -> Mapping[str, Any] | None:
    src = lock.sources.get(facts.source)
    if src is None:
        return None
    if src.kind == "git":
        if src.commit is None or not COMMIT_ID.fullmatch(src.commit):
            return None
        mirror = sources.existing_mirror(store, src.location)
        return _pyproject(mirror, src.commit, facts.subdirectory) if mirror and _has(mirror, src.commit) else None
    path = ws.root / src.location / facts.subdirectory / "pyproject.toml" if ws is not None else None
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")) if path is not None and path.is_file() else None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None


# -- from wheel metadata in the store ------------------------------------------------


def _requires(lock: Lock, store: Store) -> dict[str, set[str]]:
    """Each package whose wheel the store holds -> the names its metadata requires for the lock's target."""
    environment = target_environment(lock.python, lock.platform)
    out = {}
    for pkg in lock.packages:
        try:
            path = store_file(store, pkg.wheels[0])
            if not path.is_file():
                continue
            reqs = requires_dist(path)
        except (EnvlockError, ValueError, OSError):
            continue
        out[str(pkg.name)] = {str(canonicalize_name(r.name)) for r in reqs
                              if r.marker is None or r.marker.evaluate({**environment, "extra": ""})}
    return out


def _required_by(lock: Lock, store: Store) -> dict[str, tuple[str, ...]]:
    found: dict[str, set[str]] = {}
    for pkg, names in _requires(lock, store).items():
        for name in names:
            found.setdefault(name, set()).add(pkg)
    return {name: tuple(sorted(by)) for name, by in found.items()}


def _closures(roots: Mapping[str, set[str]], old: Lock, new: Lock, store: Store) -> dict[str, frozenset[str]]:
    """Each non-isolated build (``roots``: what its build venv is made from) -> the locked packages it
    may hold: those and what they require, as far as the store holds the wheels (either lock's)."""
    if not roots:
        return {}
    edges = _requires(old, store)
    for pkg, names in _requires(new, store).items():
        edges.setdefault(pkg, set()).update(names)
    return {name: frozenset(reach(names, edges)) - {str(canonicalize_name(name))} for name, names in roots.items()}

