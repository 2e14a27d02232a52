"""The upgrade report of two locks, on top of their change ledger (``model.lockchanges``): nightly
moves by index, source moves with their history, the local builds that rebuild (and the input that
moved) or do not, each package change with why, and the download size before and after.

Pure: takes two ``Lock`` values and a ``DiffContext`` (what the recipe, ``commands.upgradereport``,
read from the spec, the store and the sources' git mirrors), reads no files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from envlock.model.buildsystem import BuildSystem
from envlock.model.jsondoc import json_doc
from envlock.model.lockchanges import Change, line_changes, lock_changes, requirement_changes, requirements
from envlock.model.lockfile import Lock, LockedPackage, canonicalize_name

#: The version of the document ``envlock diff --json`` prints (docs/diff.md): raised when a key
#: changes meaning or goes away (new keys do not raise it).
REPORT_FORMAT = 1


# -- what the recipe reads and hands in ----------------------------------------


@dataclass(frozen=True)
class Commit:
    """A git commit as the report shows it: its full id, committer date and subject."""

    sha: str  # full 40-hex
    date: str  # committer date, YYYY-MM-DD
    subject: str

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class SourceHistory:
    """What git says of a source's move between two commits (read by the recipe from the store's mirror)."""

    # "forward": the old commit is an ancestor of the new; "backward": the other way round;
    # "diverged": neither (count: commits in the new one's history only); "unknown": the mirror
    # lacks the history (``missing`` says why and how to fetch it).
    direction: str
    count: int = 0
    first: Commit | None = None  # the oldest commit of the range
    last: Commit | None = None  # the newest
    touching: tuple[Commit, ...] = ()  # those touching a file the source's patches touch, newest first
    paths: tuple[str, ...] = ()  # the files the patches touch
    missing: str = ""

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"touching": "touching_patched_files", "paths": "patched_files"},
                        extra={"count": self.count if self.direction != "unknown" else None})


@dataclass(frozen=True)
class BuildFacts:
    """What a spec's ``[builds.NAME]`` says that the lock does not record (only the table's digest)."""

    source: str
    subdirectory: str = ""
    isolation: bool = True
    requires: tuple[str, ...] = ()  # the names of its ``requires``
    toolchain: tuple[str, ...] = ()  # its ``toolchain`` requirements
    fetchcontent: tuple[str, ...] = ()  # the names of its FetchContent inputs


@dataclass(frozen=True)
class DiffContext:
    """What the recipe (``commands.upgradereport``) found beside the two locks; every field may stay empty, and
    the report then says less (never something false)."""

    index_names: Mapping[str, str] = field(default_factory=dict)  # index URL (no trailing /) -> spec name
    nightly_order: tuple[str, ...] = ()  # nightly-pinned packages, in the spec's order
    builds: Mapping[str, BuildFacts] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict)  # package -> its override requirement
    excludes: frozenset[str] = frozenset()
    histories: Mapping[str, SourceHistory] = field(default_factory=dict)  # git source -> its move
    subdir_moved: Mapping[str, bool] = field(default_factory=dict)  # build -> its subdirectory differs
    patch_files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # patch path -> files it touches
    # Non-isolated build -> the locked packages its build venv holds (the closure of its requires).
    closures: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Package -> the packages whose wheel metadata requires it, in the old and the new lock.
    required_by_old: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    required_by_new: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Build -> its project's own dependencies (name -> requirement) at the old and the new source.
    source_requires: Mapping[str, tuple[Mapping[str, str], Mapping[str, str]]] = field(default_factory=dict)
    recipe_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # build -> its keys that changed
    # Build -> its ``toolchain`` requirements in the old and the new spec, when they differ (the lock
    # records the locked wheels only once the build ran).
    toolchains: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    # Build -> the recipe each lock's build was made from, as the store keeps it (builds/<key>/recipe.json;
    # None: not in the store): it names what the lock does not record (the toolchain, the interpreter).
    recipes: Mapping[str, tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]] = field(default_factory=dict)
    # Build -> its project's build system (backend, requires, paths outside its folder) at the old and the
    # new commit of its git source (read from the store's mirror, for a source that moved).
    build_systems: Mapping[str, tuple[BuildSystem, BuildSystem]] = field(default_factory=dict)
    # Build -> the toolchain lines a relock resolved for it, when the new lock does not record its
    # build yet (``commands.lock.LockResult.planned_toolchains``): a loose pin that moved with no spec edit.
    planned_toolchains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


# -- the report ------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """One named thing from ``old`` to ``new`` (None: not there)."""

    name: str
    old: str | None
    new: str | None

    def text(self) -> str:
        if self.old is None:
            return f"{self.name} {self.new} (added)"
        if self.new is None:
            return f"{self.name} {self.old} (removed)"
        return f"{self.name} {self.old} -> {self.new}"

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class NightlyMove:
    """The nightly pins of one index that move from one date to another, and what else of that index moved."""

    index: str  # the spec's name for it, else its URL
    old_date: str | None
    new_date: str | None
    pins: tuple[Move, ...]  # name, old version, new version
    others: tuple[Move, ...] = ()  # the index's other packages that changed (pytorch-triton)

    def line(self) -> str:
        names = [p.name for p in self.pins] + [o.text() for o in self.others]
        return f"{self.index} {self.old_date or '(none)'} -> {self.new_date or '(none)'}: {', '.join(names)}"

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class SourceMove:
    """A source whose pin (commit or tree digest) or patches moved between the locks; its git history if it did."""

    name: str
    old: str | None  # commit or tree digest; None: added
    new: str | None  # None: removed
    patches: tuple[Move, ...] = ()  # by path: old and new sha256
    history: SourceHistory | None = None  # a git source whose commit moved

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class BuildInput:
    """An input of a local build that moved."""

    # "source", "patch", "package", "build-requirement", "recipe", "env", "toolchain", "unrecorded" (name
    # "unrecorded": what the lock does not record moved; "unknown": no spec read, so the cause is not known),
    # "build-system" (name: "build-backend", "requires" or "reads")
    kind: str
    name: str
    old: str | None = None
    new: str | None = None
    note: str = ""

    def text(self) -> str:
        if self.kind == "unrecorded":
            return self.note
        if self.kind == "build-system":
            return self._system_text()
        if self.kind == "recipe":
            moved = self.name
        elif self.kind == "toolchain":
            moved = f"toolchain {self.name}: {self.old or 'absent'} -> {self.new or 'absent'}"
        elif self.kind == "patch":
            moved = f"patch {self.name} " + ("added" if self.old is None else "removed" if self.new is None
                                             else "changed")
        else:
            what = {"source": "source ", "build-requirement": "build requirement "}.get(self.kind, "")
            moved = what + Move(self.name, _short(self.old), _short(self.new)).text()
        return f"{moved} ({self.note})" if self.note else moved

    def _system_text(self) -> str:
        if self.name == "reads":
            return f"its pyproject.toml now reads {self.new}, {self.note}"
        if self.name == "requires":
            moved = f"+ {self.new}" if self.old is None else f"- {self.old}" if self.new is None else \
                f"{self.old} -> {self.new}"
            return f"[build-system] requires {moved}"
        return f"build-backend {self.old} -> {self.new}"

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, extra={"text": self.text()})


PENDING = "pending: not built for this lock yet"


@dataclass(frozen=True)
class BuildVerdict:
    """Whether a local build rebuilds for the new lock, and which of its inputs moved."""

    name: str
    action: str  # "added", "removed", "changed" (its inputs), "unchanged"
    rebuild: bool
    pending: bool  # the new lock records no build of it yet
    old_digest: str | None
    new_digest: str | None
    inputs: tuple[BuildInput, ...] = ()
    # A build upstream renamed (the same source and subdirectory under another name): removed, the name
    # it goes on as; added, the name it had.
    renamed: str | None = None

    def text(self) -> str:
        if self.action == "removed":
            if self.renamed is not None:
                return f"{self.name}: renamed {self.renamed} (the same source and subdirectory; no longer built as " \
                       f"{self.name})"
            return f"{self.name}: removed (no longer built)"
        if not self.rebuild:
            return f"{self.name}: inputs unchanged" + ("; not built for either lock yet" if self.pending else "")
        why = [i.text() for i in self.inputs]
        if self.action == "added":
            why.insert(0, f"renamed from {self.renamed}" if self.renamed is not None else "new build")
        if self.pending:
            why.append(PENDING)
        return f"{self.name}: {'; '.join(why) or 'inputs changed'}"

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"old_digest": "old_input_digest", "new_digest": "new_input_digest"})


@dataclass(frozen=True)
class PackageChange:
    """A package added, removed, changed or pending a build between the locks: versions, why, download sizes."""

    name: str
    action: str  # "added", "removed", "changed", "pending"
    old: str | None  # version
    new: str | None
    why: tuple[str, ...] = ()
    old_size: int | None = None  # bytes of the wheel a sync downloads; None: unknown or absent
    new_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)


@dataclass(frozen=True)
class DownloadSize:
    """The bytes a sync downloads for a lock: the sum of its wheels' recorded sizes."""

    known: int
    unknown: tuple[str, ...] = ()  # packages whose size the lock does not record (or not built yet)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"known": "bytes"})


@dataclass(frozen=True)
class LockDiff:
    """The report of two locks (``diff_locks``, ``envlock diff --json``): the ledger, the moves, the download sizes."""

    old: str
    new: str
    changes: tuple[Change, ...]
    unchanged: int  # packages identical in both
    nightlies: tuple[NightlyMove, ...] = ()
    sources: tuple[SourceMove, ...] = ()
    builds: tuple[BuildVerdict, ...] = ()
    packages: tuple[PackageChange, ...] = ()
    old_size: DownloadSize = DownloadSize(0)
    new_size: DownloadSize = DownloadSize(0)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"unchanged": "unchanged_packages"}, omit=("old_size", "new_size"),
                        extra={"format": REPORT_FORMAT, "download": {"old": self.old_size, "new": self.new_size}})


def diff_locks(old: Lock, new: Lock, *, old_label: str, new_label: str,
               context: DiffContext | None = None) -> LockDiff:
    """Every difference that changes what gets installed or built (``changes``), and the report on
    it, reasoned from the two locks and what ``context`` holds."""
    ctx = context or DiffContext()
    changes = lock_changes(old, new)
    moved = _moved_packages(old, new)
    return LockDiff(
        old=old_label, new=new_label, changes=tuple(changes),
        unchanged=sum(1 for p in new.packages if p.name not in moved),
        nightlies=_nightly_moves(old, new, ctx, moved), sources=_source_moves(old, new, ctx),
        builds=_build_verdicts(old, new, ctx, moved), packages=_package_changes(old, new, changes, ctx, moved),
        old_size=_download(old), new_size=_download(new),
    )


# -- the report's reasoning ---------------------------------------------------------


def _same(a: LockedPackage | None, b: LockedPackage) -> bool:
    return (a is not None and a.version == b.version and a.index == b.index
            and {w.sha256 for w in a.wheels} == {w.sha256 for w in b.wheels})


def _short(value: str | None) -> str | None:
    """A commit or digest as people read it (12 hex), a version as it is."""
    if value is None:
        return None
    bare = value.removeprefix("sha256:")
    if len(bare) in (40, 64) and all(c in "0123456789abcdef" for c in bare):
        return bare[:12]
    return value


def _moved_packages(old: Lock, new: Lock) -> dict[str, Move]:
    """Every package whose version or wheels differ, added or removed: name -> its move."""
    was, now = {p.name: p for p in old.packages}, {p.name: p for p in new.packages}
    out = {}
    for name in sorted(set(was) | set(now)):
        a, b = was.get(name), now.get(name)
        if b is not None and _same(a, b):
            continue
        out[str(name)] = Move(str(name), a.version if a else None, b.version if b else None)
    return out


def _index_label(ctx: DiffContext, url: str | None) -> str:
    bare = (url or "").rstrip("/")
    return ctx.index_names.get(bare, bare or "(no index)")


def _nightly_moves(old: Lock, new: Lock, ctx: DiffContext, packages: Mapping[str, Move]) -> tuple[NightlyMove, ...]:
    """One line per index (and date pair): its nightly pins that move, and its other packages that changed."""
    order = {name: i for i, name in enumerate(ctx.nightly_order)}
    moved = sorted((n for n in set(old.nightlies) | set(new.nightlies) if old.nightlies.get(n) != new.nightlies.get(n)),
                   key=lambda n: (order.get(n, len(order)), n))
    groups: dict[tuple[str, str | None, str | None], list[Move]] = {}
    urls: dict[str, str] = {}
    for name in moved:
        pkg = new.package(name) or old.package(name)
        label = _index_label(ctx, pkg.index if pkg else None)
        urls.setdefault(label, (pkg.index or "").rstrip("/") if pkg else "")
        na, nb = old.nightlies.get(name), new.nightlies.get(name)
        groups.setdefault((label, na.date if na else None, nb.date if nb else None), []).append(
            Move(name, na.version if na else None, nb.version if nb else None))
    pinned = set(old.nightlies) | set(new.nightlies)
    out, told = [], set()
    for (label, was, now), pins in groups.items():
        others: tuple[Move, ...] = ()
        if label not in told and urls[label]:  # an index's other packages, said once
            told.add(label)
            others = tuple(m for name, m in packages.items() if name not in pinned and urls[label] in (
                _index_url(old, name), _index_url(new, name)))
        out.append(NightlyMove(label, was, now, tuple(pins), others))
    return tuple(out)


def _index_url(lock: Lock, name: str) -> str | None:
    pkg = lock.package(name)
    return (pkg.index or "").rstrip("/") if pkg is not None and pkg.index else None


def _source_moves(old: Lock, new: Lock, ctx: DiffContext) -> tuple[SourceMove, ...]:
    out = []
    for name in sorted(set(old.sources) | set(new.sources)):
        sa, sb = old.sources.get(name), new.sources.get(name)
        pin_a = (sa.commit or sa.tree_digest) if sa else None
        pin_b = (sb.commit or sb.tree_digest) if sb else None
        pa = {p.path: p.sha256 for p in sa.patches} if sa else {}
        pb = {p.path: p.sha256 for p in sb.patches} if sb else {}
        patches = tuple(Move(path, pa.get(path), pb.get(path)) for path in sorted(set(pa) | set(pb))
                        if pa.get(path) != pb.get(path))
        if pin_a != pin_b or patches:
            out.append(SourceMove(name, pin_a, pin_b, patches, ctx.histories.get(name) if pin_a != pin_b else None))
    return tuple(out)


def renamed_builds(old: Lock, new: Lock, ctx: DiffContext) -> dict[str, str]:
    """Each build of the old lock's spec that the new one no longer has -> the one it has instead from the
    same source and subdirectory (a project upstream renamed: ``sgl-kernel`` -> ``sglang-kernel``)."""
    was, now = {*old.builds, *old.unbuilt()}, {*new.builds, *new.unbuilt()}
    out = {}
    for gone in sorted(was - now):
        a = ctx.builds.get(gone)
        same = [n for n in sorted(now - was) if a is not None and (b := ctx.builds.get(n)) is not None
                and (b.source, b.subdirectory.strip("/")) == (a.source, a.subdirectory.strip("/"))]
        if len(same) == 1:
            out[gone] = same[0]
    return out


def _build_verdicts(old: Lock, new: Lock, ctx: DiffContext, moved: Mapping[str, Move]) -> tuple[BuildVerdict, ...]:
    """Every local build of either lock (built, or declared by its spec): whether it rebuilds for the new
    one, and why."""
    pending, old_pending = set(new.unbuilt()), set(old.unbuilt())
    renamed = renamed_builds(old, new, ctx)
    out = []
    for name in sorted(set(old.builds) | set(new.builds) | pending | old_pending):
        ba, bb = old.builds.get(name), new.builds.get(name)
        if bb is None and name not in pending:
            out.append(BuildVerdict(name, "removed", False, False, ba.input_digest if ba else None, None,
                                    renamed=renamed.get(name)))
            continue
        inputs = _build_inputs(name, old, new, ctx, moved)
        unrecorded = BuildInput("unrecorded", "unrecorded", note="an input the lock does not record moved (the "
                                "toolchain: compilers, cmake, nvcc, uv; the interpreter or the host)")
        if ba is not None and bb is not None:
            rebuild = ba.input_digest != bb.input_digest
            if rebuild and not inputs and name not in ctx.builds:
                # No spec was read (two lock paths outside a workspace): the build's source, patches and
                # recipe are not known, so nothing can be ruled out; never a guess.
                inputs = (BuildInput("unrecorded", "unknown", note="cannot tell why: its source, patches and "
                                     "recipe are named by the env's spec, which this diff did not read (run it in "
                                     "the env's workspace, or with --root)"),)
            elif rebuild and not inputs:  # the digest covers what the lock does not record
                inputs = (unrecorded,)
            elif not rebuild:
                inputs = ()
        elif ba is None and bb is None and name in old_pending and not inputs:
            rebuild = False  # built for neither lock, and nothing it reads moved: this move rebuilds nothing
        else:
            rebuild = True
            if ba is not None and not inputs and name in ctx.builds:  # kept no record, though nothing shown moved
                inputs = (unrecorded,)
        # Declared in the old lock's spec too but never built there: not a new build.
        action = ("added" if ba is None and name not in old_pending else "changed" if rebuild else "unchanged")
        out.append(BuildVerdict(name, action, rebuild, bb is None, ba.input_digest if ba else None,
                                bb.input_digest if bb else None, inputs,
                                renamed=next((a for a, b in renamed.items() if b == name), None)))
    return tuple(out)


def _build_inputs(name: str, old: Lock, new: Lock, ctx: DiffContext,
                  moved: Mapping[str, Move]) -> tuple[BuildInput, ...]:
    """The inputs of build ``name`` the two locks (and the context) show moving."""
    found = [BuildInput("env", key, a, b) for key, a, b in (("python", old.python, new.python),
                                                            ("platform", old.platform, new.platform)) if a != b]
    key = f"builds.{name}"
    if key in old.spec_keys and key in new.spec_keys and old.spec_keys[key] != new.spec_keys[key]:
        keys = ctx.recipe_keys.get(name, ())
        found.append(BuildInput("recipe", f"the recipe [builds.{name}]" + (f": {', '.join(keys)}" if keys else ""),
                                old.spec_keys[key], new.spec_keys[key]))
    facts = ctx.builds.get(name)
    if facts is not None:
        sa, sb = old.sources.get(facts.source), new.sources.get(facts.source)
        pin_a = (sa.commit or sa.tree_digest) if sa else None
        pin_b = (sb.commit or sb.tree_digest) if sb else None
        if sa is not None and sb is not None and pin_a != pin_b:
            subdir = ctx.subdir_moved.get(name)
            where = f"{facts.subdirectory.rstrip('/')}/" if facts.subdirectory else "the tree"
            note = ("" if subdir is None else f"{where} changed" if subdir
                    else f"{where} unchanged; its commit time moved (SOURCE_DATE_EPOCH)")
            found.append(BuildInput("source", facts.source, pin_a, pin_b, note if sa.commit else ""))
        pa = {p.path: p.sha256 for p in sa.patches} if sa else {}
        pb = {p.path: p.sha256 for p in sb.patches} if sb else {}
        for path in sorted(set(pa) | set(pb)):
            files = ctx.patch_files.get(path)
            prefix = facts.subdirectory.rstrip("/") + "/" if facts.subdirectory else ""
            if pa.get(path) != pb.get(path) and (files is None or any(f.startswith(prefix) for f in files)):
                found.append(BuildInput("patch", path, pa.get(path), pb.get(path)))
        if not facts.isolation:
            closure = ctx.closures.get(name, frozenset(canonicalize_name(r) for r in facts.requires))
            found += [BuildInput("package", n, m.old, m.new) for n, m in moved.items() if n in closure]
    ba, bb = old.builds.get(name), new.builds.get(name)
    if ba is not None and bb is not None:
        found += [BuildInput(c.kind, c.name, c.old, c.new) for c in requirement_changes(name, ba, bb)]
    elif ba is not None and (planned := ctx.planned_toolchains.get(name)) is not None:  # as the relock resolved it
        found += [BuildInput("toolchain", c.name, c.old, c.new, c.note or "resolved now")
                  for c in line_changes("toolchain", ba.toolchain, planned)]
    elif ba is not None and facts is not None:  # not built for the new lock yet: its spec says what it will take
        found += _toolchain_against_spec(ba.toolchain, facts.toolchain)
    elif (spec_moves := ctx.toolchains.get(name)) is not None:  # built for neither: the specs say
        found += [BuildInput("toolchain", c.name, c.old, c.new, "the spec") for c in line_changes("toolchain",
                                                                                                   *spec_moves)]
    ra, rb = ctx.recipes.get(name, (None, None))
    if ra is not None and rb is not None:
        found += _toolchain_moves(ra, rb)
    if (systems := ctx.build_systems.get(name)) is not None and facts is not None:
        where = f"outside {facts.subdirectory.rstrip('/')}/" if facts.subdirectory else "outside the source tree"
        found += [BuildInput("build-system", kind, a, b, f"{where} (the build sees the whole tree, and its source "
                             "digest covers what it reads)" if kind == "reads" else "")
                  for kind, a, b in systems[0].changes(systems[1])]
    return tuple(found)


def _toolchain_against_spec(locked: Sequence[str], wanted: Sequence[str]) -> list[BuildInput]:
    """Each toolchain wheel of ``locked`` lines that the spec's ``wanted`` requirements no longer take
    (another version, or none), and each they add: a build not yet run for the new lock will move them."""
    have = requirements(locked)
    out: list[BuildInput] = []
    named = set()
    for text in wanted:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        named.add(name)
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        want = pins[0] if len(pins) == 1 else str(req.specifier) or "any version"
        if name not in have:
            out.append(BuildInput("toolchain", name, None, want, "the spec"))
        elif not req.specifier.contains(have[name][0], prereleases=True):
            out.append(BuildInput("toolchain", name, have[name][0], want, "the spec"))
    out += [BuildInput("toolchain", name, have[name][0], None, "the spec") for name in sorted(set(have) - named)]
    return out


def _toolchain_moves(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[BuildInput]:
    """What two build recipes (``build.builder.plan``'s) say moved that no lock records: the interpreter, the
    host and each tool's version line."""
    found = [BuildInput("toolchain", key, str(a.get(key)), str(b.get(key)))
             for key in ("python", "host", "machine") if a.get(key) != b.get(key)]
    ta, tb = a.get("toolchain"), b.get("toolchain")
    ta, tb = (ta if isinstance(ta, dict) else {}), (tb if isinstance(tb, dict) else {})
    found += [BuildInput("toolchain", tool, ta.get(tool), tb.get(tool)) for tool in sorted(set(ta) | set(tb))
              if ta.get(tool) != tb.get(tool)]
    return found


def _package_changes(old: Lock, new: Lock, changes: Iterable[Change], ctx: DiffContext,
                     moved: Mapping[str, Move]) -> tuple[PackageChange, ...]:
    out = []
    for c in changes:
        if c.kind != "package":
            continue
        a, b = old.package(c.name), new.package(c.name)
        why = _why(c, old, new, ctx, moved)
        out.append(PackageChange(c.name, c.action, c.old, c.new, why, _size(a), _size(b)))
    return tuple(out)


def _why(c: Change, old: Lock, new: Lock, ctx: DiffContext, moved: Mapping[str, Move]) -> tuple[str, ...]:
    """What the locks and the context show of why package ``c`` changed."""
    name = c.name
    why = []
    na, nb = old.nightlies.get(name), new.nightlies.get(name)
    if na != nb:
        why.append(f"nightly {na.date if na else '(none)'} -> {nb.date if nb else '(none)'}")
    key = f"packages.{name}"
    ka, kb = old.spec_keys.get(key), new.spec_keys.get(key)
    if ka != kb and (ka or kb) and na == nb:
        why.append(f"{key} {'added to' if ka is None else 'removed from' if kb is None else 'edited in'} the spec")
    build = next((b for b in (*new.builds, *new.unbuilt(), *old.builds) if canonicalize_name(b) == name), None)
    renamed = renamed_builds(old, new, ctx)
    if build is not None:
        facts = ctx.builds.get(build)
        why.append(f"local build{' from source ' + facts.source if facts else ''}"
                   + ("; not built for this lock yet" if c.pending else ""))
    if (to := renamed.get(build or name)) is not None:
        why.append(f"the build is renamed {to}")
    elif (before := next((a for a, b in renamed.items() if canonicalize_name(b) == name), None)) is not None:
        why.append(f"renamed from {before}")
    if name in ctx.overrides:
        edited = old.spec_keys.get("resolution") != new.spec_keys.get("resolution")
        why.append(f"resolution.overrides: {ctx.overrides[name]}" + (" (resolution edited)" if edited else ""))
    if c.action == "removed" and name in ctx.excludes:
        why.append("resolution.exclude names it")
    for b, (was, now) in sorted(ctx.source_requires.items()):
        if name in now and name not in was:
            why.append(f"{b}'s own requirements now name it: {now[name]}")
        elif name in was and name not in now:
            why.append(f"{b}'s own requirements no longer name it (was {was[name]})")
        elif name in was and was[name] != now[name]:
            why.append(f"{b}'s own requirements: {was[name]} -> {now[name]}")
    for b, facts in sorted(ctx.builds.items()):
        key = f"builds.{b}"
        if not facts.isolation and name in facts.requires and old.spec_keys.get(key) != new.spec_keys.get(key):
            why.append(f"a build requirement of {b} ([builds.{b}] edited)")
    if c.action == "added" and (by := ctx.required_by_new.get(name)):
        why.append("required by " + ", ".join(by))
    elif c.action == "removed" and (by := tuple(p for p in ctx.required_by_old.get(name, ()) if p in moved)):
        why.append("no longer required by " + ", ".join(by))
    elif c.action == "changed" and not why and (by := tuple(p for p in ctx.required_by_new.get(name, ())
                                                        if p in moved)):
        # Only with no cause of its own: torchvision requires torch, but did not move it.
        why.append(f"required by {', '.join(by)}, which moved")
    if c.note and not c.pending:
        why.append(c.note)
    return tuple(why)


def _size(pkg: LockedPackage | None) -> int | None:
    """The bytes of the wheel a sync downloads for ``pkg`` (its first), None when not recorded."""
    return pkg.wheels[0].size if pkg is not None and pkg.wheels else None


def _download(lock: Lock) -> DownloadSize:
    sizes = {str(p.name): _size(p) for p in lock.packages}
    unknown = sorted({n for n, s in sizes.items() if s is None} | {str(canonicalize_name(n)) for n in lock.unbuilt()})
    return DownloadSize(sum(s for s in sizes.values() if s is not None), tuple(unknown))
