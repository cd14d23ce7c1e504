#!/usr/bin/env bash
# Runs PROGRAM under mpirun as hosts joined by a shaped link: a private network namespace whose
# loopback is shaped with tc tbf at RATE, MPI over TCP, one rank per simulated host unless
# FLUXCPP_BENCH_RANKS_PER_NODE / FLUXCPP_TEST_RANKS_PER_NODE say otherwise. Every FLUXCPP_*
# variable of the caller reaches the ranks; FLUXCPP_BENCH_LINK is set to RATE.
# Usage: scripts/link_run.sh RATE NP PROGRAM [ARGS...]     e.g. scripts/link_run.sh 10gbit 2 ./a.out
# Exits 77, saying why, where network namespaces or tc are not available (tests skip on 77).
set -euo pipefail
rate=${1:?usage: link_run.sh RATE NP PROGRAM [ARGS...]}
np=${2:?usage: link_run.sh RATE NP PROGRAM [ARGS...]}
shift 2
for tool in unshare tc ip mpirun; do
  command -v "$tool" >/dev/null || { echo "link_run: $tool not found (scripts/install_deps.sh installs it)" >&2; exit 77; }
done
if ! err=$(unshare -n true 2>&1); then
  echo "link_run: network namespaces are not permitted here (unshare -n: $err); skipping" >&2
  exit 77
fi
export FLUXCPP_BENCH_LINK=$rate
export FLUXCPP_BENCH_RANKS_PER_NODE=${FLUXCPP_BENCH_RANKS_PER_NODE:-1}
export FLUXCPP_TEST_RANKS_PER_NODE=${FLUXCPP_TEST_RANKS_PER_NODE:-1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
flags=(--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
# One core per rank when there are enough; otherwise let them share.
if [ "$np" -gt "$(nproc)" ]; then flags+=(--oversubscribe --bind-to none); else flags+=(--bind-to core); fi
for v in $(compgen -e | grep '^FLUXCPP_\|^OPENBLAS_'); do flags+=(-x "$v"); done
exec unshare -n bash -c '
  ip link set lo up && tc qdisc add dev lo root tbf rate "$0" burst 512kb latency 100ms || {
    echo "link_run: cannot shape the loopback with tc (rate $0)" >&2; exit 77; }
  exec mpirun -np "$1" "${@:2}"
' "$rate" "$np" "${flags[@]}" "$@"
