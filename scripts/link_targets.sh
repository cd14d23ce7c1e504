#!/usr/bin/env bash
# The link targets, measured the way they are defined: ROUNDS rounds (default 3), each running the
# link probe and then the fused ops over the same shaped link (2 hosts x 1 rank), interleaved so
# that both see the same machine. Prints, per op and shape, the median over the rounds of hidden
# and speedup, next to the median of the probe's better line (the larger hidden of its thread and
# inline variants), and the ratio of the two.
#   scripts/link_targets.sh [ROUNDS] [RATE] [-- fluxcpp_bench args]
# The probe is the bench's own link_probe entry; LINK_PROBE=path/to/link_probe.sh also runs an
# external probe of the same shape each round (its "PROBE ..." lines join the probe's median).
# Needs python3 for the summary. JSON lines of every round go to ${OUT:-link_targets}/.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
rate=${2:-10gbit}
shift $(($# > 2 ? 2 : $#))
[ "${1:-}" = "--" ] && shift
ops=${OPS:-link_probe,ag_gemm,gemm_rs,a2a_gemm,ulysses}
out=${OUT:-link_targets}
mkdir -p "$out"
./scripts/build.sh
for i in $(seq 1 "$rounds"); do
  if [ -n "${LINK_PROBE:-}" ]; then
    "$LINK_PROBE" "$rate" | grep '^PROBE' | tee "$out/probe_$i.txt"
  fi
  ./scripts/link_run.sh "$rate" 2 build/bench/fluxcpp_bench --link --op "$ops" \
    --json "$out/round_$i.jsonl" "$@" >"$out/round_$i.txt"
  echo "round $i of $rounds done" >&2
done
python3 - "$out" "$rounds" <<'EOF'
import json, re, statistics, sys, glob
out, rounds = sys.argv[1], int(sys.argv[2])
probe, rows = [], {}
for i in range(1, rounds + 1):
    best = []
    for line in open(f"{out}/round_{i}.jsonl"):
        j = json.loads(line)
        if j["op"] == "link_probe":
            best.append(j["hidden"])
            continue
        if j.get("hidden") is None:
            continue
        key = (j["op"], j["m"], j["n"], j["k"], j["dtype"], j.get("zero_copy", False))
        rows.setdefault(key, []).append((j["hidden"], j["speedup"]))
    try:
        for line in open(f"{out}/probe_{i}.txt"):
            m = re.search(r"hidden (-?[0-9.]+)", line)
            if m:
                best.append(float(m.group(1)))
    except FileNotFoundError:
        pass
    if best:
        probe.append(max(best))
p = statistics.median(probe) if probe else float("nan")
print(f"# link probe: median over {len(probe)} rounds of the better line: hidden {p:.2f} "
      f"(rounds: {', '.join(f'{x:.2f}' for x in probe)})")
print(f"{'op':<20}{'M':>6}{'N':>6}{'K':>6}{'dtype':>6}{'input':>10}{'hidden':>8}{'/probe':>8}"
      f"{'speedup':>9}  rounds (hidden)")
for key, v in sorted(rows.items()):
    op, m, n, k, dt, zc = key
    h = statistics.median(x[0] for x in v)
    s = statistics.median(x[1] for x in v)
    print(f"{op:<20}{m:>6}{n:>6}{k:>6}{dt:>6}{'zero-copy' if zc else 'copied':>10}{h:>8.2f}"
          f"{h / p if p == p and p > 0 else float('nan'):>8.2f}{s:>8.2f}x  "
          f"{', '.join(f'{x[0]:.2f}' for x in v)}")
EOF
