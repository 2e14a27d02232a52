"""Command line of ``envlock bisect``: parse its options (before ``--``) and the command (after it),
call ``commands.bisect.bisect``, render each step and the first bad lock. Nothing else.

Beside ``cli.main`` (which adds it to its parser with ``add_commands``). See docs/regressions.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlock.cli.render import count, mirror_flags, mirror_options, out
from envlock.errors import UsageError

if TYPE_CHECKING:
    from envlock.commands.bisect import Step
    from envlock.workspace import Workspace


def cmd_bisect(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.cli.upgradereport import ledger
    from envlock.commands import bisect

    # Options before `--`, the command after it (argparse's REMAINDER would take the options too).
    cut = args.cmd.index("--") if "--" in args.cmd else len(args.cmd)
    given, unknown = _bisect_options().parse_known_args(args.cmd[:cut])
    quiet = bool(args.quiet) or given.quiet
    vars(args).update(vars(given), quiet=quiet)
    if unknown:
        raise UsageError(f"envlock bisect {args.env} {unknown[0]} ...: not an option of bisect (--good REV --bad REV, "
                         "--nightly DATE..DATE, --index NAME=URL, --source NAME=URL, --target NAME, --json, -q); "
                         "the command goes after `--`")
    options = bisect.BisectOptions(good=args.good, bad=args.bad, nightly=args.nightly,
                                   cmd=tuple(args.cmd[cut + 1:]), output=2,  # CMD's stdout to stderr
                                   mirrors=mirror_options(args), target=args.target)

    def on_step(step: bisect.Step) -> None:
        if not (args.json or args.quiet):
            print(_step_line(step), file=sys.stderr, flush=True)

    report = bisect.bisect(ws, args.env, options, on_step=on_step)

    def text() -> str:
        lines = [f"{report.mode} bisect of {args.env}: {count(len(report.candidates), 'candidate')} "
                 f"({report.candidates[0]} good .. {report.candidates[-1]} bad), {count(len(report.steps), 'step')}"]
        lines += [f"  {_step_line(s)}" for s in report.steps]
        if report.maybe:
            skipped = "every candidate tried was skipped" if all(s.result == bisect.SKIP for s in report.steps) \
                else "skipped candidates could not be told"
            lines.append(f"first bad is one of: {', '.join([*report.maybe, str(report.first_bad)])} ({skipped}; "
                         f"exit {bisect.CANNOT_TELL}: cannot tell)")
        else:
            lines.append(f"first bad: {report.first_bad} (last good: {report.last_good})")
        if report.diff is not None:
            lines.append(f"what it changed ({report.diff.old} -> {report.diff.new}):")
            lines += [f"  {line}" for line in ledger(report.diff)]  # as `envlock diff` prints them
        if report.restored is not None:
            lines.append(f"env {args.env} is back on generation {report.restored}")
        lines += [f"note: {n}" for n in report.notes]
        return "\n".join(lines)

    out(args, report.to_dict(), text)
    return 0 if report.found else bisect.CANNOT_TELL


def _bisect_options() -> argparse.ArgumentParser:
    """bisect's own options, read from what comes before `--`."""
    p = argparse.ArgumentParser(prog="envlock bisect ENV", add_help=False)
    p.add_argument("--good", metavar="REV")
    p.add_argument("--bad", metavar="REV")
    p.add_argument("--nightly", metavar="DATE..DATE")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--target", metavar="NAME")
    mirror_flags(p)
    return p


def _step_line(step: Step) -> str:
    code = "" if step.exit_code is None else f" (exit {step.exit_code})"
    gen = "" if step.generation is None else f", generation {step.generation}"
    note = f"; {step.note}" if step.note else ""
    return f"{step.candidate}: {step.result}{code} in {step.seconds:.1f}s{gen}{note}"


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``envlock bisect``, on ``cli.main``'s parser (``add`` makes a command)."""
    p = add("bisect", cmd_bisect, "find the first lock under which a command fails (git bisect run for envs)",
            "Binary search over the revisions that changed locks/pylock.ENV.toml (--good REV --bad REV), or\n"
            "over the nightly dates the index lists between two dates (--nightly GOOD..BAD, locked from a copy\n"
            "of the spec; the workspace's spec and lock are never written). Each step syncs its lock as a new\n"
            "generation and runs CMD in it as `envlock run` does: exit 0 good, 125 skip, 1-127 bad; a CMD that\n"
            "cannot start or dies of a signal stops the bisect. Prints each step, the first bad lock and what it\n"
            "changed against the last good one, and puts the env back on the generation current before.\n"
            "CMD's output goes to stderr. Exit: 0 found, 125 cannot tell (the skipped candidates may be the first\n"
            "bad: every one tried was skipped, as git bisect says it), 1 stopped, 2 bad input, CMD's 126/127 if it\n"
            "cannot start.\n"
            "\n"
            "Options (after ENV, before `--`):\n"
            "  --good REV --bad REV   a revision whose lock is good, and a later one whose lock is bad\n"
            "  --nightly FROM..TO     the good date and the bad date (YYYY-MM-DD)\n"
            "  --index NAME=URL       read spec index NAME at a mirror (each step's lock and sync; repeatable)\n"
            "  --source NAME=URL      fetch git source NAME from a mirror (--nightly: each step's lock)\n"
            "  --target NAME          of a spec with [targets.NAME]: the target synced (default: this machine's)\n"
            "  --json                 one JSON document on stdout\n"
            "  -q, --quiet            no line per step on stderr as it ends")
    p.usage = ("envlock bisect ENV (--good REV --bad REV | --nightly FROM..TO) [--index NAME=URL] [--source NAME=URL] "
               "[--target NAME] [--json] [-q] -- CMD...")
    p.add_argument("env", metavar="ENV")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="...", help="options, then -- CMD...")
