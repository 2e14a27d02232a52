"""What every command's rendering shares: counted nouns and the one ``--json``-or-text output."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


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


def json_option(parser: argparse.ArgumentParser) -> None:
    """The ``--json`` every command takes, read by ``out``."""
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
