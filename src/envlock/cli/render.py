"""What every command's parsing and rendering shares: the mirror and ``--json`` options, counted nouns,
a spinner, and the one ``--json``-or-text output."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence

from envlock.errors import UsageError, redact

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from envlock.model.mirrors import MirrorOptions

#: Each command's help ends with this instead of repeating the global options (``envlock --help`` has them).
GLOBAL_OPTIONS = ("global options, before or after the command: --root DIR, --debug, -q, --keyring-provider, "
                  "--native-tls (`envlock --help`)")


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun in the number it takes: 1 package, 2 packages."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def out(args: argparse.Namespace, data: dict[str, Any], text: Callable[[], str]) -> None:
    """Print ``data`` as one JSON document under ``--json``, else ``text()`` (nothing when empty)."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        rendered = text()
        if rendered:
            print(rendered)


@contextlib.contextmanager
def status(args: argparse.Namespace, message: str) -> Iterator[Callable[[str], None]]:
    """A spinner on a terminal for long quiet work (a resolution can download GBs to hash
    them, a kernel build can take an hour); yields a function that changes its text."""
    if args.quiet or getattr(args, "json", False) or not sys.stderr.isatty():
        yield lambda _text: None
        return
    from rich.console import Console

    with Console(stderr=True).status(message) as spinner:
        yield lambda text: spinner.update(text)


def target_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--target NAME``: of a spec of several targets (``[targets.NAME]``), the one ``what`` works on."""
    parser.add_argument("--target", metavar="NAME",
                        help=f"of a spec with [targets.NAME]: the target {what} (default: the one whose platform "
                        "this machine runs)")


def trusted_key_option(parser: argparse.ArgumentParser) -> None:
    """``--trusted-key NAME:BASE64``: a key whose signed binary cache records the command uses (repeatable)."""
    parser.add_argument("--trusted-key", action="append", default=[], metavar="NAME:BASE64",
                        help="use binary cache records (of builds, and of a hash-less index's wheel URLs) signed by "
                        "this key (NAME:BASE64, as `envlock cache keygen` prints it); also ENVLOCK_TRUSTED_KEYS and "
                        "[cache] trusted-keys in envlock.toml; repeatable")


def json_option(parser: argparse.ArgumentParser) -> None:
    """The ``--json`` every command takes, read by ``out``."""
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


def mirror_flags(parser: argparse.ArgumentParser, *, source: bool = True, why: str = "") -> None:
    """``--index NAME=URL`` and ``--source NAME=URL``: one set for every command that reads an index or a
    source, as ``ENVLOCK_INDEX_<NAME>`` / ``ENVLOCK_SOURCE_<NAME>`` are read by every command (a mirror a
    command does not read is checked, and unused; docs/cli.md, "Mirrors"). ``why``: what this command
    reads at the index; ``source=False`` only for a command that fetches no source at all (``cache push``)."""
    parser.add_argument("--index", action="append", default=[], metavar="NAME=URL",
                        help="read spec index NAME at URL (a mirror: the lock's sha256 decides what is taken); "
                        "also ENVLOCK_INDEX_<NAME>=URL; repeatable" + why)
    if source:
        parser.add_argument("--source", action="append", default=[], metavar="NAME=URL",
                            help="fetch git source or FetchContent input NAME from URL (a local clone or mirror: "
                            "the commit or sha256 is checked, the lock keeps the spec's URL); also "
                            "ENVLOCK_SOURCE_<NAME>=URL; repeatable")


def mirror_options(args: argparse.Namespace) -> MirrorOptions:
    """The ``--index`` and ``--source`` pairs of ``args`` (``mirror_flags``), checked: ``UsageError`` for
    one that is not NAME=URL."""
    from envlock.model.mirrors import MirrorOptions

    return MirrorOptions(_pairs(getattr(args, "index", []), "--index"), _pairs(getattr(args, "source", []), "--source"))


def _pairs(pairs: Sequence[str], option: str) -> dict[str, str]:
    what = "index" if option == "--index" else "source"
    found = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        # A name holds none of ":/@": else NAME= was left out and the "=" is the URL's own (a password's).
        if not sep or not name or not url or any(c in name for c in ":/@"):
            raise UsageError(f"{option} {redact(pair)!r}: expected NAME=URL (a spec {what} name and the mirror's URL)")
        found[name] = url
    return found
