#!/usr/bin/env bash
# The TCP channel against the MPI channel over a shaped link (scripts/link_run.sh): the fused ops
# at Llama layer shapes (hidden H, ffn 2.75 H, tensor parallel over 2 hosts of one rank; prefill
# m = 512, decode m = 8; f32 and bf16), once with the context made from MPI, once from a store
# (FLUXCPP_BENCH_CHANNEL=gloo), the link probe in the same run. Tables to stdout; with --json DIR,
# one JSON file per channel there.
# Usage: scripts/bench_channels.sh [RATE] [HIDDEN] [--json DIR]     (defaults: 10gbit 2048)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-10gbit}
hidden=${2:-2048}
json=""
[ "${3:-}" = "--json" ] && json=${4:?--json DIR}
ffn=$((hidden * 11 / 4))
ffn=$(((ffn + 63) / 64 * 64))
./scripts/build.sh >/dev/null
for channel in mpi gloo; do
  echo "### channel: $channel (hidden $hidden, ffn $ffn, link $rate)"
  for op in link_probe "ag_gemm --shape 512,$ffn,$hidden --shape 8,$ffn,$hidden" \
            "gemm_rs --shape 512,$hidden,$((ffn / 2)) --shape 8,$hidden,$((ffn / 2))" \
            "gemm_ar --shape 8,$hidden,$((ffn / 2))"; do
    name=${op%% *}
    args=(--link --op $op)
    [ -n "$json" ] && mkdir -p "$json" && args+=(--json "$json/$channel-$name.json")
    # shellcheck disable=SC2086
    FLUXCPP_BENCH_CHANNEL=$channel ./scripts/link_run.sh "$rate" 2 build/bench/fluxcpp_bench \
      "${args[@]}" | grep -v '^# \(fluxcpp_bench\|threads\|times\)'
  done
done
