"""``envlock cache keygen|push|verify``, and the caches ``lock``/``sync``/``build`` ask: parse, call, render.

Beside ``cli.main`` (which adds the ``cache`` command to its parser with ``add_commands``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from envlock.cli.render import (
    GLOBAL_OPTIONS,
    json_option,
    mirror_flags,
    mirror_options,
    out,
    target_option,
    trusted_key_option,
)
from envlock.workspace import Workspace, names_a_cache

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from envlock.cache.caches import Caches

def build_caches(ws: Workspace, trusted: Sequence[str]) -> Caches | None:
    """The caches ``envlock lock`` and ``build`` ask and push to (None: none configured)."""
    if not names_a_cache(ws):
        return None  # the caching module not loaded
    from envlock.cache.caches import Caches

    return Caches.configured(ws, trusted)


def cmd_keygen(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.commands.cache import keygen

    public, made = keygen(args.name, args.out)
    if not args.json:
        print((f"envlock: made {args.out.parent} (mode 0700); " if made else "envlock: ")
              + f"secret key written to {args.out} (mode 0600): keep it to the machines that push; "
              "trust the public key below where caches are read", file=sys.stderr)
    out(args, {"name": public.name, "public_key": str(public), "secret_key": str(args.out.absolute()),
               "made_folder": str(args.out.parent.absolute()) if made else None}, lambda: str(public))
    return 0


def cmd_push(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.cache.urlrecords import push_url_records
    from envlock.commands.cache import PushOptions, push_env  # the closure, then the fetched sources

    pushed = push_env(ws, args.env, args.to, PushOptions(lock_ref=args.lock, key_file=args.key,
                                                         url_records=push_url_records, asked=mirror_options(args),
                                                         target=args.target))
    for note in pushed.notes:
        print(f"envlock: {note}", file=sys.stderr)

    def text() -> str:
        return (f"{pushed.url}: {len(pushed.uploaded)} uploaded, {pushed.present} already there"
                + "".join(f"\n  {k}" for k in pushed.uploaded))

    out(args, pushed.to_dict(), text)
    return 0


def cmd_verify(args: argparse.Namespace, ws: Workspace) -> int:
    from envlock.cache.caches import CacheCheck, CacheConfig, verify_cache
    from envlock.cache.urlrecords import verify_url_records

    trusted = CacheConfig.of(ws if (ws.root / "envs").is_dir() else None, args.trusted_key).trusted
    check, urls = verify_cache(args.url, trusted), verify_url_records(args.url, trusted)
    check = CacheCheck(check.url, check.checked + urls.checked, check.problems + urls.problems)

    def text() -> str:
        head = f"{check.url}: {check.checked} entries checked, " + (
            "all verified" if check.ok else f"{len(check.problems)} problems:")
        return "\n".join([head, *(f"  {p}" for p in check.problems)])

    out(args, check.to_dict(), text)
    return 0 if check.ok else 1


def add_commands(add: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser,
                 parser_class: type[argparse.ArgumentParser]) -> None:
    """The ``cache`` command and its actions, on ``cli.main``'s parser (``add`` makes a command)."""
    p = add("cache", lambda a, w: 2, "binary caches: keygen / push / verify (see docs/cache.md)")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION", parser_class=parser_class, required=True)

    def cadd(name: str, func: Callable[[argparse.Namespace, Workspace], int], help: str,
             description: str | None = None) -> argparse.ArgumentParser:
        q = csub.add_parser(name, help=help, description=description or help, parents=[common], epilog=GLOBAL_OPTIONS,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        q.set_defaults(func=func, command_parser=q)
        return q

    q = cadd("keygen", cmd_keygen, "make an ed25519 signing key: the secret to --out FILE, the public key printed",
             "Write a new ed25519 secret key to FILE (mode 0600; an existing file is refused) and print its\n"
             "public key as NAME:BASE64: trust it where caches are read (--trusted-key, ENVLOCK_TRUSTED_KEYS,\n"
             "[cache] trusted-keys in envlock.toml). Builds pushed with --key FILE are signed by it.")
    q.add_argument("name", metavar="NAME", help="the key's name (e.g. team-ci-1), recorded in every record it signs")
    q.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="where to write the secret key (its folder is made, mode 0700, if missing)")
    json_option(q)
    q.set_defaults(needs_workspace=False)

    q = cadd("push", cmd_push, "upload the closure of ENV's lock to a cache (only what it lacks)",
             "Upload every wheel of the lock (from the store; fetched first where missing), each local build's\n"
             "wheel with its build record signed by --key, the closure manifest, a URL record signed by --key\n"
             "for each wheel with an http(s) URL (its URL -> file name, sha256, size: a later `envlock lock`\n"
             "takes a hash-less index's wheel from it instead of downloading it to hash it), and the fetched\n"
             "sources the builds read (git commits as sources/git-<commit>.tar, FetchContent archives by\n"
             "sha256), to URL (file://DIR, http(s)://HOST/PATH by PUT, s3://BUCKET/PREFIX). What the cache has\n"
             "is not sent again.\n"
             "Exit: 0, 1 the cache refused a write or was unreachable, 2 bad input.")
    q.add_argument("env", metavar="ENV")
    q.add_argument("--to", required=True, metavar="URL", help="the cache to upload to")
    q.add_argument("--lock", metavar="PATH[@REV]", help="push this lock's closure instead of locks/pylock.ENV.toml")
    target_option(q, "whose closure is pushed")
    mirror_flags(q, source=False, why=": the wheels the store lacks are downloaded from it")
    q.add_argument("--key", type=Path, metavar="FILE",
                   help="secret key to sign build and URL records with (default: ENVLOCK_CACHE_KEY, [cache] key); "
                   "without one, no record is pushed (said)")
    json_option(q)

    q = cadd("verify", cmd_verify, "check every entry of a cache: wheel bytes, record signatures, closures",
             "Read every entry of the cache at URL: each wheel's bytes against the sha256 it is stored under,\n"
             "each build record's signature against the trusted keys, its input digest against its key and its\n"
             "wheel's presence, each closure's keys, and each URL record's signature, key and wheel.\n"
             "Exit: 0 all verified, 1 any problem (each named).")
    q.add_argument("url", metavar="URL")
    trusted_key_option(q)
    json_option(q)
    q.set_defaults(needs_workspace=False)
