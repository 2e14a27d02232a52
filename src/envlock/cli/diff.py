"""Command line of ``envlock diff``: parse, call ``commands.diff.diff_refs``, render the upgrade report
(``cli.upgradereport``). Nothing else. See docs/diff.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlock.cli.render import mirror_flags, mirror_options, out

if TYPE_CHECKING:
    from envlock.workspace import Workspace


def cmd_diff(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.cli.upgradereport import render_markdown, render_text
    from envlock.commands import diff, upgradereport

    if args.format == "json":
        args.json = True  # before the work: its errors are a JSON document too
    options = upgradereport.ReportOptions(fetch=args.fetch, yanked=args.yanked, mirrors=mirror_options(args))
    result, notes = diff.diff_refs(ws, args.old, args.new, options,
                                   targets=(args.target, args.new_target or args.target))
    for note in notes:
        print(f"envlock: note: {note}", file=sys.stderr)
    render = render_markdown if args.format == "markdown" else render_text
    out(args, result.to_dict(), lambda: render(result))
    return 0


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``envlock diff`` on ``cli.main``'s parser (``add`` makes a command)."""
    p = add("diff", cmd_diff, "what changes between two locks (the upgrade report)",
            "Compare two locks and say what the move changes: nightly pins, one line per index; each moved\n"
            "source as a commit range (count, dates, the commits touching files its patches touch, read from\n"
            "the store's git mirror); every local build that rebuilds, with the input that moved, and those\n"
            "that do not; packages added, removed or changed, with why when the locks show it; the download\n"
            "size before and after; the wheels of NEW that are yanked (PEP 592: recorded so in NEW; with\n"
            "--yanked, also those its index marks yanked now); then every change, one a line.\n"
            "OLD and NEW are lock paths, PATH@GITREV (e.g. locks/pylock.X.toml@HEAD~1) or env names.")
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="text (default), markdown (a block for a pull request description) or json "
                   "(the schema in docs/diff.md)")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--fetch", action="store_true",
                   help="fetch the history of moved git sources into the store's mirror first (network), for "
                   "their commit ranges")
    p.add_argument("--yanked", action="store_true",
                   help="read the index page of each of NEW's packages and list its files yanked since it was "
                   "locked (network; without it, only those NEW records as yanked)")
    mirror_flags(p, why=": --yanked reads it there; --source: --fetch fetches from there")
    p.add_argument("--target", metavar="NAME",
                   help="of locks with [targets.NAME]: the target to compare (default: the one whose platform this "
                   "machine runs; on a machine of none, the first, said in a note)")
    p.add_argument("--new-target", metavar="NAME",
                   help="the target read of NEW, when not --target's: `envlock diff ENV ENV --target x86 "
                   "--new-target gb200` says what differs between two targets")
    p.set_defaults(needs_workspace=False)  # two lock paths need none; an env name is looked up in it
