#!/usr/bin/env bash
# Jobs that share /dev/shm with neighbours they cannot see (issue 19): twice, a 2-rank job runs
# context/op create, forward and destroy in a loop (shm_neighbour loop) beside
#   - a 1-rank job doing the same in another PID namespace (unshare --pid --fork --mount-proc, as
#     `docker --ipc=host` or pods sharing IPC do): its stale-segment cleaner must never remove
#     the 2-rank job's live segments, nor the other way round;
#   - a squatter (shm_neighbour squat) that created, before either job started, every name it
#     could derive for the next pids and guessed others, and holds them.
# Both jobs must report PASS, and neither may leave a segment in /dev/shm. Exits 77 (ctest
# SKIP_RETURN_CODE) when PID namespaces cannot be made here (not root, or unshare refused).
# usage: shm_neighbours.sh MPIEXEC EXE SECONDS [mpirun flags...]
set -u
mpiexec=$1 exe=$2 seconds=$3
shift 3
flags=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "$(id -u)" != 0 ]; then
  echo "SKIP: unshare --pid needs root (uid $(id -u))"
  exit 77
fi
if ! unshare --pid --fork --mount-proc true 2>"$work/unshare.err"; then
  echo "SKIP: unshare --pid --fork --mount-proc is not permitted here: $(cat "$work/unshare.err")"
  exit 77
fi

status=0
limit=$((seconds + 90))  # a hang fails here, well inside ctest's own timeout
for run in 1 2; do
  echo "== run $run"
  "$exe" squat $((seconds + 60)) >"$work/squat.out" 2>&1 &
  squatter=$!
  for _ in $(seq 100); do
    grep -q "squatting" "$work/squat.out" && break
    sleep 0.1
  done
  cat "$work/squat.out"
  timeout -s KILL $limit unshare --pid --fork --mount-proc \
    "$mpiexec" -np 1 "${flags[@]}" "$exe" loop "$seconds" >"$work/ns.out" 2>&1 &
  ns=$!
  timeout -s KILL $limit "$mpiexec" -np 2 "${flags[@]}" "$exe" loop "$seconds" \
    >"$work/job.out" 2>&1 &
  job=$!
  wait $job
  job_rc=$?
  wait $ns
  ns_rc=$?
  kill -TERM $squatter 2>/dev/null
  wait $squatter
  echo "-- 2-rank job (rc $job_rc):"
  cat "$work/job.out"
  echo "-- 1-rank job in its own PID namespace (rc $ns_rc):"
  cat "$work/ns.out"
  tail -n 2 "$work/squat.out"
  job_pass=$(grep -c "neighbour: rank [01] PASS" "$work/job.out")
  ns_pass=$(grep -c "neighbour: rank 0 PASS" "$work/ns.out")
  if [ "$job_rc" != 0 ] || [ "$job_pass" != 2 ]; then
    echo "FAIL run $run: the 2-rank job did not pass on both ranks"
    status=1
  fi
  if [ "$ns_rc" != 0 ] || [ "$ns_pass" != 1 ]; then
    echo "FAIL run $run: the job in the other PID namespace did not pass"
    status=1
  fi
  # Segments of these jobs only (names carry the creator's pid in its own namespace).
  for pid in $(sed -n 's/^neighbour: pid \([0-9]*\)$/\1/p' "$work/job.out" "$work/ns.out"); do
    left=$(ls /dev/shm | grep "^fluxcpp-$pid-" || true)
    if [ -n "$left" ]; then
      echo "FAIL run $run: segments left in /dev/shm by pid $pid: $left"
      status=1
    fi
  done
done
[ $status = 0 ] && echo "PASS"
exit $status
