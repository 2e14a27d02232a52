"""Command line of ``envlock upgrade``: parse, call ``upgrading.upgrade``, render. Nothing else.

Beside ``cli``, which adds the command to its parser with ``add_upgrade`` (as ``cliregress``
adds the regression commands). See docs/upgrading.md.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from envlock.cli.render import mirror_flags

if TYPE_CHECKING:
    from envlock.model.mirrors import MirrorOptions
    from envlock.workspace import Workspace


def add_upgrade(add: Callable[..., argparse.ArgumentParser],
                mirror_options: Callable[[argparse.Namespace], MirrorOptions],
                status: Callable[[argparse.Namespace, str], AbstractContextManager[Callable[[str], None]]]) -> None:
    """``envlock upgrade`` on ``cli``'s parser; ``mirror_options`` reads ``--index``/``--source`` and
    ``status`` shows a spinner on a terminal, as for every command."""

    def cmd_upgrade(args: argparse.Namespace, ws: Workspace) -> int:
        from envlock import ui
        from envlock.commands import upgrade

        args.json = args.json or args.format == "json"  # before the work: its errors are a JSON document too
        options = upgrade.UpgradeOptions.given(args.nightly, args.rev, args.versions, args.dry_run,
                                                 mirror_options(args), fix_renames=args.fix_renames)
        with status(args, message := f"upgrading envs/{args.env}.toml") as say:
            result = upgrade.upgrade(ws, args.env, options, progress=ui.StatusProgress(say, message))
        if args.json:
            print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
        else:
            print("\n".join(upgrade.report_lines(ws, result, markdown=args.format == "markdown")))
        return 0

    p = add("upgrade", cmd_upgrade, "move nightlies, source revs or versions in envs/ENV.toml, relock, report",
            "Edit envs/ENV.toml in place (comments and layout kept), relock, print what the lock changes. A moved\n"
            "source's patches must apply at the new commit; the spec and lock are written together at the end, or\n"
            "not at all (exit 1, every problem found named with its fix); --dry-run writes nothing and prints the\n"
            "same report. e.g.\n"
            "  envlock upgrade qwen35 --nightly latest --rev sglang=release --dry-run   (the example world's env:\n"
            "  python examples/world/serve.py --dir /tmp/world; docs/upgrading.md)")
    p.add_argument("env", metavar="ENV")
    p.add_argument("--nightly", action="append", default=[], metavar="[INDEX=]DATE|latest",
                   help="move every nightly of INDEX (default: of every index) that shares its date to DATE, or to "
                   "the newest date with a wheel for the target of each")
    p.add_argument("--rev", action="append", default=[], metavar="SOURCE=REV",
                   help="pin git source SOURCE to the commit REV (a branch or tag: kept in a comment) names now")
    p.add_argument("--version", action="append", default=[], dest="versions", metavar="PKG=SPEC",
                   help="set PKG to SPEC (0.6.6: ==0.6.6); its same-version set and the overrides pinning it move too")
    p.add_argument("--fix-renames", action="store_true",
                   help="move each build whose project upstream renamed (its [builds.NAME...] tables and its "
                   "package entry) to the new name, every comment kept")
    p.add_argument("--dry-run", action="store_true", help="write nothing (spec, lock, patches); the same report")
    mirror_flags(p)
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="the report for a terminal, as a block for a pull request, or one JSON document")
    p.add_argument("--json", action="store_true", help="the same as --format json")
