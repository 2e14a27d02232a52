"""Run ``envlock`` with pauses at named points, so a test can SIGKILL a real sync there.

The hook lives here, not in envlock: ``python -c 'import kit.pause; kit.pause.main()' ARGS``
wraps the functions a sync calls at those points before running the CLI. ``PAUSE_AT`` names
the points (``install``: before uv installs the wheels into the new venv; ``before-flip``:
before the env's link is switched), ``PAUSE_MARKER`` a file written when the pause starts.
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
        time.sleep(float(os.environ.get("PAUSE_SECONDS", "60")))


def main() -> None:
    from envlock import generations, install

    flip, uv = generations.flip, install._uv

    def paused_flip(*args: Any, **kwargs: Any) -> Any:
        _pause("before-flip")
        return flip(*args, **kwargs)

    def paused_uv(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        if argv[:2] == ["pip", "install"]:
            _pause("install")
        return uv(argv, *args, **kwargs)

    generations.flip = paused_flip  # type: ignore[assignment]
    install._uv = paused_uv  # type: ignore[assignment]
    from envlock.cli import main as cli_main

    sys.exit(cli_main(sys.argv[1:]))
