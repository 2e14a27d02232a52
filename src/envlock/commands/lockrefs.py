"""Locks named on the command line, and ``envlock diff`` between two of them.

``sync --lock``, ``verify --lock`` and ``diff`` take a lock as a path, ``PATH@GITREV`` (read
with git, never written back) or an env name (its workspace lock file): ``load_lock_ref``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envlock.errors import LockError, SpecError, UsageError
from envlock.model.lockfile import Lock, read_lock
from envlock.model.tomlio import load_toml
from envlock.workspace import Workspace

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from envlock.model.lockfile import LockDocs
    from envlock.model.spec import EnvSpec


@dataclass(frozen=True)
class LockRef:
    """A lock read from ``PATH``, ``PATH@GITREV`` or an env name, and where it lives."""

    lock: Lock
    label: str  # how to name it to people
    path: Path | None  # the file a sync may write the venv digest back to (None: read from git)
    folder: Path  # what the lock's relative ``path`` wheels are relative to
    env: str | None = None  # the env name it was given as (its workspace lock file), if so
    at: tuple[Path, str] | None = None  # read from git: (the repository, the revision)

    @property
    def writable(self) -> bool:
        """Whether a sync may write the venv digest into it: a file, not read from git, and not in a
        store (a generation's copy, a pin: store entries are never written, whichever ENVLOCK_HOME)."""
        # Not a pipe (`--lock <(git show ...)`): nothing to write back to.
        return self.path is not None and self.path.is_file() and not in_a_store(self.path.resolve())


def in_a_store(path: Path) -> bool:
    """Whether ``path`` lies in an envlock store (this ``ENVLOCK_HOME`` or another's): under its
    ``v<layout>`` folder, beside which the store's ``layout`` marker is."""
    from envlock.store.store import LAYOUT_VERSION

    return any(p.name == f"v{LAYOUT_VERSION}" and (p.parent / "layout").is_file() for p in path.parents)


def load_env_lock_ref(ws: Workspace, ref: str, env: str, command: str, target: str | None = None, *,
                      whole: bool = False, docs: LockDocs | None = None) -> LockRef:
    """``load_lock_ref`` for ``envlock COMMAND ENV --lock REF``: another env's lock is refused (its
    generations would hold, or be held to, another env's packages); ``target``: of a lock of several
    targets, the one read (None: this machine's; ``whole``: else the first, ``targets.pick``); ``docs``:
    where a lock file's document may be kept and found again (``model.lockfile.read_lock``)."""
    found = load_lock_ref(ws, ref, target, whole=whole, docs=docs)
    if found.lock.env and found.lock.env != env:
        raise UsageError(f"{found.label}: the lock of env {found.lock.env!r}, not {env!r}; "
                         f"expected `envlock {command} {found.lock.env} --lock {ref}`")
    return found


def _split_ref(ref: str) -> tuple[str, str | None]:
    """``PATH@GITREV`` as (PATH, GITREV); GITREV is None for a plain path.

    A path may hold an ``@`` (``/home/user@host/...``) and so may a rev (``HEAD@{1}``):
    an existing file is a path, else the split is at the first ``@`` after which an
    existing file ends, else at the first ``@`` (a lock git has but the tree has not).
    A rev that is empty or starts with ``-`` (which git would read as an option, such
    as ``--output=FILE``) is a ``UsageError``.
    """
    if "@" not in ref or (Path.cwd() / ref).is_file():
        return ref, None
    at = [i for i, c in enumerate(ref) if c == "@"]
    cut = next((i for i in at if (Path.cwd() / ref[:i]).is_file()), at[0])
    rev = ref[cut + 1:]
    if not rev or rev.startswith("-"):
        raise UsageError(f"{ref}: expected a git revision after '@' (a commit, tag or branch, such as HEAD~1), "
                         f"found {rev!r}")
    return ref[:cut], rev


def load_lock_ref(ws: Workspace, ref: str, target: str | None = None, *, whole: bool = False,
                  docs: LockDocs | None = None) -> LockRef:
    """A lock from ``PATH``, ``PATH@GITREV`` (read with ``git show``) or an env name; of a lock of several
    targets, ``target``'s (None: this machine's; ``whole``: else the first, ``targets.pick``)."""
    path_part, rev = _split_ref(ref)
    if rev is None and "/" not in ref and not ref.endswith(".toml") and not _lock_file_here(ws, ref):
        return _env_lock(ws, ref, target, whole, docs)
    if rev is None:
        given = Path.cwd() / path_part  # not resolved yet: `--lock <(git show REV:FILE)` is a pipe in /dev/fd
        if not given.exists():
            raise LockError(f"{ref}: no such lock file ({given})")
        path = given.resolve() if given.is_file() else given
        return LockRef(read_lock(given, target, whole=whole, docs=docs), ref, path, path.parent)
    return _git_lock(ws, ref, path_part, rev, target, whole)


def _env_lock(ws: Workspace, env: str, target: str | None = None, whole: bool = False,
              docs: LockDocs | None = None) -> LockRef:
    """The lock file of env ``env`` in the workspace."""
    if not (ws.root / "envs").is_dir():  # diff runs outside a workspace too, for two lock paths
        raise UsageError(f"{env!r}: no such lock file, and {ws.root} is not inside an envlock workspace "
                         "(no envs/ folder here or above) where it would be an env name; pass --root DIR, "
                         "or a lock path")
    path = ws.lock_path(env)
    if not path.exists():
        has_spec = (ws.root / "envs" / f"{env}.toml").is_file()
        raise LockError(f"{ws.relative(path)}: no lock of env {env!r}; "
                        + (f"create it with `envlock lock {env}`" if has_spec else
                           f"there is no envs/{env}.toml either (expected a lock path, PATH@GITREV or an env "
                           f"name; envs: {', '.join(ws.envs()) or 'none'})"))
    return LockRef(read_lock(path, target, whole=whole, docs=docs), ws.relative(path), path, path.parent, env=env)


def _git_lock(ws: Workspace, ref: str, path_part: str, rev: str, target: str | None = None,
              whole: bool = False) -> LockRef:
    """The lock file ``path_part`` as git has it at ``rev``: never written back; its ``path``
    wheels are relative to where the file lives in the work tree (locks/ -> ../wheelhouse/...)."""
    from envlock import runner  # subprocess: only a lock read from git

    # Resolved: git names files by the repository's real path, not a symlink's.
    path = (Path.cwd() / path_part).resolve()
    top = runner.git(["rev-parse", "--show-toplevel"], cwd=path.parent if path.parent.is_dir() else ws.root)
    if not top.ok:
        raise LockError(f"{ref}: {path.parent} is not in a git repository, so @{rev} cannot be read")
    repo = Path(top.stdout.strip())
    rel = path.relative_to(repo).as_posix() if path.is_relative_to(repo) else path_part
    kind = runner.git(["cat-file", "-t", f"{rev}:{rel}"], cwd=repo)
    if not kind.ok:
        raise LockError(f"{ref}: git has no {rel} at {rev!r}: {kind.tail(1)}")
    if kind.stdout.strip() != "blob":
        raise LockError(f"{ref}: {rel} at {rev!r} is a git {kind.stdout.strip()}, expected a lock file")
    shown = runner.git_bytes(["cat-file", "blob", f"{rev}:{rel}"], what=f"{ref}: git could not read {rel} at {rev!r}",
                             error=LockError, cwd=repo)
    try:
        text = shown.decode("utf-8")  # strictly, as read_lock reads a file
    except UnicodeDecodeError as exc:
        raise LockError(f"{ref}: not UTF-8 text (byte {exc.start}); not a lock file") from None
    return LockRef(Lock.from_toml(text, ref, target, whole=whole), ref, None, path.parent, at=(repo, rev))


def spec_at(ws: Workspace, ref: LockRef) -> EnvSpec | None:
    """The spec ``ref``'s lock was made from, when git has it: ``envs/ENV.toml`` at the revision a
    ``PATH@REV`` lock was read at (None: a lock from a file, or no such spec there, or one that does
    not read)."""
    if ref.at is None or not ref.lock.env:
        return None
    repo, rev = ref.at
    rel = (ws.root / "envs" / f"{ref.lock.env}.toml").resolve()
    if not rel.is_relative_to(repo.resolve()):
        return None
    from envlock import runner  # subprocess: only a lock read from git

    shown = runner.git(["show", f"{rev}:{rel.relative_to(repo.resolve()).as_posix()}"], cwd=repo)
    if not shown.ok:
        return None
    from envlock.model.spec import parse_spec  # packaging's parsers: not for a `sync --lock` of a file

    origin = Path(f"envs/{ref.lock.env}.toml@{rev}")
    try:
        return parse_spec(load_toml(shown.stdout, origin, SpecError), name=ref.lock.env, origin=origin)
    except SpecError:
        return None


def _lock_file_here(ws: Workspace, ref: str) -> bool:
    """Whether ``ref`` (no slash, no .toml) is a file in the current folder rather than an env name."""
    return not ws.lock_path(ref).exists() and (Path.cwd() / ref).is_file()
