#!/usr/bin/env bash
# The fused ops with real per-rank cores: the configurations the overlap targets are measured in,
# for a machine with at least 16 cores. Each run prints its table and writes JSON lines.
# Usage: scripts/bench_cores.sh OUTDIR [fluxcpp_bench args...]   (default: every fused entry)
#   ranks x threads: 4 x (3 compute + 1 comm, copy offload on), 4 x (4 compute, offload off),
#   8 x 1 compute, and two simulated hosts of 4 ranks x 2 compute (+ 2 comm streams).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/bench_cores.sh OUTDIR [args]}
shift
mkdir -p "$out"
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--op ag_gemm,gemm_rs,a2a_gemm,ulysses)
./scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
# run NAME NP PE ENV...: NP ranks, each bound to PE cores of its own (mpirun), its threads pinned
# to distinct cores inside them (FLUXCPP_BIND=core).
run() {
  local name=$1 np=$2 pe=$3
  shift 3
  local xs=(-x FLUXCPP_BIND)
  for kv in "$@"; do xs+=(-x "${kv%%=*}"); done
  echo "== $name: $np ranks x $pe cores, $*"
  env FLUXCPP_BIND=core "$@" mpirun -np "$np" "${root[@]}" --map-by "slot:PE=$pe" \
    --bind-to core "${xs[@]}" build/bench/fluxcpp_bench "${args[@]}" --json "$out/$name.jsonl" |
    tee "$out/$name.txt"
}
run r4_c3_offload 4 4 FLUXCPP_COMPUTE_THREADS=3 FLUXCPP_COMM_THREADS=1 FLUXCPP_COPY_OFFLOAD=on
run r4_c4 4 4 FLUXCPP_COMPUTE_THREADS=4 FLUXCPP_COMM_THREADS=1 FLUXCPP_COPY_OFFLOAD=off
run r8_c1 8 2 FLUXCPP_COMPUTE_THREADS=1 FLUXCPP_COMM_THREADS=1
run hosts2_r8_c1 8 2 FLUXCPP_BENCH_RANKS_PER_NODE=4 FLUXCPP_COMPUTE_THREADS=1 \
  FLUXCPP_COMM_THREADS=1
