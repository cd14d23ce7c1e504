#!/usr/bin/env bash
# scripts/bench_hf_tp.py on the project's Python (scripts/python) with the built module
# (build/python: fluxcpp and its "fluxcpp" torch.distributed backend). A Hugging Face Llama from
# a config (random weights, no download) under tp_plan="auto" at W ranks on one host: gloo, the
# "fluxcpp" backend, fluxcpp's fused layers swapped in, and one process; TTFT and per-token times.
# --autotp adds DeepSpeed AutoTP on its CPU shared-memory all-reduce (installed on first use by
# scripts/install_deps.sh --peers; its op compiled into build/peers/torch_extensions).
# Usage: scripts/bench_hf_tp.sh [bench_hf_tp.py flags] (--help lists them)
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  if [ "$arg" = --autotp ]; then scripts/install_deps.sh --peers; fi
done
export PYTHONPATH=$PWD/build/python${PYTHONPATH:+:$PYTHONPATH} GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
unset OMP_NUM_THREADS
exec scripts/python scripts/bench_hf_tp.py "$@"
