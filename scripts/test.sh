#!/usr/bin/env bash
# Builds fluxcpp and runs its tests (CTest; multi-rank tests under mpirun), then the sanitizer
# builds and their subset (scripts/sanitize.sh; FLUXCPP_SANITIZE=0 leaves them out). What each
# stage covers and how long it takes: docs/testing.md.
# Usage: scripts/test.sh [--full] [extra ctest args]
#   --full  also the tests labelled full (repeats of paths the default run covers: W = 4 on one
#           host, the examples at W = 4, the FetchContent consumer). The soak (label soak) runs
#           only on request: ctest --test-dir build -L soak.
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
if [ "${1:-}" = "--full" ]; then
  full=1
  shift
fi
stage() {  # stage NAME COMMAND...: runs it and prints how long it took
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: stage '$name' took $((SECONDS - start)) s"
}
# --python: PyTorch and mpi4py for the Python module's tests (python.*), not for the library.
stage deps ./scripts/install_deps.sh --python
# ccache (installed above) for every compilation of this run, the nested ones of the consumer
# tests and the sanitizer builds included: one cache per user (~/.cache/ccache), shared by every
# clone, since paths under the clone are hashed relative to it (CCACHE_BASEDIR; CCACHE_NOHASHDIR
# leaves the build directory out of the -g builds' hashes). Depend mode (CCACHE_DEPEND) takes the
# headers from the compiler's -MD output: a miss costs no extra preprocessor run, so an empty
# cache costs next to nothing (docs/testing.md measures the run with one). FLUXCPP_CCACHE=0 turns
# it off. CMake reads the launchers from the environment when it first configures a build tree.
if [ "${FLUXCPP_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_DEPEND=1
fi
# The test programs at -O1 (the library keeps Release's -O3): tests/CMakeLists.txt says why.
stage configure cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFLUXCPP_FAULT_INJECTION=ON \
  -DFLUXCPP_TEST_COMPILE_OPTIONS=-O1
stage build cmake --build build -j"$(nproc)"
# The sanitizer builds compile while the suite runs, as SCHED_IDLE processes: they get a core
# when no test wants it (the suite alone leaves ~30 % of the machine idle: ranks waiting on each
# other, mpirun starting). Not for free: a rank that yields its core while it waits hands it to
# the compiler for a time slice, so tests beside the builds run longer (docs/testing.md has the
# numbers: ~85 s saved in all; one compile job at a time instead of two saved nothing).
# Their output goes to build/sanitize-build.log, printed after the suite.
sanitize_pid=""
sanitize_log=build/sanitize-build.log
if [ "${FLUXCPP_SANITIZE:-1}" != "0" ]; then
  setsid chrt --idle 0 ./scripts/sanitize.sh --build-only >"$sanitize_log" 2>&1 &
  sanitize_pid=$!
  # Whatever ends this script ends the builds too (setsid made them a process group).
  trap '[ -n "$sanitize_pid" ] && kill -- -"$sanitize_pid" 2>/dev/null || true' EXIT
fi
# Tests run side by side while their ranks fit in twice the cores (each test's PROCESSORS is its
# ranks, tests/CMakeLists.txt); the failure model's tests run alone.
exclude='soak|full'
[ "$full" = 1 ] && exclude='soak'
stage ctest ctest --test-dir build --output-on-failure -j"$((2 * $(nproc)))" -LE "$exclude" "$@"
if [ -n "$sanitize_pid" ]; then
  wait_builds() {
    local rc=0
    wait "$sanitize_pid" || rc=$?
    sanitize_pid=""
    cat "$sanitize_log"
    [ "$rc" = 0 ] || echo "test.sh: the sanitizer builds failed ($rc); their output is above" >&2
    return "$rc"
  }
  # How long the builds ran on after the suite (their own times are in the log printed here).
  stage sanitize-build-wait wait_builds
  stage sanitize ./scripts/sanitize.sh --test-only
fi
