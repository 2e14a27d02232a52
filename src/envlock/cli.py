"""Command line: parse, call the pipeline, render, map errors to exit codes. Nothing else."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envlock import __version__
from envlock.errors import EnvlockError, UsageError
from envlock.workspace import Workspace

EPILOG = """\
Typical use:
  envlock lock qwen35-blackwell          resolve envs/qwen35-blackwell.toml -> locks/pylock.qwen35-blackwell.toml
  envlock sync qwen35-blackwell          make the env match the lock; last line printed is its path
  envlock diff locks/pylock.X.toml@HEAD~1 X   what an upgrade changes
Exit codes: 0 ok, 1 the work failed or a check found a difference, 2 bad input (spec, env, option)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own exit path: keep it at code 2
        self.print_usage(sys.stderr)
        self.exit(2, f"envlock: error: {message}\n")


def _out(args: argparse.Namespace, data: dict[str, Any], text: Callable[[], str]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        rendered = text()
        if rendered:
            print(rendered)


def _index_pairs(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not name or not url:
            raise UsageError(f"--index {pair!r}: expected NAME=URL (a spec index name and the mirror's URL)")
        out[name] = url
    return out


# -- commands -----------------------------------------------------------------


def cmd_lock(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import pipeline

    if args.check:
        check = pipeline.check_lock(ws, args.env)

        def text() -> str:
            if check.current:
                return f"{ws.relative(check.path)} is current for envs/{args.env}.toml"
            lines = [f"{ws.relative(check.path)} is stale:"] + [f"  {r}" for r in check.reasons]
            return "\n".join([*lines, f"run `envlock lock {args.env}` to update it"])

        _out(args, check.to_dict(), text)
        return 0 if check.current else 1
    result = pipeline.lock_env(ws, args.env, mirrors=_index_pairs(args.index))

    def text_lock() -> str:
        verb = "wrote" if result.changed else "unchanged:"
        lines = [f"{verb} {ws.relative(result.path)} ({result.packages} packages)"]
        lines += [f"  nightly {n} -> {v}" for n, v in result.nightlies.items()]
        lines += [f"  index {n} mirrored at {u}" for n, u in sorted(result.mirrors.items())]
        return "\n".join(lines)

    _out(args, result.to_dict(), text_lock)
    return 0


def cmd_diff(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import pipeline
    from envlock.diff import diff_locks

    old, old_label = pipeline.load_lock_ref(ws, args.old)
    new, new_label = pipeline.load_lock_ref(ws, args.new)
    result = diff_locks(old, new, old_label=old_label, new_label=new_label)

    def text() -> str:
        if not result.changes:
            return f"no differences ({result.unchanged} packages identical)"
        lines = [f"--- {result.old}", f"+++ {result.new}"]
        for c in result.changes:
            sign = {"added": "+", "removed": "-", "changed": "~"}[c.action]
            value = c.new if c.old is None else c.old if c.new is None else f"{c.old} -> {c.new}"
            note = f"  ({c.note})" if c.note else ""
            lines.append(f"{sign} {c.kind:8} {c.name}: {value}{note}")
        lines.append(f"{len(result.changes)} changes, {result.unchanged} packages identical")
        return "\n".join(lines)

    _out(args, result.to_dict(), text)
    return 0


# -- parser -------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--root", type=Path, help="workspace root (default: first folder with envs/ from here up)")
    common.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    common.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    parser = _Parser(
        prog="envlock",
        description="Reproducible Python environments for bleeding-edge GPU stacks: "
        "nightly pins, index-pinned locks (PEP 751), pinned sources, recorded patches, local builds, "
        "bit-reproducible venvs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"envlock {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, func: Callable[[argparse.Namespace, Workspace], int], help: str,
            description: str | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=description or help, parents=[common],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=func)
        return p

    p = add("lock", cmd_lock, "resolve envs/ENV.toml into locks/pylock.ENV.toml",
            "Resolve envs/ENV.toml with the pinned uv and write locks/pylock.ENV.toml (PEP 751 + [tool.envlock]).\n"
            "Nightly pins resolve to the exact version of that date; every package comes only from the index\n"
            "it is pinned to (else the default index); every wheel gets a sha256.\n"
            "Mirrors: --index NAME=URL or ENVLOCK_INDEX_<NAME>=URL resolve a spec index against another URL.")
    p.add_argument("env", metavar="ENV", help="env name (envs/ENV.toml)")
    p.add_argument("--check", action="store_true",
                   help="no network, no writes: exit 0 if the lock is current, 1 if stale (and why), 2 if missing")
    p.add_argument("--index", action="append", default=[], metavar="NAME=URL",
                   help="resolve spec index NAME against URL (a mirror); repeatable")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")

    p = add("diff", cmd_diff, "what changes between two locks",
            "Compare two locks: packages (versions, re-uploaded wheels), nightly pins, sources, patches, builds.\n"
            "OLD and NEW are lock paths, PATH@GITREV (e.g. locks/pylock.X.toml@HEAD~1) or env names.")
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        ws = Workspace.find(root=args.root)
        code: int = args.func(args, ws)
        return code
    except EnvlockError as exc:
        if args.debug:
            raise
        print(f"envlock: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("envlock: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
