"""``envlock path`` and ``envlock run``: the env's current generation, to point at or run in."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from envlock.errors import CommandError, StoreError, UsageError
from envlock.install import generations
from envlock.store.store import Store


def env_path(store: Store, env: str) -> Path:
    """The env's stable path; ``UsageError`` when it was never synced or its venv is gone."""
    number = generations.current_number(store, env)
    if number is None:
        raise generations.never_synced(store, env)
    path = generations.stable_path(store, env)
    if not (generations.env_dir(store, env) / str(number)).is_dir():
        generations.current_or_error(store, env)  # raises: the link names no generation there is
    if not path.is_dir():
        # A dangling path would run the host's python (PATH falls through to it).
        others = generations.rollback_targets(store, env, besides=number)
        back = f", or `envlock rollback {env} --to {others[-1]}`" if others else ""
        copy = generations.lock_copy(generations.env_dir(store, env) / str(number))
        raise StoreError(f"{path}: generation {number}'s venv is gone from the store ({path.resolve()}); "
                         f"run `envlock sync {env} --lock {copy}` to build it again (the lock it was built from; "
                         f"`envlock sync {env}` syncs the workspace's){back}")
    return path


def run_environ(store: Store, env: str) -> tuple[Path, dict[str, str]]:
    """The venv a command run in ``env`` uses, and the environment to run it with (its
    ``bin`` first on PATH, ``VIRTUAL_ENV`` set).

    The venv is the current generation's own link, ``envs/NAME/N/venv``, not the stable
    path: a sync or rollback while the command runs flips ``current``, and a program
    importing lazily (a server) must not load half its modules from another generation.
    """
    stable = env_path(store, env)
    root = stable.parent / os.readlink(stable)  # one level: generation N's link is never flipped
    environ = dict(os.environ)
    environ["VIRTUAL_ENV"] = str(root)
    environ["PATH"] = os.pathsep.join([str(root / "bin"), environ.get("PATH", "")])
    environ.pop("PYTHONHOME", None)
    return root, environ


def exec_in_env(store: Store, env: str, argv: Sequence[str]) -> NoReturn:
    """Replace this process with ``argv`` run in the env (see ``run_environ``).

    exec, not a child process: a Ctrl-C or a SIGTERM (``docker stop``, Slurm) reaches
    the command itself, whose handlers run to their end (a checkpoint gets saved), no
    child is orphaned, and the exit status is the command's own, as a shell gives it.
    Returns only by raising, when the command cannot be started (127, 126, as ``sh``).
    """
    if not argv:
        raise UsageError("envlock run ENV -- CMD...: no command given")
    if not argv[0]:  # execvpe refuses it with a ValueError; sh says "not found"
        raise CommandError("'': command not found (the command name is empty)", exit_code=127)
    import signal

    root, environ = run_environ(store, env)
    sys.stdout.flush()
    sys.stderr.flush()
    # Python ignores these at start-up, and an ignored signal stays ignored across exec:
    # `yes | head` in the command would print "Broken pipe" instead of ending quietly.
    # Put back if the exec fails: this process goes on, and must not die of a closed pipe.
    ignored = [getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)]
    saved = [(sig, signal.signal(sig, signal.SIG_DFL)) for sig in ignored]
    try:
        os.execvpe(argv[0], list(argv), environ)
    except FileNotFoundError:
        import shutil

        found = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=environ["PATH"])
        if found is not None and os.path.isfile(found):
            # The file is there: what is missing is the interpreter its #! line names (a
            # console script whose venv python link dangles, say).
            raise CommandError(f"{found}: cannot be run: the interpreter its #! line names was not found",
                               exit_code=126) from None
        raise CommandError(f"{argv[0]}: command not found (in {root / 'bin'} or on PATH)", exit_code=127) from None
    except PermissionError:
        import shutil

        if "/" not in argv[0] and shutil.which(argv[0], path=environ["PATH"]) is None:
            # execvp's EACCES from a PATH folder it may not search: found nowhere, as sh says.
            raise CommandError(f"{argv[0]}: command not found (in {root / 'bin'} or on PATH)", exit_code=127) from None
        raise CommandError(f"{argv[0]}: not executable (permission denied)", exit_code=126) from None
    except OSError as exc:  # found but cannot run: no #! line, another machine's binary (ENOEXEC)
        raise CommandError(f"{argv[0]}: cannot be run ({exc.strerror})", exit_code=126) from None
    finally:
        for sig, handler in saved:
            signal.signal(sig, handler)
