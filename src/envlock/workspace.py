"""Find the workspace (the folder holding ``envs/``) and name its files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from envlock.errors import UsageError, did_you_mean

#: The workspace's settings file (its ``[cache]`` table: ``caching``).
CONFIG_FILE = "envlock.toml"
#: Binary cache URLs named by the environment (``caching``).
CACHE_URLS_ENV = "ENVLOCK_CACHE_URLS"

_ENV_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def leaves(root: Path, rel: str) -> str | None:
    """Where ``root / rel`` really is when a symbolic link on the way takes it out of ``root`` (None: it
    stays inside). A path's text is checked where it is read (no ``..``, not absolute); a link is not
    text: a pull request can add ``examples/k -> /elsewhere`` and name ``examples/k``, and what is
    there would be copied into the store, built and bundled without being in the reviewed tree."""
    real, top = os.path.realpath(root / rel), os.path.realpath(root)
    tops = [top, *([_SEEN_THROUGH[top]] if top in _SEEN_THROUGH else [])]
    return None if any(real == t or real.startswith(t.rstrip("/") + "/") for t in tops) else real


#: A scratch workspace's real root -> the real root of the workspace it sees through its links (``seen_through``).
_SEEN_THROUGH: dict[str, str] = {}


def seen_through(scratch: Path, real: Path) -> None:
    """Let ``leaves`` take the links of ``scratch``, a scratch workspace envlock made (bisect's: its entries
    are links to the real workspace's), into ``real`` as inside it. Said in this process only: no file in a
    workspace can claim it."""
    _SEEN_THROUGH[os.path.realpath(scratch)] = os.path.realpath(real)


def check_env_name(env: str) -> None:
    """``UsageError`` unless ``env`` can name an env (and so a file and a store folder)."""
    if not _ENV_NAME.fullmatch(env):
        raise UsageError(f"{env!r}: not an env name (letters, digits, '.', '_', '-')")


@dataclass(frozen=True)
class Workspace:
    """A project folder: the one holding ``envs/`` (its specs) and ``locks/``."""

    root: Path

    @classmethod
    def find(cls, start: Path | None = None, root: Path | None = None) -> Workspace:
        """``root`` if given, else the first folder holding ``envs/`` from ``start`` upward."""
        if root is not None:
            if not (root / "envs").is_dir():
                raise UsageError(f"{root}: --root names no workspace (expected an envs/ folder there)")
            return cls(root.resolve())
        here = (start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / "envs").is_dir():
                return cls(folder)
        raise UsageError(f"{here}: not inside an envlock workspace (no envs/ folder here or above); pass --root DIR")

    def envs(self) -> list[str]:
        return sorted(p.stem for p in (self.root / "envs").glob("*.toml") if p.is_file())

    def spec_path(self, env: str) -> Path:
        check_env_name(env)
        path = self.root / "envs" / f"{env}.toml"
        if path.exists() and not path.is_file():
            raise UsageError(f"{path}: not a file; expected env {env!r}'s spec (a TOML file) there")
        if not path.is_file():
            known = self.envs()
            hint = did_you_mean(env, known, before="; ")
            listed = ", ".join(known) or "none"
            raise UsageError(f"{path}: no env {env!r}{hint} (envs: {listed})")
        return path

    def lock_path(self, env: str) -> Path:
        return self.root / "locks" / f"pylock.{env}.toml"

    @property
    def wheelhouse(self) -> Path:
        """Locally built wheels; the lock points here with relative paths."""
        return self.root / "wheelhouse"

    def relative(self, path: Path) -> str:
        """``path`` (built from ``root``) as people see it in the workspace; whole if it lies elsewhere.

        Not resolved: a symlinked ``wheelhouse/`` (multi-GB builds on another disk) still
        reads ``wheelhouse/x.whl``.
        """
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def env_var_suffix(name: str) -> str:
    """A spec name as an environment variable's suffix: upper-cased, other characters as ``_``
    (index pytorch-nightly -> ``ENVLOCK_INDEX_PYTORCH_NIGHTLY``)."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def names_a_cache(ws: Workspace | None) -> bool:
    """Whether ``envlock.toml`` or the environment can name a binary cache: asked before the
    ``caching`` module (~10 ms of imports) is loaded for a command that may do without it."""
    return bool(os.environ.get(CACHE_URLS_ENV)) or (ws is not None and (ws.root / CONFIG_FILE).is_file())
