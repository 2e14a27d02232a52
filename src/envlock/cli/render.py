"""What every command's rendering shares: counted nouns and the one ``--json``-or-text output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

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


def mirror_flags(parser: argparse.ArgumentParser, *, source: bool = True, why: str = "") -> None:
    """``--index NAME=URL`` (and ``--source NAME=URL``): the mirrors, with one meaning in every command that
    reads an index or fetches a git source (docs/cli.md, "Mirrors"); ``why``: what this command reads."""
    parser.add_argument("--index", action="append", default=[], metavar="NAME=URL",
                        help="read spec index NAME at the mirror URL (also ENVLOCK_INDEX_<NAME>=URL; repeatable)" + why)
    if source:
        parser.add_argument("--source", action="append", default=[], metavar="NAME=URL",
                            help="fetch git source NAME from URL (also ENVLOCK_SOURCE_<NAME>=URL; repeatable)")


def json_option(parser: argparse.ArgumentParser) -> None:
    """The ``--json`` every command takes, read by ``out``."""
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
