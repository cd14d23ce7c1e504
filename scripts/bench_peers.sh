#!/usr/bin/env bash
# fluxcpp against its peers on local ranks, the same tensors through each (scripts/bench_peers.py
# says what and how): the "fluxcpp" torch.distributed backend and fluxcpp's Python module,
# DeepSpeed's CPU shared-memory all-reduce, oneCCL's CPU collectives and torch's gloo, W = 2 and 4,
# 4 B .. 64 MiB, f32 and bf16, each result checked; a table, and JSON lines with --json.
# It installs the peers on first use (scripts/install_deps.sh --peers: scripts/peers_env.sh, an
# environment layered on the project's, torch kept at its pin) and runs in that environment; builds the library and the backend if needed, oneCCL's program into
# build/peers (scripts/peers/oneccl_bench.cpp against PyPI's static oneCCL) and DeepSpeed's
# shared-memory op into build/peers/torch_extensions (as DeepSpeed builds it: its
# ShareMemCommBuilder, torch's cpp_extension). A peer whose build fails is reported by the
# table with the build's error; the others still run.
# Usage: scripts/bench_peers.sh [bench_peers.py flags]   (--help lists them)
#        scripts/bench_peers.sh --results docs/data/peers --page docs/benchmarks.md
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/peers
rm -f build/peers/install_failed.log
if ! scripts/install_deps.sh --peers 2>build/peers/install.log; then
  # The peers that need the install then report its error in the table; the others still run.
  mv build/peers/install.log build/peers/install_failed.log
  echo "bench_peers: installing the peers failed (build/peers/install_failed.log)" >&2
fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build -j"$(nproc)" --target fluxcpp_shared fluxcpp_c10d >/dev/null
env="$(scripts/peers_env.sh)"
[ -x "$env/bin/python" ] || env="$(scripts/venv.sh)"
export PATH="$env/bin:$PATH"  # its ninja, for torch's cpp_extension
if [ ! -x build/peers/oneccl_bench ] || [ scripts/peers/oneccl_bench.cpp -nt build/peers/oneccl_bench ] ||
   [ scripts/peers/oneccl_shims.cpp -nt build/peers/oneccl_bench ]; then
  rm -f build/peers/oneccl_bench
  # Debian's hwloc (libhwloc-dev, a build dependency) is the one oneCCL's static library calls.
  g++ -O2 -std=c++17 -I"$env/include" scripts/peers/oneccl_bench.cpp scripts/peers/oneccl_shims.cpp \
    -o build/peers/oneccl_bench "$env/lib/ccl/cpu/lib/libccl.a" -lhwloc -ldl -lpthread -lrt \
    >build/peers/oneccl_build.log 2>&1 || echo "bench_peers: oneCCL's program did not build (build/peers/oneccl_build.log)" >&2
fi
export TORCH_EXTENSIONS_DIR=$PWD/build/peers/torch_extensions DS_ACCELERATOR=cpu
export PYTHONPATH=$PWD/build/python${PYTHONPATH:+:$PYTHONPATH} GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
unset OMP_NUM_THREADS
"$env/bin/python" -c 'from deepspeed.accelerator import get_accelerator
get_accelerator().create_op_builder("ShareMemCommBuilder").load()' >build/peers/deepspeed_build.log 2>&1 ||
  echo "bench_peers: DeepSpeed's shared-memory op did not build (build/peers/deepspeed_build.log)" >&2
# torch.compile's cache in the build tree, not /tmp/torchinductor_<user> (left behind otherwise).
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/build/torchinductor}"
exec "$env/bin/python" scripts/bench_peers.py "$@"
