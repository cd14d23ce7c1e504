#!/usr/bin/env bash
# Builds fluxcpp and runs the benchmark as hosts joined by a shaped link (scripts/link_run.sh):
# RATE is tc's rate (10gbit, 25gbit, ...), -np the ranks (default 2: two hosts of one rank; with
# FLUXCPP_BENCH_RANKS_PER_NODE=2 and -np 4: two hosts of two). The bench runs its link shapes
# (--link) and, at 2 ranks, the link probe: what a minimal implementation hides, in the same run.
# Usage: scripts/bench_link.sh RATE [-np N] [fluxcpp_bench args...]
#   e.g. scripts/bench_link.sh 10gbit --op link_probe,ag_gemm,gemm_rs
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:?usage: scripts/bench_link.sh RATE [-np N] [fluxcpp_bench args...]}
shift
np=2
if [ "${1:-}" = "-np" ]; then np=$2; shift 2; fi
./scripts/build.sh
exec ./scripts/link_run.sh "$rate" "$np" build/bench/fluxcpp_bench --link "$@"
