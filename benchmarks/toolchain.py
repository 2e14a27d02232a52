"""Benchmark a build's CUDA toolchain: fetched and unpacked once per digest, then set up from the store.

Prints, each against a peer measured in the same run:

* the first build's toolchain: its 7 wheels (CUDA 13.0's nvcc set, cmake, ninja: tests/.wheels/cuda/,
  served by a loopback index) downloaded into a fresh store held to their hashes
  (``buildinputs.backend_wheels``), then unpacked into ``toolchains/<digest>/`` (``toolchain.unpacked``)
  / ``pip install --no-deps --target`` of the same wheels (what one does by hand);
* a second build's: the same calls again, which download and unpack nothing (bytes downloaded, files
  written) and take milliseconds (target: under 1 s) / the first build's.

Usage: .venv/bin/python benchmarks/toolchain.py [--repeat N]
(run ``python tests/kit/backends.py`` once first: it downloads the wheels)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from packaging.utils import parse_wheel_filename  # noqa: E402

from envlock.build import inputs, toolchain  # noqa: E402
from envlock.store.home import file_sha256  # noqa: E402
from envlock.store.store import Store  # noqa: E402
from kit.cudalike import toolchain_wheels  # noqa: E402
from kit.index import IndexServer  # noqa: E402

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _locked_lines(folder: Path) -> list[str]:
    """One ``name==version --hash=sha256:...`` line per toolchain wheel (nvcc 13.0.88, not the older one)."""
    lines = []
    for wheel in sorted(folder.glob("*.whl")):
        name, version = parse_wheel_filename(wheel.name)[:2]
        if name == "nvidia-cuda-nvcc" and str(version) != "13.0.88":
            continue
        lines.append(f"{name}=={version} --hash=sha256:{file_sha256(str(wheel))}")
    return lines


def _setup(store: Store, lines: list[str], index_url: str) -> tuple[float, toolchain.Toolchain, int]:
    """(seconds, the toolchain, files under its tree written by this call) of one build's toolchain set-up."""
    before = _files(store)
    start = time.perf_counter()
    wheels = inputs.backend_wheels(lines, store, python=PYTHON, index_url=index_url, offline=False,
                                        what="[builds.bench] toolchain", env="bench")
    tools = toolchain.unpacked(store, wheels, what="[builds.bench]")
    return time.perf_counter() - start, tools, _files(store) - before


def _files(store: Store) -> int:
    return sum(1 for _ in store.root.rglob("*")) if store.root.exists() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="set-ups from the store to time (median)")
    args = parser.parse_args()
    folder = toolchain_wheels()
    if folder is None:
        print("tests/.wheels/cuda/ lacks the toolchain wheels: run `python tests/kit/backends.py` first",
              file=sys.stderr)
        return 2
    lines = _locked_lines(folder)
    with tempfile.TemporaryDirectory(prefix="envlock-bench-toolchain-") as tmp:
        server = IndexServer(Path(tmp) / "index")
        server.add_dir("pypi", folder)
        server.start()
        try:
            store = Store.open(Path(tmp) / "home")
            first, tools, written = _setup(store, lines, server.url("pypi"))
            requests = len(server.requests)
            again = []
            for _ in range(args.repeat):
                seconds, second, rewritten = _setup(store, lines, server.url("pypi"))
                assert second.tree == tools.tree and not second.unpacked and rewritten == 0
                again.append(seconds)
            downloads = len(server.requests) - requests
        finally:
            server.stop()
        start = time.perf_counter()
        wheels = sorted(str(w) for w in folder.glob("*.whl") if "13.0.48" not in w.name)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                        str(Path(tmp) / "by-hand"), *wheels], check=True)
        by_hand = time.perf_counter() - start
    size = sum(Path(w).stat().st_size for w in wheels)
    median = statistics.median(again)
    print(f"toolchain: {len(lines)} wheels, {size / 1e6:.1f} MB, digest {tools.digest[:16]}")
    print(f"first build:  download + unpack {first:.2f} s ({written} store files written) / "
          f"pip install --no-deps --target {by_hand:.2f} s = {first / by_hand:.2f}")
    print(f"second build: set up from the store {median * 1000:.1f} ms (median of {len(again)}; "
          f"{downloads} index requests, 0 files written) / first build {first:.2f} s = {median / first:.4f}")
    print(f"target: a second build's set-up under 1 s: {'met' if median < 1.0 else 'MISSED'}")
    return 0 if median < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
