#!/usr/bin/env bash
# Builds fluxcpp and runs every test (CTest; multi-rank tests under mpirun), then the sanitizer
# builds and their subset (scripts/sanitize.sh; FLUXCPP_SANITIZE=0 leaves them out).
# Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
# --python: PyTorch and mpi4py for the Python module's tests (python.*), not for the library.
./scripts/install_deps.sh --python
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
# Serial on purpose: the multi-rank tests already oversubscribe a small machine. The soak
# (label soak) is left out: ctest --test-dir build -L soak runs it.
ctest --test-dir build --output-on-failure -LE soak "$@"
if [ "${FLUXCPP_SANITIZE:-1}" != "0" ]; then
  ./scripts/sanitize.sh
fi
