"""Command line of the regression commands: export, import, gc, pin, pins, unpin, bisect.

Beside ``cli`` (which adds them to its parser with ``add_commands``): parse, call the recipe,
render. Nothing else. See docs/regressions.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from envlock.cli.render import count, json_option, mirror_flags, mirror_options, out
from envlock.errors import UsageError

if TYPE_CHECKING:
    from envlock.workspace import Workspace





def cmd_export(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import ui
    from envlock.commands import export

    target = args.out or args.to  # --to: the spelling before --out (one meaning per option name: docs/cli.md)
    if target is None:
        raise UsageError("export: expected --out DIR|FILE.tar, where to write the bundle")
    with ui.progress(quiet=args.quiet or args.json) as bar:
        result = export.export_env(ws, args.env, args.lock, target.absolute(), progress=bar,
                                      allow_pending=args.allow_pending, asked=mirror_options(args))
    for note in result.notes:  # loud, also under --json
        print(f"envlock: note: {note}", file=sys.stderr)

    def text() -> str:
        kinds = ", ".join(f"{count(n, k.rstrip('s'))}" for k, n in sorted(result.entries.items()))
        return (f"exported {result.lock} to {result.to}: {kinds} ({count(result.files, 'file')}, "
                f"{ui.size(result.bytes)})\nimport it elsewhere with `envlock import {result.to}`")

    out(args, result.to_dict(), text)
    return 0


def cmd_import(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import ui
    from envlock.commands import export

    result = export.import_bundle(args.source.absolute(), ws if (ws.root / "envs").is_dir() else None,
                                     args.trusted_key)
    for note in result.notes:
        print(f"envlock: note: {note}", file=sys.stderr)

    def text() -> str:
        added = ", ".join(count(n, k.rstrip("s")) for k, n in sorted(result.added.items())) or "nothing new"
        return (f"imported {result.source}: {added} ({ui.size(result.bytes)}; {result.present} already in the "
                f"store), every file checked against its sha256\npinned the lock of env {result.env!r}: "
                f"{result.pin.path}\nsync it with `envlock sync {result.env} --lock {result.pin.path} --offline`")

    out(args, result.to_dict(), text)
    return 0


def cmd_gc(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import ui
    from envlock.commands import gc

    options = gc.GcOptions(dry_run=args.dry_run, keep_generations=args.keep_generations,
                                   keep_git=args.keep_git, git_depth=args.git_depth)
    def on_wait() -> None:
        if not args.quiet:
            print("envlock: waiting for the running syncs, locks and builds to end (gc never removes what they "
                  "use)",
                  file=sys.stderr, flush=True)

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


def cmd_pin(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import pin as commands_pin
    from envlock.store.store import Store

    pin = commands_pin.pin_env(ws, Store.open(), args.env, args.lock)
    out(args, pin.to_dict(), lambda: f"pinned {pin.label} for env {pin.env!r} (sha256 {pin.sha256[:16]}): gc keeps "
         f"its closure\n{pin.path}")
    return 0


def cmd_pins(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import pin as commands_pin
    from envlock.store.store import Store

    found = commands_pin.pins(Store.open(create=False), args.env)
    out(args, {"pins": [p.to_dict() for p in found]},
         lambda: "\n".join(f"{p.env}  {p.created}  {p.sha256[:16]}  {p.label}" for p in found) or "no pins")
    return 0


def cmd_unpin(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import pin as commands_pin
    from envlock.store.store import Store

    if args.all and args.lock:
        raise UsageError("envlock unpin: --lock and --all: give one")
    gone = commands_pin.unpin(ws, Store.open(), args.env, args.lock, everything=args.all)
    out(args, {"unpinned": [p.to_dict() for p in gone]},
         lambda: "\n".join(f"unpinned {p.label} ({p.sha256[:16]})" for p in gone) or "no pins")
    return 0


def cmd_bisect(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import bisect

    # Options before `--`, the command after it (argparse's REMAINDER would take the options too).
    cut = args.cmd.index("--") if "--" in args.cmd else len(args.cmd)
    given, unknown = _bisect_options().parse_known_args(args.cmd[:cut])
    quiet = bool(args.quiet) or given.quiet
    vars(args).update(vars(given), quiet=quiet)
    if unknown:
        raise UsageError(f"envlock bisect {args.env} {unknown[0]} ...: not an option of bisect (--good REV --bad REV, "
                         "--nightly DATE..DATE, --index NAME=URL, --source NAME=URL, --json, -q); the command goes "
                         "after `--`")
    options = bisect.BisectOptions(good=args.good, bad=args.bad, nightly=args.nightly,
                                      cmd=tuple(args.cmd[cut + 1:]), output=2,  # CMD's stdout to stderr
                                      mirrors=mirror_options(args))

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
            for c in report.diff.changes:  # as `envlock diff` prints them
                sign = {"added": "+", "removed": "-", "changed": "~", "pending": "~"}[c.action]
                value = c.new if c.old is None else c.old if c.new is None else f"{c.old} -> {c.new}"
                lines.append(f"  {sign} {c.kind:8} {c.name}: {value}" + (f"  ({c.note})" if c.note else ""))
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
    mirror_flags(p)
    return p


def _step_line(step: Any) -> str:
    code = "" if step.exit_code is None else f" (exit {step.exit_code})"
    gen = "" if step.generation is None else f", generation {step.generation}"
    note = f"; {step.note}" if step.note else ""
    return f"{step.candidate}: {step.result}{code} in {step.seconds:.1f}s{gen}{note}"


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """export, import, gc, pin, pins, unpin, bisect (docs/regressions.md)."""
    from pathlib import Path

    p = add("export", cmd_export, "write a lock's closure (wheels, builds, sources) to a folder or FILE.tar",
            "Write everything the env's lock (or --lock PATH[@REV]) needs to sync and rebuild with no network:\n"
            "its wheels, its local builds and their records, the sources and FetchContent checkouts they were\n"
            "built from, the lock, and a manifest with the sha256 of every file. Wheels the store lacks are\n"
            "fetched first. `envlock import` reads it into another store.")
    p.add_argument("env", metavar="ENV")
    p.add_argument("--lock", metavar="PATH[@REV]", help="export this lock instead of locks/pylock.ENV.toml")
    p.add_argument("--out", type=Path, metavar="DIR|FILE.tar",
                   help="where to write it: a new folder, or a .tar file (written under a temp name, then renamed)")
    p.add_argument("--to", type=Path, help=argparse.SUPPRESS)  # the old spelling of --out
    p.add_argument("--allow-pending", action="store_true",
                   help="export a lock whose local builds are not built yet, without them (refused otherwise: "
                   "the bundle could neither sync nor rebuild them); a note names each")
    mirror_flags(p, why=": the wheels and backend wheels the store lacks are downloaded from it")
    json_option(p)

    p = add("import", cmd_import, "add an exported closure to the store (every file hash-checked) and pin its lock",
            "Read a folder or .tar written by `envlock export`: every member is held to the sha256 its manifest\n"
            "names, and a member that does not match, a path that would escape (absolute, '..'), a link or a\n"
            "device is refused by name; nothing is stored unless all of it is whole. A link must stay inside\n"
            "its entry on disk; a local build is taken only if the bundle's lock records its wheel (or a build\n"
            "record signed by a trusted key comes with it); a git source only if its files are its commit's\n"
            "tree. The lock is pinned (`envlock pins`); sync it with `envlock sync ENV --lock PINNED --offline`.")
    p.add_argument("source", type=Path, metavar="DIR|FILE")
    p.add_argument("--trusted-key", action="append", default=[], metavar="NAME:BASE64",
                   help="take a local build whose wheel the bundle's lock does not record when a build record "
                        "signed by this key comes with it (NAME:BASE64, as `envlock cache keygen` prints it); also "
                        "ENVLOCK_TRUSTED_KEYS and [cache] trusted-keys in envlock.toml; repeatable")
    json_option(p)
    p.set_defaults(needs_workspace=False)

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

    p = add("pin", cmd_pin, "keep a lock's closure through gc (default: locks/pylock.ENV.toml)")
    p.add_argument("env", metavar="ENV")
    p.add_argument("--lock", metavar="PATH[@REV]", help="pin this lock (e.g. locks/pylock.ENV.toml@v1.2)")
    json_option(p)
    p = add("pins", cmd_pins, "list pinned locks")
    p.add_argument("env", metavar="ENV", nargs="?", help="only this env's")
    json_option(p)
    p.set_defaults(needs_workspace=False)
    p = add("unpin", cmd_unpin, "remove a pin (gc may then collect its closure)")
    p.add_argument("env", metavar="ENV")
    p.add_argument("--lock", metavar="PATH[@REV]", help="the pinned lock (default: locks/pylock.ENV.toml)")
    p.add_argument("--all", action="store_true", help="every pin of ENV")
    json_option(p)

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
            "  --json                 one JSON document on stdout\n"
            "  -q, --quiet            no line per step on stderr as it ends")
    p.usage = ("envlock bisect ENV (--good REV --bad REV | --nightly FROM..TO) [--index NAME=URL] [--source NAME=URL] "
               "[--json] [-q] -- CMD...")
    p.add_argument("env", metavar="ENV")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="...", help="options, then -- CMD...")

