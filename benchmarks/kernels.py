"""Benchmark ``envlock kernels ENV`` on a real wheel in the store, against the inflate it cannot avoid.

A deflated ELF member's section headers are its last bytes, so the first read of a wheel inflates
each such member whole: ISA-L's inflate of those bytes, in a process of its own on as many threads
as the reader uses, is the floor. Prints, each run of each measured in the same round (medians,
ranges in brackets; wall, user+sys CPU, max RSS of the process):

* ``python -c pass``: interpreter start-up;
* the floor: start-up + ``isal`` inflate of every member the reader opens (largest first, on the
  reader's thread count), the output thrown away;
* ``envlock kernels ENV --offline``, first read (no ``kernels/<sha256>.json`` record: it is removed
  before each run) / the floor, and the target (issue 26): under 2 s wall and 150 MB RSS;
* ``envlock kernels ENV --offline``, second read (the record answers) / ``python -c pass``.

The wheel is hard-linked (else copied) into a fresh store as a sync would have fetched it, and a
one-package lock names it; the wheel's bytes are in the page cache after the first round (the
machine's file cache is not dropped: the figure is the reader's, not the disk's).
``--against SRC`` times another checkout's ``src/`` (e.g. main's, from ``git archive``) too.

Usage: .venv/bin/python benchmarks/kernels.py [--wheel PATH] [--repeat 5] [--against SRC]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from packaging.utils import canonicalize_name, parse_wheel_filename  # noqa: E402

from envlock.gpu import binaries  # noqa: E402
from envlock.model.lockfile import Artifact, Lock, LockedPackage  # noqa: E402
from envlock.store.store import Store  # noqa: E402
from kit.locks import sha256_of  # noqa: E402

DEFAULT_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
TIME = "/usr/bin/time"  # GNU time, for the peak RSS

#: The floor's child: inflate every (start, compressed size) of the list on THREADS threads, largest first.
FLOOR = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from isal import igzip_lib
wheel, members, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
def inflate(member):
    start, size = member
    inflater = igzip_lib.IgzipDecompressor(flag=igzip_lib.DECOMP_DEFLATE)
    with open(wheel, "rb") as fh:
        fh.seek(start)
        while not inflater.eof:
            raw = fh.read(min(256 << 10, size)) if inflater.needs_input else b""
            if inflater.needs_input and not raw:
                break
            size -= len(raw)
            inflater.decompress(raw, 512 << 10)
with ThreadPoolExecutor(threads) as pool:
    list(pool.map(inflate, sorted(members, key=lambda m: -m[1])))
"""


@dataclass(frozen=True)
class Run:
    wall: float  # seconds
    cpu: float  # user + sys seconds
    rss: float  # max resident set, MB


def run(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """One process, timed by itself: CPU from ``wait4`` (the child's and its own children's), the peak
    RSS from GNU time (``wait4``'s ``ru_maxrss`` of a child spawned from this 40 MB process starts at
    this process's size, whatever the child uses)."""
    with tempfile.TemporaryFile() as said, tempfile.NamedTemporaryFile("r") as peak:
        start = time.perf_counter()
        child = subprocess.Popen([TIME, "-f", "%M", "-o", peak.name, *argv], env=env, cwd=cwd, stdout=said,
                                 stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            said.seek(0)
            raise SystemExit(f"{' '.join(argv[:3])}... failed:\n{said.read().decode(errors='replace')}")
        rss = int(peak.read().split()[-1]) / 1024
    return Run(wall, usage.ru_utime + usage.ru_stime, rss)


def members(wheel: Path) -> tuple[list[tuple[int, int]], int, int]:
    """(data start, compressed size) of each deflated member the reader opens, and their sizes inflated
    and compressed."""
    out, inflated, compressed = [], 0, 0
    with zipfile.ZipFile(wheel) as zf, wheel.open("rb") as fh:
        for info in zf.infolist():
            if info.is_dir() or not binaries.maybe_elf(info.filename) or info.file_size < 4:
                continue
            if info.compress_type != zipfile.ZIP_DEFLATED:
                continue
            fh.seek(info.header_offset + 26)
            name_length, extra_length = struct.unpack("<HH", fh.read(4))
            out.append((info.header_offset + 30 + name_length + extra_length, info.compress_size))
            inflated += info.file_size
            compressed += info.compress_size
    return out, inflated, compressed


def workspace(tmp: Path, wheel: Path) -> tuple[Path, Path, Path]:
    """(workspace root, ENVLOCK_HOME, the store's record of the wheel) for env ``bench`` locking ``wheel``."""
    sha = sha256_of(wheel)
    home, root = tmp / "home", tmp / "ws"
    store = Store.open(home)
    stored = store.path("wheels", sha) / wheel.name
    stored.parent.mkdir(parents=True)
    try:
        os.link(wheel, stored)
    except OSError:
        shutil.copyfile(wheel, stored)
    name, version, _, _ = parse_wheel_filename(wheel.name)
    (root / "envs").mkdir(parents=True)
    (root / "locks").mkdir()
    (root / "envs" / "bench.toml").write_text(
        f'[env]\npython = "{PYTHON}"\n\n[indexes.pypi]\nurl = "https://example.invalid/simple"\ndefault = true\n\n'
        f'[packages]\n{name} = "=={version}"\n')
    artifact = Artifact(sha256=sha, url=f"https://example.invalid/{wheel.name}", size=wheel.stat().st_size)
    lock = Lock(env="bench", python=PYTHON, platform=None, spec_digest="sha256:" + "0" * 64, spec_keys={},
                packages=(LockedPackage(canonicalize_name(name), str(version), (artifact,),
                                        index="https://example.invalid/simple"),))
    (root / "locks" / "pylock.bench.toml").write_text(lock.to_toml())
    return root, home, store.path("kernels", f"{sha}.json")


def summary(runs: list[Run]) -> str:
    def one(values: list[float], unit: str, digits: int) -> str:
        return (f"{statistics.median(values):.{digits}f} {unit} "
                f"[{min(values):.{digits}f}-{max(values):.{digits}f}]")

    return (f"wall {one([r.wall for r in runs], 's', 2)}, cpu {one([r.cpu for r in runs], 's', 2)}, "
            f"rss {one([r.rss for r in runs], 'MB', 0)}")


def ratio(ours: list[Run], peer: list[Run]) -> str:
    """The ratio of the medians, and the range of the paired rounds' ratios (wall)."""
    pairs = [a.wall / b.wall for a, b in zip(ours, peer, strict=True)]
    mine, theirs = statistics.median(r.wall for r in ours), statistics.median(r.wall for r in peer)
    return f"{mine / theirs:.2f} [{min(pairs):.2f}-{max(pairs):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, default=DEFAULT_WHEEL, help="the wheel to read (a torch wheel)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (each times every row once)")
    parser.add_argument("--against", type=Path, help="another checkout's src/ folder, timed too")
    args = parser.parse_args()
    if not Path(TIME).is_file():
        print(f"{TIME}: not found (GNU time measures the peak RSS; apt-get install time)", file=sys.stderr)
        return 2
    if not args.wheel.is_file():
        print(f"{args.wheel}: no such wheel (pass --wheel PATH)", file=sys.stderr)
        return 2
    found, inflated, compressed = members(args.wheel)
    threads = binaries._READERS
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="envlock-bench-kernels-") as tmp:
        root, home, record = workspace(Path(tmp), args.wheel)
        sources = {"this": ROOT / "src", **({"against": args.against.resolve()} if args.against else {})}
        envs = {k: {**os.environ, "ENVLOCK_HOME": str(home), "PYTHONPATH": str(src)} for k, src in sources.items()}
        kernels = [python, "-m", "envlock", "kernels", "bench", "--offline"]
        floor = [python, "-c", FLOOR, str(args.wheel), json.dumps(found), str(threads)]
        rows: dict[str, list[Run]] = {}
        load = os.getloadavg()[0]
        run(floor)  # the wheel's bytes into the page cache
        for _ in range(args.repeat):
            rows.setdefault("python -c pass", []).append(run([python, "-c", "pass"]))
            rows.setdefault("floor", []).append(run(floor))
            for key, env in envs.items():
                record.unlink(missing_ok=True)
                rows.setdefault(f"first {key}", []).append(run(kernels, env=env, cwd=root))
            rows.setdefault("second this", []).append(run(kernels, env=envs["this"], cwd=root))
        said = subprocess.run(kernels, env=envs["this"], cwd=root, capture_output=True, text=True, check=True).stdout
        if "not read" in said:
            print(f"the wheel was not read:\n{said}", file=sys.stderr)
            return 1
    first = rows["first this"]
    print(f"wheel: {args.wheel.name}, {args.wheel.stat().st_size / 1e6:.1f} MB; {len(found)} deflated members "
          f"opened, {inflated / 2**20:.0f} MiB inflated from {compressed / 2**20:.0f} MiB; reader threads {threads}")
    print(f"{args.repeat} rounds, median [range]; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"python -c pass:                        {summary(rows['python -c pass'])}")
    print(f"floor (start-up + isal inflate):       {summary(rows['floor'])}")
    print(f"envlock kernels, first read:           {summary(first)}; / floor {ratio(first, rows['floor'])}")
    if "first against" in rows:
        print(f"  the same, {args.against}:  {summary(rows['first against'])}; / floor "
              f"{ratio(rows['first against'], rows['floor'])}; this / that {ratio(first, rows['first against'])}")
    print(f"envlock kernels, second read (record): {summary(rows['second this'])}; / python -c pass "
          f"{ratio(rows['second this'], rows['python -c pass'])}")
    met = statistics.median(r.wall for r in first) < 2.0 and max(r.rss for r in first) < 150
    print(f"target (issue 26): first read under 2 s wall (median) and 150 MB RSS (max): {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
