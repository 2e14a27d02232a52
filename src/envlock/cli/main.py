"""Command line: parse, call a command's recipe, render, map errors to exit codes. Nothing else.

This module holds the parser's frame (the global options, ``add`` for a command) and ``main``, which
maps the one error root to an exit code; each command group's module of ``cli`` adds its commands
(``add_commands``) and renders their results.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from envlock import __version__, gcpause, timings
from envlock.cli.render import GLOBAL_OPTIONS
from envlock.errors import EnvlockError, UsageError, asks_json, interrupted, json_error, scrub

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    # pathlib, typing and workspace (dataclasses, difflib) are imported where used at run
    # time: main()'s fast no-op answers before any of them is needed.
    from typing import Any

    from envlock.workspace import Workspace

EPILOG = """\
Typical use (envs/demo.toml, in a clone of envlock):
  envlock lock demo                      resolve envs/demo.toml -> locks/pylock.demo.toml
  envlock sync demo                      make the env match the lock; last line printed is its path
  envlock diff locks/pylock.demo.toml@HEAD~1 demo   what the lock changed since the last commit
  envlock upgrade ENV --nightly latest --dry-run    what moving to the newest nightly would change
Every job, offline: `python examples/world/serve.py --dir DIR` (README.md, A first tour).
Exit codes: 0 ok, 1 the work failed or a check found a difference, 2 bad input (spec, env, option)."""


#: Set by main(): the command line asks for --json, so even argparse's errors are a document.
_JSON_ERRORS = False


class _Parser(argparse.ArgumentParser):
    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes one for each add_argument too (to check its metavar), and a formatter made
        # without a width imports shutil for the terminal's: ~2 ms of every command's start-up. (Each
        # formatter_class here is a HelpFormatter, which takes a width; typeshed's protocol names prog only.)
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]

    def error(self, message: str) -> Any:  # argparse's own exit path: keep it at code 2
        message = scrub(message)  # `--index-url https://user:token@host/simple`, a pip habit, is echoed
        self.print_usage(sys.stderr)
        if _JSON_ERRORS:
            _json_error(message, (), "UsageError", 2)
        self.exit(2, f"envlock: error: {message}\n")


def _help_width() -> int:
    """The width argparse wraps help to: ``shutil.get_terminal_size``'s columns (``$COLUMNS``, else the
    terminal of stdout, else 80) less 2, as argparse takes them."""
    import os

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


def _network_options(options: argparse.ArgumentParser, default: object) -> None:
    """``--keyring-provider`` and ``--native-tls``: for envlock's requests and the uv it runs alike."""
    options.add_argument("--keyring-provider", choices=("disabled", "subprocess"), default=default,
                         help="subprocess: ask the `keyring` command for the password of an index URL's USER@, "
                              "as uv does (env ENVLOCK_KEYRING_PROVIDER; default disabled)")
    options.add_argument("--native-tls", action="store_true", default=default,
                         help="trust the operating system's certificate store, for envlock and uv "
                              "(env UV_NATIVE_TLS or UV_SYSTEM_CERTS; `truststore` when installed)")


def _apply_network_options(args: argparse.Namespace) -> None:
    """The network options as the variables ``envlock.netenv`` reads (and hands to uv): one
    setting for every request of the command, in every thread and in uv."""
    import os

    if getattr(args, "keyring_provider", None):
        os.environ["ENVLOCK_KEYRING_PROVIDER"] = args.keyring_provider
    if getattr(args, "native_tls", None):
        os.environ["ENVLOCK_NATIVE_TLS"] = "1"


#: Each command -> the module of ``cli`` that adds it; the modules in the order ``envlock --help`` lists them.
COMMANDS = {"lock": "lock", "nightlies": "lock", "diff": "diff", "sync": "sync", "path": "generations",
            "verify": "generations", "generations": "generations", "rollback": "generations", "run": "generations",
            "build": "build", "patch": "patch", "export": "export", "import": "export", "gc": "gc", "pin": "pin",
            "pins": "pin", "unpin": "pin", "bisect": "bisect", "kernels": "gpu", "doctor": "gpu",
            "upgrade": "upgrade", "cache": "cache"}


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs, when the parser of its group alone can parse it (``build_parser(only=...)``:
    the other 12 modules of ``cli`` and their parsers, 20-40 ms, are then not made); None: help, the
    version, no command or an unknown one, which the whole parser answers."""
    args = iter(argv)
    for arg in args:
        if arg in ("-h", "--help", "--version"):
            return None
        if arg in ("--root", "--keyring-provider"):  # the global options that take a value
            next(args, None)
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def _add_group(group: str, add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    """Add the commands of ``cli.<group>`` (imported here, alone) with ``add``."""
    adder: Callable[..., None]
    if group == "lock":
        from envlock.cli import lock as cli_lock
        adder = cli_lock.add_commands  # lock, nightlies
    elif group == "diff":
        from envlock.cli import diff as cli_diff
        adder = cli_diff.add_commands
    elif group == "sync":
        from envlock.cli import sync as cli_sync
        adder = cli_sync.add_commands
    elif group == "generations":
        from envlock.cli import generations as cli_generations
        adder = cli_generations.add_commands  # path, verify, generations, rollback, run
    elif group == "build":
        from envlock.cli import build as cli_build
        adder = cli_build.add_commands
    elif group == "patch":
        from envlock.cli import patch as cli_patch
        cli_patch.add_commands(add, common, _Parser)  # patch status, edit, rebase, record
        return
    elif group == "export":
        from envlock.cli import export as cli_export
        adder = cli_export.add_commands  # export, import
    elif group == "gc":
        from envlock.cli import gc as cli_gc
        adder = cli_gc.add_commands
    elif group == "pin":
        from envlock.cli import pin as cli_pin
        adder = cli_pin.add_commands  # pin, pins, unpin
    elif group == "bisect":
        from envlock.cli import bisect as cli_bisect
        adder = cli_bisect.add_commands
    elif group == "gpu":
        from envlock.cli import gpu as cli_gpu
        adder = cli_gpu.add_commands  # kernels, doctor
    elif group == "upgrade":
        from envlock.cli import upgrade as cli_upgrade
        adder = cli_upgrade.add_commands
    else:
        from envlock.cli import cache as cli_cache
        cli_cache.add_commands(add, common, _Parser)  # cache keygen, push, verify
        return
    adder(add)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command and option: the frame here, each command group's own in its module of ``cli``.
    ``only``: a command (``COMMANDS``); only its group's commands are added."""
    from pathlib import Path

    def common_options(default: object) -> _Parser:
        options = _Parser(add_help=False)
        options.add_argument("--root", type=Path, default=default,
                             help="workspace root (default: first folder with envs/ from here up)")
        options.add_argument("--debug", action="store_true", default=default, help="show tracebacks for errors")
        options.add_argument("-q", "--quiet", action="store_true", default=default, help="no progress output")
        _network_options(options, default)
        return options

    # Accepted before and after the command. After it, an option not given must leave the
    # value given before it alone: argparse copies a subcommand's defaults over the top's.
    top_common, common = common_options(None), common_options(argparse.SUPPRESS)
    for action in common._actions:  # said once, in `envlock --help`; each command's help points there
        action.help = argparse.SUPPRESS

    parser = _Parser(
        prog="envlock",
        description="Reproducible Python environments for bleeding-edge GPU stacks: "
        "nightly pins, index-pinned locks (PEP 751), pinned sources, recorded patches, local builds, "
        "bit-reproducible venvs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[top_common],
    )
    parser.add_argument("--version", action="version", version=f"envlock {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, func: Callable[[argparse.Namespace, Workspace], int], help: str,
            description: str | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=description or help, parents=[common],
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=GLOBAL_OPTIONS)
        # An unknown option is its command's error (main).
        p.set_defaults(func=func, command_parser=p)
        return p

    # The commands, in the order `envlock --help` lists them: each group's module adds its own.
    for group in dict.fromkeys(COMMANDS.values()) if only is None else [COMMANDS[only]]:
        _add_group(group, add, common)
    return parser


def _fail(args: argparse.Namespace, message: str, details: Sequence[str], kind: str, code: int) -> int:
    """Report an error on stderr (and, under --json, as the JSON document on stdout); return the exit code.

    Any ``scheme://user:password@`` in it is cut first: a git source's or an index's token must
    not reach a CI log, whichever stage (or git's own output) put its URL into the message."""
    message, details = scrub(message), [scrub(d) for d in details]
    print("envlock: error: " + "\n".join([message, *(f"  {d}" for d in details)]), file=sys.stderr)
    if getattr(args, "json", False):  # a caller parsing stdout gets a document either way
        _json_error(message, details, kind, code)
    return code


def _json_error(message: str, details: Sequence[str], kind: str, code: int) -> None:
    print(json_error(message, details, kind, code))


def main(argv: Sequence[str] | None = None, *, fast_path: bool = True, collecting: bool | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); its exit code.

    ``collecting``: the console script paused the garbage collector for start-up already
    (``gcpause.start_up``, whose answer this is), and exits after this; None: paused here.
    """
    exiting = collecting is not None
    # Fast path: an up-to-date `envlock sync ENV` answers here, before argparse is built
    # and the recipes (tomllib, packaging) are imported. envlock.store.noop imports only os,
    # sys and hashlib and returns None for anything it does not fully handle. The console
    # script tries it before importing this module at all (fast_path=False then).
    if fast_path:
        from envlock.store.noop import answer_noop

        fast = answer_noop(list(sys.argv[1:] if argv is None else argv))
        if fast is not None:
            return fast
    if collecting is None:
        collecting = gcpause.start_up()
    from envlock import interrupts

    # SIGINT and SIGTERM end envlock within 2 s whatever its threads do (interrupts); set from the
    # main thread only (Python's rule), and not over a parent's "ignore": that must reach `run`'s
    # command, and an ignored signal stays ignored across exec.
    installed = interrupts.install()
    try:
        return _main(argv, collecting)
    finally:
        gcpause.command_ended(collecting, exiting=exiting)
        if installed:
            interrupts.uninstall()


def _main(argv: Sequence[str] | None, collecting: bool) -> int:
    from pathlib import Path

    from envlock.workspace import Workspace

    global _JSON_ERRORS
    _JSON_ERRORS = asks_json(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=command_named(sys.argv[1:] if argv is None else argv))
    args, unknown = parser.parse_known_args(argv)
    timings.mark("imports of cli and argparse")
    if unknown:  # with the command's own usage line, not the top level's
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    _apply_network_options(args)
    try:
        try:
            ws = Workspace.find(root=args.root)
        except UsageError:
            # path, run, generations and rollback read only the store, diff of two lock paths
            # only them, and sync or verify of a --lock PATH (an imported pin) that lock and the
            # store: they work from anywhere (a systemd unit, another checkout, another machine).
            needs = getattr(args, "needs_workspace", True)
            if (needs(args) if callable(needs) else needs) or args.root is not None:
                raise
            ws = Workspace(Path.cwd())
        gcpause.command_starts(collecting)
        code: int = args.func(args, ws)
        timings.mark("done")
        return code
    except BrokenPipeError:
        # `envlock diff ... | head`: the reader left; not an error worth a traceback.
        sys.stderr.close()
        return 0
    except EnvlockError as exc:
        _traceback(args)  # --debug shows where, and exits as without it
        return _fail(args, exc.message, exc.details, type(exc).__name__, exc.exit_code)
    except OSError as exc:
        # What the stages do not name themselves: a read-only workspace, a store removed
        # under a running sync. One line naming the file; --debug shows where it happened.
        _traceback(args)
        named = exc.filename2 or exc.filename  # a rename's target is the file people know
        where = f"{named}: " if named else ""
        how = "" if args.debug else " (rerun with --debug for where)"
        return _fail(args, f"{where}{exc.strerror or exc}{how}", (), "OSError", 1)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
        from envlock import interrupts

        code = interrupted(exc)[1]
        interrupts.say(code, type(exc).__name__, json=getattr(args, "json", False))
        return code


def _traceback(args: argparse.Namespace) -> None:
    if args.debug:
        import traceback

        print(scrub(traceback.format_exc()), file=sys.stderr, end="")  # as the message: no URL passwords


if __name__ == "__main__":
    sys.exit(main())
