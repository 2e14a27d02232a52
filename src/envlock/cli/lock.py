"""``envlock lock`` and ``envlock nightlies``: a spec into its lock, and the dates a nightly pin could take.

Beside ``cli.main`` (which adds them to its parser with ``add_commands``): parse, call the recipe
(``commands.lock``, ``commands.nightlies``), render. Nothing else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from envlock import timings  # loaded already (__main__)
from envlock.cli.render import count, json_option, mirror_flags, mirror_options, out, status, trusted_key_option
from envlock.errors import UsageError

if TYPE_CHECKING:
    from envlock.commands.lock import LockResult
    from envlock.commands.nightlies import NightlyListing
    from envlock.resolution.uvahead import Ahead
    from envlock.workspace import Workspace


def cmd_lock(args: argparse.Namespace, ws: Workspace) -> int:
    # First, before the recipe's modules load: uv on the run recorded for this lock, while they load and
    # the spec, the old lock and the index pages are read (taken only if handed the same: ``resolution.uvahead``).
    ahead = None
    try:
        if not args.check and not args.offline:
            from envlock.resolution import uvahead

            ahead = uvahead.ahead_of_lock(ws.spec_path(args.env), ws.lock_path(args.env), mirror_options(args).indexes)
        return _cmd_lock(args, ws, ahead)
    finally:
        if ahead is not None:
            ahead.close()


def _cmd_lock(args: argparse.Namespace, ws: Workspace, ahead: Ahead | None) -> int:
    from envlock import ui
    from envlock.cli import cache
    from envlock.commands import lock

    timings.mark("imports of the lock recipe")

    if args.offline and not args.check:
        raise UsageError("--offline: `envlock lock` resolves against the indexes; only `envlock lock ENV --check "
                         "--offline` runs without the network")
    if args.check:
        check = lock.check_lock(ws, args.env, mirror_options(args), offline=args.offline)

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
    with status(args, message) as say:
        result = lock.lock_env(ws, args.env, mirror_options(args), progress=ui.StatusProgress(say, message),
                               caches=cache.build_caches(ws, args.trusted_key), ahead=ahead)

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
        lines += _unbuilt_lines(args.env, result)
        if result.note:
            lines.append(f"  note: {result.note}")
        lines += [f"  note: {note}" for note in result.notes]
        return "\n".join(lines)

    out(args, result.to_dict(), text_lock)
    return 0


def _unbuilt_lines(env: str, result: LockResult) -> list[str]:
    """The builds not run yet for the new lock; of a spec of several targets, per target, each built on a
    machine of its own (the others pending here)."""
    if not result.targets:
        unbuilt = result.lock.unbuilt() if result.lock is not None else ()
        return [f"  {name}: not built for this lock yet; `envlock build {env}` builds it (`envlock sync {env}` too)"
                for name in unbuilt]
    from envlock.model.targets import runs_here

    lines = []
    for target, r in sorted(result.targets.items()):
        if r.lock is None:
            continue
        platform = r.lock.platform or ""
        how = (f"`envlock build {env} --target {target}` builds it here (`envlock sync {env}` too)"
               if runs_here(platform) else f"it builds on a machine of target {target} ({platform}): "
               f"`envlock sync {env} --target {target}` there")
        lines += [f"  {target}: {name}: not built for this lock yet; {how}" for name in r.lock.unbuilt()]
    return lines


_DATE_STATUS = {"usable": "usable", "other-platforms": "other platforms", "kept": "kept", "unlisted": "unlisted"}


def cmd_nightlies(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands import nightlies

    result = nightlies.nightlies_env(ws, args.env, args.package, mirror_options(args))

    def text() -> str:
        if not result.targets:
            return _nightlies_text(args.env, result)
        lines = []
        for name, listing in sorted(result.targets.items()):
            lines.append(f"target {name} ({listing.platform}):")
            lines += [f"  {line}" for line in _nightlies_text(args.env, listing).splitlines()]
        return "\n".join(lines)

    out(args, result.to_dict(), text)
    return 0


def _nightlies_text(env: str, result: NightlyListing) -> str:
    """The dates of each nightly pin, as one target sees them."""
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
        lines.append(f"envs/{env}.toml pins no nightly")
    if result.note:
        lines.append(f"note: {result.note}")
    return "\n".join(lines)


def add_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    """lock and nightlies, on ``cli.main``'s parser (``add`` makes a command)."""
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
    trusted_key_option(p)
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
