"""Command line of ``envlock sync``: parse, answer an up-to-date ``--json`` sync from the env's stamp,
else call ``commands.sync.sync``; render. Nothing else.

Beside ``cli.main`` (which adds it to its parser with ``add_commands``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from envlock import gcpause, timings  # loaded already (__main__)
from envlock.cli.render import json_option, mirror_flags, mirror_options, out, target_option, trusted_key_option

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from envlock.commands.realize import SyncResult
    from envlock.store.store import Store
    from envlock.workspace import Workspace


def without_lock(args: argparse.Namespace) -> bool:
    """Whether ``sync`` or ``verify`` needs a workspace: not with ``--lock`` (the lock names the packages)."""
    return args.lock is None


def cmd_sync(args: argparse.Namespace, ws: Workspace) -> int:
    built: list[tuple[str, str]] = []  # the local builds this sync ran: (name, input digest)
    # Not scanned again and again by the collector while it imports, runs and says what it did.
    gcpause.off_for_the_command()
    result = _noop_or_sync(args, ws, built)
    out(args, result.to_dict() | {"built": [{"name": n, "input_digest": d} for n, d in built]},
        lambda: _said(args, result, built))
    return 0


def _said(args: argparse.Namespace, result: SyncResult, built: list[tuple[str, str]]) -> str:
    """What a sync says in text mode; its last line is the env path."""
    if result.noop:
        head = f"{args.env}: up to date (generation {result.generation})"
    else:
        from envlock import ui

        venv = "built" if result.built else "reused from the store"
        head = (f"{args.env}: generation {result.generation} ({result.fetched} fetched, "
                f"{ui.size(result.downloaded)} downloaded; venv {venv}) in {result.seconds:.1f}s")
    lines = [head, f"  venv digest {result.venv_digest}"]
    if result.relocked:
        lines.append(f"  locked envs/{args.env}.toml anew first (the lock was missing or stale)")
    lines += [f"  built {name} (inputs {digest[:19]})" for name, digest in built]
    lines += [f"  recorded {name}'s build in the lock" for name in result.builds_recorded]
    if result.recorded:
        lines.append("  recorded the venv digest in the lock")
    if result.note:
        lines.append(f"  note: {result.note}")
    return "\n".join([*lines, str(result.path)])


def _noop_or_sync(args: argparse.Namespace, ws: Workspace, built: list[tuple[str, str]]) -> SyncResult:
    """The sync's result: for ``--json``, the no-op of main()'s fast path (the one case it leaves to us; in
    text mode it has already said no) answered from the env's stamp before the sync recipe is imported
    (see envlock.store.noop); else the recipe's (``_sync``)."""
    from envlock.commands.realize import quick_noop
    from envlock.store.store import Store

    lock_file = spec_file = None
    if args.lock is None:
        spec_file = ws.spec_path(args.env)  # an unknown env is still a usage error
        lock_file = ws.lock_path(args.env)
    elif "@" not in args.lock and args.lock.endswith(".toml"):
        from pathlib import Path

        lock_file = Path(args.lock).absolute()
    store = None  # opened here only for the no-op check, then handed to the sync
    if lock_file is not None and args.json and not (args.source or args.index):  # checked on the full path
        store = Store.open()
        result = quick_noop(store, args.env, lock_file,
                            None if args.frozen or args.lock is not None else spec_file,
                            spec_file if args.frozen and args.lock is None else None)
        if result is not None:
            return result
    return _sync(args, ws, store, built)


def _sync(args: argparse.Namespace, ws: Workspace, store: Store | None,
          built: list[tuple[str, str]]) -> SyncResult:
    """The sync recipe, run for ``cmd_sync``; each local build it runs is added to ``built``."""
    from envlock import ui
    from envlock.commands import sync

    timings.mark("imports of the sync recipe")

    def on_build(name: str, digest: str) -> None:
        built.append((name, digest))
        if not (args.quiet or args.json):  # said even off a terminal: a kernel build can take an hour
            print(f"envlock: building {name} (inputs {digest[:19]}); a native build can take long",
                  file=sys.stderr)

    with ui.progress(quiet=args.quiet or args.json) as bar:
        options = sync.SyncOptions(frozen=args.frozen, offline=args.offline, lock_ref=args.lock,
                                   mirrors=mirror_options(args), trusted_keys=tuple(args.trusted_key),
                                   target=args.target)
        return sync.sync(ws, args.env, options, progress=bar, on_build=on_build, store=store)


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``envlock sync`` on ``cli.main``'s parser (``add`` makes a command)."""
    p = add("sync", cmd_sync, "make the env match its lock (fetch, install, verify, flip)",
            "Lock first if locks/pylock.ENV.toml is missing or stale, build the [builds.*] the wheelhouse\n"
            "lacks, fetch every locked wheel into the store (verified), build the venv with the pinned uv\n"
            "from the store only, check its digest against the lock, and make it the env's new current\n"
            "generation. The store is $ENVLOCK_HOME (default: the user data dir). The last line printed is\n"
            "the env's stable path. Exit: 0, 1 the work failed (nothing switched), 2 bad input, 130 Ctrl-C,\n"
            "143 SIGTERM.")
    p.add_argument("env", metavar="ENV")
    p.add_argument("--frozen", action="store_true",
                   help="sync the lock as it is, even if stale; never write it (not even the venv digest); "
                   "a missing local build is rebuilt from the locked build requirements and must be bit-identical")
    p.add_argument("--offline", action="store_true",
                   help="no network: never lock or build; wheels come from the store (locally built ones also "
                   "from the wheelhouse); name what is missing")
    p.add_argument("--lock", metavar="PATH[@REV]",
                   help="sync this lock instead of locks/pylock.ENV.toml, as it is: no relock, no builds (its "
                   "built wheels must be in the store or the wheelhouse); the first sync still records the venv "
                   "digest in a lock file (not in PATH@REV, nor with --frozen)")
    p.set_defaults(needs_workspace=without_lock)
    mirror_flags(p, why=": the wheels locked from it are downloaded from there (the file of the same name it lists), "
                 "and a lock, if locking, is made against it")
    trusted_key_option(p)
    target_option(p, "to sync (its venv is made only on a machine of its platform)")
    json_option(p)
