"""Run ``envlock`` with pauses at named points, so a test can SIGKILL a real sync there.

The hook lives here, not in envlock: ``python -c 'import kit.pause; kit.pause.main()' ARGS``
wraps the functions a sync calls at those points before running the CLI. ``PAUSE_AT`` names
the points (``install``: before uv installs the wheels into the new venv; ``before-flip``:
before the env's link is switched; ``gc-remove``: before gc's ``PAUSE_COUNT``-th removal of
an entry, default 2; ``build``: before a local build runs its backend), ``PAUSE_MARKER`` a file
written when the pause starts, ``PAUSE_UNTIL`` a file whose creation ends the pause (else, and at
the latest, ``PAUSE_SECONDS``, default 60).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

POINTS = os.environ.get("PAUSE_AT", "").split(",")


def _pause(point: str) -> None:
    if point in POINTS:
        if marker := os.environ.get("PAUSE_MARKER"):
            Path(marker).write_text(point)
        deadline = time.monotonic() + float(os.environ.get("PAUSE_SECONDS", "60"))
        until = os.environ.get("PAUSE_UNTIL")
        while time.monotonic() < deadline and not (until and Path(until).exists()):
            time.sleep(0.05)


def main() -> None:
    from envlock.build import builder
    from envlock.install import generations, install
    from envlock.store.store import Store

    flip, uv, remove_entry, run_build = generations.flip, install._uv, Store.remove_entry, builder._run_build
    removals = [0]

    def paused_remove_entry(self: Store, kind: str, key: str) -> None:
        removals[0] += 1
        if removals[0] == int(os.environ.get("PAUSE_COUNT", "2")):
            _pause("gc-remove")
        remove_entry(self, kind, key)

    def paused_flip(*args: Any, **kwargs: Any) -> Any:
        _pause("before-flip")
        return flip(*args, **kwargs)

    def paused_uv(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        if argv[:2] == ["pip", "install"]:
            _pause("install")
        return uv(argv, *args, **kwargs)

    def paused_run_build(*args: Any, **kwargs: Any) -> Any:
        _pause("build")
        return run_build(*args, **kwargs)

    builder._run_build = paused_run_build
    generations.flip = paused_flip
    install._uv = paused_uv  # type: ignore[assignment]
    Store.remove_entry = paused_remove_entry  # type: ignore[method-assign]
    from envlock.cli.main import main as cli_main

    sys.exit(cli_main(sys.argv[1:]))
