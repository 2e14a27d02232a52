"""Workspaces the tests write, and envlock's CLI run in-process in them.

``ScratchWorkspace`` is the ``ws`` fixture's value (a throwaway workspace, the current folder) and ``Cli``
the ``cli`` fixture's (``envlock ARGS`` in-process: exit code, stdout, stderr); ``write_demo``
writes the demo-shaped env (a patched local C extension, ``examples/mini-kernel``) into a
workspace, as the build and cache tests and ``benchmarks/cache.py`` use it; ``cache_config``
writes a workspace's ``envlock.toml`` ``[cache]`` table; ``said`` finds envlock's error in a captured stderr.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class CliResult:
    code: int
    out: str
    err: str


class Cli(Protocol):
    def __call__(self, *args: str) -> CliResult:
        """Run ``envlock ARGS`` in-process."""
        ...


@dataclass
class ScratchWorkspace:
    root: Path

    def write_spec(self, name: str, text: str) -> Path:
        path = self.root / "envs" / f"{name}.toml"
        path.write_text(text)
        return path

    def lock_text(self, name: str) -> str:
        return (self.root / "locks" / f"pylock.{name}.toml").read_text()


def write_demo(ws_root: Path, index_url: str) -> None:
    """The demo-shaped env ``demo`` in the workspace at ``ws_root``: ``mini-kernel`` (this repository's
    example C extension with its patch) built from a path source, and ``packaging``, from ``index_url``."""
    shutil.copytree(ROOT / "examples" / "mini-kernel", ws_root / "examples" / "mini-kernel")
    shutil.copytree(ROOT / "patches" / "mini-kernel", ws_root / "patches" / "mini-kernel")
    (ws_root / "envs" / "demo.toml").write_text(
        f"""\
[env]
python = "3.11"

[indexes.pypi]
url = "{index_url}"
default = true

[packages]
mini-kernel = {{ build = "mini-kernel" }}
packaging = ">=20"

[sources.mini-kernel]
path = "examples/mini-kernel"
patches = ["patches/mini-kernel/0001-add-dot.patch"]

[builds.mini-kernel]
source = "mini-kernel"
"""
    )


def cache_config(root: Path, **keys: object) -> None:
    """Write ``root/envlock.toml`` with a ``[cache]`` table of ``keys`` (``trusted_keys`` is ``trusted-keys``)."""
    lines = ["[cache]"] + [f"{k.replace('_', '-')} = {json.dumps(v)}" for k, v in keys.items()]
    (root / "envlock.toml").write_text("\n".join(lines) + "\n")


def said(err: str) -> str:
    """envlock's error, without what the fixture server's threads print of a client that hung up
    (uv closing a kept-alive connection) into the same captured stderr."""
    return err[err.index("envlock: error: "):] if "envlock: error: " in err else err
