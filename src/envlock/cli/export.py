"""Command line of ``envlock export`` and ``envlock import``: a lock's closure carried to another store.

Beside ``cli.main`` (which adds them to its parser with ``add_commands``): parse, call the recipe
(``commands.export``), render. Nothing else. See docs/regressions.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlock.cli.render import count, json_option, mirror_flags, mirror_options, out, target_option
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
                                   allow_pending=args.allow_pending, asked=mirror_options(args), target=args.target)
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


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """export and import, on ``cli.main``'s parser (``add`` makes a command)."""
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
    target_option(p, "whose closure is written")
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
