"""Benchmark binary caches: a fleet sharing one build, and a cold sync from an HTTP cache against uv.

Prints, each against a peer measured in the same run:

* a fleet of 4 ENVLOCK_HOMEs (each its own checkout, no wheelhouse) syncing the demo env (its C
  extension, examples/mini-kernel with its patch, built with scikit-build-core + CMake) against one
  nginx cache: builds run across the fleet (target 1), and each later sync's time / the first's;
* a cold sync (fresh store, fresh uv cache) of the default benchmark lock (benchmarks/sync.py's
  wheels: 158 packages) from an HTTP cache (nginx on loopback) / ``uv venv`` + ``uv pip sync`` of
  the same wheels from a loopback index with a cold uv cache (target <= 1.5); and, measured
  separately, the verifying hash of every installed byte (the venv digest walk), work uv does not do.

The demo env's index is a loopback index of tests/.wheels (the build backends and ``packaging``)
instead of PyPI: the benchmark makes no outside connection. nginx must be installed
(``apt-get install -y nginx-light``).

Usage: .venv/bin/python benchmarks/cache.py [--packages N] [--fleet N] [--runs N] [--skip-fleet] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sync import make_wheels  # noqa: E402

from envlock import runner  # noqa: E402
from envlock.install import generations  # noqa: E402
from envlock.store.store import Store  # noqa: E402
from kit.cacheservers import nginx_cache  # noqa: E402
from kit.index import IndexServer  # noqa: E402
from kit.locks import lock_for  # noqa: E402
from kit.workspaces import write_demo  # noqa: E402


def envlock_argv() -> list[str]:
    script = Path(sys.executable).parent / "envlock"
    return [str(script)] if script.exists() else [sys.executable, "-m", "envlock"]


def run_json(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    return elapsed, json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}


def cpu_children() -> float:
    """User + system CPU time of every waited-for child so far (uv's included)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def warm(folder: Path) -> None:
    """Read every file under ``folder`` once: a loopback server then serves from the page cache, not
    the disk (which the runs before may have evicted it from), whichever side runs first."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                while fh.read(1 << 20):
                    pass


def built_here(home: Path) -> int:
    """How many builds this home ran itself (a cache's build has a log saying so)."""
    builds = Store.open(home).root / "builds"
    return sum(1 for log in builds.glob("*/build.log") if not log.read_text().startswith("not built here"))


def fleet(work: Path, cache: str, size: int, backends: IndexServer) -> None:
    envlock = envlock_argv()
    first = work / "fleet" / "ws-1"
    (first / "envs").mkdir(parents=True)
    (first / "locks").mkdir()
    write_demo(first, backends.url("pypi"))  # the tests' demo env: mini-kernel, its patch, packaging
    key = work / "fleet" / "ci.key"
    env = runner.uv_env({"ENVLOCK_HOME": str(work / "fleet" / "home-1"), "UV_CACHE_DIR": str(work / "uv-fleet")})
    public = subprocess.run([*envlock, "cache", "keygen", "fleet-ci", "--out", str(key)], env=env,
                            capture_output=True, text=True, check=True).stdout.strip()
    (first / "envlock.toml").write_text(f'[cache]\nurls = ["{cache}"]\npush = "{cache}"\nkey = "{key}"\n'
                                        f'trusted-keys = ["{public}"]\n')
    # The lock is written first (as a team commits it); its time is not a sync's.
    subprocess.run([*envlock, "lock", "demo"], env=env, cwd=first, capture_output=True, check=True)
    times, digests, builds = [], set(), 0
    for n in range(1, size + 1):
        ws = first if n == 1 else work / "fleet" / f"ws-{n}"
        if n > 1:  # a teammate's checkout: the lock and envlock.toml, no wheelhouse
            shutil.copytree(first, ws, ignore=shutil.ignore_patterns("wheelhouse"))
        home = work / "fleet" / f"home-{n}"
        env = runner.uv_env({"ENVLOCK_HOME": str(home), "UV_CACHE_DIR": str(work / f"uv-fleet-{n}")})
        took, result = run_json([*envlock, "sync", "demo", "--json"], env, ws)
        if n == 1:  # and the rest of the closure (the index's wheel) after the build the hook pushed
            subprocess.run([*envlock, "cache", "push", "demo", "--to", cache, "--key", str(key)], env=env, cwd=ws,
                           capture_output=True, check=True)
        times.append(took)
        digests.add(str(result["venv_digest"]))
        builds += built_here(home)
        print(f"  home {n}: sync {took:.2f}s, builds run here {built_here(home)}, note: {result.get('note')}")
    print(f"fleet of {size} homes, one cache: builds run across the fleet = {builds} (target 1); "
          f"venv digests {'all equal' if len(digests) == 1 else 'DIFFER'}")
    for n, took in enumerate(times[1:], start=2):
        print(f"  home {n} sync {took:.2f}s / home 1 sync (built) {times[0]:.2f}s = {took / times[0]:.2f}")


def cold(work: Path, cache: str, cache_dir: Path, packages: int, repeat: int) -> None:
    from envlock.cache.caches import CacheConfig, Caches, wheel_key
    from envlock.install.digest import manifest

    envlock, uv = envlock_argv(), runner.uv_bin()
    server = IndexServer(work / "served").start()
    try:
        wheels = make_wheels(work / "wheels", packages)
        server.add("pypi", *wheels)
        lock = lock_for(server, "pypi", wheels, env="bench")
        ws = work / "bench-ws"
        (ws / "envs").mkdir(parents=True)
        (ws / "locks").mkdir()
        lock_path = ws / "locks" / "pylock.bench.toml"
        lock_path.write_text(lock.to_toml())
        total = sum(w.stat().st_size for w in wheels)
        print(f"lock: {len(wheels)} packages, {total / 1e6:.0f} MB of wheels")
        # The cache holds the closure (as `envlock cache push` leaves it), written straight to nginx's folder.
        (cache_dir / "wheels").mkdir(parents=True, exist_ok=True)
        for pkg, wheel in zip(sorted(lock.packages, key=lambda p: p.wheels[0].filename), sorted(wheels), strict=True):
            shutil.copyfile(wheel, cache_dir / wheel_key(pkg.wheels[0].sha256))
        reqs = work / "requirements.txt"
        reqs.write_text("".join(f"{p.name}=={p.version}\n" for p in lock.packages))
        sync_argv = [*envlock, "sync", "bench", "--frozen", "--lock", str(lock_path), "--json"]

        def cache_sync(i: int) -> tuple[float, float, float]:
            """The cold sync from the cache (fresh store, fresh uv cache), its venv's digest walk alone, and
            the sync's CPU time (envlock's and uv's)."""
            env = runner.uv_env({"ENVLOCK_HOME": str(work / f"cold-home-{i}"),
                                 "UV_CACHE_DIR": str(work / f"cold-uv-{i}"), "ENVLOCK_CACHE_URLS": cache})
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            warm(cache_dir)  # what each server sends is in the page cache, as for the others
            cpu = cpu_children()
            took, result = run_json(sync_argv, env, ws)
            cpu = cpu_children() - cpu
            if "caches: " not in str(result.get("note")):
                raise SystemExit(f"the cache was not used: {result.get('note')}")
            venv = generations.stable_path(Store.open(work / f"cold-home-{i}"), "bench").resolve()
            started = time.perf_counter()
            manifest(venv)  # the verifying hash of every installed byte, alone (page cache warm)
            return took, time.perf_counter() - started, cpu

        def index_sync(i: int) -> float:
            """For reference: the same cold sync with no cache, every wheel from the loopback index."""
            env = runner.uv_env({"ENVLOCK_HOME": str(work / f"index-home-{i}"),
                                 "UV_CACHE_DIR": str(work / f"index-uv-{i}")})
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            warm(work / "served")
            return run_json(sync_argv, env, ws)[0]

        def download_alone(i: int) -> float:
            """The cache's part alone: every wheel downloaded from it and verified into a fresh store."""
            warm(cache_dir)
            started = time.perf_counter()
            Caches(CacheConfig(urls=(cache,))).wheels_into_store(Store.open(work / f"fetch-home-{i}"),
                                                                  [p.wheels[0] for p in lock.packages])
            return time.perf_counter() - started

        def peer_run(i: int) -> tuple[float, float, float]:
            """The peer, and the write-back of what it wrote (envlock's venv is on the device before it is
            made current; uv leaves its venv and cache in the page cache): ``sync`` right after it."""
            peer_venv = work / f"peer-venv-{i}"
            peer_env = runner.uv_env({"UV_CACHE_DIR": str(work / f"peer-uv-{i}")})
            warm(work / "served")
            cpu = cpu_children()
            started = time.perf_counter()
            subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(peer_venv)], env=peer_env, check=True)
            subprocess.run([uv, "pip", "sync", "-q", "--python", str(peer_venv / "bin" / "python"), "--index-url",
                            server.url("pypi"), str(reqs)], env=peer_env, check=True)
            took = time.perf_counter() - started
            cpu = cpu_children() - cpu
            os.sync()
            return took, time.perf_counter() - started - took, cpu

        rounds: list[tuple[float, float, float, float, float, float, float, float]] = []
        for i in range(repeat):
            got: dict[str, Any] = {}
            steps = [("cache", cache_sync), ("index", index_sync), ("download", download_alone), ("peer", peer_run)]
            for name, step in steps[i % len(steps):] + steps[:i % len(steps)]:  # each round starts elsewhere
                os.sync()  # the last run's dirty pages are not the next one's to write back
                got[name] = step(i)
            rounds.append((got["cache"][0], got["peer"][0], got["cache"][1], got["index"], got["download"],
                           got["peer"][1], got["cache"][2], got["peer"][2]))
            for name in ("cold-home", "cold-uv", "index-home", "index-uv", "fetch-home", "peer-venv", "peer-uv"):
                shutil.rmtree(work / f"{name}-{i}", ignore_errors=True)
        took = statistics.median(r[0] for r in rounds)
        peer = statistics.median(r[1] for r in rounds)
        hashing = statistics.median(r[2] for r in rounds)
        cpu_took, cpu_peer = statistics.median(r[6] for r in rounds), statistics.median(r[7] for r in rounds)
        print(f"cold sync from an HTTP cache {took:.2f}s / uv venv + uv pip sync from a loopback index, cold uv "
              f"cache {peer:.2f}s = {took / peer:.2f}  (target <= 1.5; median of {repeat}; ranges "
              f"{min(r[0] for r in rounds):.2f}-{max(r[0] for r in rounds):.2f}s / "
              f"{min(r[1] for r in rounds):.2f}-{max(r[1] for r in rounds):.2f}s; CPU {cpu_took:.2f}s / "
              f"{cpu_peer:.2f}s = {cpu_took / cpu_peer:.2f})")
        from_index = statistics.median(r[3] for r in rounds)
        download = statistics.median(r[4] for r in rounds)
        print(f"  for reference, the same cold sync from the loopback index (no cache) {from_index:.2f}s / "
              f"{peer:.2f}s = {from_index / peer:.2f}")
        print(f"  of which the verifying hash of every installed byte (venv digest walk, measured alone) "
              f"{hashing:.2f}s; without it {(took - hashing) / peer:.2f}")
        print(f"  accounted: the wheels from the cache, downloaded and verified alone {download:.2f}s; the rest "
              f"(start-up, uv installing from the store, generation) {took - hashing - download:.2f}s")
        durable = statistics.median(r[1] + r[5] for r in rounds)
        print(f"  against the peer with what it wrote on the device (`sync` after it, as envlock's venv is before "
              f"it becomes current) {durable:.2f}s: {took / durable:.2f}; the ratios of each round "
              f"{', '.join(f'{r[0] / r[1]:.2f}' for r in rounds)}")
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packages", type=int, default=158)
    ap.add_argument("--fleet", type=int, default=4)
    ap.add_argument("--runs", "--repeat", dest="repeat", type=int, default=5,
                    help="rounds: each runs the cache sync, the index sync, the download alone and the peer once")
    ap.add_argument("--keep", type=Path, help="work folder to keep (default: a temp folder, removed)")
    ap.add_argument("--skip-fleet", action="store_true")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="envlock-bench-cache-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.pop("ENVLOCK_CACHE_URLS", None)
    backends = IndexServer(work / "backends").start()
    backends.add_dir("pypi", ROOT / "tests" / ".wheels")
    try:
        with nginx_cache(work / "nginx") as (url, folder):
            if not args.skip_fleet:
                fleet(work, url, args.fleet, backends)
            cold(work, url, folder, args.packages, args.repeat)
    finally:
        backends.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
