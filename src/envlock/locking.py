"""``envlock lock``, ``lock --check`` and ``diff``: a spec resolved into its lock, and locks named.

``lock_env`` is the recipe: read the spec and the lock it replaces, prepare the patched
sources (built packages' metadata comes from them), resolve with the pinned uv, keep the
build records whose inputs did not move, and write the lock only if its bytes changed and
nobody else wrote it meanwhile. ``check_lock`` answers from the ``Drift`` alone. A lock is
named to ``sync --lock``, ``verify --lock`` and ``diff`` as a path, ``PATH@GITREV`` or an env
name (``load_lock_ref``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock import building, runner
from envlock.drift import drift
from envlock.errors import (
    EnvlockError,
    FetchError,
    LockChangedError,
    LockError,
    PackageIndexError,
    ResolveError,
    SpecError,
    UsageError,
    raise_all,
)
from envlock.lockfile import Lock, LockFile, read_lock
from envlock.mirrors import MirrorOptions, Mirrors, missing_folder
from envlock.spec import load_env_spec
from envlock.store import Store, replace_if_unchanged
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.diff import LockDiff
    from envlock.progress import Progress
    from envlock.resolve import Resolution
    from envlock.spec import EnvSpec


@dataclass(frozen=True)
class LockResult:
    """What ``envlock lock`` did; doubles as its ``--json`` output."""

    env: str
    path: Path
    changed: bool  # the file's bytes changed
    packages: int
    nightlies: Mapping[str, str] = field(default_factory=dict)  # name -> exact version
    mirrors: Mapping[str, str] = field(default_factory=dict)
    lock: Lock | None = field(default=None, repr=False)  # what the file now holds
    downloaded: int = 0  # bytes, to hash wheels an index publishes no hash for
    note: str = ""  # e.g. a mirror variable that names no index
    # The env's wheels brought into the store to compute a non-isolated build's input digest.
    build_downloaded: int = 0  # bytes
    build_fetched: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "lock": str(self.path),
            "changed": self.changed,
            "packages": self.packages,
            "nightlies": dict(self.nightlies),
            "mirrors": dict(self.mirrors),
            "downloaded": self.downloaded,
            "unbuilt": list(self.lock.unbuilt()) if self.lock is not None else [],
            "note": self.note,
            "build_downloaded": self.build_downloaded,
        }


def lock_env(ws: Workspace, env: str, asked: MirrorOptions | None = None,
             progress: Progress | None = None) -> LockResult:
    """``envlock lock ENV``: resolve ``envs/ENV.toml`` and write ``locks/pylock.ENV.toml`` (bytes
    unchanged if nothing changed), reading the mirrors ``asked`` and the environment names.
    ``progress``: of the downloads that hash wheels an index publishes no hash for."""
    spec = load_env_spec(ws, env)
    return lock_spec(ws, env, spec, Mirrors.of(spec, asked), progress)


def lock_spec(ws: Workspace, env: str, spec: EnvSpec, mirrors: Mirrors,
              progress: Progress | None = None) -> LockResult:
    """``lock_env`` for a spec read and mirrors found already (a sync that relocks)."""
    from envlock import http, resolve

    urls = resolve.index_urls(spec, mirrors.indexes)
    mirrors.register_credentials()  # a private index's wheels are hashed with its password
    missing = [f"indexes.{name}.url: {url!r}: no such folder ({folder}); expected an index on disk (a folder per "
               "project)" for name, url in sorted(urls.items())
               if name not in mirrors.indexes and (folder := missing_folder(url)) is not None]
    raise_all(SpecError, missing, f"{len(missing)} indexes on disk are missing", prefix=f"{spec.path}: ")
    old_file = LockFile.read(ws.lock_path(env))
    old = old_file.lock
    # Patched source trees: built packages' metadata (and so their dependencies) comes from them.
    store = Store.open()
    states = building.prepare_sources(ws, spec, store, lock=old, mirrors=mirrors.sources) if spec.sources else {}
    resolution = _resolve(ws, spec, mirrors, urls, store, states, old, progress)
    lock = Lock(
        env=env, python=spec.python, platform=spec.platform, spec_digest=spec.digest(),
        spec_keys=spec.key_digests(), packages=resolution.packages, requires_python=resolution.requires_python,
        nightlies=resolution.nightlies, sources={name: state.locked() for name, state in states.items()},
    )
    # Unchanged build inputs keep their wheel (build requirements resolved on the same index URL).
    session = building.BuildSession.of(ws, spec, store, states, lock, urls[spec.default_index.name], mirrors,
                                       progress=progress)
    lock, for_builds = session.carry_builds(old)
    if old is not None and old.install_digest() == lock.install_digest() and not old.venv_digest_stale:
        # Same wheels: the recorded venv digest holds (not one taken for wheels since edited away).
        lock = replace(lock, venv_digest=old.venv_digest, venv_python=old.venv_python, venv_install=old.venv_install)
    changed = _write(ws, env, old_file, lock)
    return LockResult(
        env=env, path=old_file.path, changed=changed, packages=len(lock.packages),
        nightlies={k: v.version for k, v in sorted(resolution.nightlies.items())},
        mirrors={name: http.redact(url) for name, url in mirrors.indexes.items()},  # printed: no credentials
        lock=lock, downloaded=resolution.downloaded, note=mirrors.stray_note(ws),
        build_downloaded=sum(f.downloaded for f in for_builds),
        build_fetched=sum(1 for f in for_builds for a in f.artifacts if a.source != "store"),
    )


def _resolve(ws: Workspace, spec: EnvSpec, mirrors: Mirrors, urls: Mapping[str, str], store: Store,
             states: Mapping[str, building.SourceState], old: Lock | None,
             progress: Progress | None) -> Resolution:
    """uv's resolution of ``spec``, checked by envlock; a failure to reach an index gets the
    mirror to read it from, and a note on a misspelt mirror variable."""
    from envlock import fetch, resolve

    build_sources, build_requires, build_vars = building.resolve_build_inputs(spec, states)
    # Hashes an index does not publish were computed from bytes now in the store.
    hashed = {a.url: a for p in old.packages for a in p.wheels if a.url} if old is not None else {}
    # Its nightlies, for dates the index may no longer list (the store keeps their wheels).
    kept = {name: (pin, pkg.wheels[0], pkg.index) for name, pin in (old.nightlies if old else {}).items()
            if old is not None and (pkg := old.package(name)) is not None and pkg.wheels and pkg.wheels[0].url}
    try:
        return resolve.resolve(spec, resolve.ResolveInputs(
            index_urls=urls, build_sources=build_sources, extra_requirements=build_requires,
            build_env=build_vars, store=store, hashed=hashed, progress=progress, kept_nightlies=kept,
            earlier_wheels={str(p.name): (p.wheels[0], p.index) for p in old.packages if p.wheels} if old else {},
            hash_unlisted=fetch.hash_unlisted,
        ))
    except (ResolveError, FetchError, PackageIndexError) as exc:
        # An index that cannot be read may be the one a misspelt mirror variable was meant for.
        hint = mirrors.index_hint(exc)
        note = mirrors.stray_note(ws)
        if not hint and not note:
            raise
        raise exc.with_details(*filter(None, [hint, note and f"note: {note}"])) from None


def _write(ws: Workspace, env: str, old: LockFile, lock: Lock) -> bool:
    """Write ``lock`` over ``old`` if its bytes differ; whether they did.

    PEP 751 validity comes from the writer (tests load every shape it writes with
    packaging.pylock); re-validating here would cost ~90 ms of import and parse per lock.
    """
    text = lock.to_toml()
    if old.text == text:
        return False
    if not replace_if_unchanged(old.path, old.data, text.encode()):
        raise LockChangedError(f"{ws.relative(old.path)}: changed by another envlock while this one resolved; "
                               f"nothing written. Run `envlock lock {env}` again")
    return True


@dataclass(frozen=True)
class LockCheck:
    """What ``envlock lock --check`` says; doubles as its ``--json`` output."""

    env: str
    path: Path
    current: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.env, "lock": str(self.path), "current": self.current, "reasons": list(self.reasons)}


def check_lock(ws: Workspace, env: str) -> LockCheck:
    """Whether the lock matches the spec: no network, no writes. ``LockError`` if there is no lock."""
    path = ws.lock_path(env)
    return _check(ws, env, load_env_spec(ws, env), path, read_lock(path))


def _check(ws: Workspace, env: str, spec: EnvSpec, path: Path, lock: Lock) -> LockCheck:
    found = drift(ws, env, spec, lock)
    return LockCheck(env=env, path=path, current=found.current, reasons=found.reasons)


@dataclass(frozen=True)
class LockRef:
    """A lock read from ``PATH``, ``PATH@GITREV`` or an env name, and where it lives."""

    lock: Lock
    label: str  # how to name it to people
    path: Path | None  # the file a sync may write the venv digest back to (None: read from git)
    folder: Path  # what the lock's relative ``path`` wheels are relative to
    env: str | None = None  # the env name it was given as (its workspace lock file), if so

    @property
    def writable(self) -> bool:
        """Whether a sync may write the venv digest into it: a file, not read from git, and not a
        generation's copy in a store (store entries are never written)."""
        from envlock.generations import is_lock_copy

        # Not a pipe (`--lock <(git show ...)`): nothing to write back to.
        return self.path is not None and self.path.is_file() and not is_lock_copy(self.path.resolve())


def load_env_lock_ref(ws: Workspace, ref: str, env: str, command: str) -> LockRef:
    """``load_lock_ref`` for ``envlock COMMAND ENV --lock REF``: another env's lock is refused (its
    generations would hold, or be held to, another env's packages)."""
    found = load_lock_ref(ws, ref)
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


def diff_refs(ws: Workspace, old: str, new: str) -> tuple[LockDiff, tuple[str, ...]]:
    """What changes from lock ``old`` to ``new`` (as ``load_lock_ref`` reads them), and notes.

    A note names an env given by name whose lock file the spec has moved past: its diff
    does not show the spec's change. A spec that does not read gives no note (the note is a
    courtesy; the diff stands).
    """
    from envlock.diff import diff_locks

    before, after = load_lock_ref(ws, old), load_lock_ref(ws, new)
    notes = []
    for ref in sorted({r.env: r for r in (before, after) if r.env is not None}.values(), key=lambda r: str(r.env)):
        env = str(ref.env)
        if ref.path is None:  # never: an env name is read from its lock file
            continue
        try:
            check = _check(ws, env, load_env_spec(ws, env), ref.path, ref.lock)  # the lock read once, above
        except EnvlockError:
            continue
        if not check.current:
            notes.append(f"{ws.relative(check.path)} is stale for envs/{env}.toml ({'; '.join(check.reasons)}); "
                         f"run `envlock lock {env}` to diff what the spec asks for")
    return diff_locks(before.lock, after.lock, old_label=before.label, new_label=after.label), tuple(notes)


def load_lock_ref(ws: Workspace, ref: str) -> LockRef:
    """A lock from ``PATH``, ``PATH@GITREV`` (read with ``git show``) or an env name."""
    path_part, rev = _split_ref(ref)
    if rev is None and "/" not in ref and not ref.endswith(".toml") and not _lock_file_here(ws, ref):
        return _env_lock(ws, ref)
    if rev is None:
        given = Path.cwd() / path_part  # not resolved yet: `--lock <(git show REV:FILE)` is a pipe in /dev/fd
        if not given.exists():
            raise LockError(f"{ref}: no such lock file ({given})")
        path = given.resolve() if given.is_file() else given
        return LockRef(read_lock(given), ref, path, path.parent)
    return _git_lock(ws, ref, path_part, rev)


def _env_lock(ws: Workspace, env: str) -> LockRef:
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
    return LockRef(read_lock(path), ws.relative(path), path, path.parent, env=env)


def _git_lock(ws: Workspace, ref: str, path_part: str, rev: str) -> LockRef:
    """The lock file ``path_part`` as git has it at ``rev``: never written back; its ``path``
    wheels are relative to where the file lives in the work tree (locks/ -> ../wheelhouse/...)."""
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
    return LockRef(Lock.from_toml(text, ref), ref, None, path.parent)


def _lock_file_here(ws: Workspace, ref: str) -> bool:
    """Whether ``ref`` (no slash, no .toml) is a file in the current folder rather than an env name."""
    return not ws.lock_path(ref).exists() and (Path.cwd() / ref).is_file()
