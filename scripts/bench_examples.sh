#!/usr/bin/env bash
# python/examples/sp_mlp.py and moe_ep.py at a few shapes on one host: fluxcpp vs torch + gloo
# (each example checks its results against one rank first and stops on a mismatch), one run per
# shape, W ranks (default 2) with one torch thread each. Prints a markdown table of the --json
# rows: times in ms (median of --repeat, slowest rank; the paths take turns run by run) and
# torch+gloo / fluxcpp. Before each run it waits (up to --max-wait seconds, default 300) until at
# most --busy percent (default 15) of all CPUs were busy over one second, as bench_llama_tp.sh
# does; each JSON row records the busy share seen and the wait.
# Usage: scripts/bench_examples.sh [-np W] [--out FILE.jsonl] [--repeat N] [--quick]
#                                  [--busy PERCENT] [--max-wait S]
#   --quick: the two smallest shapes of each example only.
# Needs build/libfluxcpp.so (cmake --build build) and Debian's python3-torch / python3-mpi4py.
set -euo pipefail
cd "$(dirname "$0")/.."
np=2 out="" repeat=5 quick=0 busy=15 max_wait=300
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --busy) busy=$2; shift 2 ;;
    --max-wait) max_wait=$2; shift 2 ;;
    *) echo "bench_examples: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${out:-$(mktemp --suffix=.jsonl)}
. scripts/bench_common.sh
# tokens hidden ffn dtype: decode-sized rows, Llama-7B-like layer / 4 at prefill, compute-bound
mlp_shapes=("8 1024 2816 bf16" "32 1024 2816 f32" "512 1024 2816 f32" "512 1024 2816 bf16"
            "2048 1024 2816 bf16" "512 256 16384 bf16")
# tokens hidden ffn experts topk dtype
moe_shapes=("16 1024 1024 8 2 bf16" "64 1024 1024 8 2 f32" "1024 1024 1024 8 2 f32"
            "1024 1024 1024 8 2 bf16" "1024 1024 256 8 1 bf16" "256 512 4096 4 2 bf16")
if [ "$quick" = 1 ]; then
  mlp_shapes=("${mlp_shapes[@]:0:2}") moe_shapes=("${moe_shapes[@]:0:2}")
fi
common=(--warmup 2 --repeat "$repeat" --json "$out")
echo "bench_examples: results in $out" >&2
for s in "${mlp_shapes[@]}"; do
  read -r t h f d <<<"$s"
  wait_idle
  mpirun -np "$np" "${flags[@]}" "$PWD/scripts/python" python/examples/sp_mlp.py --tokens "$t" \
    --hidden "$h" --ffn "$f" --dtype "$d" "${common[@]}" --tag "$tag" | grep -v '^  check'
done
for s in "${moe_shapes[@]}"; do
  read -r t h f e k d <<<"$s"
  wait_idle
  mpirun -np "$np" "${flags[@]}" "$PWD/scripts/python" python/examples/moe_ep.py --tokens "$t" \
    --hidden "$h" --ffn "$f" --experts "$e" --topk "$k" --dtype "$d" "${common[@]}" \
    --tag "$tag" | grep -v '^  check'
done
"$PWD/scripts/python" - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| sp_mlp: tokens × hidden × ffn | dtype | fwd fluxcpp | fwd torch+gloo | ratio | fwd compute only "
      "| fwd+bwd fluxcpp | fwd+bwd torch+gloo | ratio | fwd+bwd compute only | before the run |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["example"] != "sp_mlp":
        continue
    f, t = r["fwd_fluxcpp_ms"], r["fwd_torch+gloo_ms"]
    fb, tb = r.get("fwd+bwd_fluxcpp_ms"), r.get("fwd+bwd_torch+gloo_ms")
    print(f"| {r['tokens']} × {r['hidden']} × {r['ffn']} | {r['dtype']} | {f:.3f} | {t:.3f} "
          f"| {t / f:.2f}× | {r['fwd_compute_only_ms']:.3f} | {fb:.3f} | {tb:.3f} | {tb / fb:.2f}× "
          f"| {r['fwd+bwd_compute_only_ms']:.3f} | {r.get('tag') or ''} |")
print("\n| moe_ep: tokens × hidden × ffn, experts, topk | dtype | fluxcpp | torch+gloo a2a | ratio "
      "| torch+gloo ag | ratio | expert GEMMs only | before the run |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["example"] != "moe_ep":
        continue
    f, a, g = r["fluxcpp_ms"], r["torch+gloo_a2a_ms"], r["torch+gloo_ag_ms"]
    print(f"| {r['tokens']} × {r['hidden']} × {r['ffn']}, {r['experts']}, {r['topk']} "
          f"| {r['dtype']} | {f:.3f} | {a:.3f} | {a / f:.2f}× | {g:.3f} | {g / f:.2f}× "
          f"| {r['expert_GEMMs_only_ms']:.3f} | {r.get('tag') or ''} |")
EOF
