#!/usr/bin/env bash
# Builds fluxcpp and runs the benchmark suite on local ranks, printing its table.
# Usage: scripts/bench.sh [-np N] [fluxcpp_bench args...]   (default: 2 ranks, every entry)
#   e.g. scripts/bench.sh -np 2 --op all_gather --json out.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
np=2
if [ "${1:-}" = "-np" ]; then np=$2; shift 2; fi
./scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
flags=()
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
# More ranks than cores: let them share cores instead of refusing to start.
[ "$np" -gt "$(nproc)" ] && flags+=(--oversubscribe)
exec mpirun -np "$np" "${flags[@]}" ${FLUXCPP_MPIRUN_FLAGS:-} build/bench/fluxcpp_bench "$@"
