# Sourced by the Python benchmark scripts (bench_examples.sh, bench_llama_tp.sh): the environment
# of their runs and the wait for an idle machine. The caller sets busy (percent) and max_wait (s).
#   PYTHONPATH, FLUXCPP_LIBRARY (default build/libfluxcpp.so), GLOO_SOCKET_IFNAME (default lo);
#   OMP_NUM_THREADS unset (the scripts set torch's threads, fluxcpp its own; nproc would count
#   it as the CPUs, in link_run.sh too); flags: mpirun's flags for NP ranks on this machine, one
#   core per rank (mpirun's default binding) when there are enough.
export PYTHONPATH=$PWD/python FLUXCPP_LIBRARY=${FLUXCPP_LIBRARY:-$PWD/build/libfluxcpp.so}
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
unset OMP_NUM_THREADS
flags=()
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
[ "$np" -gt "$(nproc)" ] && flags+=(--oversubscribe --bind-to none)
busy_percent() {  # the share of all CPUs busy over one second, from /proc/stat
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local total=0 idle=$(( b[4] + b[5] - a[4] - a[5] )) i
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
# Waits until at most $busy percent of all CPUs were busy over one second (at most $max_wait s):
# a run that needs every core is slowed far more by other jobs than a one-rank run. Sets tag:
# the busy share seen before the run and the seconds waited for it (each JSON row records it).
wait_idle() {
  local start=$SECONDS b
  while b=$(busy_percent); [ "$b" -gt "$busy" ] && [ $(( SECONDS - start )) -lt "$max_wait" ]; do
    sleep 2
  done
  tag="busy=${b}% waited=$(( SECONDS - start ))s"
}
