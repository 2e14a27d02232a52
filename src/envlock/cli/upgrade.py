"""Command line of ``envlock upgrade``: parse, call ``commands.upgrade.upgrade``, render. Nothing else.

Beside ``cli.main``, which adds the command to its parser with ``add_commands``. See docs/upgrading.md.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from envlock.cli.render import mirror_flags, mirror_options, status, target_option

if TYPE_CHECKING:
    from envlock.commands.upgrade import UpgradeResult
    from envlock.workspace import Workspace


def cmd_upgrade(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import ui
    from envlock.commands import upgrade

    args.json = args.json or args.format == "json"  # before the work: its errors are a JSON document too
    options = upgrade.UpgradeOptions.given(args.nightly, args.rev, args.versions, args.dry_run, mirror_options(args),
                                           fix_renames=args.fix_renames)
    options = replace(options, target=args.target)
    with status(args, message := f"upgrading envs/{args.env}.toml") as say:
        result = upgrade.upgrade(ws, args.env, options, progress=ui.StatusProgress(say, message))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print("\n".join(report_lines(ws, result, markdown=args.format == "markdown")))
    return 0


def report_lines(ws: Workspace, result: UpgradeResult, *, markdown: bool = False) -> list[str]:
    """The upgrade report as text (or, ``markdown``, a block for a pull request): the spec's edits,
    the patches carried, what the new lock changes (the upgrade report, as ``envlock diff``
    gives it), the notes, and what was written."""
    from envlock.cli.upgradereport import render_markdown, render_text
    from envlock.model.specmoves import LATEST

    spec, lock = ws.relative(result.spec), ws.relative(result.lock)
    item = "- " if markdown else "  "
    lines = [f"### envlock upgrade: `{spec}`", ""] if markdown else []
    lines.append(f"{spec}:" if result.plan.changes else f"{spec}: no value to change")
    for c in result.plan.changes:
        lines.append(f"{item}{c.key}: {c.old or '(none)'} -> {c.new}" + (f"  # {c.comment}" if c.comment else ""))
    for m in result.plan.nightlies:
        kept = f"; kept (same-date = false): {', '.join(m.kept)}" if m.kept else ""
        said = "already the newest for the target" if m.asked == LATEST and m.old == m.new else f"-> {m.new}"
        lines.append(f"{item}nightlies of index {m.index}: {m.old} {said} ({', '.join(m.packages)}){kept}")
    for r in result.plan.renames:
        lines.append(f"{item}builds.{r.build} renamed {r.project} ({r.where}): {'; '.join(r.moves())}")
    for name, statuses in sorted(result.patches.items()):
        commit = next(m.new for m in result.plan.sources if m.source == name)
        lines.append(f"{item}patches of {name} at {commit[:12]}: all {len(statuses)} apply")
    render = render_markdown if markdown else render_text
    lines += ([""] if markdown else []) + render(result.report).splitlines() + ([""] if markdown else [])
    lines += [f"{item}{name}: not built for the new lock yet; `envlock build {result.env}` builds it "
              f"(`envlock sync {result.env}` too)" for name in result.unbuilt]
    lines += [f"{item if markdown else ''}note: {note}" for note in (*result.plan.notes, *result.notes,
                                                                    *result.report.notes, result.note) if note]
    if result.dry_run:
        lines.append(f"dry run: {spec} and {lock} unchanged; run without --dry-run to write them")
    else:
        wrote = [path for path, changed in ((spec, result.plan.spec_changed), (lock, result.lock_changed)) if changed]
        same = [path for path in (spec, lock) if path not in wrote]
        done = [f"wrote {' and '.join(wrote)}"] if wrote else []
        lines.append("; ".join(done + ([f"{' and '.join(same)} unchanged"] if same else [])))
    return lines


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``envlock upgrade`` on ``cli.main``'s parser (``add`` makes a command)."""
    p = add("upgrade", cmd_upgrade, "move nightlies, source revs or versions in envs/ENV.toml, relock, report",
            "Edit envs/ENV.toml in place (comments and layout kept), relock, print what the lock changes. A moved\n"
            "source's patches must apply at the new commit; the spec and lock are written together at the end, or\n"
            "not at all (exit 1, every problem found named with its fix); --dry-run writes nothing and prints the\n"
            "same report. e.g.\n"
            "  envlock upgrade qwen35 --nightly latest --rev sglang=release --dry-run   (the example world's env:\n"
            "  python examples/world/serve.py --dir DIR; docs/upgrading.md)")
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
    target_option(p, "whose lock the report compares (every target is relocked; on a machine of none: the first)")
    mirror_flags(p)
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="the report for a terminal, as a block for a pull request, or one JSON document")
    p.add_argument("--json", action="store_true", help="the same as --format json")
