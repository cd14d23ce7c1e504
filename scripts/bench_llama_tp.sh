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
#                                  [--busy PERCENT] [--max-wait S] [--dtypes "f32 bf16"]
#                                  [--batches "1 8 32"] [--no-one-rank] [-- extra llama_tp.py flags]
#   --link RATE: the W ranks as hosts joined by a shaped link (scripts/link_run.sh RATE; one
#   rank per simulated host); the one-rank runs stay as they are.
#   --no-one-rank: only fluxcpp and torch + gloo at W (no TP = 1 columns).
# Needs build/libfluxcpp.so (cmake --build build) and Debian's python3-torch / python3-mpi4py.
set -euo pipefail
cd "$(dirname "$0")/.."
np=2 rounds=3 out="" link="" busy=15 max_wait=600 dtypes="f32 bf16" batches="1 8 32" one_rank=1
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --link) link=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --max-wait) max_wait=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --no-one-rank) one_rank=0; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench_llama_tp: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${out:-$(mktemp --suffix=.jsonl)}
. scripts/bench_common.sh
model=(--layers 4 --hidden 1024 --heads 16 --kv-heads 8 --ffn 2816 --vocab 32000
       --prompt-len 512 --prefill-batch 1 --gen 16 --warmup 1 --repeat 3 --no-progress
       "${extra[@]}")
run() {  # run NP BACKEND DTYPE BATCH
  wait_idle
  local cmd=("$PWD/scripts/python" python/examples/llama_tp.py --backend "$2" --dtype "$3"
             --batch "$4" --json "$out" --tag "$tag" "${model[@]}")
  if [ "$1" -gt 1 ] && [ -n "$link" ]; then
    scripts/link_run.sh "$link" "$1" "${cmd[@]}" | grep -v '^  tokens'
  else
    mpirun -np "$1" "${flags[@]}" "${cmd[@]}" | grep -v '^  tokens'
  fi
}
echo "bench_llama_tp: results in $out" >&2
for round in $(seq "$rounds"); do
  for dtype in $dtypes; do
    for batch in $batches; do
      echo "== round $round, $dtype, batch $batch" >&2
      run "$np" fluxcpp "$dtype" "$batch"
      run "$np" torch "$dtype" "$batch"
      if [ "$one_rank" = 1 ]; then
        run 1 single "$dtype" "$batch"
        run 1 fluxcpp "$dtype" "$batch"
      fi
    done
  done
done
"$PWD/scripts/python" - "$out" "$np" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
W = int(sys.argv[2])
# runs[(dtype, batch, backend, world)] = [run 1, run 2, ...] in round order
runs = collections.defaultdict(list)
for r in rows:
    runs[(r["dtype"], r["batch"], r["backend"], r["world"])].append(r)
med = statistics.median
CONFIGS = (("fluxcpp", W), ("torch", W), ("single", 1), ("fluxcpp", 1))
batches = sorted({r["batch"] for r in rows})


def cell(xs, key):
    return f"{med([r[key] for r in xs]):.1f}" if xs else "–"


def ratio(a, b, key):
    """median over the rounds of a[key] / b[key] (runs paired in round order)"""
    xs = [x[key] / y[key] for x, y in zip(a, b)]
    return f"{med(xs):.2f}x" if xs else "–"


print(f"TTFT and TPOT in ms, medians over the rounds: fluxcpp W={W} / torch+gloo W={W} / single "
      "(torch, one rank) / fluxcpp W=1; ratios: medians of the per-round ratios.")
print("| dtype | batch | TTFT | TPOT | TTFT torch/fluxcpp | TPOT torch/fluxcpp "
      "| prefill tok/s TP/TP=1: vs fluxcpp W=1, vs single | decode tok/s TP/TP=1: same |")
print("|---|---|---|---|---|---|---|---|")
for dtype in ("f32", "bf16"):
    for batch in batches:
        f, t, s, f1 = (runs[(dtype, batch, b, w)] for b, w in CONFIGS)
        if not f:
            continue
        print(f"| {dtype} | {batch} | {' / '.join(cell(x, 'ttft_ms') for x in (f, t, s, f1))} "
              f"| {' / '.join(cell(x, 'tpot_ms') for x in (f, t, s, f1))} "
              f"| {ratio(t, f, 'ttft_ms')} | {ratio(t, f, 'tpot_ms')} "
              f"| {ratio(f, f1, 'prefill_tok_s')}, {ratio(f, s, 'prefill_tok_s')} "
              f"| {ratio(f, f1, 'decode_tok_s')}, {ratio(f, s, 'decode_tok_s')} |")
# TTFT is the same prefill in every batch's runs: all of them together
for dtype in ("f32", "bf16"):
    f, t, s, f1 = ([r for b in batches for r in runs[(dtype, b, be, w)]] for be, w in CONFIGS)
    if f:
        print(f"{dtype}: TTFT over all {len(f)} runs {' / '.join(cell(x, 'ttft_ms') for x in (f, t, s, f1))} "
              f"ms; torch/fluxcpp {ratio(t, f, 'ttft_ms')}; prefill TP/TP=1 "
              f"{ratio(f, f1, 'prefill_tok_s')} (vs fluxcpp W=1), {ratio(f, s, 'prefill_tok_s')} (vs single)")
EOF
