"""``envlock bisect``: find the first lock that breaks a command, as ``git bisect run`` does.

The recipe: list the candidates, oldest first (``--good REV --bad REV``: the good revision and
each later one that changed ``locks/pylock.ENV.toml``; ``--nightly FROM..TO``: the dates the
index lists for the spec's nightlies, usable for the target, between them), the first taken as
good and the last as bad, untested. Then search (``search``): each step syncs the middle
candidate's lock as a new generation of the env (stored wheels, builds and venvs are reused) and
runs the command in it (``commands.run.run_environ``, as ``envlock run``): exit 0 good, 125 skip, any
other exit up to 127 bad; a command that cannot be started, or that dies of a signal (or exits
128 or more), stops the bisect. A lock that cannot be synced is skipped, with the reason. At the
end the env is put back on the generation that was current before, and the first bad lock is
diffed against the last good one (``diff.diff_locks``).

A nightly candidate is locked from a copy of the spec whose nightly date is moved, in a
temporary workspace (under the store's ``tmp/``): the workspace's own spec and lock are never
written. The dates are ``envlock nightlies``' (``commands.nightlies``); the spec is edited as ``envlock upgrade``
edits it (``specedit``).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envlock import runner
from envlock.commands.lockrefs import load_lock_ref
from envlock.commands.run import run_environ
from envlock.commands.sync import SyncOptions, sync
from envlock.errors import CommandError, EnvlockError, UsageError
from envlock.install import generations
from envlock.model import specedit
from envlock.model.jsondoc import json_doc
from envlock.model.lockdiff import LockDiff, diff_locks
from envlock.model.lockfile import Lock, read_lock
from envlock.model.mirrors import MirrorOptions
from envlock.model.spec import EnvSpec, load_env_spec, load_spec
from envlock.store.store import Store
from envlock.workspace import Workspace, check_env_name, seen_through

GOOD, BAD, SKIP = "good", "bad", "skip"
#: The exit of a bisect that could not tell the first bad candidate (every candidate it tried between
#: the ends was skipped, or skipped ones may be it): ``git bisect run``'s "cannot tell" code.
CANNOT_TELL = 125
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class BisectOptions:
    """What ``envlock bisect`` is asked: the ends to search (``--good``/``--bad`` revisions or ``--nightly``
    dates), the command to test and where its output goes, the mirrors and the target."""

    good: str | None = None
    bad: str | None = None
    nightly: str | None = None  # "FROM..TO"
    cmd: tuple[str, ...] = ()
    output: int | None = None  # where the command's stdout goes (a file descriptor; None: inherited)
    # --index/--source: the mirrors each step's lock and sync read (a --good/--bad step only --index's)
    mirrors: MirrorOptions = field(default_factory=MirrorOptions)
    target: str | None = None  # --target: of a spec of several targets, the one synced (None: this machine's)


@dataclass(frozen=True)
class Step:
    """One candidate tried; doubles as an entry of ``--json``'s ``steps``."""

    candidate: str  # the revision or the date
    lock: str  # the lock, as named
    result: str  # good, bad or skip
    exit_code: int | None
    seconds: float
    generation: int | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, extra={"seconds": round(self.seconds, 3)})


@dataclass(frozen=True)
class BisectReport:
    """The search and its answer; doubles as ``envlock bisect --json``."""

    env: str
    mode: str  # "git" or "nightly"
    candidates: tuple[str, ...]
    steps: tuple[Step, ...]
    first_bad: str | None
    last_good: str | None
    maybe: tuple[str, ...] = ()  # skipped candidates that may be the first bad one
    diff: LockDiff | None = None
    restored: int | None = None  # the generation made current again
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def found(self) -> bool:
        """Whether the first bad candidate is told (no skipped candidate may be it instead)."""
        return not self.maybe

    @property
    def max_steps(self) -> int:
        """Steps a search without skips takes at most: ceil(log2) of the candidates after the good one."""
        return math.ceil(math.log2(max(len(self.candidates) - 1, 1)))

    def to_dict(self) -> dict[str, Any]:
        return json_doc(self, extra={"max_steps": self.max_steps, "found": self.found})


def search(count: int, test: Callable[[int], str]) -> tuple[int, int, list[int]]:
    """Binary search of candidates ``0..count-1``, 0 good and ``count-1`` bad: (last good, first bad,
    skipped candidates between them that may be the first bad one). ``test(i)`` is good, bad or skip."""
    lo, hi, skipped = 0, count - 1, set()
    while hi - lo > 1:
        middle = (lo + hi) // 2
        left = [i for i in range(lo + 1, hi) if i not in skipped]
        if not left:
            break
        pick = min(left, key=lambda i: (abs(i - middle), i))
        result = test(pick)
        if result == GOOD:
            lo = pick
        elif result == BAD:
            hi = pick
        else:
            skipped.add(pick)
    return lo, hi, sorted(i for i in skipped if lo < i < hi)


@dataclass
class _Candidates:
    """How to name, lock and sync the candidates of one mode."""

    mode: str
    labels: list[str]
    names: list[str]  # each candidate's lock, as people name it
    lock_of: Callable[[int], tuple[Lock, str]]  # the candidate's lock and how to name it
    sync_one: Callable[[int], int]  # sync it as a generation; its number
    cleanup: Callable[[], None] = lambda: None


def bisect(ws: Workspace, env: str, options: BisectOptions,
           on_step: Callable[[Step], None] | None = None) -> BisectReport:
    """Search ``env``'s locks for the first one under which ``options.cmd`` fails."""
    if not options.cmd:
        raise UsageError("envlock bisect ENV ... -- CMD...: no command given after `--`")
    if (options.nightly is None) == (options.good is None and options.bad is None):
        raise UsageError("envlock bisect: give either --good REV --bad REV, or --nightly DATE..DATE")
    if options.mirrors.indexes or options.mirrors.sources:  # checked once, not as a skip at every step
        from envlock.model.mirrors import Mirrors

        Mirrors.of(load_env_spec(ws, env, check_paths=False), options.mirrors)
    # Each step syncs here: a spec of targets none of which runs on this machine fails now, not at every step.
    if (ws.root / "envs" / f"{env}.toml").is_file():
        load_env_spec(ws, env, check_paths=False).on_this_machine(options.target)
    store = Store.open()
    before = generations.current_number(store, env)
    cands = _nightly_candidates(ws, env, store, options.nightly, options.mirrors, options.target) if options.nightly \
        else _git_candidates(ws, env, store, options.good, options.bad, options.mirrors, options.target)
    steps: list[Step] = []
    notes: list[str] = []
    try:
        def test(i: int) -> str:
            step = _step(store, env, cands, i, options)
            steps.append(step)
            if on_step is not None:
                on_step(step)
            return step.result

        lo, hi, maybe = search(len(cands.labels), test)
        diff = _diff(cands, lo, hi, notes)
    finally:
        restored = _restore(store, env, before, notes)
        cands.cleanup()
    return BisectReport(env, cands.mode, tuple(cands.labels), tuple(steps), cands.labels[hi], cands.labels[lo],
                        tuple(cands.labels[i] for i in maybe), diff, restored, tuple(notes))


def _step(store: Store, env: str, cands: _Candidates, i: int, options: BisectOptions) -> Step:
    """Sync candidate ``i`` and run the command in it."""
    started = time.monotonic()
    label = cands.labels[i]
    try:
        number = cands.sync_one(i)
    except EnvlockError as exc:
        return Step(label, cands.names[i], SKIP, None, time.monotonic() - started, None,
                    f"not synced: {exc.message}")
    code = _run(store, env, options)
    result = GOOD if code == 0 else SKIP if code == 125 else BAD
    return Step(label, cands.names[i], result, code, time.monotonic() - started, number)


def _run(store: Store, env: str, options: BisectOptions) -> int:
    """The command's exit status in the env's current generation; ``CommandError`` when it cannot run."""
    _root, environ = run_environ(store, env)
    argv = list(options.cmd)
    try:
        done = subprocess.run(argv, env=environ, stdin=subprocess.DEVNULL, stdout=options.output, check=False)
    except FileNotFoundError:
        raise CommandError(f"{argv[0]}: command not found (in the env or on PATH); the bisect stopped",
                           exit_code=127) from None
    except PermissionError:
        raise CommandError(f"{argv[0]}: not executable (permission denied); the bisect stopped",
                           exit_code=126) from None
    except OSError as exc:
        raise CommandError(f"{argv[0]}: cannot be run ({exc.strerror}); the bisect stopped", exit_code=126) from None
    if done.returncode < 0 or done.returncode >= 128:
        how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        raise CommandError(f"{argv[0]}: {how}: neither good (0), bad (1-127) nor skip (125), as for "
                           "`git bisect run`; the bisect stopped", exit_code=1)
    return done.returncode


def _restore(store: Store, env: str, before: int | None, notes: list[str]) -> int | None:
    """Make generation ``before`` current again (None: the env had none; the last step's stays)."""
    if before is None:
        notes.append(f"env {env!r} had no current generation before the bisect: the last step's stays current")
        return None
    if generations.current_number(store, env) != before:
        generations.rollback(store, env, before)
    return before


def _diff(cands: _Candidates, lo: int, hi: int, notes: list[str]) -> LockDiff | None:
    try:
        (good, good_label), (bad, bad_label) = cands.lock_of(lo), cands.lock_of(hi)
    except EnvlockError as exc:
        notes.append(f"no diff: {exc.message}")
        return None
    return diff_locks(good, bad, old_label=good_label, new_label=bad_label)


# -- over git revisions ----------------------------------------------------------


def _git_candidates(ws: Workspace, env: str, store: Store, good: str | None, bad: str | None,
                    asked: MirrorOptions, target: str | None = None) -> _Candidates:
    """The good revision, then each revision up to ``bad`` that changed the env's lock."""
    if good is None or bad is None:
        raise UsageError("envlock bisect: --good REV and --bad REV go together")
    lock_path = ws.lock_path(env)
    check_env_name(env)
    top = runner.git(["rev-parse", "--show-toplevel"], cwd=ws.root)
    if not top.ok:
        raise UsageError(f"{ws.root}: not in a git repository; --good/--bad name git revisions (or use --nightly)")
    repo = Path(top.stdout.strip())
    commits = [_commit(repo, rev, option) for rev, option in ((good, "--good"), (bad, "--bad"))]
    if not runner.git(["merge-base", "--is-ancestor", *commits], cwd=repo).ok:
        raise UsageError(f"--good {good} is not an ancestor of --bad {bad}; expected the good revision first")
    rel = lock_path.resolve().relative_to(repo.resolve()).as_posix()
    changed = runner.git(["rev-list", "--reverse", f"{commits[0]}..{commits[1]}", "--", rel], cwd=repo)
    revs = [commits[0], *changed.stdout.split()]
    if len(revs) < 2:
        raise UsageError(f"no revision in {good}..{bad} changed {rel}: nothing to bisect")

    names = [f"{ws.relative(lock_path)}@{rev[:12]}" for rev in revs]

    def lock_of(i: int) -> tuple[Lock, str]:
        return load_lock_ref(ws, f"{lock_path}@{revs[i]}", target).lock, names[i]

    def sync_one(i: int) -> int:
        # A lock synced as it is fetches no source: only the index mirrors apply.
        mirrors = MirrorOptions(indexes=asked.indexes)
        return sync(ws, env, SyncOptions(lock_ref=f"{lock_path}@{revs[i]}", mirrors=mirrors, target=target),
                    store=store).generation

    return _Candidates("git", [r[:12] for r in revs], names, lock_of, sync_one)


def _commit(repo: Path, rev: str, option: str) -> str:
    if rev.startswith("-"):
        raise UsageError(f"{option} {rev}: expected a git revision")
    found = runner.git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=repo)
    if not found.ok:
        raise UsageError(f"{option} {rev}: names no commit in {repo}")
    return found.stdout.strip()


# -- over nightly dates ------------------------------------------------------------


def _nightly_candidates(ws: Workspace, env: str, store: Store, span: str, asked: MirrorOptions,
                        target: str | None = None) -> _Candidates:
    """The listed dates between FROM and TO (both ends included, listed or not), each locked on
    demand in a temporary workspace."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})", span)
    if m is None or not all(_valid(d) for d in m.groups()):
        raise UsageError(f"--nightly {span}: expected FROM..TO, two dates YYYY-MM-DD (good, then bad)")
    first, last = m.groups()
    if first >= last:
        raise UsageError(f"--nightly {span}: expected the good date before the bad one")
    spec = load_env_spec(ws, env)
    shared = _shared_dates(spec)
    listed = nightly_dates(ws, spec, store, asked)
    dates = sorted({first, last} | {d for d in listed if first <= d <= last})
    scratch = store.temp_dir("bisect-ws")
    temp = _temp_workspace(ws, scratch, env)
    text = ws.spec_path(env).read_text(encoding="utf-8")
    locks: dict[int, Lock] = {}

    def lock_of(i: int) -> tuple[Lock, str]:
        if i not in locks:
            from envlock.cache.caches import Caches
            from envlock.commands.lock import LockOptions, lock_spec
            from envlock.model.mirrors import Mirrors

            moved = _write_spec(temp, spec, text, shared, dates[i])
            locked = lock_spec(temp, env, moved, Mirrors.of(moved, asked), store,
                               LockOptions(caches=Caches.configured(ws), target=target)).lock
            locks[i] = locked if locked is not None else read_lock(temp.lock_path(env), target)
        return locks[i], f"{env} at nightly {dates[i]}"  # as names[i]

    def sync_one(i: int) -> int:
        _write_spec(temp, spec, text, shared, dates[i])
        result = sync(temp, env, SyncOptions(mirrors=asked, target=target), store=store)
        locks[i] = read_lock(temp.lock_path(env), target)
        return result.generation

    return _Candidates("nightly", dates, [f"{env} at nightly {d}" for d in dates], lock_of, sync_one,
                       lambda: shutil.rmtree(scratch, ignore_errors=True))


def _valid(date: str) -> bool:
    try:
        dt.date.fromisoformat(date)
    except ValueError:
        return False
    return True


def _shared_dates(spec: EnvSpec) -> set[str]:
    """The dates the spec's nightly pins that share their index's date hold (what a bisect moves)."""
    dates = {p.nightly for p in spec.packages.values() if p.nightly and p.same_date}
    if not dates:
        raise UsageError(f"{spec.path}: no nightly pin to move; --nightly bisects the date of the spec's "
                         "`nightly = \"YYYY-MM-DD\"` packages")
    return {d for d in dates if d is not None}


def nightly_dates(ws: Workspace, spec: EnvSpec, store: Store, asked: MirrorOptions | None = None) -> list[str]:
    """The dates on which every nightly pin of the spec that shares its date has a build the target
    installs (``commands.nightlies``, as ``envlock nightlies`` lists them), oldest first."""
    from envlock.commands.nightlies import list_nightlies
    from envlock.model.mirrors import Mirrors

    found: set[str] | None = None
    for pkg in list_nightlies(ws, spec, Mirrors.of(spec, asked), store=store).packages:
        if pkg.same_date:
            found = set(pkg.usable_dates()) if found is None else found & set(pkg.usable_dates())
    return sorted(found or ())


def _spec_at(text: str, spec: EnvSpec, dates: set[str], date: str, *, origin: str) -> str:
    """``text`` with each nightly of ``spec`` that shares one of ``dates`` moved to ``date``
    (``specedit``: comments and layout kept)."""
    for name, pkg in sorted(spec.packages.items()):
        if pkg.nightly in dates and pkg.same_date:
            text = specedit.set_nightly(text, str(name), date, origin=origin)
    return text


def _write_spec(temp: Workspace, spec: EnvSpec, text: str, dates: set[str], date: str) -> EnvSpec:
    path = temp.root / "envs" / f"{spec.name}.toml"
    path.write_text(_spec_at(text, spec, dates, date, origin=str(spec.path)), encoding="utf-8")
    return load_spec(path, name=spec.name, root=temp.root)


def _temp_workspace(ws: Workspace, scratch: Path, env: str) -> Workspace:
    """A workspace in ``scratch`` that sees the real one's files (links) but has its own envs/,
    locks/ (starting from a copy of the env's lock) and wheelhouse/."""
    for entry in ws.root.iterdir():
        if entry.name not in ("envs", "locks", "wheelhouse", ".git"):
            (scratch / entry.name).symlink_to(entry)
    for folder in ("envs", "locks", "wheelhouse"):
        (scratch / folder).mkdir()
    if ws.lock_path(env).is_file():
        shutil.copyfile(ws.lock_path(env), scratch / "locks" / ws.lock_path(env).name)
    seen_through(scratch, ws.root)  # its links lead into the real workspace: inside it, for the path checks
    return Workspace(scratch)

