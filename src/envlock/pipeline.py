"""The stages chained: spec -> lock -> fetch -> build -> patch -> install -> verify.

Each function takes typed inputs and returns a typed result; none prints. The CLI
renders results; the stages below never reach around each other.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlock.errors import LockError
from envlock.lockfile import Lock, read_lock, validate_pep751
from envlock.spec import EnvSpec, load_spec
from envlock.store import write_atomic
from envlock.workspace import Workspace

if TYPE_CHECKING:
    from envlock.fetch import Progress
    from envlock.sync import SyncResult

MIRROR_ENV_PREFIX = "ENVLOCK_INDEX_"


def mirrors_from_env(spec: EnvSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``ENVLOCK_INDEX_<NAME>=URL`` (name upper-cased, other characters as ``_``) per spec index."""
    environ = os.environ if environ is None else environ
    out = {}
    for name in spec.indexes:
        var = MIRROR_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", name.upper())
        if environ.get(var):
            out[name] = environ[var]
    return out


def load_env_spec(ws: Workspace, env: str) -> EnvSpec:
    return load_spec(ws.spec_path(env), name=env)


@dataclass(frozen=True)
class LockResult:
    env: str
    path: Path
    changed: bool  # the file's bytes changed
    packages: int
    nightlies: Mapping[str, str] = field(default_factory=dict)  # name -> exact version
    mirrors: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "lock": str(self.path),
            "changed": self.changed,
            "packages": self.packages,
            "nightlies": dict(self.nightlies),
            "mirrors": dict(self.mirrors),
        }


def lock_env(
    ws: Workspace,
    env: str,
    *,
    mirrors: Mapping[str, str] | None = None,
    cache_dir: Path | None = None,
) -> LockResult:
    """Resolve ``envs/ENV.toml`` and write ``locks/pylock.ENV.toml`` (bytes unchanged if nothing changed)."""
    from envlock import resolve

    spec = load_env_spec(ws, env)
    all_mirrors = {**mirrors_from_env(spec), **(mirrors or {})}
    urls = resolve.index_urls(spec, all_mirrors)
    resolution = resolve.resolve(spec, resolve.ResolveInputs(index_urls=urls, cache_dir=cache_dir))
    path = ws.lock_path(env)
    old = _read_optional(path)
    lock = Lock(
        env=env,
        python=spec.python,
        platform=spec.platform,
        spec_digest=spec.digest(),
        spec_keys=spec.key_digests(),
        packages=resolution.packages,
        requires_python=resolution.requires_python,
        nightlies=resolution.nightlies,
    )
    if old is not None and old.install_digest() == lock.install_digest():
        lock = lock.with_venv_digest(old.venv_digest)  # same wheels: the recorded venv still holds
    text = lock.to_toml()
    validate_pep751(text, path)
    changed = not path.exists() or path.read_text(encoding="utf-8") != text
    if changed:
        write_atomic(path, text.encode())
    return LockResult(
        env=env,
        path=path,
        changed=changed,
        packages=len(lock.packages),
        nightlies={k: v.version for k, v in sorted(resolution.nightlies.items())},
        mirrors=all_mirrors,
    )


def _read_optional(path: Path) -> Lock | None:
    try:
        return read_lock(path)
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
    spec = load_env_spec(ws, env)
    path = ws.lock_path(env)
    lock = read_lock(path)
    reasons: list[str] = []
    if lock.spec_digest != spec.digest():
        new = spec.key_digests()
        old = dict(lock.spec_keys)
        for key in sorted(set(new) | set(old)):
            if key not in old:
                reasons.append(f"{key}: added to the spec")
            elif key not in new:
                reasons.append(f"{key}: removed from the spec")
            elif old[key] != new[key]:
                reasons.append(f"{key}: changed")
        if not reasons:
            reasons.append("spec changed")
    for name, source in sorted(lock.sources.items()):
        for patch in source.patches:
            reasons += _patch_drift(ws, name, patch.path, patch.sha256)
    return LockCheck(env=env, path=path, current=not reasons, reasons=tuple(reasons))


def _patch_drift(ws: Workspace, source: str, rel: str, sha256: str) -> list[str]:
    import hashlib

    file = ws.root / rel
    if not file.is_file():
        return [f"sources.{source}.patches: {rel} is missing"]
    if hashlib.sha256(file.read_bytes()).hexdigest() != sha256:
        return [f"sources.{source}.patches: {rel} changed since the lock"]
    return []


def load_lock_ref(ws: Workspace, ref: str) -> tuple[Lock, str]:
    """A lock from ``PATH``, ``PATH@GITREV`` (read with ``git show``) or an env name."""
    from envlock import runner

    path_part, _, rev = ref.partition("@")
    if not rev and "/" not in ref and not ref.endswith(".toml"):
        path = ws.lock_path(ref)  # an env name
        return read_lock(path), ws.relative(path) if path.exists() else str(path)
    path = Path(path_part)
    if not path.is_absolute():
        path = (Path.cwd() / path).resolve()
    if not rev:
        return read_lock(path), ref
    top = runner.git(["rev-parse", "--show-toplevel"], cwd=path.parent if path.parent.is_dir() else ws.root)
    if not top.ok:
        raise LockError(f"{ref}: {path.parent} is not in a git repository, so @{rev} cannot be read")
    repo = Path(top.stdout.strip())
    rel = path.relative_to(repo).as_posix() if path.is_relative_to(repo) else path_part
    shown = runner.git(["show", f"{rev}:{rel}"], cwd=repo)
    if not shown.ok:
        raise LockError(f"{ref}: git has no {rel} at {rev!r}: {shown.tail(1)}")
    return Lock.from_toml(shown.stdout, ref), ref


def sync(
    ws: Workspace,
    env: str,
    *,
    frozen: bool = False,
    offline: bool = False,
    lock_ref: str | None = None,
    progress: Progress | None = None,
) -> SyncResult:
    """Make ``env`` match its lock (``--lock PATH[@REV]`` overrides which) and return a ``SyncResult``.

    Without ``lock_ref`` a missing or stale lock is re-locked first, unless ``frozen``
    (then a missing lock is a ``LockError``). The venv digest is written back only
    to a lock file in the working tree, never to a ``PATH@REV``.
    """
    from envlock.store import Store
    from envlock.sync import sync_lock

    if lock_ref is not None:
        lock, _label = load_lock_ref(ws, lock_ref)
        path_part, _, rev = lock_ref.partition("@")
        if rev:
            lock_path = None
        elif "/" not in lock_ref and not lock_ref.endswith(".toml"):
            lock_path = ws.lock_path(lock_ref)
        else:
            lock_path = Path(path_part).absolute()
    else:
        ws.spec_path(env)  # an unknown env is a usage error before anything else
        lock_path = ws.lock_path(env)
        if not frozen and (not lock_path.exists() or not check_lock(ws, env).current):
            lock_env(ws, env)
        lock = read_lock(lock_path)
    return sync_lock(Store.open(), env, lock, lock_path=lock_path, frozen=frozen or lock_path is None,
                     offline=offline, progress=progress)
