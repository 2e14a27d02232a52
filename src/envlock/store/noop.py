"""The fast no-op of ``envlock sync``, answered before argparse and the rest of envlock load.

Every sync that ends with an env's current generation writes ``envs/NAME/noop-stamp``
(under the env lock, atomically): the generation's number and digests, the sha256 of
the lock file's bytes it was synced from and, when that sync checked the lock against
the spec (plain ``envlock sync NAME``), the sha256 of every file the check read (the
spec, recorded patches, local wheels). A later sync is a no-op without parsing any
TOML when that generation is still current, its venv is still in the store and those
bytes are unchanged; anything else (a changed spec or patch, another lock, a missing
venv, an option this module does not know) takes the full path, which decides
properly and writes a new stamp.

For a sync it does not answer, it names the store venv the lock file's bytes were last synced to
(``venv_last_synced``, a hint every sync keeps: ``keep_venv_of_lock``), whose check the console
script then starts ahead (``envlock.ahead``).

Only ``os``, ``sys`` and ``hashlib`` are imported here: on a slow machine each of
``re``, ``json``, ``tomllib``, ``pathlib`` or ``dataclasses`` costs as much as
``uv pip sync``'s whole no-op.
"""

from __future__ import annotations

import os
import stat  # loaded by os already
import sys

from envlock.store.home import LAYOUT_DIR, MANIFEST_NAME, default_home, file_sha256

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable

STAMP = "noop-stamp"
#: The stamp format: a stamp of any other is not read (the full path writes a new one).
_MAGIC = "envlock-noop-stamp 1"
_FLAGS = {"--frozen", "--offline", "-q", "--quiet", "--debug"}


def stamp_text(generation: int, install_digest: str, venv_digest: str, lock_sha256: str,
               inputs: dict[str, str] | None, spec: dict[str, str] | None = None) -> str:
    """The stamp for a sync that left ``generation`` current (``inputs``: path -> sha256).

    ``spec`` (path -> sha256): a ``--frozen`` sync found the lock made for this spec and these
    patches, so a frozen no-op may skip that check while their bytes are these.
    """
    lines = [_MAGIC, f"generation {generation}", f"install-digest {install_digest}",
             f"venv-digest {venv_digest}", f"lock {lock_sha256}"]
    lines += [f"input {sha} {path}" for path, sha in sorted((inputs or {}).items())]
    lines += [f"spec {sha} {path}" for path, sha in sorted((spec or {}).items())]
    return "\n".join(lines) + "\n"


def check(home: str, env: str, lock_file: str, spec_file: str | None,
          frozen_spec: str | None = None, *, lock_sha256: str | None = None) -> tuple[int, str, str] | None:
    """(generation, install digest, venv digest) when syncing ``lock_file`` is a no-op, else None.

    ``spec_file`` given (a plain sync): the stamp must also say the lock was checked
    current against that spec, and every file that check read must be unchanged.
    ``frozen_spec`` given (``--frozen`` of the env's own lock): the stamp must say the lock
    was made for that spec as its bytes are now (else the full path says it is stale).
    ``lock_sha256``: the lock file's, when the caller hashed it already.
    """
    env_dir = os.path.join(home, LAYOUT_DIR, "envs", env)
    try:
        target = os.readlink(os.path.join(env_dir, "current"))
        with open(os.path.join(env_dir, STAMP), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, ValueError):
        return None
    head = target.split("/", 1)[0]
    if not head.isdigit() or not lines or lines[0] != _MAGIC:
        return None
    fields: dict[str, str] = {}
    inputs: dict[str, str] = {}
    specs: dict[str, str] = {}
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        if key in ("input", "spec"):
            sha, _, path = value.partition(" ")
            (inputs if key == "input" else specs)[path] = sha
        else:
            fields[key] = value
    if fields.get("generation") != head or "lock" not in fields:
        return None
    if spec_file is not None and spec_file not in inputs:
        return None  # the last sync did not check the lock against this spec
    if frozen_spec is not None:
        # What a frozen sync (spec lines) or a plain one (inputs, a superset) found the lock made for.
        made_for = specs if frozen_spec in specs else inputs if frozen_spec in inputs else None
        if made_for is None or any(file_sha256(p) != sha for p, sha in made_for.items()):
            return None  # changed (or never seen current): the full path notes a stale lock
    if not os.path.isfile(os.path.join(env_dir, head, "venv", MANIFEST_NAME)):
        return None  # the venv is gone from the store
    if (lock_sha256 or file_sha256(lock_file)) != fields["lock"]:
        return None
    if spec_file is not None and any(file_sha256(p) != sha for p, sha in inputs.items()):
        return None
    try:
        return int(head), fields["install-digest"], fields["venv-digest"]
    except KeyError:
        return None


def _workspace(root: str | None) -> str | None:
    """``Workspace.find``'s answer (the folder holding ``envs/``), or None."""
    if root is not None:
        return os.path.realpath(root) if os.path.isdir(os.path.join(root, "envs")) else None
    here = os.path.realpath(os.getcwd())
    while True:
        if os.path.isdir(os.path.join(here, "envs")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _env_name_ok(env: str) -> bool:
    # workspace._ENV_NAME, without importing re.
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    return bool(env) and env[0].isascii() and env[0].isalnum() and set(env) <= allowed


def answer_noop(argv: list[str], ahead: Callable[[str], object] | None = None) -> int | None:
    """Print the no-op answer of ``envlock sync`` and return 0, or None to take the full path.

    Handles only ``sync ENV [--frozen] [--offline] [-q] [--debug] [--root DIR]
    [--lock PATH.toml]`` in text mode; anything else falls through to argparse. ``ahead``: called,
    when it is not a no-op, with the store venv the lock file's bytes were last synced to
    (``venv_last_synced``), if it is still there.
    """
    sync = _sync_of(argv)
    if sync is None:
        return None
    env, home, lock_file, checked_spec, frozen_spec = sync
    lock_sha256 = file_sha256(lock_file)  # once: for the stamp, and else for the hint
    found = check(home, env, lock_file, checked_spec, frozen_spec, lock_sha256=lock_sha256)
    if found is None:
        if ahead is not None and lock_sha256 is not None and (venv := venv_last_synced(home, lock_sha256)):
            ahead(venv)
        return None
    generation, _install, venv_digest = found
    current = os.path.join(home, LAYOUT_DIR, "envs", env, "current")
    # Same text as cli.cmd_sync's no-op answer; the last line is the env path.
    sys.stdout.write(f"{env}: up to date (generation {generation})\n  venv digest {venv_digest}\n{current}\n")
    return 0


def venv_last_synced(home: str, lock_sha256: str) -> str | None:
    """The store venv (its folder) that the lock file whose bytes have ``lock_sha256`` was last synced
    to (``keep_venv_of_lock``), when that venv is still there; None for anything else. A hint, for work
    started ahead (``envlock.ahead``): the sync decides on its own which venv is the lock's."""
    entry = hinted_entry(_venv_of_lock(home, lock_sha256))
    hexdigest = entry.removeprefix("sha256-")
    if len(hexdigest) != 64 or not set(hexdigest) <= set("0123456789abcdef") or entry == hexdigest:
        return None  # not an entry name install writes (never a path out of venvs/)
    venv = os.path.join(home, LAYOUT_DIR, "venvs", entry)
    return venv if os.path.isfile(os.path.join(venv, MANIFEST_NAME)) else None


def hinted_entry(path: str) -> str:
    """What the hint file ``path`` says (a venv entry's name, ``keep_venv_of_lock``), "" when there is none:
    a regular file of a few bytes, read without blocking (not a FIFO, not a link): it is only a hint."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            return os.read(fd, 128).decode().strip() if stat.S_ISREG(os.fstat(fd).st_mode) else ""
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return ""


def keep_venv_of_lock(home: str, lock_sha256: str, entry: str) -> None:
    """Remember that the lock file whose bytes have ``lock_sha256`` was synced to store venv ``entry``
    (for ``venv_last_synced``). Replaced atomically, never synced: a lost or stale hint costs only the
    work started ahead, which the sync then does itself."""
    import contextlib  # written by a sync's full path, not read at start-up

    path = _venv_of_lock(home, lock_sha256)
    if hinted_entry(path) == entry:
        return  # a sync of the same lock again: nothing to write
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temp, "w", encoding="utf-8") as fh:
            fh.write(entry + "\n")
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def venvs_of_locks(home: str) -> str:
    """The folder where ``keep_venv_of_lock`` keeps the venv of each lock's bytes: beside the hash cache."""
    return os.path.join(home, LAYOUT_DIR, "hashes", "venv-of-lock")


def _venv_of_lock(home: str, lock_sha256: str) -> str:
    return os.path.join(venvs_of_locks(home), lock_sha256)


def _sync_of(argv: list[str]) -> tuple[str, str, str, str | None, str | None] | None:
    """What ``envlock sync`` ``argv`` syncs, when this module handles it: (env, store home, lock file, the
    spec the lock must be current against, the spec a ``--frozen`` lock must have been made for)."""
    if not argv or argv[0] != "sync":
        return None
    env = lock = root = None
    frozen = False
    args = iter(argv[1:])
    for arg in args:
        name, eq, value = arg.partition("=")
        if name in ("--lock", "--root"):
            value = value if eq else next(args, "")
            if not value or value.startswith("-"):
                return None
            if name == "--lock":
                lock = value
            else:
                root = value
        elif arg in _FLAGS:
            frozen = frozen or arg == "--frozen"
        elif arg.startswith("-") or env is not None:
            return None
        else:
            env = arg
    if env is None or not _env_name_ok(env):
        return None
    home = default_home()
    if not os.path.isabs(home) or os.path.normpath(home) != home:
        return None  # let the store spell an unusual path
    ws = _workspace(root)
    if ws is None:
        return None
    spec_file = os.path.join(ws, "envs", f"{env}.toml")
    if lock is not None:
        if "@" in lock or not lock.endswith(".toml"):
            return None
        return env, home, os.path.join(os.getcwd(), lock), None, None
    if not os.path.isfile(spec_file):
        return None  # an unknown env: the full path names it
    lock_file = os.path.join(ws, "locks", f"pylock.{env}.toml")
    return env, home, lock_file, None if frozen else spec_file, spec_file if frozen else None
