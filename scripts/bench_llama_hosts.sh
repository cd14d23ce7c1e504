#!/usr/bin/env bash
# The Llama example (python/examples/llama_tp.py) as two hosts under torchrun, no MPI anywhere:
# two torchrun agents (--nnodes 2, one per simulated host: FLUXCPP_HOST_ID) in a network namespace
# of their own whose loopback is shaped to RATE (tc tbf), for each backend: fluxcpp's fused layers
# (context from the job's store, its TCP channel between the hosts), torch.mm + dist.all_reduce
# over gloo, and torch.mm + dist.all_reduce over the "fluxcpp" backend. Prints llama_tp's lines.
# Usage: scripts/bench_llama_hosts.sh [RATE] [PER_HOST] [llama_tp args...]   (root; 10gbit 1)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-10gbit}; shift || true
per_host=${1:-1}; shift || true
export PYTHONPATH=$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1
# torchrun's own log folders (torchelastic_*, never removed) and the logs: one folder, gone at exit.
export TMPDIR=$(mktemp -d)
trap 'rm -rf "$TMPDIR"' EXIT
unshare -n bash -c '
  ip link set lo up && tc qdisc add dev lo root tbf rate "$0" burst 512kb latency 100ms || exit 1
  per_host=$1; shift
  port=29600
  for variant in "--backend fluxcpp" "--backend torch --dist-backend gloo" \
                 "--backend torch --dist-backend fluxcpp"; do
    port=$((port + 1))
    for node in 1 0; do
      # shellcheck disable=SC2086
      FLUXCPP_HOST_ID=host$node FLUXCPP_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo \
        "$PWD/scripts/python" -m torch.distributed.run --nnodes 2 --node_rank $node \
        --nproc_per_node "$per_host" --master_addr 127.0.0.1 --master_port $port \
        --redirects 1 --tee 1 python/examples/llama_tp.py $variant --no-progress "$@" \
        > $TMPDIR/bench_llama_hosts.$node.log 2>&1 &
    done
    wait
    grep -h "llama_tp:\|TTFT" $TMPDIR/bench_llama_hosts.0.log | sed "s/^\[default0\]://"
  done
' "$rate" "$per_host" "$@"
