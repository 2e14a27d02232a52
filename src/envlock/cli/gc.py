"""Command line of ``envlock gc``: parse, call ``commands.gc.gc``, render. Nothing else.

Beside ``cli.main`` (which adds it to its parser with ``add_commands``). See docs/regressions.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlock.cli.render import count, json_option, out

if TYPE_CHECKING:
    from envlock.workspace import Workspace


def cmd_gc(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import ui
    from envlock.commands import gc

    options = gc.GcOptions(dry_run=args.dry_run, keep_generations=args.keep_generations,
                           keep_git=args.keep_git, git_depth=args.git_depth)

    def on_wait() -> None:
        if not args.quiet:
            print("envlock: waiting for the running syncs, locks and builds to end (gc never removes what they "
                  "use)", file=sys.stderr, flush=True)

    report = gc.gc(ws if (ws.root / "envs").is_dir() else None, options, on_wait)

    def text() -> str:
        verb = "would remove" if report.dry_run else "removed"
        # Entries and uv-cache archives apart: before - removed = after, in entries.
        archives = sum(1 for name in report.removed if name.startswith("uv-cache/"))
        entries = len(report.removed) - archives
        lines = [f"roots: {count(len(report.roots), 'lock')} ("
                 + ", ".join(count(sum(1 for r in report.roots if r.kind == k), noun)
                             for k, noun in (("generation", "generation"), ("workspace", "workspace lock"),
                                             ("git", "git lock"), ("pin", "pin"))) + ")",
                 f"before: {count(report.before.entries, 'entry', 'entries')}, {ui.size(report.before.bytes)}",
                 f"{verb}: {count(entries, 'entry', 'entries')}"
                 + (f" and {count(archives, 'uv-cache archive')}" if archives else "") + ", "
                 f"{count(len(report.generations), 'old generation')}, freeing {ui.size(report.freed)}",
                 f"after: {count(report.after.entries, 'entry', 'entries')}, {ui.size(report.after.bytes)}"]
        lines += [f"  {verb} {name}" for name in report.removed] if args.verbose else []
        lines += [f"  note: {n}" for n in report.notes]
        return "\n".join(lines)

    out(args, report.to_dict(), text)
    return 0


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``envlock gc``, on ``cli.main``'s parser (``add`` makes a command)."""
    p = add("gc", cmd_gc, "remove store entries no root reaches, and say what that frees",
            "Roots: each env's current generation and its newest N (--keep-generations), the workspace's lock\n"
            "files, the locks its git history holds (--keep-git, --git-depth) and pinned locks (`envlock pin`).\n"
            "A root keeps its whole closure: wheels, builds, sources, git mirrors, venv. The uv cache is trimmed\n"
            "to what kept venvs link to. Runs under the store's writer lock (a sync waits for it, it for a sync).")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    p.add_argument("--keep-generations", type=int, default=3, metavar="N",
                   help="generations kept per env, newest first (default 3; the current one always)")
    p.add_argument("--keep-git", default="all", metavar="all|tags|none",
                   help="locks of git history kept: all (commits down to --git-depth, and tags), tags, none")
    p.add_argument("--git-depth", type=int, default=50, metavar="N",
                   help="commits that changed locks/ whose locks are roots (default 50)")
    p.add_argument("-v", "--verbose", action="store_true", help="list each entry removed")
    json_option(p)
    p.set_defaults(needs_workspace=False)
