#!/usr/bin/env bash
# python/examples/llama_tp.py on one host: fluxcpp (W ranks) vs torch + gloo (W ranks) vs the
# whole model on one rank (torch, and fluxcpp at W = 1), f32 and bf16; prefill of one 512-token
# prompt (TTFT) and decode at batch 1, 8 and 32 on its cache. The backends run one after another
# inside each round (so they see the same machine); each run reports the median of its timed
# repeats; the table gives, per cell, the median over the rounds, and each ratio is the median of
# the per-round ratios.
# Before each run it waits (up to --max-wait seconds, default 600) until the machine is idle: at
# most --busy percent (default 15) of all CPUs busy over one second, so that a run with W ranks
# is not measured while other jobs hold cores (they slow a run that needs every core far more
# than a one-rank run); each JSON row records the busy share seen and the wait.
# Usage: scripts/bench_llama_tp.sh [-np W] [--rounds N] [--out FILE.jsonl] [--link RATE]
#                                  [--busy PERCENT] [--max-wait S] [-- extra llama_tp.py flags]
#   --link RATE: the W ranks as hosts joined by a shaped link (scripts/link_run.sh RATE; one
#   rank per simulated host); the one-rank runs stay as they are.
# Needs build/libfluxcpp.so (cmake --build build) and Debian's python3-torch / python3-mpi4py.
set -euo pipefail
cd "$(dirname "$0")/.."
np=2 rounds=3 out="" link="" busy=15 max_wait=600 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --link) link=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --max-wait) max_wait=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench_llama_tp: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${out:-$(mktemp --suffix=.jsonl)}
export PYTHONPATH=$PWD/python FLUXCPP_LIBRARY=${FLUXCPP_LIBRARY:-$PWD/build/libfluxcpp.so}
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
# One core per rank (mpirun's default binding) when there are enough, as link_run.sh does; the
# script sets torch's threads (--threads 1) and fluxcpp its own. (OMP_NUM_THREADS is left
# unset here: nproc would count it as the CPUs, in link_run.sh too.)
unset OMP_NUM_THREADS
flags=()
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
[ "$np" -gt "$(nproc)" ] && flags+=(--oversubscribe --bind-to none)
model=(--layers 4 --hidden 1024 --heads 16 --kv-heads 8 --ffn 2816 --vocab 32000
       --prompt-len 512 --prefill-batch 1 --gen 16 --warmup 1 --repeat 3 --no-progress
       "${extra[@]}")
busy_percent() {  # the share of all CPUs busy over one second, from /proc/stat
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local total=0 idle=$(( b[4] + b[5] - a[4] - a[5] )) i
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
wait_idle() {  # sets tag: the busy share seen before the run and the seconds waited for it
  local start=$SECONDS b
  while b=$(busy_percent); [ "$b" -gt "$busy" ] && [ $(( SECONDS - start )) -lt "$max_wait" ]; do
    sleep 2
  done
  tag="busy=${b}% waited=$(( SECONDS - start ))s"
}
run() {  # run NP BACKEND DTYPE BATCH
  wait_idle
  local cmd=(/usr/bin/python3 python/examples/llama_tp.py --backend "$2" --dtype "$3"
             --batch "$4" --json "$out" --tag "$tag" "${model[@]}")
  if [ "$1" -gt 1 ] && [ -n "$link" ]; then
    scripts/link_run.sh "$link" "$1" "${cmd[@]}" | grep -v '^  tokens'
  else
    mpirun -np "$1" "${flags[@]}" "${cmd[@]}" | grep -v '^  tokens'
  fi
}
echo "bench_llama_tp: results in $out" >&2
for round in $(seq "$rounds"); do
  for dtype in f32 bf16; do
    for batch in 1 8 32; do
      echo "== round $round, $dtype, batch $batch" >&2
      run "$np" fluxcpp "$dtype" "$batch"
      run "$np" torch "$dtype" "$batch"
      run 1 single "$dtype" "$batch"
      run 1 fluxcpp "$dtype" "$batch"
    done
  done
done
/usr/bin/python3 - "$out" "$np" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
W = int(sys.argv[2])
# runs[(dtype, batch, backend, world)] = [run 1, run 2, ...] in round order
runs = collections.defaultdict(list)
for r in rows:
    runs[(r["dtype"], r["batch"], r["backend"], r["world"])].append(r)
med = statistics.median
def ratio(a, b, key, inv=False):
    xs = [(y[key] / x[key]) if inv else (x[key] / y[key]) for x, y in zip(a, b)]
    return med(xs) if xs else float("nan")
print("| dtype | batch | TTFT fluxcpp / torch+gloo / single / fluxcpp W=1 (ms) | TPOT (ms) same order "
      "| TTFT torch/fluxcpp | TPOT torch/fluxcpp | prefill tok/s TP/TP=1 (fluxcpp, vs single) "
      "| decode tok/s TP/TP=1 (fluxcpp, vs single) |")
print("|---|---|---|---|---|---|---|---|")
for dtype in ("f32", "bf16"):
    for batch in (1, 8, 32):
        f, t, s, f1 = (runs[(dtype, batch, b, w)] for b, w in
                       (("fluxcpp", W), ("torch", W), ("single", 1), ("fluxcpp", 1)))
        if not (f and t and s and f1):
            continue
        cell = lambda key: " / ".join(f"{med([r[key] for r in x]):.1f}" for x in (f, t, s, f1))
        print(f"| {dtype} | {batch} | {cell('ttft_ms')} | {cell('tpot_ms')} "
              f"| {ratio(t, f, 'ttft_ms'):.2f}x | {ratio(t, f, 'tpot_ms'):.2f}x "
              f"| {ratio(f, f1, 'prefill_tok_s'):.2f}x, {ratio(f, s, 'prefill_tok_s'):.2f}x "
              f"| {ratio(f, f1, 'decode_tok_s'):.2f}x, {ratio(f, s, 'decode_tok_s'):.2f}x |")
EOF
