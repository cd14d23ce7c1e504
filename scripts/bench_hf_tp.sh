#!/usr/bin/env bash
# scripts/bench_hf_tp.py on the project's Python (scripts/python; with --autotp, the peers') with
# the built module (build/python: fluxcpp and its "fluxcpp" torch.distributed backend). A Hugging
# Face Llama from a config (random weights, no download) under tp_plan="auto" at W ranks on one
# host: gloo, the "fluxcpp" backend, fluxcpp's fused layers swapped in, and one process; TTFT and
# per-token times.
# --autotp adds DeepSpeed AutoTP on its CPU shared-memory all-reduce (installed on first use by
# scripts/install_deps.sh --peers, and the run is in that environment; its op compiled into
# build/peers/torch_extensions).
# Usage: scripts/bench_hf_tp.sh [bench_hf_tp.py flags] (--help lists them)
set -euo pipefail
cd "$(dirname "$0")/.."
python=scripts/python
for arg in "$@"; do
  if [ "$arg" = --autotp ]; then  # the whole run in the peers' environment (scripts/peers_env.sh)
    scripts/install_deps.sh --peers
    peers="$(scripts/peers_env.sh)"
    python="$peers/bin/python"
    export PATH="$peers/bin:$PATH"  # its ninja, for DeepSpeed's op
  fi
done
export PYTHONPATH=$PWD/build/python${PYTHONPATH:+:$PYTHONPATH} GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
unset OMP_NUM_THREADS
# torch.compile's cache in the build tree, not /tmp/torchinductor_<user> (left behind otherwise).
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/build/torchinductor}"
exec "$python" scripts/bench_hf_tp.py "$@"
