"""The example world: every walkthrough in docs/ runs against it, on 127.0.0.1, with no network.

    python examples/world/serve.py --dir /tmp/world

makes the world under DIR (a new or empty folder) and serves its indexes until Ctrl-C: a nightly
index of torch-like wheels (one date built for python 3.12 only), a flashinfer-like trio, an
SGLang-shaped git repository with upstream moves after its pin, and a workspace (DIR/work, a git
checkout) whose env specs name them. In another shell:

    . /tmp/world/env.sh        # ENVLOCK_HOME and UV_CACHE_DIR inside the world, cd to its workspace
    envlock lock qwen35

The world is the test kit's fixtures (tests/kit/world.py builds it; tests/test_docs.py runs each doc's
``console`` blocks against it and compares the output). It needs git and the Python envlock is
installed in (`pip install -e .`: the test kit uses envlock's runner and `packaging`), not the test
extras: no pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from kit.world import build_world


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serve.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, type=Path, help="a new or empty folder to make the world in")
    parser.add_argument("--port", type=int, default=18080,
                        help="the index's port on 127.0.0.1 (default 18080, as the docs show it; 0: any free one)")
    args = parser.parse_args(argv)
    root = args.dir.resolve()
    try:
        world = build_world(root, port=args.port)
    except OSError as exc:
        hint = f" (port {args.port} is taken: --port 0 takes any free one)" if exc.errno == errno.EADDRINUSE else ""
        print(f"serve.py: error: {exc}{hint}", file=sys.stderr)
        return 2
    script = root / "env.sh"
    print(f"world: {root}")
    print(f"  indexes: {world.server.base}/{{pypi,pytorch,flashinfer}}/simple")
    print(f"  upstream: {world.upstream.sg.url} (the SGLang-shaped repository)")
    print(f"  workspace: {world.workspace} (envs qwen35 and demo)")
    print(f"in another shell: . {script}")
    print("serving until Ctrl-C", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    world.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
