"""Benchmark ``envlock sync`` against uv on one generated lock, served on loopback.

Prints these ratios, each against a peer measured in the same run:

* warm sync (every wheel in the store, a new venv + generation) / ``uv venv`` +
  ``uv pip sync`` with a warm uv cache, the same wheels in one
  --find-links folder, its venv made in the folder envlock
  builds in (see peer_venv)                                  target <= 2.0
  and, of the warm sync, envlock's own time: the run less the uv install it waits for (read off
  its ENVLOCK_TIMINGS timeline; uv's install time moves 2x between rounds here, this does not);
  and in the same rounds, the floor under it: the leanest warm sync a CPython program can do
  (benchmarks/leanest_sync.py), its ratio to the same peer and its own time
* a switch to a venv already in the store / the same peer     target <= 1.0
  and in the same rounds its floor: the leanest CPython switch (leanest_sync.py --switch)
* no-op sync / ``uv pip sync`` no-op                         target <= 2.0
* verify throughput / ``sha256sum`` over the same files     target >= 1.0
* peak RSS of a process fetching a 1 GB wheel               target < 150 MB

The lock: --packages wheels (default 158, the real qwen35-blackwell lock's count, as
in benchmarks/lock.py) of --modules Python modules each (default 40), every fifth with a
6 MB native library. Try --packages 40 (a small lock: envlock's fixed cost of Python
start-up and imports weighs most) and --modules 200 (a file-heavy one, ~32k files: the
venv walk's lstat per file weighs most) too; the ratios differ, see docs/performance.md.

Each line gives the ratio of the medians, then the number of pairs, each side's range, the range of
the pairs' ratios and each side's median CPU time (user + system of envlock and uv, of the peer's
uv): on a machine shared with others, CPU time is the steadier figure.

Each measured run starts with every dirty page written back (``settle``), and each round with the
next side: no side pays for the write-back of the run before it.

Usage: .venv/bin/python benchmarks/sync.py [--packages N] [--modules M] [--big-mb M] [--runs R] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from envlock import runner  # noqa: E402
from envlock.install import generations, uvcache  # noqa: E402
from envlock.install.install import venv_entry  # noqa: E402
from envlock.model.lockfile import Artifact  # noqa: E402
from envlock.store.store import Store, store_file  # noqa: E402
from kit.index import IndexServer  # noqa: E402
from kit.locks import lock_for, sha256_of  # noqa: E402
from kit.wheels import build_wheel  # noqa: E402


def make_wheels(dest: Path, packages: int, modules: int = 40) -> list[Path]:
    """Wheels shaped like a real env: many small modules, a few multi-MB native libraries."""
    wheels = []
    for i in range(packages):
        name = f"pkg{i:03d}"
        files: dict[str, bytes | str] = {
            f"{name}/mod{j:03d}.py": f"# module {j}\n" + "x = 1\n" * (50 + 40 * (j % 40)) for j in range(modules)
        }
        files[f"{name}/__init__.py"] = "VERSION = '1.0'\n"
        if i % 5 == 0:
            files[f"{name}/_native.so"] = os.urandom(6 * 1024 * 1024)
        wheels.append(build_wheel(dest, name, "1.0", files=files, tag="py3-none-any"))
    return wheels


def big_wheel(dest: Path, megabytes: int) -> Path:
    """A real (stored, uncompressed) wheel of about ``megabytes`` MB, written without holding it in memory."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "huge-1.0-py3-none-any.whl"
    block = os.urandom(1 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        with zf.open(zipfile.ZipInfo("huge/blob.bin", date_time=(2020, 1, 1, 0, 0, 0)), "w",
                     force_zip64=True) as fh:
            for _ in range(megabytes):
                fh.write(block)
        zf.writestr("huge-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: huge\nVersion: 1.0\n")
        zf.writestr("huge-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("huge-1.0.dist-info/RECORD", "")
    return path


#: CPU time (user + system) of the processes run by ``timed`` and their children, as they end.
CPU: list[float] = []
#: The standard error of each ``timed`` run (the warm syncs' ``ENVLOCK_TIMINGS`` lines).
STDERR: list[str] = []
#: The step timeline's line for uv's install in a sync: its wall time.
UV_STEP = re.compile(r"^envlock-timing +[0-9.]+ ms +\+([0-9.]+) ms wall .*  uv pip install \(", re.M)


#: The leanest sync's one line: its uv install's wall time.
LEAN_UV = re.compile(r"^uv ([0-9.]+)$", re.M)


def ms(samples: list[float]) -> str:
    """A list of seconds as its median and range in milliseconds."""
    return f"{statistics.median(samples) * 1000:.0f} ms, range {min(samples) * 1000:.0f}-{max(samples) * 1000:.0f}"


def settle() -> None:
    """Every dirty page written back before a measured run (cache.py does the same): the last run's
    writes are not this one's to write back. A warm sync unlinks and links ~7k files; uv never
    flushes them, envlock's fsyncs did, so whichever side followed the peer's run paid for its
    write-back (its uv install 185 ms against the leanest's 109 one round, 160 against 110 alone)."""
    os.sync()


def cpu_children() -> float:
    """User + system CPU time of every waited-for child so far (uv's included: envlock waits for it)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """Wall-clock seconds of one run; its CPU time (with its children's) is appended to ``CPU``."""
    cpu = cpu_children()
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    CPU.append(cpu_children() - cpu)
    STDERR.append(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    return elapsed


def paired(a: Callable[[], float], b: Callable[[], float], n: int) -> tuple[float, float, str]:
    """Medians of ``a`` and ``b`` run alternately (``n`` pairs), so load that comes and goes hits both
    alike, and as text: the range of each side, the range of the pairs' ratios, and the median CPU
    time of each side (user + system of the processes a side ran, uv's included: on a shared machine
    the less noisy figure)."""
    times = rounds([a, b], n)
    return statistics.median(times[0][0]), statistics.median(times[1][0]), spread(times[0], times[1])


#: One side of ``rounds``: its wall times and its CPU times, run by run.
Side = tuple[list[float], list[float]]


def rounds(sides: list[Callable[[], float]], n: int) -> list[Side]:
    """Each of ``sides`` run once per round, in turn, for ``n`` rounds, each round starting with the next
    side: each side's wall and CPU times."""
    out: list[Side] = [([], []) for _ in sides]
    for i in range(n):
        turn = list(zip(sides, out, strict=True))
        for side, (wall, cpu) in turn[i % len(turn):] + turn[:i % len(turn)]:  # each round starts elsewhere
            CPU.clear()
            wall.append(side())
            cpu.append(sum(CPU))
    return out


def spread(a: Side, b: Side) -> str:
    """``a`` against ``b`` as ``paired`` says it: each side's range, the pairs' ratios, the median CPU times."""
    (ta, ca), (tb, cb) = a, b
    ratios = sorted(x / y for x, y in zip(ta, tb, strict=True))
    ma, mb = statistics.median(ca), statistics.median(cb)
    cpu = f"; CPU {ma * 1000:.0f} / {mb * 1000:.0f} ms = {ma / mb:.2f}" if ma and mb else ""
    return (f"{len(ta)} pairs; ranges {min(ta):.3f}-{max(ta):.3f}s / {min(tb):.3f}-{max(tb):.3f}s, "
            f"pairs {ratios[0]:.2f}-{ratios[-1]:.2f}{cpu}")


FETCH_CHILD = """
import resource, sys
from pathlib import Path
from envlock.install.fetch import fetch
from envlock.model.lockfile import Artifact
from envlock.store.store import Store
art = Artifact(sha256=sys.argv[2], url=sys.argv[3], size=int(sys.argv[4]))
fetch([art], Store.open(Path(sys.argv[1])), base_dir=Path(sys.argv[1]))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", type=int, default=158)
    ap.add_argument("--modules", type=int, default=40, help="Python modules per package")
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--runs", "--repeat", dest="repeat", type=int, default=5,
                    help="paired runs of each measurement (envlock, then its peer), after one unmeasured warm-up")
    ap.add_argument("--keep", type=Path, help="work folder to keep (default: a temp folder, removed)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="envlock-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    server = IndexServer(work / "served").start()
    try:
        return run(args, work, server)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path, server: IndexServer) -> int:
    wheels = make_wheels(work / "wheels", args.packages, args.modules)
    server.add("pypi", *wheels)
    lock = lock_for(server, "pypi", wheels, env="bench")
    ws = work / "ws"
    (ws / "envs").mkdir(parents=True, exist_ok=True)
    (ws / "locks").mkdir(exist_ok=True)
    lock_path = ws / "locks" / "pylock.bench.toml"
    lock_path.write_text(lock.to_toml())
    home = work / "home"
    env = runner.uv_env({"ENVLOCK_HOME": str(home), "UV_CACHE_DIR": str(work / "uv-cache")})
    # Measure an ordinary install: envlock's own byte-code cached after the first run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # The console script, as users run it (python -m adds runpy's imports).
    script = Path(sys.executable).parent / "envlock"
    envlock = [str(script)] if script.exists() else [sys.executable, "-m", "envlock.cli.main"]
    total = sum(w.stat().st_size for w in wheels)
    print(f"lock: {len(wheels)} packages, {total / 1e6:.0f} MB of wheels")

    # Cold sync: fills the store and warms the uv cache for both tools.
    sync_argv = [*envlock, "sync", "bench", "--frozen", "--lock", str(lock_path)]
    cold = timed(sync_argv, env, ws)
    store = Store.open(home)
    files = sum(len(names) for _, _, names in os.walk(generations.stable_path(store, "bench") / ""))
    print(f"cold sync (download + install + digest): {cold:.2f}s; the venv has {files} files")
    # A user's install has envlock's byte-code: make sure the runs below use it.
    import importlib.util

    from envlock.cli import main as envlock_cli

    pyc = importlib.util.cache_from_source(envlock_cli.__file__)
    if not os.path.exists(pyc):
        print(f"WARNING: {pyc} was not written: envlock's imports are measured without byte-code")
    key = lock.install_digest()

    # 1. Warm sync: all wheels in the store, the venv entry removed, a new generation.
    #    The venv is installed by uv and hashed before the flip, like the peer's fresh venv.
    # Each warm run's own time: its wall time less that of the uv install it waits for (its
    # ENVLOCK_TIMINGS line), the figure uv's own noise (its install's time moves 2x between
    # rounds on this VM) does not move: envlock's start-up, checks, walk and generation.
    own: list[float] = []
    uv_step: list[float] = []

    def warm() -> float:
        store.remove_entry("venvs", venv_entry(key))
        settle()
        elapsed = timed(sync_argv, {**env, "ENVLOCK_TIMINGS": "1"}, ws)
        found = UV_STEP.search(STDERR[-1])
        if found is None:
            raise SystemExit(f"no uv install step in the warm sync's timeline:\n{STDERR[-1]}")
        uv_step.append(float(found[1]) / 1000)
        own.append(elapsed - uv_step[-1])
        return elapsed

    # The leanest warm sync a CPython program can do (benchmarks/leanest_sync.py: the same uv install, walk,
    # write-back, manifest and generation, nothing more), in its own folder of the store's tmp/, from the
    # same store files, skeleton and uv cache: the floor under envlock's own time, measured in each round.
    lean_out = store.root / "tmp" / "leanest"
    lean_argv = [sys.executable, str(ROOT / "benchmarks" / "leanest_sync.py"), str(lock_path), str(store.root),
                 str(lean_out), runner.uv_bin()]
    lean_own: list[float] = []
    lean_uv: list[float] = []

    def leanest() -> float:
        shutil.rmtree(lean_out / "venvs", ignore_errors=True)
        settle()
        elapsed = timed(lean_argv, {**env, "UV_CACHE_DIR": str(uvcache.uv_cache_dir(store))})
        found = LEAN_UV.search(STDERR[-1])
        if found is None:
            raise SystemExit(f"no uv time from the leanest sync:\n{STDERR[-1]}")
        lean_uv.append(float(found[1]))
        lean_own.append(elapsed - lean_uv[-1])
        return elapsed

    # 2. A switch to a venv already in the store: the venv entry is still there (an earlier sync of this
    # lock), only a new generation is made; the entry is re-walked before it becomes current.
    def reuse() -> float:
        generations.stable_path(store, "bench").unlink()
        settle()
        return timed(sync_argv, env, ws)

    # The peer's wheels sit in one folder, as a user's wheelhouse would: hard links to the wheels
    # made above (the bytes envlock fetched, on the same file system, no copy). Not to the store's
    # files: a link moves its file's ctime, by which uv's cache knows a path wheel, so envlock's next
    # sync unpacked every wheel into its uv cache again, and the inode hash cache kept the first
    # unpacking's 6.8k entries too (loaded by each warm sync: 15 ms where the leanest's takes 7).
    wheelhouse = work / "wheelhouse"
    wheelhouse.mkdir(exist_ok=True)
    for p in lock.packages:
        name = p.wheels[0].filename
        if not (wheelhouse / name).exists():
            os.link(work / "wheels" / name, wheelhouse / name)
    find_links = ["--find-links", str(wheelhouse)]
    reqs = work / "requirements.txt"
    reqs.write_text("".join(f"{p.name}=={p.version}\n" for p in lock.packages))
    # Made in the folder envlock builds its venvs in (the store's tmp/, where its build slot is):
    # ext4 places a folder's new entries in that folder's block group, and one congested group
    # made either side 2-4x slower on this VM (a new temp folder per run lands anywhere), so
    # both are measured writing into the same folder.
    peer_venv = store.root / "tmp" / "peer-venv"
    uv = runner.uv_bin()
    python = sys.executable

    def peer_warm() -> float:
        shutil.rmtree(peer_venv, ignore_errors=True)
        settle()
        start = time.perf_counter()
        timed([uv, "venv", "-q", "--python", python, str(peer_venv)], env)
        timed([uv, "pip", "sync", "-q", "--python", str(peer_venv / "bin" / "python"), "--no-index",
               *find_links, str(reqs)], env)
        return time.perf_counter() - start

    peer_warm()
    # One unmeasured warm run too: the warm-ups' writes (the peer's first run unpacks every wheel
    # into its own uv cache, 0.2 GB never synced) are not the first measured run's to write back:
    # an fsync then waited for them (ext4 commits them first), as cache.py found too.
    warm()
    leanest()  # its inode hash cache filled, its parsed lock kept, as envlock's
    os.sync()
    own.clear()
    uv_step.clear()
    lean_own.clear()
    lean_uv.clear()
    envlock_side, lean_side, peer_side = rounds([warm, leanest, peer_warm], args.repeat)
    t_warm, t_lean, t_peer_warm = (statistics.median(side[0]) for side in (envlock_side, lean_side, peer_side))
    print(f"warm sync (new venv installed + hashed, new generation) {t_warm:.3f}s / uv venv + uv pip sync "
          f"(warm cache) {t_peer_warm:.3f}s = {t_warm / t_peer_warm:.2f}  (target <= 2.0; "
          f"{spread(envlock_side, peer_side)})")
    print(f"  of which envlock's own (the run less its uv install) {ms(own)}; its uv install {ms(uv_step)}")
    print(f"  the floor under it, in the same rounds: the leanest CPython warm sync (benchmarks/leanest_sync.py) "
          f"{t_lean:.3f}s / {t_peer_warm:.3f}s = {t_lean / t_peer_warm:.2f}  ({spread(lean_side, peer_side)}); "
          f"its own {ms(lean_own)}, its uv install {ms(lean_uv)}: envlock's own time is "
          f"{statistics.median(own) / statistics.median(lean_own):.2f}x its")
    to_floor = sorted(e / f for e, f in zip(envlock_side[0], lean_side[0], strict=True))
    above = statistics.median(own) - statistics.median(lean_own)
    print(f"  envlock's warm sync / the floor's, the same rounds: {t_warm / t_lean:.2f}  (pairs {to_floor[0]:.2f}-"
          f"{to_floor[-1]:.2f}); envlock's own time above the floor's: {above * 1000:.0f} ms  (proposed target: "
          "<= 60 ms, uv's speed aside; docs/performance.md)")

    def lean_switch() -> float:
        settle()
        return timed([*lean_argv, "--switch"], env)

    lean_switch()  # records its venv's stat snapshot, as envlock's build did
    envlock_side, lean_side, peer_side = rounds([reuse, lean_switch, peer_warm], args.repeat)
    t_reuse, t_lean, t_peer_reuse = (statistics.median(side[0]) for side in (envlock_side, lean_side, peer_side))
    print(f"  for comparison, venv already in the store (re-walked, new generation) {t_reuse:.3f}s / "
          f"{t_peer_reuse:.3f}s = {t_reuse / t_peer_reuse:.2f}  (target <= 1.0; {spread(envlock_side, peer_side)})")
    print(f"  the floor under it, in the same rounds: the leanest CPython switch (leanest_sync.py --switch) "
          f"{t_lean:.3f}s / {t_peer_reuse:.3f}s = {t_lean / t_peer_reuse:.2f}  ({spread(lean_side, peer_side)})")

    # uv's part of a warm sync alone: the very `uv pip install` envlock runs (the 158 store files, the
    # store's uv cache) into a copy of its skeleton, beside the peer's `uv pip sync` into one: whether
    # the warm ratio is uv's way of being called or envlock's own work.
    skeleton = next((store.root / "skeletons").iterdir())
    alone = store.root / "tmp" / "uv-alone"
    store_files = [str(store_file(store, p.wheels[0])) for p in lock.packages]

    def into_skeleton_copy() -> None:
        shutil.rmtree(alone, ignore_errors=True)
        shutil.copytree(skeleton, alone, symlinks=True)
        settle()

    def uv_as_envlock() -> float:
        into_skeleton_copy()
        return timed([uv, "pip", "install", "--python", str(alone / "bin" / "python"), "--link-mode", "hardlink",
                      "--no-index", "--offline", "--no-deps", "--no-build", *store_files],
                     {**env, "UV_CACHE_DIR": str(uvcache.uv_cache_dir(store))})

    def uv_as_peer() -> float:
        into_skeleton_copy()
        return timed([uv, "pip", "sync", "-q", "--python", str(alone / "bin" / "python"), "--no-index", *find_links,
                      str(reqs)], env)

    uv_as_envlock()
    uv_as_peer()
    t_uv, t_uv_peer, pairs = paired(uv_as_envlock, uv_as_peer, args.repeat)
    print(f"  uv's install as envlock runs it (store files, store's uv cache) {t_uv:.3f}s / as the peer runs it "
          f"(`uv pip sync`, one find-links folder) {t_uv_peer:.3f}s = {t_uv / t_uv_peer:.2f}  ({pairs})")
    shutil.rmtree(alone, ignore_errors=True)

    # 2. No-op: the env already is this lock.
    def noop() -> float:
        return timed(sync_argv, env, ws)

    def peer_noop() -> float:
        return timed([uv, "pip", "sync", "-q", "--python", str(peer_venv / "bin" / "python"), "--no-index",
                      *find_links, str(reqs)], env)

    noop()
    peer_noop()
    t_noop, t_peer_noop, pairs = paired(noop, peer_noop, args.repeat)
    print(f"no-op sync {t_noop * 1000:.0f}ms / uv pip sync no-op {t_peer_noop * 1000:.0f}ms "
          f"= {t_noop / t_peer_noop:.2f}  (target <= 2.0; {pairs})")

    # 3. Verify throughput against sha256sum over the very same files (page cache warm for both).
    from envlock.install.digest import manifest

    venv = store.path("venvs", venv_entry(key))
    paths = [str(p) for p in venv.rglob("*") if p.is_file() and not p.is_symlink()]
    size = sum(os.path.getsize(f) for f in paths)
    listing = work / "files.txt"
    listing.write_text("\0".join(paths))

    def verify_time() -> float:
        start = time.perf_counter()
        manifest(venv)
        return time.perf_counter() - start

    def sha256sum_time() -> float:
        start = time.perf_counter()
        subprocess.run(f"xargs -0 sha256sum < {listing} > /dev/null", shell=True, check=True)
        return time.perf_counter() - start

    verify_time()
    sha256sum_time()
    t_verify, t_sum, pairs = paired(verify_time, sha256sum_time, args.repeat)
    print(f"verify {size / t_verify / 1e6:.0f} MB/s / sha256sum {size / t_sum / 1e6:.0f} MB/s "
          f"= {t_sum / t_verify:.2f}  ({len(paths)} files, {size / 1e6:.0f} MB; target >= 1.0; {pairs}: "
          "the pairs' ratios are envlock's time / sha256sum's, the inverse of the throughput ratio)")

    # 4. Peak RSS of a process fetching a big wheel over loopback.
    big = big_wheel(work / "big", args.big_mb)
    server.add("pypi", big)
    art = Artifact(sha256=sha256_of(big), url=server.file_url("pypi", big.name), size=big.stat().st_size)
    big.unlink()  # the served copy remains; do not keep two
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", FETCH_CHILD, str(work / "home-big"), art.sha256,
                          art.url or "", str(art.size)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    elapsed = time.perf_counter() - start
    rss_mb = int(out.stdout.strip()) / 1024
    print(f"fetch {(art.size or 0) / 1e6:.0f} MB wheel: peak RSS {rss_mb:.0f} MB, "
          f"{(art.size or 0) / elapsed / 1e6:.0f} MB/s  (target < 150 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
