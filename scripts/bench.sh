#!/usr/bin/env bash
# Builds fluxcpp and runs the benchmark suite on local ranks, printing its table; then (default
# run only) a short table of the fused ops on two hosts joined by a 10 Gbit/s link
# (scripts/bench_link.sh), next to what a minimal implementation hides on the same link.
# Usage: scripts/bench.sh [-np N] [fluxcpp_bench args...]   (default: 2 ranks, every entry)
#   e.g. scripts/bench.sh -np 2 --op all_gather --json out.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
np=2
if [ "${1:-}" = "-np" ]; then np=$2; shift 2; fi
default_run=$([ $# -eq 0 ] && echo 1 || echo 0)
./scripts/build.sh
flags=()
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
# More ranks than cores: let them share cores instead of refusing to start.
[ "$np" -gt "$(nproc)" ] && flags+=(--oversubscribe)
mpirun -np "$np" "${flags[@]}" ${FLUXCPP_MPIRUN_FLAGS:-} build/bench/fluxcpp_bench "$@"
[ "$default_run" = 1 ] || exit 0
echo
echo "# two hosts of one rank each, joined by a 10 Gbit/s link (scripts/bench_link.sh 10gbit)"
rc=0
./scripts/link_run.sh 10gbit 2 build/bench/fluxcpp_bench --link --quick \
  --op link_probe,ag_gemm,gemm_rs,a2a_gemm,ulysses || rc=$?
[ "$rc" -eq 77 ] && { echo "(link table skipped: see the message above)"; rc=0; }
exit "$rc"
