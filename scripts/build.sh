#!/usr/bin/env bash
# Installs the dependencies (if missing) and builds fluxcpp in build/ (Release). Quiet unless
# something fails.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
