#!/usr/bin/env bash
# PyTorch's backend suite (tests/torch_backend/dist_suite.py) in full, for fluxcpp and for gloo
# at the given world sizes, then the table of outcomes per test side by side
# (scripts/torch_suite_table.py; docs/testing.md holds the last one). The backend
# "fluxcpp_as_gloo" is fluxcpp running the tests the suite enables for gloo only
# (DIST_SUITE_AS=gloo).
# Usage: scripts/torch_suite.sh [--build DIR] [--out DIR]
#            [--backends "fluxcpp gloo fluxcpp_as_gloo"] [W ...]
# (default W: 2 3). Takes about 4-6 minutes per backend and world size on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build" out="${TMPDIR:-/tmp}/fluxcpp-torch-suite" backends="fluxcpp gloo fluxcpp_as_gloo" sizes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --backends) backends="$2"; shift 2 ;;
    -h|--help) sed -n 2,6p "$0"; exit 0 ;;
    *) sizes+=("$1"); shift ;;
  esac
done
[ ${#sizes[@]} -eq 0 ] && sizes=(2 3)
[ -f "$build/python/fluxcpp/_c10d.so" ] || {
  echo "torch_suite: $build/python/fluxcpp/_c10d.so missing (build after scripts/install_deps.sh --python)" >&2
  exit 1
}
mkdir -p "$out"
for w in "${sizes[@]}"; do
  for b in $backends; do
    log="$out/$b-w$w.log"
    echo "torch_suite: BACKEND=$b WORLD_SIZE=$w -> $log" >&2
    start=$(date +%s)
    as=""
    backend=$b
    if [ "$b" = fluxcpp_as_gloo ]; then as=gloo backend=fluxcpp; fi
    # Spawned ranks, as PyTorch runs its suite (the CI subset forks them: dist_suite.py).
    BACKEND=$backend DIST_SUITE_AS=$as DIST_SUITE_START=spawn WORLD_SIZE=$w \
      PYTHONPATH="$build/python" "$here/scripts/python" \
      "$here/tests/torch_backend/dist_suite.py" -v >"$log" 2>&1 || true
    echo "torch_suite: $b W=$w took $(( $(date +%s) - start )) s: $(tail -1 "$log")" >&2
  done
done
"$here/scripts/python" "$here/scripts/torch_suite_table.py" "$out"
