"""The edit/record workflow: a patched tree checked out as a git work dir, edits recorded as the next patch.

``edit`` checks the patched tree of a source out into a work dir, one git commit per patch
level, and leaves a state file in its ``.git`` naming the source, the env and the patches
(label and sha256) it was made on. ``record`` writes the work dir's changes against its top
level as the next ``NNNN-title.patch`` (or, after ``edit`` with ``EditOptions(stop_at_conflict=True)``,
rewrites the first pending patch), only while the spec's patches are still those it was made on.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envlock import runner
from envlock.errors import PatchError, UsageError
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import LockedPatch
from envlock.patches.patchfile import PatchFile, parse_patch, parse_patch_file, written_header
from envlock.patches.patchmerge import apply_partly, merge_patch
from envlock.patches.treeview import HunkFailure, TreeView
from envlock.store.store import write_atomic
from envlock.store.trees import copy_tree

_EDIT_STATE = "envlock-edit.json"


@dataclass(frozen=True)
class EditSession:
    """A work dir ``edit`` made: its patch levels, and (for a refresh) what is pending."""

    source: str
    workdir: Path
    levels: tuple[str, ...]  # patch labels, one commit each on top of "base"
    # Patches not applied because the first of them conflicts (``edit`` with ``EditOptions(stop_at_conflict=True)``):
    # redo its change by hand, then ``record(..., refresh=True)`` rewrites that file.
    pending: tuple[str, ...] = ()
    conflict: HunkFailure | None = None
    upstreamed: tuple[str, ...] = ()  # already applied at that commit: drop them from the spec
    commit: str | None = None  # the 40-hex commit checked out (a git source's)
    # The first pending patch, applied as far as it goes (uncommitted): "clean" (a 3-way merge
    # carried it whole), "conflict" (conflict markers in ``conflicted``), "partly" (no base to
    # merge on: the hunks that apply, the rest in ``rejects``).
    merge: str | None = None
    conflicted: tuple[str, ...] = ()
    rejects: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self)

    def describe_pending(self) -> list[str]:
        """How far the first pending patch got (left uncommitted in the work dir), as lines to show."""
        if self.merge == "clean":
            return ["  a 3-way merge carried it whole (uncommitted): check it"]
        lines = []
        if self.conflicted:
            lines.append(f"  applied as far as it goes; conflict markers in {', '.join(self.conflicted)}")
        if self.rejects:
            lines.append(f"  applied hunk by hunk; the hunks that do not apply are in {', '.join(self.rejects)} "
                         "(remove them once redone)")
        return lines


def _git_ok(args: Sequence[str | os.PathLike[str]], cwd: Path, what: str) -> runner.Result:
    return runner.git_checked(args, what=what, error=PatchError, cwd=cwd)


@dataclass(frozen=True)
class EditOptions:
    """How ``edit`` makes a work dir, besides from which tree and patches, and where."""

    # Refreshing patches for a new commit: apply them up to the first that does not apply; it and
    # the rest are pending (``EditSession.pending``).
    stop_at_conflict: bool = False
    env: str | None = None  # the env whose spec the work dir is made from, which ``record`` holds it to
    base: Path | None = None  # the tree the patches were recorded on: the first pending patch merges there
    label: str = "upstream"  # what the conflict markers call the tree (``<<<<<<< label``)
    commit: str | None = None  # the 40-hex commit checked out (a git source's), for ``EditSession.commit``


def edit(source: str, tree: Path, patches: Sequence[PatchFile], workdir: Path,
         options: EditOptions | None = None) -> EditSession:
    """Check the patched tree out into ``workdir``: a git repo, one commit per patch level.

    Edit files there, then ``record`` writes the difference against the top level as the
    next patch. With ``options.stop_at_conflict`` (refreshing patches for a new commit) the
    patches are applied up to the first that does not apply; it and the rest are ``pending``.
    The work dir's state names ``options.env`` and the patches it was made on (label and
    sha256), which ``record`` holds the spec's patches to.

    The first pending patch is applied as far as it goes, uncommitted: by a 3-way merge against
    ``options.base`` (the tree the patches were recorded on), with conflict markers
    (``<<<<<<< label``), or without a base hunk by hunk, the hunks that do not apply left in ``FILE.rej``.
    """
    options = options or EditOptions()
    if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        what = "is not empty" if workdir.is_dir() else "is a file"
        raise UsageError(f"{workdir}: work dir exists and {what}; expected a new or empty directory")
    view = TreeView(tree)
    conflict: HunkFailure | None = None
    applying: list[PatchFile] = []
    upstreamed: list[str] = []
    pending: Sequence[PatchFile] = ()
    made_on = [{"path": p.label, "sha256": p.sha256} for p in patches]
    made_on_patches = list(patches)
    for i, patch in enumerate(patches):
        if not options.stop_at_conflict:
            view.apply(patch)  # fails before anything is written
            applying.append(patch)
            continue
        verdict, ok, failure = view.classify(patch)
        if verdict == "already-applied":
            upstreamed.append(patch.label)  # upstream has it: nothing to redo, retire it
        elif ok is not None:
            view.changes.update(ok.changes)
            applying.append(patch)
        else:
            conflict, pending = failure, patches[i:]
            break
    patches = applying
    copy_tree(tree, workdir)
    what = f"patch edit {source}"
    _git_ok(["init", "-q"], workdir, what)
    _git_ok(["add", "-A", "-f"], workdir, what)
    _git_ok(["commit", "-q", "--allow-empty", "--no-verify", "-m", "base (unpatched)"], workdir, what)
    for patch in patches:
        view = TreeView(workdir)
        view.apply(patch)
        _commit_level(workdir, view, patch, what)
    state = {"source": source, "env": options.env, "levels": [p.label for p in patches],
             "pending": [p.label for p in pending], "made_on": made_on, "upstreamed": upstreamed, "recorded": [],
             "base": str(options.base) if options.base is not None else None, "label": options.label}
    (workdir / ".git" / _EDIT_STATE).write_text(json.dumps(state, indent=2) + "\n")
    session = EditSession(source, workdir, tuple(p.label for p in patches), tuple(p.label for p in pending), conflict,
                          tuple(upstreamed), options.commit)
    if not pending:
        return session
    before = made_on_patches[:len(made_on_patches) - len(pending)]
    return _apply_pending(session, pending[0], before, options.base, options.label)


def _apply_pending(session: EditSession, patch: PatchFile, before: Sequence[PatchFile], base: Path | None,
                   label: str) -> EditSession:
    """The first pending patch written into the work dir as far as it goes (uncommitted)."""
    how, conflicted, rejects, conflict = write_partly(session.workdir, patch, before, base, label)
    return replace(session, merge=how, conflicted=conflicted, rejects=rejects, conflict=conflict or session.conflict)


def write_partly(workdir: Path, patch: PatchFile, before: Sequence[PatchFile], base: Path | None,
                 label: str) -> tuple[str, tuple[str, ...], tuple[str, ...], HunkFailure | None]:
    """``patch`` written into ``workdir`` as far as it goes, uncommitted: merged 3-way against
    ``base`` with the patches ``before`` it (conflict markers ``<<<<<<< label`` / ``>>>>>>> patch
    NNNN``), else (no base, or the series does not apply there) hunk by hunk with ``FILE.rej``
    files. Returns how ("clean", "conflict", "partly"), the files with markers, the .rej files
    and the first conflict."""
    ours = TreeView(workdir)
    number = patch_number(Path(patch.label).name)
    theirs = f"patch {number:04d}" if number is not None else f"patch {patch.label}"
    recorded = TreeView(base) if base is not None else None
    # Only the earlier patches on the same files make its base (one refreshed since, rewritten
    # for the new commit, may no longer apply at the pin; on other files it does not matter).
    for earlier in (e for e in before if set(e.paths) & set(patch.paths)):
        applied = recorded.try_apply(earlier) if recorded is not None else None
        if applied is None or isinstance(applied, HunkFailure):  # no base, or not the series the pin builds
            recorded = None
            break
        assert recorded is not None
        recorded.changes.update(applied.changes)
    conflict: HunkFailure | None = None
    if recorded is not None and not isinstance(recorded.try_apply(patch), HunkFailure):
        merged = merge_patch(ours, recorded, patch, ours_label=label, theirs_label=theirs)
        changes, rejects = merged.changes, merged.rejects or {}
        how, conflicted = ("clean" if merged.clean else "conflict"), merged.conflicted
        conflict = merged.conflicts[0] if merged.conflicts else None
    else:
        changes, rejects = apply_partly(ours, patch)
        how, conflicted = "partly", ()
    ours.changes = changes
    ours.write(workdir)
    for path, text in rejects.items():
        (workdir / f"{path}.rej").write_bytes(text)
    return how, tuple(conflicted), tuple(f"{p}.rej" for p in rejects), conflict


def _commit_level(workdir: Path, view: TreeView, patch: PatchFile, what: str) -> None:
    """Write ``view``'s changes (``patch`` applied) into the work dir as the next patch level."""
    view.write(workdir)
    _git_ok(["add", "-A", "-f"], workdir, what)
    _git_ok(["commit", "-q", "--allow-empty", "--no-verify", "-m", f"{patch.label}\n\n{patch.subject}"],
            workdir, what)


@dataclass(frozen=True)
class RecordedPatch:
    """The patch file ``record`` wrote, and (for a refresh) where the work dir now stands."""

    source: str
    path: Path
    number: int
    files: tuple[str, ...]
    sha256: str
    pending: tuple[str, ...] = ()  # (refresh) patches still to redo by hand, first one conflicting
    upstreamed: tuple[str, ...] = ()  # (refresh) later patches the new code already has: retire them
    env: str = ""  # the env whose spec the work dir was made from (what `envlock lock ENV` then locks)
    # (refresh) how far the next pending patch got in the work dir, as ``EditSession`` says it
    merge: str | None = None
    conflicted: tuple[str, ...] = ()
    rejects: tuple[str, ...] = ()
    removed: bool = False  # the work dir, once its new patch is written (``commands.patch.patch_record``)

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, omit=("env",))


def slug(title: str) -> str:
    """A patch subject as the ``title`` of its ``NNNN-title.patch`` file name (at most 60 characters)."""
    s = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return s[:60].rstrip("-") or "patch"


def format_header(subject: str, why: str, upstream: str) -> str:
    """The header envlock writes above a recorded diff (continuation lines indented by two)."""

    def field_(key: str, value: str) -> str:
        lines = value.strip().splitlines() or [""]
        return f"{key}: {lines[0].strip()}\n" + "".join(f"  {line.strip()}\n" for line in lines[1:])

    return field_("Subject", subject) + field_("Why", why) + field_("Upstream", upstream) + "---\n"


def edited_source(workdir: Path) -> str:
    """The source an ``edit`` work dir was made for (``PatchError`` if it is not one)."""
    return str(_edit_state(workdir)[1]["source"])


def edited_env(workdir: Path) -> str:
    """The env whose spec an ``edit`` work dir was made from (``PatchError`` if it does not say)."""
    state = _edit_state(workdir)[1]
    if not isinstance(state.get("env"), str) or "made_on" not in state:
        raise _unknown_base(workdir, state)
    return str(state["env"])


def _unknown_base(workdir: Path, state: dict[str, Any]) -> PatchError:
    return PatchError(
        f"{workdir}: the work dir does not record the env and the patches it was made on (made by an earlier "
        f"envlock, or not by `envlock patch edit`); expected a work dir made with `envlock patch edit ENV "
        f"{state.get('source', 'SOURCE')}`: make one and redo your change there"
    )


def _edit_state(workdir: Path) -> tuple[Path, dict[str, Any]]:
    state_file = workdir / ".git" / _EDIT_STATE
    if not state_file.is_file():
        raise PatchError(
            f"{workdir}: not an envlock edit work dir (no .git/{_EDIT_STATE}); create one with `envlock patch edit`"
        )
    state: dict[str, Any] = json.loads(state_file.read_text())
    return state_file, state


@dataclass(frozen=True)
class PatchHeader:
    """What ``record`` writes above the diff (``format_header``): a new patch needs a subject and a
    why; a refresh keeps the header of the patch it rewrites where these are None."""

    subject: str | None = None
    why: str | None = None
    upstream: str | None = None


def record(
    workdir: Path,
    patches_dir: Path,
    header: PatchHeader,
    *,
    current: Sequence[LockedPatch],
    refresh: bool = False,
    workspace_root: Path | None = None,
    other_envs: Sequence[Path] = (),
) -> RecordedPatch:
    """Write the work dir's changes against its top patch level as ``patches_dir/NNNN-slug.patch``,
    ``header`` above them.

    The new patch becomes the next level (committed), so another ``record`` diffs against it.
    With ``refresh``, the changes replace the first pending patch's file instead (same name,
    same header unless given), for a patch that no longer applied to a new commit.

    ``current``: the source's patches as the spec lists them now. They must still be the ones
    the work dir was made on (``PatchError`` otherwise, naming what changed), and no numbered
    patch in ``patches_dir`` the work dir was not made on may precede the new one, but those
    ``other_envs`` list (the patch folder is the source's, which other envs share).
    """
    state_file, state = _edit_state(workdir)
    source = str(state["source"])
    what = f"patch record {source}"
    pending = [str(p) for p in state.get("pending", [])]
    # What was asked is checked before anything in the work dir is touched.
    _check_request(workdir, pending, refresh=refresh, subject=header.subject, why=header.why)
    root = workspace_root or patches_dir.parent.parent  # pending patches are named from the workspace root
    _check_base(workdir, state, current, root, None if refresh else patches_dir, other_envs)
    diff = _staged_diff(workdir, state, what)
    if refresh:
        target = _refreshed(root, pending[0], header.subject, header.why, header.upstream)
    else:
        assert header.subject and header.why  # checked above
        target = _numbered(patches_dir, header.subject, header.why, header.upstream)
    data = target.header + diff
    parsed = _self_checked(workdir, target.path, data, what)
    write_atomic(target.path, data)
    _git_ok(["add", "-A"], workdir, what)
    _git_ok(["commit", "-q", "--no-verify", "-m", f"{target.path.name}\n\n{target.subject}"], workdir, what)
    _add_level(state, target.label, parsed.sha256, pending, refresh=refresh)
    # A refresh carries on with the patches after it, as edit does.
    upstreamed, (how, conflicted, rejects) = _carry_on(workdir, state, root, what) if refresh else ([], (None, (), ()))
    state["upstreamed"] = [*state.get("upstreamed", []), *upstreamed]
    state_file.write_text(json.dumps(state, indent=2) + "\n")
    return RecordedPatch(source, target.path, target.number, tuple(f.path for f in parsed.files), parsed.sha256,
                         tuple(state["pending"]), tuple(upstreamed), merge=how, conflicted=conflicted, rejects=rejects)


@dataclass(frozen=True)
class _Target:
    """Where ``record`` writes a patch, and the header it writes above the diff."""

    label: str  # as the work dir's state names the patch
    path: Path
    number: int  # the NNNN of its file name (0 for a pending patch named otherwise)
    subject: str  # for the level's commit message
    header: bytes


def _check_request(workdir: Path, pending: Sequence[str], *, refresh: bool, subject: str | None,
                   why: str | None) -> None:
    """Refuse (``UsageError``) a refresh with nothing pending, or a new patch without a subject and a why."""
    if refresh and not pending:
        raise UsageError(f"{workdir}: no pending patch to refresh; record a new one with --subject and --why")
    if not refresh and (not subject or not why):
        raise UsageError(f"{workdir}: a new patch needs a subject and a why (--subject, --why)")


def _staged_diff(workdir: Path, state: dict[str, Any], what: str) -> bytes:
    """Stage the work dir's changes and return them as a git diff against the top level
    (``PatchError`` if there are none)."""
    # Without -f (unlike edit's levels): what the source's .gitignore covers, such as the
    # __pycache__ and build output of trying the change, is not part of a patch.
    _git_ok(["add", "-A"], workdir, what)
    diff = runner.git_bytes(
        [
            "-c",
            "core.quotepath=false",
            "diff",
            "--cached",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "HEAD",
        ],
        what=what,
        error=PatchError,
        cwd=workdir,
    )
    if not diff.strip():
        level = state["levels"][-1] if state["levels"] else "base"
        raise PatchError(f"{workdir}: nothing to record (no change against {level})")
    return diff


def _refreshed(root: Path, label: str, subject: str | None, why: str | None, upstream: str | None) -> _Target:
    """The pending patch ``label`` rewritten in place: its header's fields unless given."""
    target = root / label
    try:
        written = target.read_bytes()
    except FileNotFoundError:
        raise PatchError(f"{label}: patch file not found") from None
    old = parse_patch(written, label=label, path=target)
    # A refresh that changes no field keeps the header's bytes, line breaks and all.
    kept_header = written_header(written) if not (subject or why or upstream) else None
    subject, why, upstream = subject or old.subject, why or old.why, upstream or old.upstream
    header = kept_header or format_header(subject, why or "", upstream or "not proposed upstream").encode()
    return _Target(label, target, patch_number(target.name) or 0, subject, header)


def _numbered(patches_dir: Path, subject: str, why: str, upstream: str | None) -> _Target:
    """A new patch, numbered after the highest ``NNNN-`` file in ``patches_dir``."""
    number = max((n for p in patches_dir.glob("*.patch") if (n := patch_number(p.name)) is not None),
                 default=0) + 1
    target = patches_dir / f"{number:04d}-{slug(subject)}.patch"
    header = format_header(subject, why, upstream or "not proposed upstream").encode()
    return _Target(str(target), target, number, subject, header)


def _self_checked(workdir: Path, target: Path, data: bytes, what: str) -> PatchFile:
    """``data`` parsed (refusing binary diffs and the like), refused if it records patch(1)'s
    leftovers or does not apply to the level it was diffed from."""
    parsed = parse_patch(data, label=str(target))
    # patch(1)'s leftovers from redoing a change by hand would become part of the patch.
    leftovers = sorted(f.path for f in parsed.files if f.path.endswith((".orig", ".rej")))
    if leftovers:
        _git_ok(["reset", "-q"], workdir, what)  # unstage: the work dir is as the user left it
        raise PatchError(f"{workdir}: {len(leftovers)} patch(1) leftover file(s) would be recorded; "
                         "expected them removed first", details=leftovers)
    markers = sorted({f"{f.path}: {text[:7].decode()}" for f in parsed.files for h in f.hunks for op, text in h.lines
                      if op == "+" and (text.startswith((b"<<<<<<< ", b">>>>>>> ")) or text.rstrip() == b"=======")})
    if markers:
        _git_ok(["reset", "-q"], workdir, what)
        raise PatchError(f"{workdir}: conflict markers would be recorded; expected the conflict resolved first",
                         details=markers)
    check = TreeView(workdir)
    _git_ok(["stash", "-q"], workdir, what)  # check the patch against the level it was diffed from
    try:
        result = check.try_apply(parsed)
    finally:
        _git_ok(["stash", "pop", "-q"], workdir, what)
    if isinstance(result, HunkFailure):
        raise PatchError(f"{target}: recorded diff does not apply to its own base", details=result.describe())
    return parsed


def _add_level(state: dict[str, Any], label: str, sha256: str, pending: Sequence[str], *, refresh: bool) -> None:
    """Note the recorded patch in the work dir's state: its level, and what it is now made on."""
    state["levels"] = [*state["levels"], label]
    state["pending"] = pending[1:] if refresh else pending
    if refresh:  # the spec lists the rewritten file: its new bytes are what the work dir is made on
        state["made_on"] = [{"path": p["path"], "sha256": sha256 if p["path"] == label else p["sha256"]}
                            for p in state["made_on"]]
    else:
        state["recorded"] = [*state.get("recorded", []), {"path": label, "sha256": sha256}]


def _carry_on(workdir: Path, state: dict[str, Any], root: Path,
              what: str) -> tuple[list[str], tuple[str | None, tuple[str, ...], tuple[str, ...]]]:
    """Apply the pending patches after a refresh, as edit does: commit what applies, retire what
    the new code already has (returned), and write the next one that needs a hand as far as it
    goes (how, the files with conflict markers, the .rej files: returned)."""
    upstreamed: list[str] = []
    while state["pending"]:
        nxt = parse_patch_file(root / state["pending"][0], label=state["pending"][0])
        view = TreeView(workdir)
        verdict, applies, _failure = view.classify(nxt)
        if verdict == "already-applied":
            upstreamed.append(nxt.label)
        elif applies is not None:
            view.changes.update(applies.changes)
            _commit_level(workdir, view, nxt, what)
            state["levels"].append(nxt.label)
        else:
            labels = [str(p["path"]) for p in state["made_on"]]
            before = [parse_patch_file(root / label, label=label) for label in labels[:labels.index(nxt.label)]]
            base = Path(state["base"]) if state.get("base") else None
            how, conflicted, rejects, _ = write_partly(workdir, nxt, before, base, state.get("label", "upstream"))
            return upstreamed, (how, conflicted, rejects)
        state["pending"] = state["pending"][1:]
    return upstreamed, (None, (), ())


def patch_number(filename: str) -> int | None:
    """The NNNN of a ``NNNN-title.patch`` file name (None for another name): the order of a
    source's patches folder, which ``record`` numbers after."""
    found = re.match(r"(\d{4})-", filename)
    return int(found.group(1)) if found else None


def _check_base(workdir: Path, state: dict[str, Any], current: Sequence[LockedPatch], root: Path,
                patches_dir: Path | None, other_envs: Sequence[Path] = ()) -> None:
    """Refuse to record when the spec's patches are no longer those the work dir was made on
    (the new patch would be diffed against a base the spec does not build), or, for a new
    patch (``patches_dir``), when a numbered patch there that the work dir was not made on,
    nor another env lists (``other_envs``), would come between them and it."""
    if "made_on" not in state:
        raise _unknown_base(workdir, state)
    source, env = state["source"], state.get("env") or "ENV"
    redo = f"make a new work dir with `envlock patch edit {env} {source}` and redo your change there"

    def where(label: str) -> str:  # one name for a patch however it is spelled (relative, absolute)
        return os.path.normpath(root / label)

    made_on = [(str(p["path"]), str(p["sha256"])) for p in state["made_on"]]
    recorded = [(str(p["path"]), str(p["sha256"])) for p in state.get("recorded", [])]
    # A patch the work dir found already applied may stay in the spec or leave it (as the
    # advice says): the tree has its change either way.
    gone = {label: sha for label, sha in made_on if label in state.get("upstreamed", [])}
    expected = [(where(label), sha) for label, sha in made_on if label not in gone]
    actual = [(where(p.path), p.sha256) for p in current if gone.get(p.path) != p.sha256]
    mine = [(where(label), sha) for label, sha in recorded]
    extra = actual[len(expected):]
    if actual[:len(expected)] != expected or extra != mine[:len(extra)]:
        was = dict(expected + mine + [(where(label), sha) for label, sha in gone.items()])
        now = dict(actual)
        names = {where(label): label for label, _ in made_on + recorded} | {where(p.path): p.path for p in current}
        problems = [f"{names[key]}: removed from the spec" for key, _ in expected if key not in now]
        problems += [f"{names[key]}: added to the spec" for key in now if key not in was]
        problems += [f"{names[key]}: its file changed (sha256 {was[key][:12]} -> {sha[:12]})"
                     for key, sha in actual if key in was and was[key] != sha]
        if not problems:  # the same patches, in another order
            problems.append("the spec lists " + ", ".join(names[key] for key, _ in actual) + "; expected "
                            + ", ".join(names[key] for key, _ in expected)
                            + (", then those recorded here, in order: " + ", ".join(names[k] for k, _ in mine)
                               if mine else ""))
        raise PatchError(f"{workdir}: the spec's patches of source {source!r} are no longer those this work dir was "
                         f"made on, so a patch recorded here would be diffed against a tree the spec does not "
                         f"build; {redo}", details=problems)
    if patches_dir is None:
        return
    # The next number must follow the patches the work dir was made on: a higher-numbered
    # patch it was not made on (recorded from another work dir since) would be taken to come
    # before the new one, which was diffed without it.
    folder = os.path.normpath(patches_dir)
    base = {key for key, _ in expected + mine} | {where(label) for label in gone}
    top = max((n for key in base
               if os.path.dirname(key) == folder and (n := patch_number(os.path.basename(key))) is not None),
              default=0)
    # Not stray: what the work dir was made on, and what other envs list (the folder is the source's).
    known = base | {os.path.normpath(p) for p in other_envs}
    later = sorted(str(p) for p in patches_dir.glob("*.patch")
                   if os.path.normpath(p) not in known and (n := patch_number(p.name)) is not None and n > top)
    if later:
        shown = ", ".join(os.path.relpath(p, root) if p.startswith(os.path.normpath(root) + os.sep) else p
                          for p in later)
        it = "it" if len(later) == 1 else "them"
        raise PatchError(f"{workdir}: a new patch of source {source!r} would be numbered after {shown}, which this "
                         f"work dir was not made on (recorded from another work dir since?); the new patch was "
                         f"diffed without {it}. Add {it} to the spec and {redo}, or delete {it} if retired")
