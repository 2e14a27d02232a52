"""``envlock patch rebase``: a source moved to another commit with its patches, as ``git rebase`` does.

The recipe: plan (the spec's pin, the target commit, the patches as listed), then carry each
patch in order onto the target in a git work dir, one commit per patch: as it is where it
applies, by a 3-way merge against the tree it was recorded on (the pin, with the patches
before it) where it does not; a patch whose change upstream already has is retired. At a
conflict the work dir is left with standard conflict markers and the rebase stops; the user
resolves it and runs ``--continue`` (or ``--abort``). Nothing in the workspace changes until
every patch is carried: then the rewritten patches, the retired ones and the spec's ``rev``
(tomlkit: comments kept) are written, each atomically, after checking that none of them
changed since the rebase started.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envlock import runner
from envlock.commands.patch import SourceReader, patches_of_other_envs
from envlock.errors import PatchError, UsageError
from envlock.model.jsondoc import json_doc
from envlock.model.lockfile import LockFile
from envlock.model.mirrors import MirrorOptions, Mirrors
from envlock.model.spec import SourceSpec, load_env_spec
from envlock.patches.patchapply import HunkFailure, TreeView
from envlock.patches.patchedit import patch_number
from envlock.patches.patchfile import PatchFile, load_patches, parse_patch, with_rebased_onto
from envlock.patches.patchmerge import merge_patch
from envlock.store.store import Store, write_atomic
from envlock.store.trees import copy_tree
from envlock.workspace import Workspace

Outcome = Literal["applies", "rebased", "already-applied", "conflict"]
_STATE = "envlock-rebase.json"
_MARKERS = (b"<<<<<<< ", b"=======", b">>>>>>> ")


@dataclass(frozen=True)
class RebaseStep:
    """What happened to one patch."""

    patch: str
    subject: str
    outcome: Outcome
    how: str = ""  # how it was found ("3-way merge", "resolved by hand", "its reverse applies", ...)
    conflicts: tuple[HunkFailure, ...] = ()
    rejects: tuple[str, ...] = ()  # .rej files left in the work dir
    label: str = ""  # its side's conflict-marker label, "patch NNNN"

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, omit=("label",))


@dataclass(frozen=True)
class RebaseReport:
    """A rebase run: done (written), stopped at a conflict (``workdir`` kept) or aborted."""

    env: str
    source: str
    rev: str  # as asked
    pin: str  # the commit the patches were recorded on
    commit: str  # the 40-hex commit of ``rev``
    steps: tuple[RebaseStep, ...]
    workdir: Path
    state: Literal["done", "stopped", "aborted"]
    spec: Path | None = None
    rewritten: tuple[str, ...] = ()
    retired: tuple[str, ...] = ()  # dropped from the spec (and, unless another env lists one, deleted)
    kept: tuple[str, ...] = ()  # retired here, kept on disk: other envs list them
    shared: tuple[str, ...] = ()  # rewritten patches that other envs list too (pinned elsewhere)
    rev_comment: str = ""  # the comment after the spec's rev, kept as written

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, keys={"pin": "from", "commit": "to", "steps": "patches", "rev_comment": "rev-comment"})

    def describe(self) -> list[str]:
        """Each patch's outcome, then what was written or where it stopped, as lines to show."""
        import shlex

        if self.state == "aborted":
            return [f"aborted: removed {self.workdir}; nothing in the workspace changed"]
        lines = [f"{self.source} of env {self.env}: {self.pin[:12]} -> {self.rev} ({self.commit})"]
        for step in self.steps:
            how = f"  ({step.how})" if step.how else ""
            lines.append(f"  {step.outcome:16} {step.patch}{how}")
            lines += [f"      {line}" for failure in step.conflicts for line in failure.describe()]
        if self.state == "stopped":
            stopped, workdir = self.steps[-1], shlex.quote(str(self.workdir))
            lines += [f"stopped at {stopped.patch}: resolve the conflict in the work dir {self.workdir}",
                      f"  (the source at {self.rev} with the patches before it applied, this one as far as it goes: "
                      f"conflict markers <<<<<<< {self.rev} / >>>>>>> {stopped.label})"]
            lines += [f"  {rej}: hunks with no base to merge on; remove it once redone" for rej in stopped.rejects]
            lines += [f"then: envlock patch rebase --continue {workdir}   (or: envlock patch rebase --abort {workdir})",
                      "nothing in the workspace has changed"]
            return lines
        lines += [f"rewrote {label} (Rebased-onto: {self.commit})" for label in self.rewritten]
        lines += [f"note: {label} is also listed by another env, still pinned where it was recorded: rebase that "
                  "env too" for label in self.shared]
        n = len(self.rewritten)
        lines.append(f"wrote envs/{self.env}.toml: [sources.{self.source}] rev = \"{self.commit}\"; "
                     f"{n} patch{'' if n == 1 else 'es'} rewritten, {len(self.retired)} retired")
        if self.rev_comment:
            lines.append(f"note: the comment after rev is kept as it was ({self.rev_comment}): check it still holds")
        lines.append(f"run `envlock lock {self.env}` to lock the env at the new commit")
        return lines


@dataclass
class _Session:
    """A rebase in progress, as its work dir's state file records it."""

    workdir: Path
    env: str
    source: str
    root: Path
    rev: str
    pin: str
    commit: str
    spec_sha256: str
    patches: list[dict[str, str]]  # as listed when it started: path, sha256
    steps: list[dict[str, Any]] = field(default_factory=list)
    conflicted: list[str] = field(default_factory=list)
    rejects: list[str] = field(default_factory=list)

    @property
    def state_file(self) -> Path:
        return self.workdir / ".git" / _STATE

    def save(self) -> None:
        data = {k: v for k, v in vars(self).items() if k != "workdir"}
        self.state_file.write_text(json.dumps(data, indent=2, default=str) + "\n")

    @classmethod
    def load(cls, workdir: Path) -> _Session:
        state = workdir / ".git" / _STATE
        if not state.is_file():
            raise UsageError(f"{workdir}: not a rebase work dir (no .git/{_STATE}); expected the directory "
                             "`envlock patch rebase` printed when it stopped")
        data = json.loads(state.read_text())
        return cls(workdir=workdir, **{**data, "root": Path(data["root"])})


# -- the recipe ----------------------------------------------------------------------


def rebase(ws: Workspace, env: str, source: str, to: str, *, workdir: Path | None = None,
           asked: MirrorOptions | None = None) -> RebaseReport:
    """Move ``source`` of ``env`` to ``to`` carrying its patches; stop at a conflict (report
    ``stopped``, work dir kept), else write the refreshed patches and the spec's rev."""
    spec = load_env_spec(ws, env)
    src = _git_source(spec.sources.get(source), source, ws.relative(spec.path))
    store = Store.open()
    mirrors = Mirrors.of(spec, asked, read_indexes=bool(asked and asked.indexes))  # --index: checked, unused
    # Of a lock of several targets, any one: a source is pinned alike on every target.
    lock = LockFile.read(ws.lock_path(env)).lock_of(whole=True)
    reader = SourceReader(ws, store, lock, mirrors)
    pin, target = reader.at(source, src), reader.at(source, src, against=to)
    assert pin.commit is not None and target.commit is not None
    listed = [{"path": p.label, "sha256": p.sha256} for p in load_patches(ws.root, src.patches)]
    workdir = _new_workdir(workdir or store.root / "rebase" / f"{env}-{source}", env, source)
    session = _Session(workdir, env, source, ws.root, to, pin.commit, target.commit,
                       _sha256(spec.path.read_bytes()), listed)
    try:
        copy_tree(target.tree, workdir)
        _git(workdir, ["init", "-q"])
        _commit(workdir, f"{to} ({target.commit})", force=True)
        session.save()
        return _carry(session, store, mirrors)
    except BaseException:
        # Nothing to continue from (a patch that does not apply where it was recorded, an
        # interrupt): the work dir goes, as if the rebase had not started. A stop is a return.
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def resume(workdir: Path) -> RebaseReport:
    """``--continue``: take the user's resolution of the stopped patch and carry the rest."""
    session = _Session.load(workdir)
    if not session.steps or session.steps[-1]["outcome"] != "conflict":
        raise PatchError(f"{workdir}: no stopped patch to continue from")
    ws = Workspace(session.root)
    _check_unchanged(session, ws)
    _check_resolved(session)
    stopped = session.steps.pop()
    label = stopped["patch"]
    _git(workdir, ["add", "-A"])
    diff = _diff(workdir, ["--cached", "HEAD"])
    if not diff.strip():  # resolved to upstream's content: the change is not needed any more
        session.steps.append({"patch": label, "outcome": "already-applied", "how": "resolved to upstream's lines"})
    else:
        _rewrite(session, label, diff)
        _commit(workdir, label, force=False)
        session.steps.append({"patch": label, "outcome": "rebased", "how": "resolved by hand"})
    session.conflicted, session.rejects = [], []
    spec = load_env_spec(ws, session.env)
    store = Store.open()
    return _carry(session, store, Mirrors.of(spec, read_indexes=False))


def abort(workdir: Path) -> RebaseReport:
    """``--abort``: forget the rebase (its work dir removed); the workspace was never touched."""
    session = _Session.load(workdir)
    steps = _steps(session, _labels_subjects(session))
    shutil.rmtree(workdir)
    return RebaseReport(session.env, session.source, session.rev, session.pin, session.commit, steps, workdir,
                        "aborted")


# -- carrying patches ------------------------------------------------------------------


def _carry(session: _Session, store: Store, mirrors: Mirrors) -> RebaseReport:
    """Carry the patches after those done onto the work dir, one commit each; stop at a conflict."""
    ws = Workspace(session.root)
    spec = load_env_spec(ws, session.env)
    src = _git_source(spec.sources.get(session.source), session.source, ws.relative(spec.path))
    pin_tree = SourceReader(ws, store, None, mirrors).at(session.source, src, commit=session.pin).tree
    patches = load_patches(ws.root, [p["path"] for p in session.patches])
    base = TreeView(pin_tree)  # the tree each patch was recorded on: the pin, the patches before it
    for patch in patches[:len(session.steps)]:
        base.apply(patch)
    for patch in patches[len(session.steps):]:
        step = _carry_one(session, base, patch)
        session.steps.append(step)
        session.save()
        if step["outcome"] == "conflict":
            return _report(session, "stopped")
        base.apply(patch)
    return _finish(session, ws)


def _carry_one(session: _Session, base: TreeView, patch: PatchFile) -> dict[str, Any]:
    """One patch onto the work dir: committed as it is, rewritten by a 3-way merge, found
    upstream already, or left half-merged with conflict markers (the returned step says which)."""
    workdir = session.workdir
    ours = TreeView(workdir)
    verdict, applied, _failure = ours.classify(patch)
    if applied is not None:
        ours.changes = applied.changes
        ours.write(workdir)
        _commit(workdir, patch.label, force=True)
        return {"patch": patch.label, "outcome": "applies", "how": "as it is"}
    if verdict == "already-applied":
        return {"patch": patch.label, "outcome": "already-applied", "how": "its reverse applies"}
    number = patch_number(Path(patch.label).name)
    theirs = f"patch {number:04d}" if number is not None else f"patch {patch.label}"
    merged = merge_patch(ours, base, patch, ours_label=session.rev, theirs_label=theirs)
    if merged.already:
        return {"patch": patch.label, "outcome": "already-applied", "how": "3-way merge: upstream has the change"}
    ours.changes = merged.changes
    ours.write(workdir)
    if merged.clean:
        _commit(workdir, patch.label, force=True)
        _rewrite(session, patch.label, _diff(workdir, ["HEAD~1", "HEAD"]))
        return {"patch": patch.label, "outcome": "rebased", "how": "3-way merge"}
    for path, text in (merged.rejects or {}).items():
        (workdir / f"{path}.rej").write_bytes(text)
    session.conflicted = list(merged.conflicted)
    session.rejects = [f"{path}.rej" for path in merged.rejects or {}]
    return {"patch": patch.label, "outcome": "conflict", "how": "3-way merge", "label": theirs,
            "conflicts": [c.to_dict() for c in merged.conflicts], "rejects": session.rejects}


def _rewrite(session: _Session, label: str, diff: bytes) -> None:
    """Keep the rewritten patch (its header, a Rebased-onto line, the new diff) in the work dir's .git."""
    original = (session.root / label).read_bytes()
    data = with_rebased_onto(original, session.commit) + diff
    parsed = parse_patch(data, label=label)  # what envlock would refuse to apply is refused now
    left = [f"{f.path}: patch(1) leftover" for f in parsed.files if f.path.endswith((".orig", ".rej"))]
    left += sorted({f"{f.path}: conflict marker {text[:7].decode()}" for f in parsed.files for h in f.hunks
                    for op, text in h.lines
                    if op == "+" and (text.startswith((b"<<<<<<< ", b">>>>>>> ")) or text.rstrip() == b"=======")})
    if left:
        raise PatchError(f"{session.workdir}: {label} would be rewritten with these; expected them gone first",
                         details=left)
    kept = session.workdir / ".git" / "envlock-rebased" / _key(label)
    kept.parent.mkdir(exist_ok=True)
    kept.write_bytes(data)


# -- finishing -------------------------------------------------------------------------


def _finish(session: _Session, ws: Workspace) -> RebaseReport:
    """Write what the rebase made into the workspace (each file atomically, the spec last) and
    remove the work dir."""
    spec_path = _check_unchanged(session, ws)
    retired = [s["patch"] for s in session.steps if s["outcome"] == "already-applied"]
    rewritten = [s["patch"] for s in session.steps if s["outcome"] == "rebased"]
    others = {str(p.relative_to(ws.root)) if p.is_relative_to(ws.root) else str(p)
              for p in patches_of_other_envs(ws, session.env, session.source)}
    spec_text, rev_comment = _new_spec(spec_path.read_text(), session.source, session.commit, retired)
    new = {label: (session.workdir / ".git" / "envlock-rebased" / _key(label)).read_bytes() for label in rewritten}
    for label, data in new.items():
        write_atomic(ws.root / label, data)
    gone = [label for label in retired if label not in others]
    for label in gone:
        (ws.root / label).unlink(missing_ok=True)
    write_atomic(spec_path, spec_text.encode())
    shutil.rmtree(session.workdir)
    return _report(session, "done", spec=spec_path, rewritten=tuple(rewritten), retired=tuple(retired),
                   kept=tuple(label for label in retired if label in others),
                   shared=tuple(label for label in rewritten if label in others), rev_comment=rev_comment)


def _new_spec(text: str, source: str, commit: str, retired: Sequence[str]) -> tuple[str, str]:
    """The spec's text with ``[sources.SOURCE]``'s rev set to ``commit`` and the retired patches
    left out of its list; everything else (comments, layout) as it was. Also the comment after
    the rev, if any (it may name the old commit)."""
    import tomlkit

    doc = tomlkit.parse(text)
    table: Any = doc["sources"][source]
    old = table.get("rev")
    comment = (old.trivia.comment or "").strip() if old is not None and hasattr(old, "trivia") else ""
    table["rev"] = commit  # a comment after the old value stays, as written
    listed = table.get("patches")
    if listed is not None:
        for label in retired:
            names = [str(item) for item in listed]
            if label in names:
                del listed[names.index(label)]
    return tomlkit.dumps(doc), comment


def _check_unchanged(session: _Session, ws: Workspace) -> Path:
    """The spec and the patches as they were when the rebase started (``PatchError`` naming what changed)."""
    spec_path = ws.spec_path(session.env)
    changed = []
    if _sha256(spec_path.read_bytes()) != session.spec_sha256:
        changed.append(f"{ws.relative(spec_path)}: changed")
    for p in session.patches:
        path = ws.root / p["path"]
        if not path.is_file() or _sha256(path.read_bytes()) != p["sha256"]:
            changed.append(f"{p['path']}: {'changed' if path.is_file() else 'removed'}")
    if changed:
        raise PatchError(f"{session.workdir}: the workspace changed since this rebase started; nothing was written. "
                         f"Run `envlock patch rebase --abort {session.workdir}` and start again", details=changed)
    return spec_path


def _check_resolved(session: _Session) -> None:
    """Refuse to continue while a conflicted file still has markers or a .rej is left."""
    left = []
    for path in session.conflicted:
        target = session.workdir / path
        lines = target.read_bytes().split(b"\n") if target.is_file() else []
        left += [f"{path}: line {n}: conflict marker" for n, line in enumerate(lines, 1)
                 if line.startswith(_MARKERS) and (line == b"=======" or line[:8] in _MARKERS)]
    left += [f"{rej}: remove it once its hunks are redone" for rej in session.rejects
             if (session.workdir / rej).exists()]
    if left:
        raise PatchError(f"{session.workdir}: the conflict is not resolved yet; edit the files, then run "
                         f"`envlock patch rebase --continue {session.workdir}`", details=left)


# -- helpers -----------------------------------------------------------------------------


def _git_source(src: SourceSpec | None, name: str, spec: str) -> SourceSpec:
    if src is None:
        raise UsageError(f"{spec}: no [sources.{name}]")
    if src.git is None:
        raise UsageError(f"{spec}: [sources.{name}] is a path source: it has no commits to rebase onto")
    return src


def _new_workdir(workdir: Path, env: str, source: str) -> Path:
    workdir = workdir.absolute()
    if (workdir / ".git" / _STATE).is_file():
        raise UsageError(f"{workdir}: a rebase of source {source!r} of env {env!r} is in progress there; "
                         f"run `envlock patch rebase --continue {workdir}` or `--abort {workdir}`")
    if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        raise UsageError(f"{workdir}: work dir exists and is not empty; expected a new or empty directory")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def _git(workdir: Path, args: Sequence[str]) -> runner.Result:
    return runner.git_checked(args, what="patch rebase", error=PatchError, cwd=workdir)


def _commit(workdir: Path, message: str, *, force: bool) -> None:
    _git(workdir, ["add", "-A", "-f"] if force else ["add", "-A"])
    _git(workdir, ["commit", "-q", "--allow-empty", "--no-verify", "-m", message])


def _diff(workdir: Path, revs: Sequence[str]) -> bytes:
    return runner.git_bytes(["-c", "core.quotepath=false", "diff", "--no-color", "--no-ext-diff", "--no-renames",
                             "--src-prefix=a/", "--dst-prefix=b/", *revs], what="patch rebase", error=PatchError,
                            cwd=workdir)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key(label: str) -> str:
    return label.replace("/", "__")


def _labels_subjects(session: _Session) -> dict[str, str]:
    out = {}
    for p in session.patches:
        try:
            out[p["path"]] = parse_patch((session.root / p["path"]).read_bytes(), label=p["path"]).subject
        except (OSError, PatchError):
            out[p["path"]] = ""
    return out


def _steps(session: _Session, subjects: dict[str, str]) -> tuple[RebaseStep, ...]:
    return tuple(RebaseStep(s["patch"], subjects.get(s["patch"], ""), s["outcome"], s.get("how", ""),
                            _failures(s), tuple(s.get("rejects", ())), s.get("label", "")) for s in session.steps)


def _failures(step: dict[str, Any]) -> tuple[HunkFailure, ...]:
    return tuple(HunkFailure(c["file"], c["hunk"], c["header"], c["reason"], c["line"], tuple(c["expected"]),
                             tuple(c["actual"]), c["merged"]) for c in step.get("conflicts", ()))


def _report(session: _Session, state: Literal["done", "stopped"], **kw: Any) -> RebaseReport:
    return RebaseReport(session.env, session.source, session.rev, session.pin, session.commit,
                        _steps(session, _labels_subjects(session)), session.workdir, state, **kw)
