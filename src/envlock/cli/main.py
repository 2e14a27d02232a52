"""Command line: parse, call a command's recipe, render, map errors to exit codes. Nothing else."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence

from envlock import __version__
from envlock.cli.render import GLOBAL_OPTIONS, count, json_option, mirror_flags, mirror_options, out
from envlock.errors import EnvlockError, UsageError, asks_json, interrupted, json_error, scrub

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    # pathlib, typing and workspace (dataclasses, difflib) are imported where used at run
    # time: main()'s fast no-op answers before any of them is needed.
    from pathlib import Path
    from typing import Any

    from envlock.model.mirrors import MirrorOptions
    from envlock.store.store import Store
    from envlock.workspace import Workspace

EPILOG = """\
Typical use (envs/demo.toml, in a clone of envlock):
  envlock lock demo                      resolve envs/demo.toml -> locks/pylock.demo.toml
  envlock sync demo                      make the env match the lock; last line printed is its path
  envlock diff locks/pylock.demo.toml@HEAD~1 demo   what the lock changed since the last commit
  envlock upgrade ENV --nightly latest --dry-run    what moving to the newest nightly would change
Every job, offline: `python examples/world/serve.py --dir /tmp/world` (README.md, Recipes).
Exit codes: 0 ok, 1 the work failed or a check found a difference, 2 bad input (spec, env, option)."""


#: Set by main(): the command line asks for --json, so even argparse's errors are a document.
_JSON_ERRORS = False


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own exit path: keep it at code 2
        message = scrub(message)  # `--index-url https://user:token@host/simple`, a pip habit, is echoed
        self.print_usage(sys.stderr)
        if _JSON_ERRORS:
            _json_error(message, (), "UsageError", 2)
        self.exit(2, f"envlock: error: {message}\n")




@contextlib.contextmanager
def _status(args: argparse.Namespace, message: str) -> Iterator[Callable[[str], None]]:
    """A spinner on a terminal for long quiet work (a resolution can download GBs to hash
    them, a kernel build can take an hour); yields a function that changes its text."""
    if args.quiet or getattr(args, "json", False) or not sys.stderr.isatty():
        yield lambda _text: None
        return
    from rich.console import Console

    with Console(stderr=True).status(message) as status:
        yield lambda text: status.update(text)


def _mirror_options(args: argparse.Namespace) -> MirrorOptions:
    return mirror_options(args)


# -- commands -----------------------------------------------------------------


def cmd_lock(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock import ui
    from envlock.cli import cache
    from envlock.commands import lock

    if args.offline and not args.check:
        raise UsageError("--offline: `envlock lock` resolves against the indexes; only `envlock lock ENV --check "
                         "--offline` runs without the network")
    if args.check:
        check = lock.check_lock(ws, args.env, _mirror_options(args), offline=args.offline)

        def text() -> str:
            if check.current:
                return f"{ws.relative(check.path)} is current for envs/{args.env}.toml"
            lines = [f"{ws.relative(check.path)} is stale:"] + [f"  {r}" for r in check.reasons]
            return "\n".join([*lines, f"run `envlock lock {args.env}` to update it"])

        out(args, check.to_dict(), text)
        for note in check.notes:  # the yanked files, on stderr: stdout keeps the answer (or the JSON document)
            print(f"envlock: note: {note}", file=sys.stderr)
        return 0 if check.current else 1
    message = f"locking envs/{args.env}.toml"
    with _status(args, message) as status:
        result = lock.lock_env(ws, args.env, _mirror_options(args), progress=ui.StatusProgress(status, message),
                                  caches=cache.build_caches(ws, args.trusted_key))

    def text_lock() -> str:
        verb = "wrote" if result.changed else "unchanged:"
        lines = [f"{verb} {ws.relative(result.path)} ({count(result.packages, 'package')})"]
        lines += [f"  nightly {n} -> {v}" for n, v in result.nightlies.items()]
        lines += [f"  {name} {old or '(new)'} -> {new or '(gone)'}" for name, old, new in result.moved]
        lines += [f"  index {n} mirrored at {u}" for n, u in sorted(result.mirrors.items())]
        if result.downloaded:
            lines.append(f"  {ui.size(result.downloaded)} read into the store, to hash wheels whose index "
                         "publishes no hash (or is a folder on disk)")
        if result.build_downloaded:
            lines.append(f"  {ui.size(result.build_downloaded)} downloaded into the store: the env's wheels a "
                         "non-isolated build reads, for its input digest")
        unbuilt = result.lock.unbuilt() if result.lock is not None else ()
        lines += [f"  {name}: not built for this lock yet; `envlock build {args.env}` builds it "
                  f"(`envlock sync {args.env}` too)" for name in unbuilt]
        if result.note:
            lines.append(f"  note: {result.note}")
        lines += [f"  note: {note}" for note in result.notes]
        return "\n".join(lines)

    out(args, result.to_dict(), text_lock)
    return 0


_DATE_STATUS = {"usable": "usable", "other-platforms": "other platforms", "kept": "kept", "unlisted": "unlisted"}


def cmd_nightlies(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import nightlies

    result = nightlies.nightlies_env(ws, args.env, args.package, _mirror_options(args))

    def text() -> str:
        lines = []
        for p in result.packages:
            local = f", local tag +{p.local}" if p.local else ""
            lines.append(f"{p.name}: index {p.index!r} ({p.index_url}){local}; "
                         f"for python {result.python}{' on ' + result.platform if result.platform else ''}")
            width = max((len(d.version or "-") for d in p.dates), default=1)
            for d in p.dates:
                marks = [m for m, on in (("locked", d.locked), ("pinned", d.pinned)) if on]
                why = {"other-platforms": f"no wheel for the target: has {d.platforms()}",
                       "kept": "the index dropped it, the store keeps its wheel (a relock keeps it)",
                       "unlisted": "not listed; a lock of it fails" + ("" if not d.locked else
                                   f" (the store lacks its wheel: a mirror, --index {p.index}=URL)")}.get(d.status)
                notes = "; ".join(filter(None, [", ".join(marks), why]))
                lines.append(f"  {d.date}  {_DATE_STATUS[d.status]:15}  {d.version or '-':{width}}  {notes}".rstrip())
            listed = [d.date for d in p.dates if d.status in ("usable", "other-platforms")]
            usable = sum(1 for d in p.dates if d.status == "usable")
            span = f" ({min(listed)} .. {max(listed)})" if listed else ""
            kept = sum(1 for d in p.dates if d.status == "kept")
            lines.append(f"  {count(len(listed), 'date')} listed{span}, {usable} usable for the target"
                         + (f", {kept} kept in the store" if kept else ""))
        if not result.packages:
            lines.append(f"envs/{args.env}.toml pins no nightly")
        if result.note:
            lines.append(f"note: {result.note}")
        return "\n".join(lines)

    out(args, result.to_dict(), text)
    return 0


def cmd_diff(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import diff, upgradereport

    if args.format == "json":
        args.json = True  # before the work: its errors are a JSON document too
    options = upgradereport.ReportOptions(fetch=args.fetch, yanked=args.yanked, mirrors=_mirror_options(args))
    result, notes = diff.diff_refs(ws, args.old, args.new, options)
    for note in notes:
        print(f"envlock: note: {note}", file=sys.stderr)
    render = upgradereport.render_markdown if args.format == "markdown" else upgradereport.render_text
    out(args, result.to_dict(), lambda: render(result))
    return 0


def _without_lock(args: argparse.Namespace) -> bool:
    """Whether ``sync`` or ``verify`` needs a workspace: not with ``--lock`` (the lock names the packages)."""
    return args.lock is None


def cmd_sync(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.realize import quick_noop
    from envlock.store.store import Store

    # The no-op check of main()'s fast path, for the one case it leaves to us (--json; in
    # text mode it has already said no): answer from the env's stamp before importing
    # the sync recipe (see envlock.store.noop).
    result = None
    built: list[tuple[str, str]] = []  # the local builds this sync ran: (name, input digest)
    lock_file = spec_file = None
    if args.lock is None:
        spec_file = ws.spec_path(args.env)  # an unknown env is still a usage error
        lock_file = ws.lock_path(args.env)
    elif "@" not in args.lock and args.lock.endswith(".toml"):
        from pathlib import Path

        lock_file = Path(args.lock).absolute()
    if lock_file is not None and args.json and not (args.source or args.index):  # checked on the full path
        result = quick_noop(Store.open(), args.env, lock_file,
                            None if args.frozen or args.lock is not None else spec_file,
                            spec_file if args.frozen and args.lock is None else None)
    if result is None:
        from envlock import ui
        from envlock.commands import sync

        def on_build(name: str, digest: str) -> None:
            built.append((name, digest))
            if not (args.quiet or args.json):  # said even off a terminal: a kernel build can take an hour
                print(f"envlock: building {name} (inputs {digest[:19]}); a native build can take long",
                      file=sys.stderr)

        with ui.progress(quiet=args.quiet or args.json) as bar:
            options = sync.SyncOptions(frozen=args.frozen, offline=args.offline, lock_ref=args.lock,
                                          mirrors=_mirror_options(args), trusted_keys=tuple(args.trusted_key))
            result = sync.sync(ws, args.env, options, progress=bar, on_build=on_build)

    def text() -> str:
        if result.noop:
            head = f"{args.env}: up to date (generation {result.generation})"
        else:
            venv = "built" if result.built else "reused from the store"
            head = (f"{args.env}: generation {result.generation} ({result.fetched} fetched, "
                    f"{ui.size(result.downloaded)} downloaded; venv {venv}) in {result.seconds:.1f}s")
        lines = [head, f"  venv digest {result.venv_digest}"]
        if result.relocked:
            lines.append(f"  locked envs/{args.env}.toml anew first (the lock was missing or stale)")
        lines += [f"  built {name} (inputs {digest[:19]})" for name, digest in built]
        if result.recorded:
            lines.append("  recorded the venv digest in the lock")
        if result.note:
            lines.append(f"  note: {result.note}")
        return "\n".join([*lines, str(result.path)])  # last line: the env path

    out(args, result.to_dict() | {"built": [{"name": n, "input_digest": d} for n, d in built]}, text)
    return 0


def _env_store(args: argparse.Namespace, ws: Workspace) -> Store:
    """The store, for a command on ``args.env`` that reads it only; an env neither synced there
    nor declared in the workspace is named as a typo, not sent to `envlock sync`."""
    from envlock.install import generations
    from envlock.store.store import Store

    store = Store.open(create=False)
    spec = ws.root / "envs" / f"{args.env}.toml"
    if not generations.env_dir(store, args.env).is_dir() and spec.parent.is_dir() and not spec.is_file():
        raise generations.unknown_env(store, args.env, ws.root, ws.envs())
    return store


def cmd_path(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.run import env_path

    path = env_path(_env_store(args, ws), args.env)
    out(args, {"env": args.env, "path": str(path)}, lambda: str(path))
    return 0


def cmd_verify(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.verify import repair_env, verify_workspace_env

    store = _env_store(args, ws)
    repaired = repair_env(store, args.env) if args.repair else None
    result = verify_workspace_env(ws, store, args.env, args.lock)

    def text() -> str:
        said = [] if repaired is None else [
            f"{args.env}: repaired {count(len(repaired.venvs), 'venv')} (generations "
            f"{', '.join(repaired.generations)})" if repaired.venvs else f"{args.env}: every generation is intact"]
        said += [f"  removed {name}: modified, and no generation uses it"
                 for name in (repaired.removed if repaired else ())]
        return "\n".join([*said, verdict()])

    def verdict() -> str:
        if result.ok:
            return f"{args.env}: ok ({result.actual})" + (f"; {result.note}" if result.note else "")
        if result.intact:  # a generation of another lock, as it was built
            return f"{args.env}: NOT THIS LOCK: intact ({result.actual}), but {result.note}"
        lines = [f"{args.env}: MISMATCH at {result.path}", f"  expected {result.expected}",
                 f"  found    {result.actual}"]
        if result.difference is not None:
            lines += [f"  {line}" for line in result.difference.lines()]
        if result.note:
            lines.append(f"  {result.note}")
        if len(result.shared) > 1:
            lines.append(f"  the changed files are hard links (uv's cache): the same edit is in the venvs of "
                         f"generations {', '.join(result.shared)}")
        lines.append(f"  repair {'them all' if len(result.shared) > 1 else 'it'}: envlock verify {args.env} --repair "
                     "(rebuilds each from its lock and the store's wheels)")
        return "\n".join(lines)

    doc = result.to_dict() | ({"repair": repaired.to_dict()} if repaired is not None else {})
    out(args, doc, text)
    return 0 if result.ok else 1


def cmd_generations(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.install import generations

    store = _env_store(args, ws)
    gens, damaged = generations.scan(store, args.env)
    number = generations.current_number(store, args.env)
    if not gens and not damaged and number is None:
        raise generations.never_synced(store, args.env)  # exit 2, as path and verify say
    present = {g.number: g.venv.is_dir() for g in gens}  # a generation whose venv is gone cannot be rolled back to

    def text() -> str:
        lines = [f"  {'gen':>4}  {'created':20}  {'lock (install digest)':23}  venv digest"] + [
            f"{'*' if g.current else ' '} {g.number:>4}  {g.created}  {g.install_digest[:23]}  {g.venv_digest[:23]}"
            + ("" if present[g.number] else "  (venv gone from the store)")
            + ("  (never current: its sync stopped before the switch)" if g.pending else "")
            for g in gens
        ] if gens else [f"{args.env}: no generations" + ("" if damaged else f" (run `envlock sync {args.env}`)")]
        lines += [f"  unreadable: {path} (not listed; `envlock sync {args.env}` makes a new generation)"
                  for path in damaged]
        if number is None and (why := generations.no_current(store, args.env)) is not None:
            lines.append(f"  current: none {why}")
        elif number is not None and not any(g.current for g in gens) and not any(p.parent.name == str(number)
                                                                                  for p in damaged):
            lines.append(f"  current: the link names generation {number}, which is not there")
        return "\n".join(lines)

    out(args, {"env": args.env, "current": number,
                "generations": [{**g.to_dict(), "venv_present": present[g.number]} for g in gens],
                "unreadable": [str(p) for p in damaged]}, text)
    return 0


def cmd_rollback(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.install import generations

    result = generations.rollback(_env_store(args, ws), args.env, args.to)
    out(args, result.to_dict(),
         lambda: f"{args.env}: generation {result.previous or '(none)'} -> {result.current}\n"
                 + str(result.path))
    return 0


def cmd_run(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.run import exec_in_env

    cut = 0  # options between ENV and the `--` (a "--" later on is the command's own)
    while cut < len(args.cmd) and args.cmd[cut] != "--" and args.cmd[cut].startswith("-"):
        cut += 1
    given_cut = cut < len(args.cmd) and args.cmd[cut] == "--"
    options, argv = (args.cmd[:cut], args.cmd[cut + 1:]) if given_cut else ([], args.cmd)
    # Only envlock's own options are looked at: a command's `--root=/x` is the command's.
    if root := next((a for a in (options if given_cut else argv[:1]) if a == "--root" or a.startswith("--root=")),
                    None):
        raise UsageError(f"envlock run {args.env} {root} ...: --root goes before ENV (envlock --root DIR run ENV -- "
                         "CMD...), where the workspace is looked for")
    for option in options:  # `run ENV -q -- CMD`, as `sync ENV --json` takes its options after ENV
        if option in ("-q", "--quiet"):
            args.quiet = True
        elif option == "--debug":
            args.debug = True
        else:
            raise UsageError(f"envlock run {args.env} {option} -- ...: {option!r} is no option of run here "
                             "(-q, --debug; --root goes before ENV); the command goes after `--`")
    if argv[:1] and argv[0].startswith("-") and not given_cut:
        raise UsageError(f"envlock run {args.env} {argv[0]} ...: {argv[0]!r} is not a command; options go before "
                         "`--` and the command after it: envlock run ENV [-q] -- CMD...")
    exec_in_env(_env_store(args, ws), args.env, argv)


def _overrides(values: Sequence[str]) -> dict[str, Path]:
    from envlock.build.sources import parse_override

    return dict(parse_override(v) for v in values)


def cmd_build(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.cli.cache import build_caches
    from envlock.commands import build

    with _status(args, "preparing sources and build inputs") as say:
        options = build.BuildOptions(
            check=args.check, overrides=_overrides(args.override_source), offline=args.offline, rebuild=args.rebuild,
            caches=None if args.offline else build_caches(ws, args.trusted_key),
            on_build=lambda name, digest: say(f"building {name} (inputs {digest[:19]}; same inputs are "
                                              "reused from the store; a native build can take long)"),
        )
        report = build.build_env(ws, args.env, tuple(args.packages), options, _mirror_options(args))
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


# -- parser -------------------------------------------------------------------


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


def build_parser() -> argparse.ArgumentParser:
    from pathlib import Path

    from envlock.cli import cache

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
        # An unknown option is its command's error (main); the mirrors, as every command reads them.
        p.set_defaults(func=func, command_parser=p, mirror_options=_mirror_options)
        return p

    p = add("lock", cmd_lock, "resolve envs/ENV.toml into locks/pylock.ENV.toml",
            "Resolve envs/ENV.toml with the pinned uv and write locks/pylock.ENV.toml (PEP 751 + [tool.envlock]).\n"
            "Nightly pins resolve to the exact version of that date; every package comes only from the index\n"
            "it is pinned to (else the default index); every wheel gets a sha256. A yanked release (PEP 592) is\n"
            "taken only by an exact == pin, and then recorded in the lock and noted.\n"
            "--check: is the lock current for the spec (no writes); it also reads each locked package's index\n"
            "page and notes the files now yanked, with the index's reason (--offline: not read).\n"
            "Mirrors: --index NAME=URL or ENVLOCK_INDEX_<NAME>=URL resolve a spec index against another URL.\n"
            "Caches ([cache] urls in envlock.toml, docs/cache.md): a wheel whose index publishes no hash is\n"
            "taken from a cache by a trusted signed URL record before it is downloaded to hash it; with\n"
            "[cache] push, the wheels this lock downloaded are pushed with their signed URL records.")
    p.add_argument("env", metavar="ENV", help="env name (envs/ENV.toml)")
    p.add_argument("--check", action="store_true",
                   help="no writes, no resolution: exit 0 if the lock is current, 1 if stale (and why), 2 if "
                   "missing; notes each locked file its index now marks yanked (one page per package; never "
                   "changes the exit code)")
    p.add_argument("--offline", action="store_true",
                   help="with --check: read no index (the yanked files are not checked; a note says so)")
    mirror_flags(p)
    p.add_argument("--trusted-key", action="append", default=[], metavar="NAME:BASE64", help=cache.TRUSTED_HELP)
    json_option(p)

    p = add("nightlies", cmd_nightlies, "the dates each nightly pin could take, for the env's target",
            "List, per nightly-pinned package of envs/ENV.toml (or PKG only), every date its index lists with\n"
            "the pin's local tag, newest first: usable (a wheel for the spec's python and platform), other\n"
            "platforms (wheels for other platforms or pythons only: which, is said), kept (the index dropped\n"
            "the locked date, the store keeps its wheel: a relock keeps it) or unlisted. The lock's date is\n"
            "marked locked, the spec's pinned. Reads index pages only; writes nothing.\n"
            "Mirrors: --index NAME=URL or ENVLOCK_INDEX_<NAME>=URL read a spec index at another URL.")
    p.add_argument("env", metavar="ENV", help="env name (envs/ENV.toml)")
    p.add_argument("package", nargs="?", metavar="PKG", help="only this nightly-pinned package")
    mirror_flags(p)
    json_option(p)

    p = add("diff", cmd_diff, "what changes between two locks (the upgrade report)",
            "Compare two locks and say what the move changes: nightly pins, one line per index; each moved\n"
            "source as a commit range (count, dates, the commits touching files its patches touch, read from\n"
            "the store's git mirror); every local build that rebuilds, with the input that moved, and those\n"
            "that do not; packages added, removed or changed, with why when the locks show it; the download\n"
            "size before and after; the wheels of NEW that are yanked (PEP 592: recorded so in NEW; with\n"
            "--yanked, also those its index marks yanked now); then every change, one a line.\n"
            "OLD and NEW are lock paths, PATH@GITREV (e.g. locks/pylock.X.toml@HEAD~1) or env names.")
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                   help="text (default), markdown (a block for a pull request description) or json "
                   "(the schema in docs/diff.md)")
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument("--fetch", action="store_true",
                   help="fetch the history of moved git sources into the store's mirror first (network), for "
                   "their commit ranges")
    p.add_argument("--yanked", action="store_true",
                   help="read the index page of each of NEW's packages and list its files yanked since it was "
                   "locked (network; without it, only those NEW records as yanked)")
    mirror_flags(p, why=": --yanked reads it there; --source: --fetch fetches from there")
    p.set_defaults(needs_workspace=False)  # two lock paths need none; an env name is looked up in it

    p = add("sync", cmd_sync, "make the env match its lock (fetch, install, verify, flip)",
            "Lock first if locks/pylock.ENV.toml is missing or stale, build the [builds.*] the wheelhouse\n"
            "lacks, fetch every locked wheel into the store (verified), build the venv with the pinned uv\n"
            "from the store only, check its digest against the lock, and make it the env's new current\n"
            "generation. The store is $ENVLOCK_HOME (default: the user data dir). The last line printed is\n"
            "the env's stable path. Exit: 0, 1 the work failed (nothing switched), 2 bad input, 130 Ctrl-C,\n"
            "143 SIGTERM.")
    p.add_argument("env", metavar="ENV")
    p.add_argument("--frozen", action="store_true",
                   help="sync the lock as it is, even if stale; never write it (not even the venv digest); "
                   "a missing local build is rebuilt from the locked build requirements and must be bit-identical")
    p.add_argument("--offline", action="store_true",
                   help="no network: never lock or build; wheels come from the store (locally built ones also "
                   "from the wheelhouse); name what is missing")
    p.add_argument("--lock", metavar="PATH[@REV]",
                   help="sync this lock instead of locks/pylock.ENV.toml, as it is: no relock, no builds (its "
                   "built wheels must be in the store or the wheelhouse); the first sync still records the venv "
                   "digest in a lock file (not in PATH@REV, nor with --frozen)")
    p.set_defaults(needs_workspace=_without_lock)
    mirror_flags(p, why=": the wheels locked from it are downloaded from there (the file of the same name it lists), "
                 "and a lock, if locking, is made against it")
    p.add_argument("--trusted-key", action="append", default=[], metavar="NAME:BASE64", help=cache.TRUSTED_HELP)
    json_option(p)

    def env_command(name: str, func: Callable[[argparse.Namespace, Workspace], int], help: str, *,
                    store_only: bool = False, json: bool = True) -> argparse.ArgumentParser:
        """A command on one env; ``store_only`` ones need no workspace (they read only the store)."""
        p = add(name, func, help)
        p.add_argument("env", metavar="ENV")
        if store_only:
            p.set_defaults(needs_workspace=False)
        if json:
            json_option(p)
        return p

    env_command("path", cmd_path, "print the env's stable path (a symlink to its current generation)",
                store_only=True)
    p = env_command("verify", cmd_verify, "recompute the venv digest and compare with the lock (exit 1 on mismatch)")
    p.add_argument("--lock", metavar="PATH[@REV]",
                   help="compare with this lock instead of locks/pylock.ENV.toml (as `sync --lock`, e.g. "
                   "locks/pylock.ENV.toml@HEAD~1 after syncing a known-good lock)")
    p.set_defaults(needs_workspace=_without_lock)
    p.add_argument("--repair", action="store_true",
                   help="first rebuild every generation's venv of ENV that was modified, and every venv sharing a "
                   "modified file with one (hard links), from its lock and the store's wheels; then verify")
    env_command("generations", cmd_generations, "list the env's generations (* = current)", store_only=True)
    p = env_command("rollback", cmd_rollback, "make an earlier generation current (default: the previous one)",
                    store_only=True)
    p.add_argument("--to", type=int, metavar="N", help="generation number to switch to")

    p = env_command("run", cmd_run, "run a command inside the env: envlock run ENV -- CMD...",
                    store_only=True, json=False)
    p.description = (
        "Run CMD with the env's bin first on PATH and VIRTUAL_ENV set. CMD replaces envlock (exec), so\n"
        "Ctrl-C and SIGTERM reach CMD itself and its exit status is its own. It runs in the generation\n"
        "current when it starts (envs/ENV/N/venv): a later sync or rollback does not change it under CMD.")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD",
                   help="the command and its arguments, after --; exit: its own, 127 not found, 126 not executable")

    p = add("build", cmd_build, "build the env's local packages ([builds.*]) into the wheelhouse",
            "Fetch each source at its pinned commit, apply its patches, build the wheel (keyed by an input digest:\n"
            "same inputs => no rebuild) and record it in the lock. --check rebuilds from scratch and compares\n"
            "(exit 1 if not bit-identical, naming the files that differ), and writes no lock: it says when the\n"
            "lock records a build of other inputs, and what changed. A build installs its backend only from\n"
            "hash-checked wheels in the store; --offline takes everything from there (`envlock import`).")
    p.add_argument("env", metavar="ENV")
    p.add_argument("packages", nargs="*", metavar="PKG", help="only these builds (default: all)")
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
    p.add_argument("--trusted-key", action="append", default=[], metavar="NAME:BASE64", help=cache.TRUSTED_HELP)
    json_option(p)

    p = add("patch", lambda a, w: 2, "patch status / edit / record / rebase")
    psub = p.add_subparsers(dest="patch_command", metavar="ACTION", parser_class=_Parser, required=True)

    def padd(name: str, func: Callable[[argparse.Namespace, Workspace], int], help: str) -> argparse.ArgumentParser:
        q = psub.add_parser(name, help=help, description=help, parents=[common], epilog=GLOBAL_OPTIONS)
        q.set_defaults(func=func, command_parser=q, mirror_options=_mirror_options)
        return q

    from envlock.cli.patch import add_patch_commands  # status, edit, record, rebase

    add_patch_commands(padd)

    from envlock.cli.gpu import add_commands as add_gpu_commands  # kernels, doctor
    from envlock.cli.regress import add_commands  # export, import, gc, pin(s), unpin, bisect
    from envlock.cli.upgrade import add_upgrade

    add_commands(add)
    add_gpu_commands(add)
    add_upgrade(add, _mirror_options, _status)
    cache.add_commands(add, common, _Parser)
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


def main(argv: Sequence[str] | None = None, *, fast_path: bool = True) -> int:
    # Fast path: an up-to-date `envlock sync ENV` answers here, before argparse is built
    # and the recipes (tomllib, packaging) are imported. envlock.store.noop imports only os,
    # sys and hashlib and returns None for anything it does not fully handle. The console
    # script tries it before importing this module at all (fast_path=False then).
    if fast_path:
        from envlock.store.noop import answer_noop

        fast = answer_noop(list(sys.argv[1:] if argv is None else argv))
        if fast is not None:
            return fast
    from envlock import interrupts

    # SIGINT and SIGTERM end envlock within 2 s whatever its threads do (interrupts); set from the
    # main thread only (Python's rule), and not over a parent's "ignore": that must reach `run`'s
    # command, and an ignored signal stays ignored across exec.
    installed = interrupts.install()
    try:
        return _main(argv)
    finally:
        if installed:
            interrupts.uninstall()


def _main(argv: Sequence[str] | None) -> int:
    from pathlib import Path

    from envlock.workspace import Workspace

    global _JSON_ERRORS
    _JSON_ERRORS = asks_json(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
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
        code: int = args.func(args, ws)
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
