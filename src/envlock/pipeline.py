"""The stages chained: spec -> lock -> fetch -> build -> patch -> install -> verify.

Each function takes typed inputs and returns a typed result; none prints. The CLI
renders results; the stages below never reach around each other.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock.errors import (
    BuildError,
    EnvlockError,
    FetchError,
    LockChangedError,
    LockError,
    PackageIndexError,
    PatchError,
    ResolveError,
    SourceError,
    SourceTreeError,
    SpecError,
    UsageError,
    raise_all,
    redact,
)
from envlock.lockfile import Lock, read_lock
from envlock.store import replace_if_unchanged
from envlock.workspace import Workspace, env_var_suffix

if TYPE_CHECKING:
    from envlock.diff import LockDiff
    from envlock.fetch import FetchResult, Locate, Progress
    from envlock.spec import EnvSpec  # imported by load_env_spec: `sync --lock PATH` needs no spec
    from envlock.sync import SyncResult

MIRROR_ENV_PREFIX = "ENVLOCK_INDEX_"
#: Under the wheelhouse: builds of an ``--override-source`` tree (never named by a lock).
OVERRIDE_WHEELHOUSE = "overrides"
SOURCE_MIRROR_ENV_PREFIX = "ENVLOCK_SOURCE_"


def env_var(prefix: str, name: str) -> str:
    """``PREFIX<NAME>``: see ``workspace.env_var_suffix``."""
    return prefix + env_var_suffix(name)


def _from_env(prefix: str, names: Iterable[str], environ: Mapping[str, str] | None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {name: environ[var] for name in names if environ.get(var := env_var(prefix, name))}


def mirrors_from_env(spec: EnvSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``ENVLOCK_INDEX_<NAME>=URL`` per spec index."""
    return _from_env(MIRROR_ENV_PREFIX, spec.indexes, environ)


def register_credentials(spec: EnvSpec, mirrors: Mapping[str, str]) -> None:
    """Have every download send the ``user:password@`` of the spec's indexes and ``mirrors`` to
    their origin (``http.register_credentials``). envlock.http (socket, ssl) is imported only
    when one holds credentials: a sync downloads nothing most of the time."""
    if urls := [url for url in (*(i.url for i in spec.indexes.values()), *mirrors.values()) if "@" in url]:
        from envlock import http

        http.register_credentials(*urls)


def index_mirrors(spec: EnvSpec, explicit: Mapping[str, str] | None = None) -> dict[str, str]:
    """The mirror URL of each spec index that has one: ``--index NAME=URL`` over ``ENVLOCK_INDEX_<NAME>``.

    Mirrors that are no URL are refused here (exit 2, each named with where it came
    from), not left to uv to report as a package missing from the registry; so is an
    ``--index NAME`` the spec has no index of, for ``lock`` and ``sync`` alike.
    """
    from envlock.spec import is_index_url

    given = {name: (env_var(MIRROR_ENV_PREFIX, name), url) for name, url in mirrors_from_env(spec).items()}
    given.update({name: (f"--index {name}", url) for name, url in (explicit or {}).items()})
    bad = [f"{origin}={redact(url)!r}: expected an http(s):// or file:// URL"  # a password must not reach a log
           for _, (origin, url) in sorted(given.items()) if not is_index_url(url)]
    bad += [f"{origin}={url!r}: no such folder ({path}); expected an index on disk (a folder per project)"
            for _, (origin, url) in sorted(given.items())
            if is_index_url(url) and (path := _missing_folder(url)) is not None]
    raise_all(UsageError, bad, f"{len(bad)} index mirrors are not URLs of an index")
    if unknown := sorted(set(given) - set(spec.indexes)):
        known = ", ".join(sorted(spec.indexes))
        raise UsageError(f"--index {unknown[0]}=...: {spec.path} has no [indexes.{unknown[0]}]; indexes: {known}")
    return {name: url for name, (_, url) in given.items()}


def _missing_folder(url: str) -> str | None:
    """The path of a ``file://`` index URL that names no folder (else None): uv would report
    every package as missing from the registry."""
    from envlock.http import file_path

    path = file_path(url)
    return path if path is not None and not os.path.isdir(path) else None


def stray_mirror_vars(ws: Workspace, spec: EnvSpec, environ: Mapping[str, str] | None = None) -> list[str]:
    """``ENVLOCK_INDEX_*`` variables set that name no index of any env spec in the workspace (a
    typo: silently unused, the spec's own URL would be read instead)."""
    from envlock.spec import read_spec

    environ = os.environ if environ is None else environ
    wanted = {env_var(MIRROR_ENV_PREFIX, name) for name in spec.indexes}
    stray = sorted(v for v, url in environ.items() if v.startswith(MIRROR_ENV_PREFIX) and url and v not in wanted)
    for other in ws.envs() if stray else ():  # another env's index is no typo
        try:
            wanted |= {env_var(MIRROR_ENV_PREFIX, name) for name in read_spec(ws.root / "envs" / f"{other}.toml",
                                                                                 name=other)[0].indexes}
        except (SpecError, OSError):
            continue
    return [v for v in stray if v not in wanted]


def stray_mirror_note(ws: Workspace, spec: EnvSpec) -> str:
    """The note for ``stray_mirror_vars`` ("" when there are none)."""
    stray = stray_mirror_vars(ws, spec)
    if not stray:
        return ""
    known = ", ".join(env_var(MIRROR_ENV_PREFIX, name) for name in sorted(spec.indexes))
    return (f"{', '.join(stray)} set, but no env spec here has an index of that name, so it was not used "
            f"(this env's: {known})")


#: How a host that cannot be reached reads: envlock's own downloads, then uv's resolver.
_UNREACHABLE = ("cannot connect", "dns error", "tcp connect error", "error sending request")


def index_mirror_hint(spec: EnvSpec, mirrors: Mapping[str, str], exc: EnvlockError) -> str:
    """For a failure to reach the host of spec indexes without a mirror: how to read them from one ("" else).

    A cluster with no route to download.pytorch.org reads that index from a mirror; the
    failure itself names only the URL it could not reach."""
    from urllib.parse import urlsplit

    from envlock import http

    said = str(exc)
    if not any(words in said for words in _UNREACHABLE):
        return ""
    names = [name for name, index in sorted(spec.indexes.items()) if name not in mirrors
             and (host := urlsplit(http.redact(index.url)).netloc) and f"//{host}/" in said]
    if not names:
        return ""
    how = ", ".join(f"--index {name}=URL or {env_var(MIRROR_ENV_PREFIX, name)}=URL" for name in names)
    return f"no access to that host? read {'its index' if len(names) == 1 else 'those indexes'} from a mirror: {how}"


def source_mirrors(spec: EnvSpec, explicit: Mapping[str, str] | None = None,
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where to fetch each git repository from: ``--source NAME=URL`` or ``ENVLOCK_SOURCE_<NAME>=URL``.

    NAME is a ``[sources.NAME]`` or a build's ``fetchcontent.NAME`` (cutlass and the like,
    which an air-gapped cluster also needs from a mirror). The lock still names the spec's
    URL and the pinned commit is verified, so a mirror (a local clone, an internal git
    server) changes where bytes come from, not what they are.
    """
    names = {*spec.sources, *(dep.name for b in spec.builds.values() for dep in b.fetchcontent)}
    out = _from_env(SOURCE_MIRROR_ENV_PREFIX, names, environ)
    for name, url in (explicit or {}).items():
        if name not in names:
            known = ", ".join(sorted(names)) or "none"
            raise UsageError(f"--source {name}=...: {spec.path} has no [sources.{name}] nor a fetchcontent.{name}; "
                             f"known: {known}")
        if name in spec.sources and spec.sources[name].git is None:
            raise UsageError(f"--source {name}=...: [sources.{name}] is a path source; only git sources take a mirror")
        out[name] = url
    return out


def load_env_spec(ws: Workspace, env: str, *, check_paths: bool = True) -> EnvSpec:
    """The env's spec; ``check_paths``: its source paths and patches must exist in the workspace
    (not for work that may never read them: a frozen sync whose wheels are all there, a build
    from --override-source)."""
    from envlock.spec import load_spec

    return load_spec(ws.spec_path(env), name=env, root=ws.root if check_paths else None)


@dataclass(frozen=True)
class LockResult:
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


def lock_env(
    ws: Workspace,
    env: str,
    *,
    mirrors: Mapping[str, str] | None = None,
    sources_from: Mapping[str, str] | None = None,
    spec: EnvSpec | None = None,
    progress: Progress | None = None,
) -> LockResult:
    """Resolve ``envs/ENV.toml`` and write ``locks/pylock.ENV.toml`` (bytes unchanged if nothing changed).

    ``spec``: the env's spec when the caller has read it already. ``progress``: of the
    downloads that hash wheels an index publishes no hash for.
    """
    from envlock import fetch, http, resolve
    from envlock.store import Store

    spec = spec or load_env_spec(ws, env)
    all_mirrors = index_mirrors(spec, mirrors)
    urls = resolve.index_urls(spec, all_mirrors)
    register_credentials(spec, all_mirrors)  # a private index's wheels are hashed with its password
    missing = [f"indexes.{name}.url: {url!r}: no such folder ({folder}); expected an index on disk (a folder per "
               "project)" for name, url in sorted(urls.items())
               if name not in all_mirrors and (folder := _missing_folder(url)) is not None]
    raise_all(SpecError, missing, f"{len(missing)} indexes on disk are missing", prefix=f"{spec.path}: ")
    path = ws.lock_path(env)
    old_bytes, old_text = _read_lock_file(path)
    old = _lock_optional(old_text, path)
    # Patched source trees: built packages' metadata (and so their dependencies) comes from them.
    store = Store.open()
    git_mirrors = source_mirrors(spec, sources_from)
    states = _sources_for_lock(ws, spec, store, old, git_mirrors)
    build_sources, build_requires, build_vars = resolve_build_inputs(spec, states)
    # Hashes an index does not publish were computed from bytes now in the store.
    hashed = {a.url: a for p in old.packages for a in p.wheels if a.url} if old is not None else {}
    # Its nightlies, for dates the index may no longer list (the store keeps their wheels).
    kept = {name: (pin, pkg.wheels[0], pkg.index) for name, pin in (old.nightlies if old else {}).items()
            if old is not None and (pkg := old.package(name)) is not None and pkg.wheels and pkg.wheels[0].url}
    try:
        resolution = resolve.resolve(spec, resolve.ResolveInputs(
            index_urls=urls, build_sources=build_sources, extra_requirements=build_requires,
            build_env=build_vars, store=store, hash_unlisted=fetch.hash_unlisted, hashed=hashed, progress=progress,
            kept_nightlies=kept,
            earlier_wheels={str(p.name): (p.wheels[0], p.index) for p in old.packages if p.wheels} if old else {},
        ))
    except (ResolveError, FetchError, PackageIndexError) as exc:
        # An index that cannot be read may be the one a misspelt mirror variable was meant for.
        hint = index_mirror_hint(spec, all_mirrors, exc)
        note = stray_mirror_note(ws, spec)
        if not hint and not note:
            raise
        raise exc.with_details(*filter(None, [hint, note and f"note: {note}"])) from None
    lock = Lock(
        env=env,
        python=spec.python,
        platform=spec.platform,
        spec_digest=spec.digest(),
        spec_keys=spec.key_digests(),
        packages=resolution.packages,
        requires_python=resolution.requires_python,
        nightlies=resolution.nightlies,
        sources={name: state.locked() for name, state in states.items()},
    )
    # Unchanged build inputs keep their wheel (build requirements resolved on the same index URL).
    for_builds: list[FetchResult] = []  # the env's wheels fetched to compute non-isolated builds' inputs
    lock = _carry_builds(ws, spec, store, states, lock, old, urls[spec.default_index.name], git_mirrors, progress,
                         for_builds)
    if old is not None and old.install_digest() == lock.install_digest() and not old.venv_digest_stale:
        # Same wheels: the recorded venv digest holds (not one taken for wheels since edited away).
        lock = replace(lock, venv_digest=old.venv_digest, venv_python=old.venv_python, venv_install=old.venv_install)
    # PEP 751 validity comes from the writer (tests load every shape it writes with
    # packaging.pylock); re-validating here would cost ~90 ms of import and parse per lock.
    text = lock.to_toml()
    changed = old_text != text
    if changed and not replace_if_unchanged(path, old_bytes, text.encode()):
        raise LockChangedError(f"{ws.relative(path)}: changed by another envlock while this one resolved; "
                               f"nothing written. Run `envlock lock {env}` again")
    return LockResult(
        env=env,
        path=path,
        changed=changed,
        packages=len(lock.packages),
        nightlies={k: v.version for k, v in sorted(resolution.nightlies.items())},
        mirrors={name: http.redact(url) for name, url in all_mirrors.items()},  # printed: no credentials
        lock=lock,
        downloaded=resolution.downloaded,
        note=stray_mirror_note(ws, spec),
        build_downloaded=sum(f.downloaded for f in for_builds),
        build_fetched=sum(1 for f in for_builds for a in f.artifacts if a.source != "store"),
    )


def _read_optional(path: Path) -> Lock | None:
    return _lock_optional(_read_lock_file(path)[1], path)


def _read_lock_file(path: Path) -> tuple[bytes | None, str | None]:
    """A lock file's bytes (None if missing or unreadable) and their text (None if not UTF-8).

    The text is the bytes decoded as they are (no newline translation), so it encodes
    back to exactly the bytes a later ``replace_if_unchanged`` compares with.
    """
    from envlock.lockfile import read_lock_bytes

    try:
        data = read_lock_bytes(path)
    except OSError:
        return None, None
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        return data, None


def _lock_optional(text: str | None, path: Path) -> Lock | None:
    if text is None:
        return None
    try:
        return Lock.from_toml(text, path)
    except LockError:
        return None


@dataclass(frozen=True)
class LockCheck:
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


def _spec_reasons(spec: EnvSpec, lock: Lock) -> list[str]:
    """The spec keys added, removed or changed since ``lock`` was made (it was made for another spec)."""
    reasons = []
    new = spec.key_digests()
    old = dict(lock.spec_keys)
    for key in sorted(set(new) | set(old)):
        if key not in old:
            reasons.append(f"{key}: added to the spec")
        elif key not in new:
            reasons.append(f"{key}: removed from the spec")
        elif old[key] != new[key]:
            reasons.append(f"{key}: changed")
    return reasons or ["spec changed"]


def _frozen_reasons(ws: Workspace, spec: EnvSpec, lock: Lock) -> tuple[list[str], list[str]]:
    """What makes ``lock`` stale for the spec, as a frozen sync says it: the spec's keys, and
    patches and path sources edited since (not missing ones: a frozen sync needs no source);
    and the path sources that cannot be hashed at all (a link out of the tree), which a note
    names rather than failing a sync that reads no source."""
    reasons = _spec_reasons(spec, lock) if lock.spec_digest != spec.digest() else []
    unhashable = []
    for name, source in sorted(lock.sources.items()):
        if source.kind == "path" and source.tree_digest is not None and (ws.root / source.location).is_dir():
            try:
                reasons += _tree_drift(ws, name, source.location, source.tree_digest)
            except SourceTreeError as exc:
                unhashable.append(exc.message)
        reasons += [r for patch in source.patches if (ws.root / patch.path).is_file()
                    for r in _patch_drift(ws, name, patch.path, patch.sha256)]
    return reasons, unhashable


def _check(ws: Workspace, env: str, spec: EnvSpec, path: Path, lock: Lock) -> LockCheck:
    reasons: list[str] = []
    if lock.spec_digest != spec.digest():
        reasons += _spec_reasons(spec, lock)
    elif lock.env == env:
        # Made for this spec: a lock edited by hand since may still not keep its pins.
        versions = {p.name: p.version for p in lock.packages}
        nightlies = {name: pin.version for name, pin in lock.nightlies.items()}
        reasons += [f"{problem} (edited by hand?)" for problem in spec.pin_problems(versions, nightlies,
                                                                                      what="the lock")]
        # The spec digest covers these: a lock that holds others was edited after it was written.
        reasons += [f"tool.envlock.{key}: {got!r}, but env.{key} is {want!r} (edited by hand?)"
                    for key, got, want in (("python", lock.python, spec.python), ("platform", lock.platform,
                                                                                    spec.platform)) if got != want]
    if lock.env != env:
        reasons.append(f"tool.envlock.env: the lock of env {lock.env!r}, not {env!r}")
    if lock.venv_digest_stale:
        reasons.append("tool.envlock.venv-digest: recorded for other packages than the lock's (install digest "
                       f"{lock.venv_install}, now {lock.install_digest()}): the packages were edited by hand since")
    for name, source in sorted(lock.sources.items()):
        reasons += _source_drift(ws, name, source)
    return LockCheck(env=env, path=path, current=not reasons, reasons=tuple(reasons))


def _source_drift(ws: Workspace, name: str, source: LockedSource) -> list[str]:
    """A source's edits since the lock: its tree (a ``path`` source) and its patches."""
    reasons = _tree_drift(ws, name, source.location, source.tree_digest) if (
        source.kind == "path" and source.tree_digest is not None) else []
    for patch in source.patches:
        reasons += _patch_drift(ws, name, patch.path, patch.sha256)
    return reasons


def input_drift(ws: Workspace, spec: EnvSpec, lock: Lock, build: str, source: str) -> list[str]:
    """What changed since the lock in the inputs of ``[builds.BUILD]`` (of source ``source``):
    ``lock --check``'s reasons that name that build or source (the other sources are not read)."""
    keys = (f"sources.{source}.", f"sources.{source}:", f"builds.{build}.", f"builds.{build}:")
    reasons = _spec_reasons(spec, lock) if lock.spec_digest != spec.digest() else []
    reasons += _source_drift(ws, source, lock.sources[source]) if source in lock.sources else []
    return list(dict.fromkeys(r for r in reasons if r.startswith(keys)))


def _tree_drift(ws: Workspace, source: str, rel: str, digest: str) -> list[str]:
    """A ``path`` source is content-hashed: an edit in its tree makes the lock stale."""
    from envlock.sources import tree_digest

    folder = ws.root / rel
    if not folder.is_dir():
        return [f"sources.{source}.path: {rel} is missing"]
    if tree_digest(folder, name=f"sources.{source}.path: {rel}") != digest:
        return [f"sources.{source}.path: {rel} changed since the lock"]
    return []


def _patch_drift(ws: Workspace, source: str, rel: str, sha256: str) -> list[str]:
    from envlock.quick import file_sha256

    actual = file_sha256(str(ws.root / rel))
    if actual is None:
        return [f"sources.{source}.patches: {rel} is missing"]
    if actual != sha256:
        return [f"sources.{source}.patches: {rel} changed since the lock"]
    return []


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
    from envlock import runner

    path_part, rev = _split_ref(ref)
    if rev is None and "/" not in ref and not ref.endswith(".toml") and not _lock_file_here(ws, ref):
        if not (ws.root / "envs").is_dir():  # diff runs outside a workspace too, for two lock paths
            raise UsageError(f"{ref!r}: no such lock file, and {ws.root} is not inside an envlock workspace "
                             "(no envs/ folder here or above) where it would be an env name; pass --root DIR, "
                             "or a lock path")
        path = ws.lock_path(ref)  # an env name
        if not path.exists():
            has_spec = (ws.root / "envs" / f"{ref}.toml").is_file()
            raise LockError(f"{ws.relative(path)}: no lock of env {ref!r}; "
                            + (f"create it with `envlock lock {ref}`" if has_spec else
                               f"there is no envs/{ref}.toml either (expected a lock path, PATH@GITREV or an env "
                               f"name; envs: {', '.join(ws.envs()) or 'none'})"))
        return LockRef(read_lock(path), ws.relative(path), path, path.parent, env=ref)
    if rev is None:
        given = Path.cwd() / path_part  # not resolved yet: `--lock <(git show REV:FILE)` is a pipe in /dev/fd
        if not given.exists():
            raise LockError(f"{ref}: no such lock file ({given})")
        path = given.resolve() if given.is_file() else given
        return LockRef(read_lock(given), ref, path, path.parent)
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
    # Never written back; its `path` wheels are relative to where the file lives in the
    # work tree (locks/ -> ../wheelhouse/...).
    return LockRef(Lock.from_toml(text, ref), ref, None, path.parent)


def _lock_file_here(ws: Workspace, ref: str) -> bool:
    """Whether ``ref`` (no slash, no .toml) is a file in the current folder rather than an env name."""
    return not ws.lock_path(ref).exists() and (Path.cwd() / ref).is_file()


def sync(
    ws: Workspace,
    env: str,
    *,
    frozen: bool = False,
    offline: bool = False,
    lock_ref: str | None = None,
    progress: Progress | None = None,
    sources_from: Mapping[str, str] | None = None,
    on_build: Callable[[str, str], None] | None = None,
    mirrors: Mapping[str, str] | None = None,
) -> SyncResult:
    """Make ``env`` match its lock (``--lock PATH[@REV]`` overrides which) and return a ``SyncResult``.

    Without ``lock_ref`` a missing or stale lock is re-locked first, unless ``frozen``
    (then a missing lock is a ``LockError``). The venv digest is written back only
    to a lock file in the working tree, never to a ``PATH@REV``. ``on_build(name,
    input digest)`` is called before each local build this sync runs (minutes to hours).
    ``mirrors`` (``--index NAME=URL``, over ``ENVLOCK_INDEX_<NAME>``): a relock resolves
    against them, and wheels locked from spec index NAME are downloaded from its mirror
    (``fetch.mirror_locator``).
    """
    import hashlib
    import time

    started = time.monotonic()

    from envlock.store import Store
    from envlock.sync import sync_lock

    inputs = None
    spec_input: dict[str, str] | None = None  # frozen: the spec and patches the lock was found made for
    base_dir: Path | None = None
    hashed = 0  # bytes a relock downloaded
    built_downloaded = built_fetched = 0  # what the builds' fetch of the env's wheels brought in
    relocked = False  # the lock file was written anew first
    if offline and mirrors:
        raise UsageError("--index: --offline downloads nothing, so no mirror is read; drop one of the two")
    local_wheels: dict[str, list[Path]] = {}  # sha256 -> where a built wheel of a --lock PATH lock may be
    mirrored_spec: EnvSpec | None = None  # the spec whose index names the mirrors are given by
    unread = ""  # why the mirrors of ENVLOCK_INDEX_* were not applied
    stale = ""  # frozen: what the spec asks for that the lock synced as it is does not have
    stray: str | None = None  # the note on misspelt ENVLOCK_INDEX_* variables, once known
    download_from: dict[str, str] = {}  # spec index name -> mirror URL, for the downloads
    if lock_ref is not None:
        if sources_from:
            raise UsageError(f"--source: `sync --lock {lock_ref}` neither locks nor builds, so it fetches no source")
        # The mirrors are named by spec index, and a private index's credentials are in the spec's
        # URL: only the spec says which packages an index serves. Read when there is one.
        spec_file = ws.root / "envs" / f"{env}.toml"
        if mirrors and not spec_file.is_file():
            raise UsageError(f"--index {next(iter(mirrors))}=...: mirrors are named by spec index, and env "
                             f"{env!r} has no spec ({ws.relative(spec_file)})")
        if not offline and spec_file.is_file():
            try:
                mirrored_spec = load_env_spec(ws, env, check_paths=False)
            except SpecError:
                if mirrors:
                    raise
                if _mirror_vars():  # only ENVLOCK_INDEX_* asked: `--lock` syncs as it is, and says so
                    unread = (f"ENVLOCK_INDEX_* is set, but {ws.relative(spec_file)} does not read (`envlock lock "
                              f"{env} --check` says why), so no mirror was applied to this sync's downloads")
            if mirrored_spec is not None:
                download_from = index_mirrors(mirrored_spec, mirrors)
                register_credentials(mirrored_spec, download_from)
        ref = load_env_lock_ref(ws, lock_ref, env, "sync")
        lock, lock_path, base_dir = ref.lock, ref.path if ref.writable else None, ref.folder
        if ref.path is not None:  # a lock copied out of locks/: its built wheels are named from there
            local_wheels = _local_wheels(ws, lock, ref.folder)
        if unbuilt := lock.unbuilt():
            # As it is, it would make a venv without the kernel: never silently.
            how = (f"check that revision's envs/, locks/ and patches/ out and run `envlock sync {env}` there, "
                   "which builds" if ref.path is None else
                   f"build first, or run `envlock sync {env}`, which builds")
            raise LockError(f"{ref.label}: records no build of {', '.join(unbuilt)} (its spec declares "
                            f"{', '.join('[builds.' + n + ']' for n in unbuilt)}; the lock was written before "
                            f"`envlock build {env}`); {how}")
    else:
        from envlock.spec import read_spec

        spec_path = ws.spec_path(env)  # an unknown env is a usage error before anything else
        lock_path = ws.lock_path(env)
        # One read of each file: the spec parsed is the spec hashed for the no-op stamp.
        # Frozen, the lock is synced as it is: the sources are read only if a build is missing.
        spec, spec_bytes = read_spec(spec_path, name=env, root=None if frozen else ws.root)
        source_mirrors(spec, sources_from)  # a --source NAME the spec lacks is an error before any work
        if not offline:
            mirrored_spec, download_from = spec, index_mirrors(spec, mirrors)  # a NAME the spec lacks: exit 2
            register_credentials(spec, download_from)  # before a relock or a build downloads too
        found = read_lock(lock_path) if frozen or lock_path.exists() else None
        if found is not None and found.env != env:
            # As for --lock: the env's generations would hold another env's packages.
            raise UsageError(f"{ws.relative(lock_path)}: the lock of env {found.env!r}, not {env!r}; expected "
                             f"the lock of env {env!r} there (`envlock lock {env}` writes it anew)")
        if offline and found is not None and (unbuilt := found.unbuilt()):
            raise LockError(f"{ws.relative(lock_path)}: --offline, but the lock records no build of "
                            f"{', '.join(unbuilt)} (building needs the index); run `envlock sync {env}` online")
        if frozen and found is not None and (unbuilt := found.unbuilt()):
            # Before anything is built: a frozen sync could only refuse after the build.
            raise LockError(f"{ws.relative(lock_path)}: --frozen, but the lock records no build of "
                            f"{', '.join(unbuilt)}; run `envlock build {env}` (or sync without --frozen)")
        check = _check(ws, env, spec, lock_path, found) if not frozen and found is not None else None
        if not frozen and (check is None or not check.current):
            if offline:
                why = "missing" if check is None else "stale (" + "; ".join(check.reasons) + ")"
                raise LockError(f"{ws.relative(lock_path)}: {why}; --offline cannot lock (that needs the indexes): "
                                f"run `envlock lock {env}` where they are reachable"
                                + ("" if check is None else ", or sync the lock as it is with --frozen --offline"))
            locked = lock_env(ws, env, mirrors=mirrors, sources_from=sources_from, spec=spec, progress=progress)
            stray = locked.note  # the relock read the workspace's specs for it already
            found, hashed, relocked = locked.lock, locked.downloaded + locked.build_downloaded, locked.changed
            built_fetched += locked.build_fetched
        assert found is not None  # frozen: read_lock raised; else lock_env returned the lock it wrote
        # Offline, nothing is built (a build resolves and installs its requirements from the
        # index): a locally built wheel then comes from the store, or is named missing by fetch.
        lock, builds = (found, None) if offline else _ensure_builds(
            ws, env, spec, found, lock_path, frozen=frozen, sources_from=sources_from, on_build=on_build,
            progress=progress, mirrors=mirrors)
        if builds is not None:  # the env's wheels a non-isolated build needed were fetched for it
            built_downloaded, built_fetched = built_downloaded + builds.downloaded, built_fetched + builds.fetched
        if not frozen:
            inputs = _checked_inputs(ws, spec, hashlib.sha256(spec_bytes).hexdigest(), lock, lock_path)
        elif any(frozen_said := _frozen_reasons(ws, spec, found)):  # synced as it is, as asked; but the
            # spec and the patches ask for something else now, or a source tree cannot be read
            reasons, unhashable = frozen_said
            stale = "; ".join(
                ([f"{ws.relative(lock_path)} is stale for {ws.relative(spec_path)} (" + "; ".join(reasons)
                  + f"): --frozen synced the lock as it is; `envlock lock {env}` locks the spec anew"]
                 if reasons else [])
                + [f"{problem} (--frozen reads no source; `envlock lock {env}` and a build refuse it until it is "
                   "fixed)" for problem in unhashable])
        elif not any(source.kind == "path" for source in found.sources.values()):  # a tree: checked each time
            spec_input = {str(spec_path): hashlib.sha256(spec_bytes).hexdigest(),
                          **{str(ws.root / patch.path): patch.sha256 for source in found.sources.values()
                             for patch in source.patches}}
    if stray is None:
        stray = stray_mirror_note(ws, mirrored_spec) if mirrored_spec is not None and not offline else ""
    try:
        result = sync_lock(Store.open(), env, lock, lock_path=lock_path, frozen=frozen or lock_path is None,
                           offline=offline, progress=progress, inputs=inputs, base_dir=base_dir,
                           mirrors=_package_mirrors(mirrored_spec, lock, download_from), local_wheels=local_wheels,
                           spec_input=spec_input)
    except FetchError as exc:
        if mirrored_spec is None or not (hint := index_mirror_hint(mirrored_spec, download_from, exc)):
            raise
        raise exc.with_details(hint) from None
    # The whole sync: a relock and builds come before sync_lock's own clock starts. Wheels
    # the relock downloaded to hash them are in the store now: this sync downloaded them.
    return replace(result, downloaded=result.downloaded + hashed + built_downloaded,
                   fetched=result.fetched + built_fetched, seconds=time.monotonic() - started,
                   relocked=relocked, note="; ".join(n for n in (result.note, unread, stale, stray) if n))


def _local_wheels(ws: Workspace, lock: Lock, folder: Path) -> dict[str, list[Path]]:
    """sha256 -> the files to copy each relative ``path`` wheel of ``lock`` (read from ``folder``)
    from, in the order to try them: beside ``folder``, and in the workspace's ``locks/`` (`envlock
    lock` writes them relative to it: ``../wheelhouse/...``), those of the locked size first.
    Each is held to the locked sha256 as it is copied in; the first that is, is taken."""
    out = {}
    for pkg in lock.packages:
        art = pkg.wheels[0]
        if art.path is None or Path(art.path).is_absolute():
            continue
        found = []
        for base in (folder, ws.root / "locks"):
            try:
                found.append((art.size not in (None, (base / art.path).stat().st_size), base / art.path))
            except OSError:
                continue
        if found:
            out[art.sha256] = [path for _, path in sorted(found, key=lambda item: item[0])]
    return out


def _mirror_vars() -> bool:
    return any(var.startswith(MIRROR_ENV_PREFIX) for var in os.environ)


def _package_mirrors(spec: EnvSpec | None, lock: Lock, by_index: Mapping[str, str]) -> dict[str, str]:
    """Locked package -> the mirror to download its wheel from: that of the spec index whose URL
    the lock records for it; for a URL the spec does not name (a lock made through another
    mirror), that of the one index the spec lets the package come from."""
    if spec is None or not by_index:
        return {}

    def url(name: str) -> str:
        return redact(spec.indexes[name].url).rstrip("/")

    out: dict[str, str] = {}
    for p in lock.packages:
        recorded = (p.index or "").rstrip("/")
        pinned = spec.index_of(p.name)
        # The pin wins where two spec indexes share the recorded URL.
        index = pinned if url(pinned) == recorded else next(
            (name for name in spec.indexes if url(name) == recorded), pinned)
        if index in by_index:
            out[p.name] = by_index[index]
    return out


def _checked_inputs(ws: Workspace, spec: EnvSpec, spec_sha: str, lock: Lock,
                    lock_path: Path) -> dict[str, str] | None:
    """The files whose bytes make ``lock`` current for its spec (path -> sha256), or None.

    For the fast no-op stamp (``envlock.quick``): ``spec`` was parsed from the bytes with
    ``spec_sha`` and must give the lock's spec digest; patches and local wheels must keep
    the sha256 the lock records (what ``lock --check`` and the build check read).
    """
    spec_path = spec.path
    if spec.digest() != lock.spec_digest:
        return None
    if any(source.kind == "path" for source in lock.sources.values()):
        return None  # a whole tree is an input: the full check (tree digest) runs every time
    inputs = {str(spec_path): spec_sha}
    for source in lock.sources.values():
        inputs.update((str(ws.root / patch.path), patch.sha256) for patch in source.patches)
    for pkg in lock.packages:
        art = pkg.wheels[0]
        if art.path is not None:
            inputs[str(lock_path.parent / art.path)] = art.sha256
    return inputs


# -- sources, patches and local builds (issue 4) --------------------------------

if TYPE_CHECKING:
    from envlock.build import BuildRequest, BuiltWheel, CheckResult
    from envlock.lockfile import LockedBuild, LockedSource
    from envlock.patch import EditSession, PatchedTree, PatchStatus, RecordedPatch
    from envlock.sources import PreparedSource
    from envlock.spec import BuildSpec, SourceSpec
    from envlock.store import Store



@dataclass(frozen=True)
class SourceState:
    """A source fetched (or snapshotted) into the store, and its patched tree."""

    prepared: PreparedSource
    patched: PatchedTree

    def locked(self) -> LockedSource:
        return self.prepared.locked(self.patched.patches)


def _pinned_commit(src: SourceSpec, lock: Lock | None) -> str | None:
    """The commit to use for a git source: the spec's full hash, else the one the lock resolved
    from this very URL and branch or tag (a branch is followed only when asked to relock)."""
    if src.git is None:
        return None
    from envlock.spec import COMMIT_ID

    if src.rev and COMMIT_ID.fullmatch(src.rev):
        return src.rev
    locked = lock.sources.get(src.name) if lock is not None else None
    if (locked is not None and locked.kind == "git" and locked.location == src.git and locked.commit
            and locked.rev == (src.rev or "HEAD")):
        return locked.commit
    return None  # resolved now (``git ls-remote``); the lock then records it


def prepare_sources(
    ws: Workspace,
    spec: EnvSpec,
    store: Store,
    *,
    lock: Lock | None = None,
    overrides: Mapping[str, Path] | None = None,
    names: set[str] | None = None,
    mirrors: Mapping[str, str] | None = None,
) -> dict[str, SourceState]:
    """Fetch or snapshot each source (only ``names``, if given) and apply its patches."""
    from envlock import patch, sources
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(spec.sources))
    if unknown:
        known = ", ".join(sorted(spec.sources)) or "none"
        raise UsageError(f"--override-source {unknown[0]}=...: {spec.path} has no [sources.{unknown[0]}]; "
                         f"sources: {known}")
    out: dict[str, SourceState] = {}
    for name, src in sorted(spec.sources.items()):
        if names is not None and name not in names:
            continue
        with _mirror_hint(name, src, mirrors or {}):
            prepared = sources.prepare(src, store, ws.root, commit=_pinned_commit(src, lock),
                                       override=overrides.get(name), fetch_from=(mirrors or {}).get(name))
        patches = patch.load_patches(ws.root, src.patches)
        try:
            patched = patch.apply_all(name, prepared.tree, prepared.tree_digest, patches, store)
        except PatchError as exc:
            if name not in overrides:
                raise
            raise PatchError(exc.message, details=[
                *exc.details, f"--override-source {name}=...: the spec's patches are applied to that tree, so it "
                "must be unpatched (a `patch edit` work dir has them applied already)"]) from None
        out[name] = SourceState(prepared, patched)
    return out


@contextlib.contextmanager
def _mirror_hint(name: str, src: SourceSpec, mirrors: Mapping[str, str], *, option: bool = True) -> Iterator[None]:
    """A git source that could not be fetched: say how to fetch it from a clone or mirror instead.

    ``option``: whether the command takes ``--source`` (else only the variable is named)."""
    try:
        yield
    except SourceError as exc:
        if src.git is None or name in mirrors:
            raise
        var = env_var(SOURCE_MIRROR_ENV_PREFIX, name)
        how = f"--source {name}=URL-OR-PATH or {var}=URL-OR-PATH" if option else f"{var}=URL-OR-PATH"
        raise exc.with_details(f"no access to {src.git}? fetch the pinned commit from a clone or mirror: "
                               f"{how}") from None


def _project_name(project: Path) -> str | None:
    """The static ``[project] name`` of ``project``'s pyproject.toml, if it has one."""
    from envlock.tomlio import load_toml

    path = project / "pyproject.toml"
    try:
        name = load_toml(path.read_text(encoding="utf-8"), path, BuildError).get("project", {}).get("name")
    except (OSError, UnicodeDecodeError, BuildError, AttributeError):
        return None  # the build backend reports what it cannot read
    return name if isinstance(name, str) and name else None


def resolve_build_inputs(
    spec: EnvSpec, states: Mapping[str, SourceState]
) -> tuple[dict[Any, Path], tuple[str, ...], dict[str, str]]:
    """For the resolver: each built package's patched source dir (its metadata), the build
    requirements of ``isolation = false`` builds (locked with the env), and the builds' env."""
    from envlock.lockfile import canonicalize_name

    build_sources: dict[Any, Path] = {}
    extra: set[str] = set()
    env: dict[str, str] = {}
    for pkg in spec.packages.values():
        if pkg.build and pkg.build in spec.builds:
            b = spec.builds[pkg.build]
            tree = states[b.source].patched.tree
            project = tree / b.subdirectory if b.subdirectory else tree
            if not project.is_dir():  # else uv reports "Distribution not found" as a failed resolution
                raise SpecError(f"{spec.path}: builds.{pkg.build}.subdirectory: expected a folder of source "
                                f"{b.source!r} (as patched), found no {b.subdirectory!r} there")
            if (named := _project_name(project)) is not None and canonicalize_name(named) != pkg.name:
                # Else uv's "metadata name does not match" reads as a failed resolution, exit 1.
                where = f"{b.subdirectory}/pyproject.toml" if b.subdirectory else "pyproject.toml"
                raise SpecError(f"{spec.path}: [builds.{pkg.build}]: source {b.source!r} builds project "
                                f"{named!r} ({where}), expected {pkg.build!r}: a build makes the package of its "
                                f"own name; name the build (and its package) {named!r}")
            build_sources[pkg.name] = project
            env.update(b.env)
            if not b.isolation:
                extra.update(b.requires)
    return build_sources, tuple(sorted(extra)), env


@dataclass(frozen=True)
class BuildReport:
    env: str
    lock: Path
    builds: tuple[BuiltWheel, ...]
    checks: tuple[CheckResult, ...]
    notices: tuple[str, ...]
    lock_changed: bool
    new_lock: Lock  # the lock with these builds (written when lock_changed)
    downloaded: int = 0  # bytes of the env's wheels brought into the store for non-isolated builds
    fetched: int = 0  # how many of them

    @property
    def rebuilt(self) -> int:
        return sum(1 for b in self.builds if b.rebuilt)

    @property
    def reproducible(self) -> bool:
        return all(c.reproducible for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "lock": str(self.lock),
            "lock-changed": self.lock_changed,
            "rebuilt": self.rebuilt,
            "builds": [b.to_dict() for b in self.builds],
            "checks": [c.to_dict() for c in self.checks],
            "reproducible": self.reproducible,
            "notices": list(self.notices),
        }


def build_env(
    ws: Workspace,
    env: str,
    packages: tuple[str, ...] = (),
    *,
    check: bool = False,
    overrides: Mapping[str, Path] | None = None,
    frozen: bool = False,
    sources_from: Mapping[str, str] | None = None,
    on_build: Callable[[str, str], None] | None = None,
    spec: EnvSpec | None = None,
    progress: Progress | None = None,
    mirrors: Mapping[str, str] | None = None,
) -> BuildReport:
    """Build the env's ``[builds.*]`` (or just ``packages``) into the wheelhouse and record them in its lock.

    The lock (``envlock lock``) must exist: ``isolation = false`` builds run against its
    packages. Records each source's commit and patch digests, each build's input digest
    and wheel sha256, and a PEP 751 entry pointing at the wheelhouse. With ``check``, every
    build is also rebuilt from scratch and compared. An ``--override-source`` build is
    never recorded in the lock. ``frozen``: rebuild what the lock records, from its build
    requirements, and leave the lock as it is. ``spec``: the env's spec when the caller has
    read it already.
    """
    from packaging.utils import canonicalize_name, parse_wheel_filename

    from envlock import build, resolve
    from envlock.lockfile import Artifact, LockedPackage
    from envlock.store import Store

    spec = spec or load_env_spec(ws, env, check_paths=not overrides)
    lock_path = ws.lock_path(env)
    lock_bytes, lock_text = _read_lock_file(lock_path)
    if lock_text is None:
        raise LockError(f"{lock_path}: no lock file; create it with `envlock lock {env}` before building")
    lock = Lock.from_toml(lock_text, lock_path)
    wanted = list(spec.builds.values())
    if packages:
        by_name = {canonicalize_name(b.name): b for b in wanted}  # a build's name is its table key
        unknown = [p for p in packages if canonicalize_name(p) not in by_name]
        if unknown:
            known = ", ".join(sorted(spec.builds)) or "none"
            raise UsageError(f"{spec.path}: no [builds.{unknown[0]}]; builds: {known}")
        wanted = list({canonicalize_name(p): by_name[canonicalize_name(p)] for p in packages}.values())
    store = Store.open()
    git_mirrors = source_mirrors(spec, sources_from)
    states = prepare_sources(ws, spec, store, lock=lock, overrides=overrides, names={b.source for b in wanted},
                             mirrors=git_mirrors)
    fetched: list[FetchResult] = []
    locate = None
    by_index = index_mirrors(spec, mirrors)  # --index, ENVLOCK_INDEX_*
    register_credentials(spec, by_index)  # the env's wheels a non-isolated build reads come from them
    if by_package := _package_mirrors(spec, lock, by_index):
        from envlock.fetch import mirror_locator

        locate = mirror_locator(lock.packages, by_package)
    default_url = resolve.index_urls(spec, by_index)[spec.default_index.name]  # as `lock` resolves against
    requests = _build_requests(ws, spec, states, lock, store, wanted, default_url, git_mirrors,
                               locked=lock.builds if frozen else {}, progress=progress, locate=locate,
                               fetched=fetched)
    built: list[BuiltWheel] = []
    checks: list[CheckResult] = []
    moved: list[str] = []  # --check: builds whose inputs are not the ones the lock records
    for b in wanted:
        request = requests[b.name]
        plan = build.plan(request, store)
        recorded = lock.builds.get(b.name)
        same_inputs = recorded is not None and recorded.input_digest == plan.input_digest
        if frozen and recorded is not None and not same_inputs:
            # Inputs edited since the lock (a patch, a path source) cannot give the recorded
            # wheel: said before a build is spent on it.
            why = input_drift(ws, spec, lock, b.name, b.source)
            raise LockError(f"{ws.relative(lock_path)}: --frozen, but the inputs of {b.name} changed since the lock "
                             f"(input digest {recorded.input_digest[:19]}, now {plan.input_digest[:19]}), so the "
                             f"recorded wheel cannot be rebuilt; restore them, or sync without --frozen (`envlock "
                             f"sync {env}` relocks and rebuilds)", details=why)
        overridden_tree = states[b.source].prepared.override is not None
        held = (build.recorded_wheel(request, plan, ws.wheelhouse, recorded)
                if recorded is not None and not (check or frozen or overridden_tree) else None)
        if on_build is not None and held is None and not build.is_built(plan, store):  # a stored wheel: a copy
            on_build(b.name, plan.input_digest)
        # Into the wheelhouse only what the lock names (or will, when this build is recorded): an
        # overridden tree's build goes beside it, a check's or a frozen rebuild's stays in the store
        # until it proves to be the recorded wheel. A sync installs only what the lock names.
        if overridden_tree:
            house: Path | None = ws.wheelhouse / OVERRIDE_WHEELHOUSE
        else:
            house = None if frozen or check else ws.wheelhouse
        wheel = held or build.build_wheel(request, store, house, plan_=plan)
        if house is None and recorded is not None and wheel.sha256 == recorded.sha256:
            wheel = build.place(wheel, ws.wheelhouse)
        built.append(wheel)
        if check:
            expected = recorded.sha256 if recorded is not None and same_inputs else None
            checks.append(build.check(request, store, house, expected_sha256=expected, plan_=plan, first=wheel))
            if recorded is not None and not same_inputs:
                what = "; ".join(input_drift(ws, spec, lock, b.name, b.source)) or "inputs changed"
                moved.append(f"{b.name}: the lock records a build of other inputs ({what}; input digest "
                             f"{recorded.input_digest[:19]}, now {plan.input_digest[:19]}): --check compared two "
                             "builds of the inputs as they are now")
    notices = tuple(n for s in states.values() if (n := s.prepared.notice)) + tuple(moved)
    overridden = any(s.prepared.override is not None for s in states.values())
    pkgs = {p.name: p for p in lock.packages}
    for w in built:
        name, version = parse_wheel_filename(w.filename)[:2]
        rel = os.path.relpath(ws.wheelhouse / w.filename, lock_path.parent).replace(os.sep, "/")
        artifact = Artifact(sha256=w.sha256, path=rel, size=w.wheel.stat().st_size)
        pkgs[name] = LockedPackage(name, str(version), (artifact,))
    new = replace(
        lock,
        sources={**lock.sources, **{n: s.locked() for n, s in states.items()}},
        builds={**lock.builds, **{w.name: w.locked() for w in built}},
        packages=tuple(sorted(pkgs.values(), key=lambda p: p.name)),
    )
    if new.install_digest() != lock.install_digest():
        new = new.with_venv_digest(None)
    # PEP 751 validity comes from the writer, as in lock_env (tests load every shape it writes).
    text = new.to_toml()
    changed = text != lock_text
    written = changed and not frozen and not overridden and not check  # a check is a diagnosis: it never writes
    if written and not replace_if_unchanged(lock_path, lock_bytes, text.encode()):
        raise LockChangedError(f"{ws.relative(lock_path)}: changed by another envlock while this build ran; "
                               f"the lock was not written. The wheels just built are in the store: "
                               f"`envlock build {env}` again records them without building")
    if overridden:
        notices += (f"the lock was not updated: an overridden source is not a pin; its build is in "
                    f"{ws.relative(ws.wheelhouse / OVERRIDE_WHEELHOUSE)}/, which no sync installs (try it in a "
                    f"venv of your own: `uv pip install` it into one made from `envlock path {env}`'s python)",)
    elif changed and check and not frozen:
        notices += (f"--check does not write the lock: `envlock build {env}` records these builds in "
                    f"{ws.relative(lock_path)}",)
    return BuildReport(env, lock_path, tuple(built), tuple(checks), notices, written, new,
                       downloaded=sum(f.downloaded for f in fetched),
                       fetched=sum(1 for f in fetched for a in f.artifacts if a.source != "store"))


@dataclass(frozen=True)
class PatchReport:
    env: str
    against: str | None
    sources: Mapping[str, tuple[PatchStatus, ...]]
    commits: Mapping[str, str | None]

    @property
    def conflicts(self) -> int:
        return sum(1 for st in self.sources.values() for s in st if s.state == "conflict")

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "against": self.against,
            "sources": {
                name: {"commit": self.commits.get(name), "patches": [s.to_dict() for s in st]}
                for name, st in sorted(self.sources.items())
            },
            "conflicts": self.conflicts,
        }


def patch_status(ws: Workspace, env: str, *, against: str | None = None,
                 sources_from: Mapping[str, str] | None = None) -> PatchReport:
    """Each source's patches against its pinned commit (or ``against``): applies / already-applied / conflict."""
    from envlock import patch, sources
    from envlock.store import Store

    spec = load_env_spec(ws, env)
    lock = _read_optional(ws.lock_path(env))
    store = Store.open()
    out: dict[str, tuple[PatchStatus, ...]] = {}
    commits: dict[str, str | None] = {}
    mirrors = source_mirrors(spec, sources_from)
    commit: str | None
    for name, src in sorted(spec.sources.items()):
        if not src.patches:
            continue
        if against is not None:
            if src.git is None:
                raise UsageError(f"--against {against}: source {name!r} is a path source (no commits)")
            with _mirror_hint(name, src, mirrors):
                commit = sources.resolve_rev(src.git, against, store=store, fetch_from=mirrors.get(name))
        else:
            commit = _pinned_commit(src, lock)
        with _mirror_hint(name, src, mirrors):
            prepared = sources.prepare(src, store, ws.root, commit=commit, fetch_from=mirrors.get(name))
        commits[name] = prepared.commit
        out[name] = tuple(patch.status(prepared.tree, patch.load_patches(ws.root, src.patches)))
    return PatchReport(env, against, out, commits)


def patch_edit(ws: Workspace, env: str, source: str, workdir: Path, *, against: str | None = None) -> EditSession:
    """Check the patched tree of ``source`` out into ``workdir`` (one git commit per patch level).

    ``against``: another commit (an upgrade target); patches apply up to the first conflict,
    which ``patch_record(..., refresh=True)`` then rewrites from the user's edits.
    """
    from envlock import patch, sources
    from envlock.store import Store

    spec = load_env_spec(ws, env)
    if source not in spec.sources:
        known = ", ".join(sorted(spec.sources)) or "none"
        raise UsageError(f"{spec.path}: no [sources.{source}]; sources: {known}")
    src = spec.sources[source]
    store = Store.open()
    mirror = source_mirrors(spec).get(source)
    if against is not None:
        if src.git is None:
            raise UsageError(f"--against {against}: source {source!r} is a path source (no commits)")
        with _mirror_hint(source, src, {source: mirror} if mirror else {}, option=False):
            commit: str | None = sources.resolve_rev(src.git, against, store=store, fetch_from=mirror)
    else:
        commit = _pinned_commit(src, _read_optional(ws.lock_path(env)))
    with _mirror_hint(source, src, {source: mirror} if mirror else {}, option=False):
        prepared = sources.prepare(src, store, ws.root, commit=commit, fetch_from=mirror)
    # A path source has no pin to go back to: its tree as it is now is what a patch must
    # be redone on, as for a new commit (record --refresh).
    return patch.edit(source, prepared.tree, patch.load_patches(ws.root, src.patches), workdir,
                      stop_at_conflict=against is not None or src.git is None, env=env)


def patch_record(ws: Workspace, workdir: Path, *, subject: str | None, why: str | None, upstream: str | None,
                 refresh: bool = False) -> RecordedPatch:
    """Write the edits in ``workdir`` as ``patches/SOURCE/NNNN-title.patch`` (add it to the spec's list),
    or with ``refresh`` over the first pending patch that did not apply to the new commit; only while
    the spec's patches of the source are still those the work dir was made on."""
    from envlock import patch
    from envlock.errors import PatchError

    try:
        source = patch.edited_source(workdir)
    except PatchError as exc:  # the command was pointed at another folder: bad input
        raise UsageError(exc.message) from None
    spec = load_env_spec(ws, patch.edited_env(workdir))
    if source not in spec.sources:
        raise PatchError(f"{workdir}: made for [sources.{source}], which {ws.relative(spec.path)} no longer has; "
                         "expected the source the work dir was made for")
    current = tuple(p.locked() for p in patch.load_patches(ws.root, spec.sources[source].patches))
    patches_dir = ws.root / "patches" / source
    # A refresh rewrites a patch in place: no new number for other envs' patches to stand before.
    recorded = patch.record(workdir, patches_dir, current=current, subject=subject, why=why, upstream=upstream,
                            refresh=refresh, workspace_root=ws.root,
                            other_envs=() if refresh else _patches_of_other_envs(ws, spec.name, source))
    return replace(recorded, env=spec.name)


def _patches_of_other_envs(ws: Workspace, env: str, source: str) -> list[Path]:
    """The patches of source ``source`` that the workspace's other envs list (patches/SOURCE/
    is the source's, shared by every env that builds it). A spec that does not read lists none."""
    found = []
    for other in ws.envs():
        if other == env:
            continue
        try:
            spec = load_env_spec(ws, other, check_paths=False)
        except EnvlockError:
            continue
        if source in spec.sources:
            found += [ws.root / rel for rel in spec.sources[source].patches]
    return found


def _sources_for_lock(
    ws: Workspace, spec: EnvSpec, store: Store, old: Lock | None, mirrors: Mapping[str, str]
) -> dict[str, SourceState]:
    if not spec.sources:
        return {}
    return prepare_sources(ws, spec, store, lock=old, mirrors=mirrors)


def _build_requests(ws: Workspace, spec: EnvSpec, states: Mapping[str, SourceState], lock: Lock, store: Store,
                    builds: Iterable[BuildSpec], index_url: str, git_mirrors: Mapping[str, str],
                    locked: Mapping[str, LockedBuild] | None = None, *, progress: Progress | None = None,
                    locate: Locate | None = None, fetched: list[FetchResult] | None = None) -> dict[str, BuildRequest]:
    """The request of each build whose source is prepared: what ``build_env`` builds and
    ``_carry_builds`` compares digests of, so they must be made one way.

    A non-isolated build's inputs are the wheels its build requirements reach in the env;
    reading their metadata needs the env's runtime wheels in the store (sync fetches them
    anyway). They are fetched with ``progress``, from mirrors when ``locate`` (a sync's
    ``--index``) says so, and what that brought in is appended to ``fetched``.
    """
    from envlock import build, fetch

    builds = [b for b in builds if b.source in states]
    env_packages: tuple[build.BuildEnvPackage, ...] = ()
    if any(not b.isolation for b in builds):
        from envlock.lockfile import canonicalize_name

        local = {canonicalize_name(n) for n in spec.builds}
        runtime = [p.wheels[0] for p in lock.packages if p.name not in local]
        got = fetch.fetch(runtime, store, base_dir=ws.lock_path(spec.name).parent, progress=progress, locate=locate)
        if fetched is not None:
            fetched.append(got)
        env_packages = build.env_packages_from_lock(lock, store, exclude=tuple(local))
    out = {}
    for b in builds:
        state = states[b.source]
        recorded = (locked or {}).get(b.name)
        out[b.name] = build.BuildRequest(
            b, state.patched.tree, state.prepared.source_date_epoch, spec.python, spec.platform, index_url,
            () if b.isolation else env_packages, recorded.requirements if recorded is not None else None,
            {dep.name: git_mirrors[dep.name] for dep in b.fetchcontent if dep.name in git_mirrors},
        )
    return out


def _carry_builds(
    ws: Workspace, spec: EnvSpec, store: Store, states: Mapping[str, SourceState], lock: Lock, old: Lock | None,
    index_url: str, git_mirrors: Mapping[str, str], progress: Progress | None = None,
    fetched: list[FetchResult] | None = None,
) -> Lock:
    """Keep the old lock's build records (and PEP 751 entries) whose input digest is unchanged.

    A relock of an unchanged spec then gives the same bytes; a build whose inputs moved
    drops out until ``envlock build`` (or ``sync``) builds it again.
    """
    if old is None or not old.builds or not spec.builds:
        return lock
    from packaging.utils import canonicalize_name

    from envlock import build

    requests = _build_requests(ws, spec, states, lock, store, spec.builds.values(), index_url, git_mirrors,
                               progress=progress, fetched=fetched)
    kept_builds = {}
    kept_packages = []
    old_packages = {p.name: p for p in old.packages}
    for b in spec.builds.values():
        recorded = old.builds.get(b.name)
        package = old_packages.get(canonicalize_name(b.name))
        if recorded is None or package is None or b.name not in requests:
            continue
        if build.plan(requests[b.name], store).input_digest == recorded.input_digest:
            kept_builds[b.name] = recorded
            kept_packages.append(package)
    if not kept_builds:
        return lock
    packages = sorted([*lock.packages, *kept_packages], key=lambda p: p.name)
    return replace(lock, builds=kept_builds, packages=tuple(packages))


def _ensure_builds(ws: Workspace, env: str, spec: EnvSpec, lock: Lock, lock_path: Path, *, frozen: bool,
                   sources_from: Mapping[str, str] | None = None,
                   on_build: Callable[[str, str], None] | None = None,
                   progress: Progress | None = None,
                   mirrors: Mapping[str, str] | None = None) -> tuple[Lock, BuildReport | None]:
    """Before a sync: build what the spec's ``[builds.*]`` need and the wheelhouse lacks.

    Unfrozen, the lock gets the build records; ``--frozen`` rebuilds only to restore a
    recorded wheel and fails if the rebuild is not bit-identical to it. Returns the lock
    and the report of the builds run (None: none were needed).
    """
    from packaging.utils import canonicalize_name

    from envlock.quick import file_sha256

    if not spec.builds:
        return lock, None
    missing = []
    for b in spec.builds.values():
        recorded = lock.builds.get(b.name)
        package = lock.package(b.name)
        art = package.wheels[0] if package is not None else None
        if recorded is None or art is None or art.path is None:
            missing.append(b.name)
            continue
        # Streamed: a local build can be hundreds of MB.
        if file_sha256(str(lock_path.parent / art.path)) != art.sha256:
            missing.append(b.name)
    if not missing:
        return lock, None
    if not frozen:
        report = build_env(ws, env, tuple(missing), sources_from=sources_from, spec=spec, on_build=on_build,
                           progress=progress, mirrors=mirrors)
        return report.new_lock, report
    report = build_env(ws, env, tuple(missing), frozen=True, sources_from=sources_from, spec=spec,
                       on_build=on_build, progress=progress, mirrors=mirrors)
    for w in report.builds:
        recorded = lock.builds.get(w.name)
        if recorded is None:
            raise LockError(f"{lock_path}: --frozen, but the lock has no build of {w.name}; "
                            f"run `envlock build {env}` first")
        if recorded.sha256 != w.sha256:  # same inputs (build_env refuses moved ones), other bytes
            raise BuildError(
                f"{ws.relative(lock_path)}: --frozen: rebuilt {w.filename} is not the recorded wheel (recorded "
                f"sha256 {recorded.sha256}, rebuilt {w.sha256}, input digest unchanged): the build is not "
                f"reproducible; `envlock build {env} {canonicalize_name(w.name)} --check` names the files "
                "that differ")
    return lock, report
