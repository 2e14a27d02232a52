"""envlock lock vs raw uv on the same inputs.

    python benchmarks/lock.py [--runs 7] [--packages 150] [--keep DIR] [--profile FILE]

Builds the test kit's loopback universe (tests/kit) plus N extra plain packages,
writes an env spec shaped like qwen35-blackwell's index part (torch nightly + its
companions, the flashinfer trio, N plain deps), and times, with warm caches:

- ``envlock lock ENV`` (the CLI, as a user runs it), and
- the pinned uv resolving the very same transient project (``uv pip compile``),
  which is what envlock drives; envlock adds the nightly look-up, the index-pin
  check of every wheel and the lock writing.

The raw uv gets the nightlies' index URLs, as a user running uv would; envlock hands
uv the copies in its store (downloaded on its first lock, the warm-up run here). The
fixture's nightlies are KB, so that does not show in the ratio; real ones are GBs,
which raw uv downloads on every run to hash them.

Prints the medians, the ratio envlock / uv of the medians (target: <= 1.2), and the range of
the ratios of the paired runs (the machine's load comes and goes: it hits both runs of a pair).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from kit.universe import Universe, build_universe  # noqa: E402
from kit.wheels import build_wheel  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", "--runs", dest="runs", type=int, default=7,
                    help="paired runs (envlock, then uv), after one warm-up run of each")
    ap.add_argument("--packages", type=int, default=150,
                    help="extra plain packages (150: 158 locked, the size of the real qwen35-blackwell lock)")
    ap.add_argument("--profile", type=Path, help="after the timed runs, one more lock under cProfile, its stats here")
    ap.add_argument("--keep", type=Path, help="work folder to keep (default: a temp folder, removed)")
    args = ap.parse_args()

    tmp = args.keep or Path(tempfile.mkdtemp(prefix="envlock-bench-lock-"))
    tmp.mkdir(parents=True, exist_ok=True)
    universe = build_universe(tmp / "universe")
    try:
        return run(args, tmp, universe)
    finally:
        universe.server.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: Path, universe: Universe) -> int:
    from envlock import runner
    from envlock.install.fetch import hash_unlisted
    from envlock.model.spec import load_spec
    from envlock.net.indexes import Listings
    from envlock.resolution.resolve import ResolveInputs, index_urls, pinned_override_wheels, resolve_nightlies
    from envlock.resolution.uvproject import compile_args, transient_project, uv_overrides
    from envlock.store.store import Store

    extra = [f"benchdep{i:03d}" for i in range(args.packages)]
    for i, name in enumerate(extra):
        requires = [extra[i + 1]] if i + 1 < len(extra) and i % 3 == 0 else []
        for v in ("1.0", "1.1", "2.0"):
            universe.server.add("pypi", build_wheel(tmp / "wheels", name, v, requires=requires))
    ws = tmp / "ws"
    (ws / "envs").mkdir(parents=True)
    deps = "\n".join(f'{n} = ">=1"' for n in extra)
    (ws / "envs" / "bench.toml").write_text(f"""
[env]
python = "3.12"
platform = "x86_64-manylinux_2_28"
[indexes.pypi]
url = "{universe.pypi}"
default = true
[indexes.pytorch-nightly]
url = "{universe.pytorch}"
[indexes.flashinfer]
url = "{universe.flashinfer}"
[packages]
torch = {{ nightly = "2026-03-07", local = "cu130", index = "pytorch-nightly" }}
torchvision = {{ nightly = "2026-03-07", local = "cu130", index = "pytorch-nightly" }}
torchaudio = {{ nightly = "2026-03-07", local = "cu130", index = "pytorch-nightly" }}
pytorch-triton = {{ index = "pytorch-nightly" }}
flashinfer-python = "==0.6.5"
flashinfer-cubin = "==0.6.5"
flashinfer-jit-cache = {{ version = "==0.6.5+cu130", index = "flashinfer" }}
{deps}
[resolution]
exclude = ["sgl-fa4"]
same-version = [["flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"]]
""")
    env = runner.uv_env({"UV_CACHE_DIR": str(tmp / "uv-cache"), "ENVLOCK_HOME": str(tmp / "home")})
    # Measure an ordinary install, as benchmarks/sync.py does: envlock's byte-code cached after the
    # warm-up run (with PYTHONDONTWRITEBYTECODE set, every run compiled its modules again).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # The console script, as users run it (python -m adds runpy's imports), as in sync.py.
    script = Path(sys.executable).parent / "envlock"
    envlock_cmd = [*([str(script)] if script.exists() else [sys.executable, "-m", "envlock.cli.main"]), "lock", "bench"]

    # The same transient project envlock hands to uv, for the raw uv run.
    spec = load_spec(ws / "envs" / "bench.toml")
    urls = index_urls(spec, {})
    with Listings() as listings:
        pinned = pinned_override_wheels(spec, urls, resolve_nightlies(spec, urls, listings), listings)
    raw = tmp / "raw"
    raw.mkdir()
    inputs = ResolveInputs(index_urls=urls, store=Store.open(tmp / "raw-home"), hash_unlisted=hash_unlisted)
    (raw / "pyproject.toml").write_text(transient_project(spec, inputs, pinned))
    (raw / "overrides.txt").write_text("".join(f"{o}\n" for o in uv_overrides(spec, inputs, pinned)))
    uv_cmd = [runner.uv_bin(), *compile_args(spec, inputs)]

    cpu: list[float] = []  # user + system CPU time of each timed run (its children's, uv's, included)

    def timed(cmd: list[str], cwd: Path) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        return elapsed

    timed(envlock_cmd, ws)  # warm both caches (uv's HTTP cache, the OS page cache)
    timed(uv_cmd, raw)
    cpu.clear()
    ours, theirs = [], []
    for _ in range(args.runs):
        ours.append(timed(envlock_cmd, ws))
        theirs.append(timed(uv_cmd, raw))
    cpu_ours, cpu_theirs = statistics.median(cpu[0::2]), statistics.median(cpu[1::2])
    if args.profile:
        timed([sys.executable, "-m", "cProfile", "-o", str(args.profile.absolute()), "-m", "envlock.cli.main",
               *envlock_cmd[-2:]], ws)
    a, b = statistics.median(ours), statistics.median(theirs)
    packages = (ws / "locks" / "pylock.bench.toml").read_text().count("[[packages]]")
    print(f"env: {packages} locked packages, {args.runs} runs each, warm caches, loopback index")
    print(f"envlock lock      median {a * 1000:8.1f} ms  range {min(ours) * 1000:.1f}-{max(ours) * 1000:.1f}  "
          f"CPU {cpu_ours * 1000:.0f} ms")
    print(f"uv pip compile    median {b * 1000:8.1f} ms  range {min(theirs) * 1000:.1f}-{max(theirs) * 1000:.1f}  "
          f"CPU {cpu_theirs * 1000:.0f} ms")
    pairs = sorted(o / t for o, t in zip(ours, theirs, strict=True))
    print(f"ratio envlock/uv  {a / b:.2f}  (target <= 1.2); paired runs {pairs[0]:.2f}-{pairs[-1]:.2f}, "
          f"median {statistics.median(pairs):.2f}; CPU {cpu_ours / cpu_theirs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
