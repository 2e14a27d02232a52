"""Command line of the patch commands: status, edit, record, rebase.

Beside ``cli.main`` (which adds them under ``envlock patch`` with ``add_commands``): parse, call
the recipe (``commands.patch``, ``commands.rebase``), render. Nothing else. See docs/patches.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlock.cli.render import GLOBAL_OPTIONS, count, json_option, mirror_flags, mirror_options, out
from envlock.errors import UsageError

if TYPE_CHECKING:
    from envlock.workspace import Workspace




def cmd_patch_status(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import patch

    report = patch.patch_status(ws, args.env, against=args.against, asked=mirror_options(args))

    def text() -> str:
        lines = []
        for name, checks in sorted(report.sources.items()):
            commit = report.commits.get(name)
            lines.append(f"{name}" + (f" @ {commit}" if commit else "") + (f" (--against {args.against}, pin "
                                                                          f"{report.pins.get(name)})"
                                                                          if args.against else ""))
            for check in checks:
                s = check.status
                advice = f"  -- {s.advice}" if s.advice else ""
                lines.append(f"  {s.state:16} {s.patch}{advice}")
                if args.against:
                    lines += [f"      {line}" for line in check.describe_upstream()]
                if s.failure is not None and s.merge != "clean":  # a clean merge: nothing to show but that
                    lines += [f"      {line}" for f in (s.conflicts or (s.failure,)) for line in f.describe()]
        if not lines:
            lines.append(f"{args.env}: no source has patches")
        return "\n".join(lines)

    out(args, report.to_dict(), text)
    return 1 if report.conflicts else 0


def cmd_patch_edit(args: argparse.Namespace, ws: Workspace) -> int:
    from pathlib import Path

    from envlock.commands import patch

    workdir = (args.dir or Path(f"{args.source_name}-edit")).absolute()
    session = patch.patch_edit(ws, args.env, args.source_name, workdir, against=args.against,
                               asked=mirror_options(args))
    import shlex

    # The work dir is outside the workspace: named, the command also works from inside it.
    root = f" --root {shlex.quote(str(ws.root))}"
    dir_arg = shlex.quote(str(workdir))

    def text() -> str:
        at = f" at {session.commit}" if session.commit else ""
        lines = [f"{workdir}: {args.source_name}{at} with {count(len(session.levels), 'patch', 'patches')} applied "
                 "(one commit each)"]
        where = f"upstream at {args.against}" if args.against else "in the source tree"
        lines += [f"{label} is already {where}: retire it (drop it from the spec)" for label in session.upstreamed]
        if session.pending:
            lines.append(f"{session.pending[0]} does not apply here:")
            if session.conflict is not None and session.merge != "clean":  # clean: the old context is no news
                lines += [f"  {line}" for line in session.conflict.describe()]
            lines += session.describe_pending()
            lines.append(f"redo its change in {workdir}, then: envlock patch record {dir_arg} --refresh{root}")
            if session.commit:
                lines.append(f"then set [sources.{args.source_name}] rev = \"{session.commit}\" and run "
                             f"`envlock lock {args.env}`")
        else:
            lines.append(f"edit there, then: envlock patch record {dir_arg} --subject '...' --why '...' "
                         f"--upstream '...'{root}")
        return "\n".join(lines)

    out(args, session.to_dict(), text)
    return 0


def cmd_patch_rebase(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import rebase

    modes = [m for m in ("continue_", "abort") if getattr(args, m)]
    if modes and (args.env or args.source_name or args.to or len(modes) > 1):
        raise UsageError("patch rebase: --continue DIR and --abort DIR take no ENV, SOURCE or --to, nor each other")
    if args.continue_:
        report = rebase.resume(args.continue_.absolute())
    elif args.abort:
        report = rebase.abort(args.abort.absolute())
    else:
        if not (args.env and args.source_name and args.to):
            raise UsageError("patch rebase: expected ENV SOURCE --to REV (or --continue DIR, --abort DIR)")
        from envlock.workspace import Workspace as Found

        ws = Found.find(root=args.root)
        report = rebase.rebase(ws, args.env, args.source_name, args.to, workdir=args.dir,
                               asked=mirror_options(args))
    for label in report.retired:  # loud, also under --json
        print(f"envlock: RETIRED {label}: upstream has its change at {report.commit[:12]}; dropped from the spec"
              + (" (kept on disk: other envs list it)" if label in report.kept else " and deleted")
              + " (it stays in git history)", file=sys.stderr)
    out(args, report.to_dict(), lambda: "\n".join(report.describe()))
    return 1 if report.state == "stopped" else 0


def cmd_patch_record(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import patch

    recorded = patch.patch_record(ws, args.workdir.absolute(), subject=args.subject, why=args.why,
                                     upstream=args.upstream, refresh=args.refresh)
    env = recorded.env

    def text() -> str:
        rel = ws.relative(recorded.path)
        if args.refresh:
            lines = [f"refreshed {rel} ({count(len(recorded.files), 'file')})"]
            lines += [f"{label} is already upstream here: retire it (drop it from the spec)"
                      for label in recorded.upstreamed]
            if recorded.pending:
                lines.append(f"next: {recorded.pending[0]} does not apply as it is either; finish it, then record "
                             "--refresh again")
                lines += [f"  applied as far as it goes; conflict markers in {f}" for f in recorded.conflicted]
                lines += [f"  the hunks that do not apply are in {f} (remove it once redone)" for f in recorded.rejects]
            else:
                lines.append(f"every patch applies now; run `envlock lock {env}` (for a git source, once its rev in "
                             "the spec is the commit you edited against)")
            return "\n".join(lines)
        removed = [f"removed the work dir {args.workdir.absolute()}"] if recorded.removed else []
        return "\n".join([f"wrote {rel} ({count(len(recorded.files), 'file')})", *removed,
                          f"add it to [sources.{recorded.source}] patches = [..., \"{rel}\"] and run "
                          f"`envlock lock {env}`"])

    out(args, recorded.to_dict(), text)
    return 0


def add_commands(add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser,
                 parser_class: type[argparse.ArgumentParser]) -> None:
    """The ``patch`` command and its actions (status, edit, rebase, record), on ``cli.main``'s parser
    (``add`` makes a command)."""
    from pathlib import Path

    p = add("patch", lambda a, w: 2, "patch status / edit / record / rebase")
    psub = p.add_subparsers(dest="patch_command", metavar="ACTION", parser_class=parser_class, required=True)

    def padd(name: str, func: Callable[[argparse.Namespace, Workspace], int], help: str) -> argparse.ArgumentParser:
        q = psub.add_parser(name, help=help, description=help, parents=[common], epilog=GLOBAL_OPTIONS)
        q.set_defaults(func=func, command_parser=q)
        return q

    q = padd("status", cmd_patch_status, "each patch against the pinned commit (or --against REV): "
             "applies, already-applied or conflict (exit 1 on any conflict); with --against, merged 3-way as "
             "`patch rebase` would, with the upstream commits that touch each patch's files and lines")
    q.add_argument("env", metavar="ENV")
    q.add_argument("--against", metavar="REV", help="a commit, branch or tag of the source's repository")
    mirror_flags(q)
    json_option(q)
    q = padd("edit", cmd_patch_edit, "check the patched tree of SOURCE out into a work dir (a git repo, "
             "one commit per patch)")
    q.add_argument("env", metavar="ENV")
    q.add_argument("source_name", metavar="SOURCE")  # not "source": --source NAME=URL is a mirror
    q.add_argument("--dir", type=Path, help="work dir (default: ./SOURCE-edit)")
    q.add_argument("--against", metavar="REV",
                   help="check out REV instead of the pin (an upgrade): patches apply up to the first conflict, "
                   "which is applied as far as it goes (3-way, with conflict markers); finish it and record "
                   "with --refresh")
    mirror_flags(q)
    json_option(q)
    q = padd("rebase", cmd_patch_rebase, "move SOURCE to REV carrying its patches, as git rebase does (3-way)")
    q.description = (
        "Move SOURCE to the commit REV with its patches, one by one, as `git rebase` does: each patch\n"
        "applies as it is, or is rewritten by a 3-way merge against the commit it was recorded on (the\n"
        "pin), or is retired because upstream has its change. At a conflict it stops (exit 1) with a\n"
        "work dir holding REV, the patches before it, and the conflicting one with conflict markers;\n"
        "resolve them there and run --continue DIR (or --abort DIR). Nothing in the workspace changes\n"
        "until every patch is carried: then the patches and the spec's rev are written; relock after.")
    q.add_argument("env", metavar="ENV", nargs="?")
    q.add_argument("source_name", metavar="SOURCE", nargs="?")
    q.add_argument("--to", metavar="REV", help="the commit, branch or tag to move to")
    q.add_argument("--continue", dest="continue_", type=Path, metavar="DIR",
                   help="carry on after resolving the conflict in the work dir DIR")
    q.add_argument("--abort", type=Path, metavar="DIR", help="give the rebase up: remove DIR (the workspace "
                   "was never changed)")
    q.add_argument("--dir", type=Path,
                   help="work dir (default: rebase/ENV-SOURCE in the store, under $ENVLOCK_HOME; removed when done)")
    mirror_flags(q)
    json_option(q)
    q.set_defaults(needs_workspace=False)  # --continue and --abort read it from the work dir
    q = padd("record", cmd_patch_record, "write a work dir's edits as the next patches/SOURCE/NNNN-title.patch")
    q.add_argument("workdir", type=Path, metavar="WORKDIR")
    q.add_argument("--subject", help="one line: what the patch does (also its file name); needed for a new patch")
    q.add_argument("--why", help="why it is needed; needed for a new patch")
    q.add_argument("--upstream", help="upstream link or status (default for a new patch: not proposed upstream)")
    q.add_argument("--refresh", action="store_true",
                   help="rewrite the pending patch that did not apply (after `patch edit --against`), "
                   "keeping its name and header")
    json_option(q)

