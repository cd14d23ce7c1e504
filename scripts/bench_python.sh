#!/usr/bin/env bash
# The Python module's numbers: per-call overhead over the C ABI (same calls from C and from
# Python, tiny shapes) and fluxcpp vs torch + gloo at the same shapes.
# Usage: scripts/bench_python.sh [-np W]   (default 2; needs scripts/install_deps.sh --python)
set -euo pipefail
cd "$(dirname "$0")/.."
np=2
[ "${1:-}" = "-np" ] && np=$2
flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
cmake --build build -j2 --target fluxcpp_shared fluxcpp_capi_call_overhead >/dev/null
export PYTHONPATH=$PWD/build/python OMP_NUM_THREADS=1
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for W in 1 "$np"; do
  mpirun -np "$W" "${flags[@]}" build/bench/fluxcpp_capi_call_overhead 2000 >"$tmp"
  mpirun -np "$W" "${flags[@]}" "$PWD/scripts/python" scripts/bench_python_overhead.py 2000 "$tmp"
done
mpirun -np "$np" "${flags[@]}" "$PWD/scripts/python" scripts/bench_torch.py
