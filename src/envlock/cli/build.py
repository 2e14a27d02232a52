"""Command line of ``envlock build``: parse, call ``commands.build.build_env``, render. Nothing else.

Beside ``cli.main`` (which adds it to its parser with ``add_commands``). See docs/builds.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from envlock.cli.render import json_option, mirror_flags, mirror_options, out, status, target_option, trusted_key_option

if TYPE_CHECKING:
    from pathlib import Path

    from envlock.workspace import Workspace


def _overrides(values: Sequence[str]) -> dict[str, Path]:
    from envlock.build.sources import parse_override

    return dict(parse_override(v) for v in values)


def cmd_build(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.cli.cache import build_caches
    from envlock.commands import build

    with status(args, "preparing sources and build inputs") as say:
        options = build.BuildOptions(
            check=args.check, overrides=_overrides(args.override_source), offline=args.offline, rebuild=args.rebuild,
            target=args.target,
            caches=None if args.offline else build_caches(ws, args.trusted_key),
            on_build=lambda name, digest: say(f"building {name} (inputs {digest[:19]}; same inputs are "
                                              "reused from the store; a native build can take long)"),
        )
        report = build.build_env(ws, args.env, tuple(args.packages), options, mirror_options(args))
    for notice in report.notices:
        print(f"envlock: {notice}", file=sys.stderr)  # loud, also under --json

    def text() -> str:
        lines = []
        for b in report.builds:
            how = ("built" if b.rebuilt else "unchanged (the wheelhouse holds the lock's wheel)" if b.from_wheelhouse
                   else "unchanged (from the store)")
            lines.append(f"{b.name}: {how} {ws.relative(b.wheel)} sha256 {b.sha256[:16]} inputs {b.input_digest[:23]}")
        for c in report.checks:
            if c.reproducible:
                to = " to the lock's wheel" if c.recorded else ""
                lines.append(f"{c.name}: reproducible (rebuilt bit-identical{to}, sha256 {c.actual_sha256[:16]})")
            else:
                lines.append(f"{c.name}: NOT reproducible: expected sha256 {c.expected_sha256[:16]}, "
                             f"rebuilt {c.actual_sha256[:16]}; differing files:")
                lines += [f"  {d}" for d in c.differing] + [f"  rebuild kept at {c.kept}"]
        lines.append(f"{report.rebuilt} rebuilt, {len(report.builds) - report.rebuilt} reused"
                     + (f"; {len(report.checks)} built again from scratch to check" if report.checks else "")
                     + (f"; updated {ws.relative(report.lock)}" if report.lock_changed else ""))
        return "\n".join(lines)

    out(args, report.to_dict(), text)
    return 0 if report.reproducible else 1


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``envlock build`` on ``cli.main``'s parser (``add`` makes a command)."""
    p = add("build", cmd_build, "build the env's local packages ([builds.*]) into the wheelhouse",
            "Fetch each source at its pinned commit, apply its patches, build the wheel (keyed by an input digest:\n"
            "same inputs => no rebuild) and record it in the lock. --check rebuilds from scratch and compares\n"
            "(exit 1 if not bit-identical, naming the files that differ), and writes no lock: it says when the\n"
            "lock records a build of other inputs, and what changed. A build installs its backend only from\n"
            "hash-checked wheels in the store; --offline takes everything from there (`envlock import`).")
    p.add_argument("env", metavar="ENV")
    p.add_argument("packages", nargs="*", metavar="PKG", help="only these builds (default: all)")
    target_option(p, "to build for (a build runs only on a machine of its platform)")
    p.add_argument("--check", action="store_true",
                   help="rebuild from scratch and compare (exit 1 on a difference); the lock is not written")
    p.add_argument("--offline", action="store_true",
                   help="no network: build from the build requirements the lock records, with sources and backend "
                   "wheels from the store only (after `envlock import`); name what is missing")
    p.add_argument("--rebuild", action="store_true",
                   help="build again from scratch, replacing the store's build of the same inputs (one whose wheel "
                   "is not the lock's is never taken: imported, or not reproducible)")
    p.add_argument("--override-source", action="append", default=[], metavar="NAME=PATH",
                   help="build source NAME from a local tree instead of its pin, the spec's patches applied on "
                   "top (so give it unpatched); never recorded in the lock")
    mirror_flags(p)
    trusted_key_option(p)
    json_option(p)
