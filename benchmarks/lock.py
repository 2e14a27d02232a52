"""envlock lock vs raw uv on the same inputs.

    python benchmarks/lock.py [--runs 7] [--packages 150] [--keep DIR] [--profile FILE] [--targets]

Builds the test kit's loopback universe (tests/kit) plus N extra plain packages,
writes an env spec shaped like qwen35-blackwell's index part (torch nightly + its
companions, the flashinfer trio, N plain deps), and times, with warm caches:

- ``envlock lock ENV`` (the CLI, as a user runs it), and
- the pinned uv resolving the very same transient project (``uv pip compile``),
  which is what envlock drives; envlock adds the nightly look-up, the index-pin
  check of every wheel and the lock writing. The warm-up lock records the run it
  hands uv; each timed relock starts uv on it ahead (``resolution.uvahead``), and
  takes its answer because it hands uv the same.

The raw uv gets the nightlies' index URLs, as a user running uv would; envlock hands
uv the copies in its store (downloaded on its first lock, the warm-up run here). The
fixture's nightlies are KB, so that does not show in the ratio; real ones are GBs,
which raw uv downloads on every run to hash them.

Prints the medians, the ratio envlock / uv of the medians (target: <= 1.2), and the range of
the ratios of the paired runs (the machine's load comes and goes: it hits both runs of a pair).

With ``--targets``, also the same spec with two ``[targets.NAME]`` (x86_64 and aarch64; the universe's
nightlies, triton and flashinfer-jit-cache published for aarch64 too), its relock timed in each round
after the one-target one: the medians, ranges and the ratio two targets / one (issue 30: < 1.5, the
shared part resolved once). ``--profile`` then profiles a two-target relock.
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
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from kit.universe import Universe, build_universe  # noqa: E402
from kit.wheels import build_wheel  # noqa: E402

if TYPE_CHECKING:
    from envlock.model.spec import EnvSpec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", "--runs", dest="runs", type=int, default=7,
                    help="paired runs (envlock, then uv), after one warm-up run of each")
    ap.add_argument("--packages", type=int, default=150,
                    help="extra plain packages (150: 158 locked, the size of the real qwen35-blackwell lock)")
    ap.add_argument("--profile", type=Path, help="after the timed runs, one more lock under cProfile, its stats here")
    ap.add_argument("--keep", type=Path, help="work folder to keep (default: a temp folder, removed)")
    ap.add_argument("--targets", action="store_true",
                    help="also time a relock of the spec with two targets (x86_64, aarch64) against one target's")
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
    from envlock.model.spec import load_spec

    extra = [f"benchdep{i:03d}" for i in range(args.packages)]
    for i, name in enumerate(extra):
        requires = [extra[i + 1]] if i + 1 < len(extra) and i % 3 == 0 else []
        for v in ("1.0", "1.1", "2.0"):
            universe.server.add("pypi", build_wheel(tmp / "wheels", name, v, requires=requires))
    ws = tmp / "ws"
    (ws / "envs").mkdir(parents=True)
    deps = "\n".join(f'{n} = ">=1"' for n in extra)
    (ws / "envs" / "bench.toml").write_text(text := f"""
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
    if args.targets:
        _publish_aarch64(universe, tmp / "wheels")
        (ws / "envs" / "two.toml").write_text(text.replace('platform = "x86_64-manylinux_2_28"\n', "", 1) + TARGETS)
    env = runner.uv_env({"UV_CACHE_DIR": str(tmp / "uv-cache"), "ENVLOCK_HOME": str(tmp / "home")})
    # Measure an ordinary install, as benchmarks/sync.py does: envlock's byte-code cached after the
    # warm-up run (with PYTHONDONTWRITEBYTECODE set, every run compiled its modules again).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # The console script, as users run it (python -m adds runpy's imports), as in sync.py.
    script = Path(sys.executable).parent / "envlock"
    envlock_cmd = [*([str(script)] if script.exists() else [sys.executable, "-m", "envlock.cli.main"]), "lock", "bench"]

    # The same transient project envlock hands to uv, for the raw uv run.
    uv_cmd, raw = _raw_uv(load_spec(ws / "envs" / "bench.toml"), tmp / "raw")
    # With --targets, each target's own, run at once: the floor of a two-target lock (uv resolves per target).
    two = load_spec(ws / "envs" / "two.toml") if args.targets else None
    raws = [_raw_uv(two.for_target(name), tmp / f"raw-{name}") for name in sorted(two.targets)] if two else []

    cpu: list[float] = []  # user + system CPU time of each timed run (its children's, uv's, included)

    def timed(*runs: tuple[list[str], Path]) -> float:
        """The wall time of ``runs`` (command, folder) started together, until the last ends."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        procs = [subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for cmd, cwd in runs]
        for proc, (cmd, _) in zip(procs, runs, strict=True):
            _, err = proc.communicate()
            if proc.returncode:
                raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{err.decode()}")
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        return elapsed

    two_cmd = [*envlock_cmd[:-1], "two"]
    timed((envlock_cmd, ws))  # warm both caches (uv's HTTP cache, the OS page cache)
    timed((uv_cmd, raw))
    if args.targets:
        timed((two_cmd, ws))
        timed(*raws)
    cpu.clear()
    ours, theirs, twos, uvs = [], [], [], []
    for _ in range(args.runs):  # alternated: the machine's load hits each of a round
        ours.append(timed((envlock_cmd, ws)))
        theirs.append(timed((uv_cmd, raw)))
        if args.targets:
            twos.append(timed((two_cmd, ws)))
            uvs.append(timed(*raws))
    step = 4 if args.targets else 2
    cpu_ours, cpu_theirs = statistics.median(cpu[0::step]), statistics.median(cpu[1::step])
    if args.profile:
        timed(([sys.executable, "-m", "cProfile", "-o", str(args.profile.absolute()), "-m", "envlock.cli.main",
                *(two_cmd if args.targets else envlock_cmd)[-2:]], ws))
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
    if args.targets:
        _print_targets(ws, ours, twos, uvs, theirs, cpu)
    return 0


def _print_targets(ws: Path, ours: list[float], twos: list[float], uvs: list[float], theirs: list[float],
                   cpu: list[float]) -> None:
    """The lines of ``--targets``: the two-target relock against the one-target one, and its floor (the
    two targets' uv resolutions at once) against one uv resolution."""
    a, c, u, b = (statistics.median(x) for x in (ours, twos, uvs, theirs))
    cpu_one, cpu_two, cpu_uvs = (statistics.median(cpu[i::4]) for i in (0, 2, 3))
    entries = (ws / "locks" / "pylock.two.toml").read_text().count("[[packages]]")
    print(f"two targets (x86_64, aarch64): {entries} package entries; each round: one target, uv, two targets, "
          "the two targets' uv at once")
    print(f"envlock lock, 2   median {c * 1000:8.1f} ms  range {min(twos) * 1000:.1f}-{max(twos) * 1000:.1f}  "
          f"CPU {cpu_two * 1000:.0f} ms")
    print(f"uv x2 at once     median {u * 1000:8.1f} ms  range {min(uvs) * 1000:.1f}-{max(uvs) * 1000:.1f}  "
          f"CPU {cpu_uvs * 1000:.0f} ms")
    rounds = sorted(t / o for o, t in zip(ours, twos, strict=True))
    print(f"ratio two/one     {c / a:.2f}  (goal < 1.5); paired runs {rounds[0]:.2f}-{rounds[-1]:.2f}, "
          f"median {statistics.median(rounds):.2f}; CPU {cpu_two / cpu_one:.2f}")
    floor = sorted(x / t for x, t in zip(uvs, theirs, strict=True))
    print(f"floor uv x2/uv    {u / b:.2f}  (uv resolving each target, at once); paired runs "
          f"{floor[0]:.2f}-{floor[-1]:.2f}; envlock's own on top of it: two targets {(c - u) * 1000:.0f} ms, "
          f"one {(a - b) * 1000:.0f} ms")


def _raw_uv(spec: EnvSpec, folder: Path) -> tuple[list[str], Path]:
    """The transient project envlock hands uv for ``spec`` (one target), written in ``folder``, and the
    ``uv pip compile`` that resolves it there."""
    from envlock import runner
    from envlock.install.fetch import hash_unlisted
    from envlock.net.indexes import Listings
    from envlock.resolution.resolve import ResolveInputs, index_urls, pinned_override_wheels, resolve_nightlies
    from envlock.resolution.uvproject import compile_args, transient_project, uv_overrides
    from envlock.store.store import Store

    urls = index_urls(spec, {})
    with Listings() as listings:
        pinned = pinned_override_wheels(spec, urls, resolve_nightlies(spec, urls, listings), listings)
    folder.mkdir()
    inputs = ResolveInputs(index_urls=urls, store=Store.open(folder.parent / "raw-home"), hash_unlisted=hash_unlisted)
    (folder / "pyproject.toml").write_text(transient_project(spec, inputs, pinned))
    (folder / "overrides.txt").write_text("".join(f"{o}\n" for o in uv_overrides(spec, inputs, pinned)))
    return [runner.uv_bin(), *compile_args(spec, inputs)], folder


# No gpus: the one-target spec names none either (with them, each target's wheels are read for the kernels check).
TARGETS = """
[targets.x86]
platform = "x86_64-manylinux_2_28"
[targets.gb200]
platform = "aarch64-manylinux_2_28"
"""


def _publish_aarch64(universe: Universe, wheels: Path) -> None:
    """The bench spec's platform wheels for aarch64 too (the universe publishes x86_64 only): its nightlies
    at the spec's date, triton and flashinfer-jit-cache, for python 3.12."""
    tag, date = "cp312-cp312-manylinux_2_28_aarch64", "20260307"
    add = universe.server.add
    add("pytorch", build_wheel(wheels, "torch", f"2.12.0.dev{date}+cu130", tag=tag,
                               requires=["pytorch-triton==3.6.0+git5e7b3f4e", "tinydep>=1.0"]),
        build_wheel(wheels, "torchvision", f"0.27.0.dev{date}+cu130", tag=tag,
                    requires=[f"torch==2.12.0.dev{date}+cu130"]),
        build_wheel(wheels, "torchaudio", f"2.11.0.dev{date}+cu130", tag=tag,
                    requires=[f"torch==2.12.0.dev{date}+cu130"]),
        build_wheel(wheels, "pytorch-triton", "3.6.0+git5e7b3f4e", tag=tag))
    for v in ("0.6.4", "0.6.5"):
        add("flashinfer", build_wheel(wheels, "flashinfer-jit-cache", f"{v}+cu130",
                                      tag="cp39-abi3-manylinux_2_28_aarch64"))


if __name__ == "__main__":
    sys.exit(main())
