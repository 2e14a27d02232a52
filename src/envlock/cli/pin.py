"""Command line of ``envlock pin``, ``pins`` and ``unpin``: locks the store keeps through gc.

Beside ``cli.main`` (which adds them to its parser with ``add_commands``): parse, open the store, call
the recipe (``commands.pin``), render. Nothing else. See docs/regressions.md.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlock.cli.render import json_option, out
from envlock.errors import UsageError

if TYPE_CHECKING:
    from envlock.workspace import Workspace


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


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """pin, pins and unpin, on ``cli.main``'s parser (``add`` makes a command)."""
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
