"""Command line of the commands on an env's generations in the store: ``path``, ``verify``,
``generations``, ``rollback`` and ``run``. Parse, call the recipe (``commands.run``, ``commands.verify``,
``install.generations``), render. Nothing else.

Beside ``cli.main`` (which adds them to its parser with ``add_commands``). All but ``verify`` of the
workspace's lock read only the store, so they work from anywhere.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlock.cli.render import count, json_option, out, target_option
from envlock.cli.sync import without_lock
from envlock.errors import UsageError

if TYPE_CHECKING:
    from envlock.store.store import Store
    from envlock.workspace import Workspace


def _env_store(args: argparse.Namespace, ws: Workspace) -> Store:
    """The store, for a command on ``args.env`` that reads it only; an env neither synced there
    nor declared in the workspace is named as a typo, not sent to `envlock sync`."""
    from envlock.install import generations
    from envlock.store.store import Store

    store = Store.open(create=False)
    spec = ws.root / "envs" / f"{args.env}.toml"
    if not generations.env_dir(store, args.env).is_dir() and spec.parent.is_dir() and not spec.is_file():
        raise generations.unknown_env(store, args.env, ws.root, ws.envs())
    return store


def cmd_path(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.run import env_path

    path = env_path(_env_store(args, ws), args.env)
    out(args, {"env": args.env, "path": str(path)}, lambda: str(path))
    return 0


def cmd_verify(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.verify import repair_env, verify_workspace_env

    store = _env_store(args, ws)
    repaired = repair_env(store, args.env) if args.repair else None
    result = verify_workspace_env(ws, store, args.env, args.lock, target=args.target)

    def text() -> str:
        said = [] if repaired is None else [
            f"{args.env}: repaired {count(len(repaired.venvs), 'venv')} (generations "
            f"{', '.join(repaired.generations)})" if repaired.venvs else f"{args.env}: every generation is intact"]
        said += [f"  removed {name}: modified, and no generation uses it"
                 for name in (repaired.removed if repaired else ())]
        return "\n".join([*said, verdict()])

    def verdict() -> str:
        if result.ok:
            return f"{args.env}: ok ({result.actual})" + (f"; {result.note}" if result.note else "")
        if result.intact:  # a generation of another lock, as it was built
            return f"{args.env}: NOT THIS LOCK: intact ({result.actual}), but {result.note}"
        lines = [f"{args.env}: MISMATCH at {result.path}", f"  expected {result.expected}",
                 f"  found    {result.actual}"]
        if result.difference is not None:
            lines += [f"  {line}" for line in result.difference.lines()]
        if result.note:
            lines.append(f"  {result.note}")
        if len(result.shared) > 1:
            lines.append(f"  the changed files are hard links (uv's cache): the same edit is in the venvs of "
                         f"generations {', '.join(result.shared)}")
        lines.append(f"  repair {'them all' if len(result.shared) > 1 else 'it'}: envlock verify {args.env} --repair "
                     "(rebuilds each from its lock and the store's wheels)")
        return "\n".join(lines)

    doc = result.to_dict() | ({"repair": repaired.to_dict()} if repaired is not None else {})
    out(args, doc, text)
    return 0 if result.ok else 1


def cmd_generations(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.install import generations

    store = _env_store(args, ws)
    gens, damaged = generations.scan(store, args.env)
    number = generations.current_number(store, args.env)
    if not gens and not damaged and number is None:
        raise generations.never_synced(store, args.env)  # exit 2, as path and verify say
    present = {g.number: g.venv.is_dir() for g in gens}  # a generation whose venv is gone cannot be rolled back to

    def text() -> str:
        lines = [f"  {'gen':>4}  {'created':20}  {'lock (install digest)':23}  venv digest"] + [
            f"{'*' if g.current else ' '} {g.number:>4}  {g.created}  {g.install_digest[:23]}  {g.venv_digest[:23]}"
            + ("" if present[g.number] else "  (venv gone from the store)")
            + ("  (never current: its sync stopped before the switch)" if g.pending else "")
            for g in gens
        ] if gens else [f"{args.env}: no generations" + ("" if damaged else f" (run `envlock sync {args.env}`)")]
        lines += [f"  unreadable: {path} (not listed; `envlock sync {args.env}` makes a new generation)"
                  for path in damaged]
        if number is None and (why := generations.no_current(store, args.env)) is not None:
            lines.append(f"  current: none {why}")
        elif number is not None and not any(g.current for g in gens) and not any(p.parent.name == str(number)
                                                                                  for p in damaged):
            lines.append(f"  current: the link names generation {number}, which is not there")
        return "\n".join(lines)

    out(args, {"env": args.env, "current": number,
                "generations": [{**g.to_dict(), "venv_present": present[g.number]} for g in gens],
                "unreadable": [str(p) for p in damaged]}, text)
    return 0


def cmd_rollback(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.install import generations

    result = generations.rollback(_env_store(args, ws), args.env, args.to)
    out(args, result.to_dict(),
         lambda: f"{args.env}: generation {result.previous or '(none)'} -> {result.current}\n"
                 + str(result.path))
    return 0


def cmd_run(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.run import exec_in_env

    cut = 0  # options between ENV and the `--` (a "--" later on is the command's own)
    while cut < len(args.cmd) and args.cmd[cut] != "--" and args.cmd[cut].startswith("-"):
        cut += 1
    given_cut = cut < len(args.cmd) and args.cmd[cut] == "--"
    options, argv = (args.cmd[:cut], args.cmd[cut + 1:]) if given_cut else ([], args.cmd)
    # Only envlock's own options are looked at: a command's `--root=/x` is the command's.
    if root := next((a for a in (options if given_cut else argv[:1]) if a == "--root" or a.startswith("--root=")),
                    None):
        raise UsageError(f"envlock run {args.env} {root} ...: --root goes before ENV (envlock --root DIR run ENV -- "
                         "CMD...), where the workspace is looked for")
    for option in options:  # `run ENV -q -- CMD`, as `sync ENV --json` takes its options after ENV
        if option in ("-q", "--quiet"):
            args.quiet = True
        elif option == "--debug":
            args.debug = True
        else:
            raise UsageError(f"envlock run {args.env} {option} -- ...: {option!r} is no option of run here "
                             "(-q, --debug; --root goes before ENV); the command goes after `--`")
    if argv[:1] and argv[0].startswith("-") and not given_cut:
        raise UsageError(f"envlock run {args.env} {argv[0]} ...: {argv[0]!r} is not a command; options go before "
                         "`--` and the command after it: envlock run ENV [-q] -- CMD...")
    exec_in_env(_env_store(args, ws), args.env, argv)


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """path, verify, generations, rollback and run, on ``cli.main``'s parser (``add`` makes a command)."""

    def env_command(name: str, func: Callable[[argparse.Namespace, Workspace], int], help: str, *,
                    store_only: bool = False, json: bool = True) -> argparse.ArgumentParser:
        """A command on one env; ``store_only`` ones need no workspace (they read only the store)."""
        p = add(name, func, help)
        p.add_argument("env", metavar="ENV")
        if store_only:
            p.set_defaults(needs_workspace=False)
        if json:
            json_option(p)
        return p

    env_command("path", cmd_path, "print the env's stable path (a symlink to its current generation)",
                store_only=True)
    p = env_command("verify", cmd_verify, "recompute the venv digest and compare with the lock (exit 1 on mismatch)")
    p.add_argument("--lock", metavar="PATH[@REV]",
                   help="compare with this lock instead of locks/pylock.ENV.toml (as `sync --lock`, e.g. "
                   "locks/pylock.ENV.toml@HEAD~1 after syncing a known-good lock)")
    p.set_defaults(needs_workspace=without_lock)
    target_option(p, "whose lock the venv is compared with")
    p.add_argument("--repair", action="store_true",
                   help="first rebuild every generation's venv of ENV that was modified, and every venv sharing a "
                   "modified file with one (hard links), from its lock and the store's wheels; then verify")
    env_command("generations", cmd_generations, "list the env's generations (* = current)", store_only=True)
    p = env_command("rollback", cmd_rollback, "make an earlier generation current (default: the previous one)",
                    store_only=True)
    p.add_argument("--to", type=int, metavar="N", help="generation number to switch to")

    p = env_command("run", cmd_run, "run a command inside the env: envlock run ENV -- CMD...",
                    store_only=True, json=False)
    p.description = (
        "Run CMD with the env's bin first on PATH and VIRTUAL_ENV set. CMD replaces envlock (exec), so\n"
        "Ctrl-C and SIGTERM reach CMD itself and its exit status is its own. It runs in the generation\n"
        "current when it starts (envs/ENV/N/venv): a later sync or rollback does not change it under CMD.")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD",
                   help="the command and its arguments, after --; exit: its own, 127 not found, 126 not executable")
