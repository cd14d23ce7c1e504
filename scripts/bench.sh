#!/usr/bin/env bash
# The benchmark suite on 2 local ranks, in the order a PyTorch user asks: (1) the MLP GEMMs of a
# tensor-parallel layer, fluxcpp against torch.mm + gloo, f32 and bf16, prefill and decode;
# (2) the collectives against torch's gloo and against MPI; (3) the fused ops at a layer's
# shapes on two hosts joined by a shaped 10 Gbit/s link, against the unfused path and the link
# probe. It installs what is missing, builds only what it runs (the library and fluxcpp_bench,
# not the tests), prints a line per step with its expected duration, each sweep's rows with the
# time the rest of the sweep will take, and ends with the results tables.
#
# Usage: scripts/bench.sh [--layer H,FFN,M] the suite: first a quick pass at your layer (hidden
#                                          H, MLP width FFN, M rows; default 2048,5632,512) and
#                                          its table, then the full sweep (~5 minutes here from a
#                                          fresh clone, ~3 of them the build; ~2 once built)
#        scripts/bench.sh --results [DIR]  the same, its JSON kept in DIR (docs/data/results),
#                                          then docs/benchmarks.md's results and plots remade
# Stopped (Ctrl-C) after the build, it prints the table of the rows it finished.
#        scripts/bench.sh [-np N] ARGS...  fluxcpp_bench ARGS on N ranks (default 2), e.g.
#                                          scripts/bench.sh -np 4 --op all_gather --json out.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
np=2
quick_layer=2048,5632,512
if [ "${1:-}" = "--layer" ]; then quick_layer=${2:?usage: scripts/bench.sh --layer H,FFN,M}; shift 2; fi
if [ "${1:-}" = "-np" ]; then np=${2:?usage: scripts/bench.sh -np N [fluxcpp_bench args]}; shift 2; fi
results=""
if [ "${1:-}" = "--results" ]; then
  results=docs/data/results; shift
  if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then results=$1; shift; fi
  [ $# -eq 0 ] || { echo "bench.sh: --results [DIR] takes no other arguments" >&2; exit 2; }
fi
if [ $# -eq 0 ] && [ "$np" != 2 ]; then
  echo "bench.sh: the suite runs 2 ranks; -np N is for a fluxcpp_bench run: scripts/bench.sh -np N ARGS..." >&2
  exit 2
fi
flags=()
[ "$np" -gt "$(nproc)" ] && flags+=(--oversubscribe)
# The revision measured, before anything is written (the results' JSON is tracked).
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+changes"
start=$SECONDS
step() { printf '\n[%s] %s (%s elapsed)\n' "$1" "$2" "$(date -u -d @$((SECONDS - start)) +%M:%S)"; }

# run LOG CMD...: CMD's output to LOG; a progress line meanwhile: the highest "[ NN%]" so far
# (make prints each target's own percentage, which may go down when another target starts).
run() {
  local log=$1; shift
  "$@" >"$log" 2>&1 &
  local pid=$! t=0 top=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1; t=$((t + 1))
    local pct; pct=$(grep -o '^\[ *[0-9]*%\]' "$log" | tr -dc '0-9\n' | sort -n | tail -1) || true
    [ -n "$pct" ] && [ "$pct" -ge "$top" ] && top=$pct
    pct=$top
    if [ "$pct" -gt 0 ]; then
      local bar; bar=$(printf '%*s' $((pct / 5)) '' | tr ' ' '#')
      [ -t 1 ] && printf '\r  [%-20s] %3s%%  %ds' "$bar" "$pct" "$t"
      [ -t 1 ] || [ $((t % 30)) -ne 0 ] || echo "  ${pct}% after ${t}s"
    fi
  done
  [ -t 1 ] && printf '\r%60s\r' ''
  wait "$pid" || { echo "failed: $*  (log: $log)"; tail -30 "$log"; return 1; }
}

# sweep LABEL TOTAL CMD...: CMD's rows as they come, with "i/TOTAL" in front and the time the
# rest of the sweep will take at the pace so far; stops the script with CMD's output when it fails.
sweep() {
  local label=$1 total=$2; shift 2
  local i=0 t0=$SECONDS
  if ! "$@" 2>&1 | while IFS= read -r line; do
    case "$line" in
      *fluxcpp*torch+gloo*|*skipped:*)
        i=$((i + 1))
        local left=$(( (SECONDS - t0) * (total - i) / i ))
        printf '  %s %2d/%d  %s  [~%dm%02ds left]\n' "$label" "$i" "$total" "$line" \
          $((left / 60)) $((left % 60)) ;;
      \#*|"") ;;
      *) printf '  %s\n' "$line" ;;
    esac
  done; then
    echo "failed: $*"; exit 1
  fi
}

mkdir -p build
log=build/bench_build.log
n=5 deps=(--python)
[ $# -gt 0 ] && n=3 deps=()
step "1/$n" "dependencies (scripts/install_deps.sh ${deps[*]}; seconds when installed, ~2 minutes on a fresh machine)"
./scripts/install_deps.sh "${deps[@]}"
step "2/$n" "build: libfluxcpp, fluxcpp_bench and the torch backend, not the tests (~3 minutes on 2 cores with an empty compiler cache; log: $log)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 || { tail -30 "$log"; exit 1; }
targets=(fluxcpp_shared fluxcpp_bench)
# The backend "fluxcpp" (backend/), when the configure found torch 2.x in scripts/python.
grep -q "torch.distributed backend built" "$log" && targets+=(fluxcpp_c10d)
run "$log.2" cmake --build build -j"$(nproc)" --target "${targets[@]}"

if [ $# -gt 0 ]; then  # a plain fluxcpp_bench run
  step "3/3" "mpirun -np $np fluxcpp_bench $*"
  mpirun -np "$np" "${flags[@]}" ${FLUXCPP_MPIRUN_FLAGS:-} build/bench/fluxcpp_bench "$@"
  exit
fi

out=${results:-build/bench_results}
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/link_*.txt "$out"/meta.json  # this script's files only
export PYTHONPATH=$PWD/build/python
py=(mpirun -np 2 "${flags[@]}" "$PWD/scripts/python" scripts/bench_torch.py)
producer="scripts/bench.sh${results:+ --results}"
# The table of what is done so far: at the end, or when the run is stopped.
table() {
  echo
  echo "# Results${1:+ ($1)} (elapsed $(date -u -d @$((SECONDS - start)) +%M:%S); JSON in $out)"
  "$PWD/scripts/python" scripts/results_page.py "$out" --print
}
# Stopped (Ctrl-C: mpirun exits 1 on it, so its sweep fails) or failed: the rows done so far.
trap 'rc=$?; trap - EXIT; [ "$rc" -eq 0 ] || table "stopped (status $rc): the rows finished so far"' EXIT
trap 'exit 130' INT TERM
# The load before the measurements: --results waits (up to 5 minutes) for the build's to decay.
load=$(cut -d' ' -f1 /proc/loadavg)
if [ -n "$results" ]; then
  for _ in $(seq 30); do
    awk -v l="$load" 'BEGIN { exit !(l > 0.5) }' || break
    echo "  waiting for the load average ($load) to fall below 0.5"
    sleep 10
    load=$(cut -d' ' -f1 /proc/loadavg)
  done
fi
awk -v l="$load" 'BEGIN { exit !(l > 0.5) }' &&
  echo "  note: load average $load before the run: other work shares the cores; the figures are no result"
# Written first: a stopped run's table has its header too.
"$PWD/scripts/python" - "$out/meta.json" "$load" "$rev" "$producer" <<'PY'
import json, os, sys, time
from fluxcpp import baseline
model, feats, _ = baseline.cpu()
json.dump({"rev": sys.argv[3], "date": time.strftime("%Y-%m-%d"), "producer": sys.argv[4],
           "machine": f"{os.cpu_count()} cores ({model}; {', '.join(feats) or 'no AVX-512'})",
           "torch": f"torch {baseline.torch.__version__} with {baseline.torch_blas()}",
           "load": float(sys.argv[2])}, open(sys.argv[1], "w"))
PY
step "3a/5" "quick pass: your layer $quick_layer (hidden,ffn,rows), f32 and bf16 (~1 minute)"
sweep quick 8 "${py[@]}" --quick --layer "$quick_layer" --json "$out/layers.jsonl"
table "quick pass"
# Llama layers: hidden H, ffn 2.75 H (rounded as Llama's), 2 ranks.
layers=("1024,2816,512" "2048,5632,512" "4096,11008,512"
        "2048,5632,1" "2048,5632,8" "2048,5632,32" "4096,11008,1" "4096,11008,8" "4096,11008,32")
largs=(); for l in "${layers[@]}"; do largs+=(--layer "$l"); done
step "3b/5" "Llama layers: fluxcpp vs torch's GEMM + gloo, ${#layers[@]} layer shapes x f32, bf16 (~1 minute)"
rm -f "$out/layers.jsonl"  # the quick pass's rows, measured again below
sweep layer $((${#layers[@]} * 2 * 4)) "${py[@]}" "${largs[@]}" --json "$out/layers.jsonl"
step "4/5" "collectives: fluxcpp vs torch's gloo, then vs MPI (~15 s)"
sweep gloo 16 "${py[@]}" --collectives --json "$out/collectives_torch.jsonl"
mpirun -np 2 "${flags[@]}" build/bench/fluxcpp_bench --op all_gather,reduce_scatter,all_reduce,all_to_all_single \
  --dtype f32 --json "$out/collectives_mpi.jsonl" | grep -v '^# \(threads\|times\)'
step "5/5" "2 hosts joined by a shaped 10 Gbit/s link: Llama layer of hidden 2048, prefill and decode (~30 s)"
h=2048 f=2816
for op in link_probe "ag_gemm --shape 512,$f,$h --shape 8,$f,$h" \
          "gemm_rs --shape 512,$h,$f --shape 8,$h,$f" "gemm_ar --shape 512,$h,$f --shape 8,$h,$f"; do
  echo "  ${op%% *} ..."
  rc=0
  # shellcheck disable=SC2086
  ./scripts/link_run.sh 10gbit 2 build/bench/fluxcpp_bench --link --op $op \
    --json "$out/link_${op%% *}.jsonl" >"$out/link_${op%% *}.txt" 2>&1 || rc=$?
  [ "$rc" -eq 77 ] && { echo "  (link table skipped: $(tail -1 "$out/link_${op%% *}.txt"))"; break; }
  [ "$rc" -eq 0 ] || { cat "$out/link_${op%% *}.txt"; exit "$rc"; }
done

trap - EXIT INT TERM
table
if [ -n "$results" ]; then
  "$PWD/scripts/python" scripts/results_page.py "$out"
fi
