#!/usr/bin/env bash
# Builds fluxcpp and runs every test (CTest; multi-rank tests under mpirun).
# Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
# Serial on purpose: the multi-rank tests already oversubscribe a small machine. The soak
# (label soak) is left out: ctest --test-dir build -L soak runs it.
ctest --test-dir build --output-on-failure -LE soak "$@"
