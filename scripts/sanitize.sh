#!/usr/bin/env bash
# Sanitizer builds and a representative multi-rank subset under them (scripts/test.sh builds them
# while the main suite runs and runs their tests after it):
#  * build-asan (-fsanitize=address,undefined, -O1 -g1): every op and the misuse tests at W = 3
#    (an odd W: uneven splits and two host peers, where an index goes wrong first; W = 2 runs in
#    the main suite), the local ops on one rank (their work is per rank), moe_layout and
#    grouped_gemm through the C ABI at W = 2, and the failure model at W = 2 (fault.*; the
#    one-host W = 3 variants and the PID-namespace neighbours run in the main suite only);
#  * build-tsan (-fsanitize=thread, -O1 -g1): the shm, signal and stream unit tests, and ag_gemm
#    with copy offload (a comm thread moving the data while the caller computes) at W = 3.
# Any report fails the run (halt_on_error). The TSan suppressions (scripts/sanitize/tsan.supp)
# cover OpenMPI internals only, each with its reason; leak detection is off (see test_asan).
# Usage: scripts/sanitize.sh [--build-only | --test-only [--beside | --timed]] [asan|tsan]...
#        (default: both kinds, built then tested; --test-only expects the builds of an earlier
#        --build-only; --beside runs only the tests that time no deadline, which scripts/test.sh
#        runs beside the main suite, --timed the rest: the failure model and the MPI-free
#        bootstrap under ASan, which it runs after the suite)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
build_jobs=${FLUXCPP_SANITIZE_BUILD_JOBS:-$jobs}  # compile jobs (test.sh: 1 beside the suite)
phases=(build test)
case "${1:-}" in
  --build-only) phases=(build); shift ;;
  --test-only) phases=(test); shift ;;
esac
part=all  # which tests: all, beside (no deadline timed), timed
case "${1:-}" in
  --beside) part=beside; shift ;;
  --timed) part=timed; shift ;;
esac
kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=(asan tsan)

# configure DIR FLAGS: a build with only what the subsets need. The build type "Sanitize" has no
# flags of its own, so -O1 holds (an empty type becomes Release, whose -O3 came after it and
# cost 639 s of ASan compile here against 233 s at -O1); -g1 keeps the line tables the
# reports need. The library is a unity build (FLUXCPP_UNITY_BUILD): at -O1
# parsing the same headers once per source was most of its compile time. The test programs
# compile at -O0 (FLUXCPP_TEST_COMPILE_OPTIONS): still instrumented, half the compile time of
# -O1 (their GoogleTest code is large; the work they check runs in the library, at -O1).
configure() {
  local dir=$1 flags=$2
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Sanitize -DFLUXCPP_BUILD_BENCH=OFF \
    -DFLUXCPP_BUILD_EXAMPLES=OFF -DFLUXCPP_FAULT_INJECTION=ON \
    -DFLUXCPP_UNITY_BUILD=ON -DFLUXCPP_TEST_COMPILE_OPTIONS=-O0 \
    "-DCMAKE_C_FLAGS=-O1 -g1 -fno-omit-frame-pointer $flags" \
    "-DCMAKE_CXX_FLAGS=-O1 -g1 -fno-omit-frame-pointer $flags" \
    "-DCMAKE_EXE_LINKER_FLAGS=$flags" "-DCMAKE_SHARED_LINKER_FLAGS=$flags" >/dev/null
}

build_asan() {
  local start=$SECONDS
  configure build-asan "-fsanitize=address,undefined -fno-sanitize-recover=undefined"
  cmake --build build-asan -j"$build_jobs" --target \
    fluxcpp_all_gather_test fluxcpp_ag_gemm_test fluxcpp_reduce_scatter_test fluxcpp_gemm_rs_test \
    fluxcpp_all_reduce_test fluxcpp_gemm_ar_test \
    fluxcpp_all_to_all_single_test fluxcpp_a2a_gemm_test fluxcpp_ulysses_test \
    fluxcpp_grouped_gemm_test fluxcpp_inplace_cast_test fluxcpp_moe_capi_test \
    fluxcpp_moe_dispatch_test fluxcpp_moe_combine_test fluxcpp_ag_scatter_grouped_gemm_test \
    fluxcpp_grouped_gemm_gather_rs_test fluxcpp_async_send_recv_test \
    fluxcpp_misuse_test fluxcpp_fault_runner fluxcpp_killed_rank fluxcpp_fork_test \
    fluxcpp_abandoned_test fluxcpp_shm_group_test \
    fluxcpp_from_id_capi_test >/dev/null
  echo "sanitize: asan build $((SECONDS - start)) s"
}

test_asan() {
  local start=$SECONDS
  local ops='all_gather|ag_gemm|reduce_scatter|gemm_rs|all_reduce|gemm_ar|all_to_all_single|a2a_gemm|ulysses'
  ops+='|moe_dispatch|moe_combine|ag_scatter_grouped_gemm|grouped_gemm_gather_rs|async_send_recv'
  local bootstrap='comm\.shm_group|from_id_capi'  # the control plane without MPI
  # allocator_may_return_null: a create too large for the machine must reach the library as
  # std::bad_alloc (which it reports as kSystem), not end the process in ASan's allocator.
  # detect_leaks=0: OpenMPI keeps allocations of MPI_Init past MPI_Finalize and unloads its
  # components (mca_*.so) there, so LeakSanitizer reports them at exit with frames of an unknown
  # module, which no suppression can tell from fluxcpp's. Leaks are checked by the soak instead
  # (ctest -L soak: RSS, mappings, fds and threads over 10,000 calls).
  # The failure model at W = 2 (fault.abandoned.*.np2, fault.fork.np2*, and the 3-rank scenarios
  # of fault_runner and killed_rank, which have no other size); shm_neighbours (PID namespaces)
  # in the main suite only.
  local faults='fault\.(abandoned\..*\.np2|fork\.np2.*|killed_rank|null_ctx_create|skip_create|comm_null|skip_destroy|bootstrap|forward\..*)'
  local beside="(${ops}|misuse)\.np3|(grouped_gemm|inplace_cast)\.np1|moe_capi\.np2"
  local timed="${faults}|${bootstrap}"
  local pick="${beside}|${timed}"
  [ "$part" = beside ] && pick=$beside
  [ "$part" = timed ] && pick=$timed
  ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=0:allocator_may_return_null=1" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    ctest --test-dir build-asan --output-on-failure -j"$((2 * jobs))" -R "^(${pick})\$"
  echo "sanitize: asan tests ($part) $((SECONDS - start)) s"
}

build_tsan() {
  local start=$SECONDS
  configure build-tsan "-fsanitize=thread"
  cmake --build build-tsan -j"$build_jobs" --target fluxcpp_shm_test fluxcpp_ag_gemm_test >/dev/null
  echo "sanitize: tsan build $((SECONDS - start)) s"
}

test_tsan() {
  [ "$part" = timed ] && return 0  # no deadline timed here: all of it runs with --beside
  local start=$SECONDS
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/sanitize/tsan.supp"
  ctest --test-dir build-tsan --output-on-failure -R '^shm$'
  # ag_gemm with copy offload at W = 3: its repeated calls in every mode, one shape of each
  # dtype pair, the bad-input paths (the big FLUX shape is left out: minutes under TSan).
  local flags=(--oversubscribe --bind-to none)
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
  FLUXCPP_COPY_OFFLOAD=on FLUXCPP_TEST_WATCHDOG_S=600 \
    mpirun -np 3 "${flags[@]}" build-tsan/tests/fluxcpp_ag_gemm_test \
      --gtest_filter='Modes/AgGemmCalls.*:Shapes/AgGemmTest.*rows96*:AgGemmBadInput.*'
  ctest --test-dir build-tsan --output-on-failure -R '^shm_clean'
  echo "sanitize: tsan tests $((SECONDS - start)) s"
}

for k in "${kinds[@]}"; do
  case $k in
    asan | tsan) ;;
    *) echo "sanitize: unknown kind $k (asan, tsan)" >&2; exit 2 ;;
  esac
done
for phase in "${phases[@]}"; do
  for k in "${kinds[@]}"; do
    "${phase}_${k}"
  done
done
