"""A lock of two targets (x86_64 and aarch64) vs a lock of one, on the same loopback indexes.

    python benchmarks/targets.py [--repeat 5] [--packages 150]

Serves a nightly index (no hashes, as PyTorch's) with a torch-like nightly for x86_64 (+cu130) and
aarch64, and a default index with N plain packages and a native one for both architectures; writes a
spec of one target (``platform = "x86_64-manylinux_2_28"``) and the same spec with two
``[targets.NAME]``; times ``envlock lock`` of each (the CLI, warm caches: a relock, as a CI check runs it).

Prints the medians and the ratio two targets / one (issue 30's goal: under 1.5).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from kit.index import IndexServer  # noqa: E402
from kit.wheels import build_wheel  # noqa: E402

X86, ARM = "manylinux_2_28_x86_64", "manylinux_2_28_aarch64"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="paired runs (one target, then two), after a warm-up")
    ap.add_argument("--packages", type=int, default=150, help="plain packages besides the nightly and native ones")
    ap.add_argument("--profile", type=Path, help="after the timed runs, one more two-target lock under cProfile, "
                    "its stats here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="envlock-bench-targets-"))
    server = IndexServer(tmp / "served")
    try:
        _publish(server, tmp / "wheels", args.packages)
        server.start()
        return run(args, tmp, server)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _publish(server: IndexServer, w: Path, packages: int) -> None:
    server.add("pypi", build_wheel(w, "nativedep", "1.0", tag=f"cp311-cp311-{X86}"),
               build_wheel(w, "nativedep", "1.0", tag=f"cp311-cp311-{ARM}"))
    for i in range(packages):
        requires = [f"benchdep{i + 1:03d}"] if i + 1 < packages and i % 3 == 0 else []
        server.add("pypi", *(build_wheel(w, f"benchdep{i:03d}", v, requires=requires) for v in ("1.0", "2.0")))
    server.add_index("nightly", hashes=False)
    for arch, local in ((X86, "+cu130"), (ARM, "")):
        server.add("nightly", build_wheel(w, "torch", f"2.12.0.dev20260305{local}", tag=f"cp311-cp311-{arch}",
                                          requires=["benchdep000>=1"]))


def _spec(server: IndexServer, packages: int, *, targets: bool) -> str:
    deps = "\n".join(f'benchdep{i:03d} = ">=1"' for i in range(0, packages, 5))
    text = f"""[env]
python = "3.11"
{'' if targets else 'platform = "x86_64-manylinux_2_28"'}
[indexes.pypi]
url = "{server.url('pypi')}"
default = true
[indexes.nightly]
url = "{server.url('nightly')}"
[packages]
torch = {{ nightly = "2026-03-05", local = "cu130", index = "nightly" }}
nativedep = "==1.0"
{deps}
"""
    if targets:
        text += ('[targets.x86]\nplatform = "x86_64-manylinux_2_28"\n'
                 '[targets.gb200]\nplatform = "aarch64-manylinux_2_28"\nlocal = ""\n')
    return text


def run(args: argparse.Namespace, tmp: Path, server: IndexServer) -> int:
    from envlock import runner

    ws = tmp / "ws"
    (ws / "envs").mkdir(parents=True)
    (ws / "envs" / "one.toml").write_text(_spec(server, args.packages, targets=False))
    (ws / "envs" / "two.toml").write_text(_spec(server, args.packages, targets=True))
    env = runner.uv_env({"UV_CACHE_DIR": str(tmp / "uv-cache"), "ENVLOCK_HOME": str(tmp / "home")})
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    script = Path(sys.executable).parent / "envlock"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "envlock.cli.main"]

    def timed(name: str) -> float:
        start = time.perf_counter()
        subprocess.run([*base, "lock", name], cwd=ws, env=env, check=True, capture_output=True)
        return time.perf_counter() - start

    timed("one")
    timed("two")
    ones, twos = [], []
    for _ in range(args.repeat):
        ones.append(timed("one"))
        twos.append(timed("two"))
    if args.profile:
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(args.profile.absolute()), "-m",
                        "envlock.cli.main", "lock", "two"], cwd=ws, env=env, check=True, capture_output=True)
    a, b = statistics.median(ones), statistics.median(twos)
    packages = (ws / "locks" / "pylock.two.toml").read_text().count("[[packages]]")
    print(f"{packages} package entries in the two-target lock, {args.repeat} runs each, warm caches, loopback index")
    print(f"lock, one target   median {a * 1000:8.1f} ms")
    print(f"lock, two targets  median {b * 1000:8.1f} ms")
    pairs = sorted(t / o for o, t in zip(ones, twos, strict=True))
    print(f"ratio two/one      {b / a:.2f}  (goal < 1.5); paired runs {pairs[0]:.2f}-{pairs[-1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
