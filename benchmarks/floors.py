"""The floors under envlock's fixed costs, measured on this machine: what no Python front end can go below.

    .venv/bin/python benchmarks/floors.py [--runs 15] [--venv DIR]

Prints the median (and range) of wall-clock and CPU time of:

* ``python -c pass`` (this interpreter, with ``site``) against ``uv --version``: start-up alone;
* the imports of a switch (``cli.main``, the sync recipe, realize, install) in one fresh interpreter, less
  start-up;
* ``find DIR -printf`` (one ``lstat`` per file, in C) and Python's ``os.scandir`` walk with an ``lstat`` per
  file: the floor of the digest walk over ``--venv`` (default: this interpreter's venv); the venv's stat
  snapshot taken (what a switch to a venv already in the store does) and the walk itself answered from a
  warm inode hash cache (what the build of a new venv does for the files uv linked from its cache);
* an ``fsync`` of a small new file and of a folder (a generation writes and syncs three files and two
  folders, the flip one folder twice, the stamp one file and its folder).

docs/performance.md ("Floors") says what targets these allow.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORTS = ("import envlock.cli.main, envlock.cli.sync, envlock.commands.sync, envlock.commands.realize, "
           "envlock.install.install, envlock.install.fetch, envlock.install.digest")


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


#: As a user's install runs: envlock's byte-code written once and used after (sync.py does the same).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process."""
    cpu, start = cpu_children(), time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - start, cpu_children() - cpu


def in_process(work: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of ``work`` in this process."""
    cpu, start = time.process_time(), time.perf_counter()
    work()
    return time.perf_counter() - start, time.process_time() - cpu


def report(name: str, samples: list[tuple[float, float]]) -> float:
    walls, cpus = [s[0] * 1000 for s in samples], [s[1] * 1000 for s in samples]
    print(f"{name:58} wall {statistics.median(walls):7.2f} ms [{min(walls):.2f}-{max(walls):.2f}]  "
          f"CPU {statistics.median(cpus):7.2f} ms")
    return statistics.median(walls)


def scandir_walk(root: str) -> int:
    count, stack = 0, [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                entry.stat(follow_symlinks=False)
                count += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return count


def fsyncs(folder: Path) -> tuple[float, float]:
    path = folder / f"f-{os.getpid()}"
    with open(path, "wb") as fh:
        fh.write(b"x" * 2000)
        fh.flush()
        wall, cpu = in_process(lambda: os.fsync(fh.fileno()))
    path.unlink()
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--venv", type=Path, default=Path(sys.prefix), help="the tree to walk (default: this venv)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from envlock import runner
    from envlock.install.digest import Snapshot, manifest

    uv, n = runner.uv_bin(), args.runs
    env_python = [sys.executable, "-c", "pass"]
    run(env_python), run([uv, "--version"]), run([sys.executable, "-c", IMPORTS])  # warm: byte-code, page cache
    start = report("python -c pass (start-up)", [run(env_python) for _ in range(n)])
    uv_start = report("uv --version", [run([uv, "--version"]) for _ in range(n)])
    imports = report("python -c 'import <a switch's modules>'",
                     [run([sys.executable, "-c", IMPORTS]) for _ in range(n)])
    print(f"  start-up / uv's: {start / uv_start:.1f}; the imports alone {imports - start:.1f} ms")
    venv = str(args.venv)
    files = scandir_walk(venv)
    find = shutil.which("find")
    if find:
        report(f"find -printf (lstat of {files} entries, C)", [run([find, venv, "-printf", "%s %T@\n"])
                                                                for _ in range(n)])
    report("Python scandir walk, lstat each", [in_process(lambda: scandir_walk(venv)) for _ in range(n)])
    report("the stat snapshot taken (a switch's walk)", [in_process(lambda: Snapshot.taken(args.venv))
                                                         for _ in range(n)])
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "hashes"
        manifest(args.venv, cache_dir=cache)  # fills the inode cache (reads every byte once)
        report("digest walk, warm inode hash cache (a new venv's shared files)",
               [in_process(lambda: manifest(args.venv, cache_dir=cache)) for _ in range(n)])
        report("fsync of a new 2 kB file", [fsyncs(Path(tmp)) for _ in range(n)])

        def dir_fsync() -> None:
            fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        report("fsync of a folder", [in_process(dir_fsync) for _ in range(n)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
