#!/usr/bin/env bash
# On a machine with a real NVIDIA GPU: what envlock sees of it, and of an env's kernels.
#
#   bash benchmarks/gpu-check.sh [ENV]        (default ENV: qwen35-blackwell; run from the workspace)
#
# Prints `envlock doctor` (the driver, the CUDA version it runs, each GPU's name and compute
# capability; with ENV, the problems against the env's locked binaries), `envlock kernels ENV` (what
# each package carries, which GPU of [env] gpus runs it), and nvidia-smi's own view to compare with.
# Nothing is written but the store's records of the wheels read.
set -uo pipefail
cd "$(dirname "$0")/.."
ENV="${1:-qwen35-blackwell}"
ENVLOCK="${ENVLOCK:-.venv/bin/envlock}"

echo "== nvidia-smi (the driver's own view, for comparison)"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv
else
    echo "nvidia-smi: not found"
fi

echo "== envlock doctor (the machine alone)"
"$ENVLOCK" doctor; echo "exit $?"

echo "== envlock doctor $ENV"
"$ENVLOCK" doctor "$ENV"; echo "exit $?"

echo "== envlock kernels $ENV (reads the locked wheels; fetches those the store lacks)"
/usr/bin/time -f "kernels: %e s wall, %M KB max RSS" "$ENVLOCK" kernels "$ENV"; echo "exit $?"

echo "== envlock kernels $ENV again (from the store's records)"
/usr/bin/time -f "kernels: %e s wall, %M KB max RSS" "$ENVLOCK" kernels "$ENV" >/dev/null; echo "exit $?"
